package tomus.bench;

import java.io.File;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Locale;
import java.util.Random;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.locks.ReentrantLock;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FSDataInputStream;
import org.apache.hadoop.fs.FSDataOutputStream;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.hdfs.MiniDFSCluster;

/**
 * HDFS as the peer of `tomus bench`: starts a MiniDFSCluster (one NameNode and --datanodes
 * DataNodes in this JVM, data under a temporary directory removed at the end) and runs the
 * access patterns of tomus bench's S2-S5 with the Hadoop FileSystem client, one thread per
 * client, printing JSON shaped like tomus bench's (points of {clients, median, runs, unit}).
 *
 * <p>Durability matches tomus with fsync on, where every acknowledged write is on disk: writers
 * call hsync() after every write (--hsync write, the default) or only once before closing the
 * file (--hsync file). S4 differs by necessity: HDFS lets one writer hold a file's lease, so
 * the N appenders take turns on one file (lock, append(), one 4 MiB write, hsync, close).
 */
public final class HdfsBench {
  private static final long MIB = 1L << 20;
  private static final int BLOCK = 4 << 20;

  private final Opts o;
  private final FileSystem fs;
  private final ExecutorService pool;
  private final byte[] data;

  private HdfsBench(Opts o, FileSystem fs) {
    this.o = o;
    this.fs = fs;
    int threads = Arrays.stream(o.clients).max().orElse(1);
    this.pool = Executors.newFixedThreadPool(threads);
    this.data = new byte[BLOCK];
    new Random(3).nextBytes(data);
  }

  /**
   * Runs one or more passes, separated by `--then`, on one cluster: starting a MiniDFSCluster
   * takes tens of seconds of class loading, more than a small pass. The cluster's shape
   * (--datanodes, --replication, --block-size) is the first pass's.
   */
  public static void main(String[] args) throws Exception {
    if (Arrays.asList(args).contains("--help") || Arrays.asList(args).contains("-h")) {
      System.out.println(Opts.USAGE);
      return;
    }
    List<Opts> passes = new ArrayList<>();
    try {
      List<String> cur = new ArrayList<>();
      for (String a : args) {
        if (a.equals("--then")) {
          passes.add(Opts.parse(cur.toArray(new String[0])));
          cur.clear();
        } else {
          cur.add(a);
        }
      }
      passes.add(Opts.parse(cur.toArray(new String[0])));
    } catch (IllegalArgumentException e) {
      System.err.println("hdfs-bench: " + e.getMessage());
      System.err.println(Opts.USAGE);
      System.exit(2);
      return;
    }
    Opts first = passes.get(0);
    Path base = Files.createTempDirectory("tomus-bench-hdfs-");
    Configuration conf = new Configuration();
    conf.set(MiniDFSCluster.HDFS_MINIDFS_BASEDIR, base.toString());
    conf.setInt("dfs.replication", first.replication);
    conf.setLong("dfs.blocksize", first.blockSize);
    // The MiniDFSCluster's default of 4 handler threads would throttle 8+ clients.
    conf.setInt("dfs.namenode.handler.count", 32);
    conf.setInt("dfs.datanode.handler.count", 32);
    MiniDFSCluster cluster = null;
    int status = 0;
    try {
      cluster =
          new MiniDFSCluster.Builder(conf).numDataNodes(first.datanodes).format(true).build();
      cluster.waitActive();
      FileSystem fs = cluster.getFileSystem();
      boolean warm = false;
      for (Opts o : passes) {
        HdfsBench b = new HdfsBench(o, fs);
        String out;
        try {
          if (!warm) {
            b.warmUp();
            warm = true;
          }
          out = b.run();
        } finally {
          b.pool.shutdownNow();
        }
        System.out.println(out);
        if (o.out != null) {
          Files.writeString(Path.of(o.out), out + "\n");
        }
      }
    } catch (Exception e) {
      System.err.println("hdfs-bench: " + e);
      e.printStackTrace();
      status = 1;
    } finally {
      if (cluster != null) {
        cluster.shutdown(true);
      }
      deleteTree(base.toFile());
    }
    // Hadoop leaves non-daemon threads behind; exit explicitly.
    System.exit(status);
  }

  private String run() throws Exception {
    StringBuilder j = new StringBuilder("{\n");
    j.append(String.format(Locale.ROOT,
        "  \"config\": {\"system\": \"hdfs\", \"hadoop\": \"%s\", \"datanodes\": %d, "
            + "\"replication\": %d, \"block_size\": %d, \"clients\": %s, \"runs\": %d, "
            + "\"per_client_bytes\": %d, \"small_ops\": %d, \"hsync\": \"%s\", \"cores\": %d}",
        org.apache.hadoop.util.VersionInfo.getVersion(), o.datanodes, o.replication, o.blockSize,
        Arrays.toString(o.clients), o.runs, o.perClient, o.smallOps, o.hsync,
        Runtime.getRuntime().availableProcessors()));
    for (String s : o.scenarios) {
      System.err.println("hdfs-bench: " + s);
      switch (s) {
        case "s2":
          j.append(",\n  \"s2\": ").append(s2());
          break;
        case "s3s4":
          j.append(s3s4());
          break;
        case "s5":
          j.append(",\n  \"s5\": ").append(s5());
          break;
        default:
          throw new IllegalArgumentException("unknown scenario " + s);
      }
    }
    return j.append("\n}").toString();
  }

  /**
   * Runs the write, read and hsync paths once before the clock starts: a long-running HDFS
   * client and its DataNodes run JIT-compiled code, which the first measured point would not.
   */
  private void warmUp() throws Exception {
    org.apache.hadoop.fs.Path p = new org.apache.hadoop.fs.Path("/warm-up/large");
    writeFile(p, 8L * BLOCK);
    readRange(p, 0, 8L * BLOCK, BLOCK);
    try (FSDataOutputStream out = create(new org.apache.hadoop.fs.Path("/warm-up/small"))) {
      for (int k = 0; k < 200; k++) {
        out.write(data, 0, 4096);
        out.hsync();
      }
    }
    fs.delete(p.getParent(), true);
  }

  /** S2: one shared file of max(N) * per_client bytes; N readers each read a distinct range. */
  private String s2() throws Exception {
    int maxN = Arrays.stream(o.clients).max().orElse(1);
    long size = maxN * o.perClient;
    org.apache.hadoop.fs.Path p = new org.apache.hadoop.fs.Path("/s2");
    try (FSDataOutputStream out = create(p)) {
      for (long at = 0; at < size; at += BLOCK) {
        out.write(data, 0, (int) Math.min(BLOCK, size - at));
      }
      out.hsync();
    }
    List<String> points = new ArrayList<>();
    for (int n : o.clients) {
      double[] runs = new double[o.runs];
      for (int r = 0; r < o.runs; r++) {
        List<Task> tasks = new ArrayList<>();
        for (int i = 0; i < n; i++) {
          long from = i * o.perClient;
          tasks.add(() -> readRange(p, from, o.perClient, 16 << 20));
        }
        runs[r] = n * o.perClient / (double) MIB / timed(tasks);
      }
      points.add(point(n, runs, "MiB/s"));
    }
    fs.delete(p, false);
    return "{\"points\": " + points + "}";
  }

  /** S3 and S4 interleaved run by run, as tomus bench does (the disk drifts over minutes). */
  private String s3s4() throws Exception {
    List<String> w = new ArrayList<>();
    List<String> rd = new ArrayList<>();
    List<String> a = new ArrayList<>();
    for (int n : o.clients) {
      double[] wr = new double[o.runs];
      double[] rr = new double[o.runs];
      double[] ar = new double[o.runs];
      for (int r = 0; r < o.runs; r++) {
        double mib = n * o.perClient / (double) MIB;
        List<org.apache.hadoop.fs.Path> files = new ArrayList<>();
        List<Task> writers = new ArrayList<>();
        for (int i = 0; i < n; i++) {
          org.apache.hadoop.fs.Path p = new org.apache.hadoop.fs.Path("/s3/" + r + "-" + i);
          files.add(p);
          writers.add(() -> writeFile(p, o.perClient));
        }
        wr[r] = mib / timed(writers);
        List<Task> readers = new ArrayList<>();
        for (org.apache.hadoop.fs.Path p : files) {
          readers.add(() -> readRange(p, 0, o.perClient, BLOCK));
        }
        rr[r] = mib / timed(readers);
        fs.delete(new org.apache.hadoop.fs.Path("/s3"), true);
        ar[r] = s4Once(n);
      }
      w.add(point(n, wr, "MiB/s"));
      rd.add(point(n, rr, "MiB/s"));
      a.add(point(n, ar, "MiB/s"));
    }
    return ",\n  \"s3\": {\"write\": " + w + ", \"read\": " + rd + "},\n  \"s4\": {\"points\": "
        + a + ", \"mode\": \"one shared file; HDFS allows one writer per file (the lease), so"
        + " the N appenders take turns: lock, append(), one 4 MiB write, hsync, close\"}";
  }

  /** S4: N appenders to one shared file, 4 MiB appends each, one at a time (see class doc). */
  private double s4Once(int n) throws Exception {
    org.apache.hadoop.fs.Path p = new org.apache.hadoop.fs.Path("/s4");
    create(p).close();
    ReentrantLock lease = new ReentrantLock(true);
    List<Task> appenders = new ArrayList<>();
    for (int i = 0; i < n; i++) {
      appenders.add(() -> {
        for (long done = 0; done < o.perClient; done += BLOCK) {
          int len = (int) Math.min(BLOCK, o.perClient - done);
          lease.lock();
          try (FSDataOutputStream out = fs.append(p)) {
            out.write(data, 0, len);
            out.hsync();
          } finally {
            lease.unlock();
          }
        }
      });
    }
    double secs = timed(appenders);
    long size = fs.getFileStatus(p).getLen();
    fs.delete(p, false);
    if (size != n * o.perClient) {
      throw new IOException("S4: file size " + size + " after " + n + " appenders, expected "
          + n * o.perClient);
    }
    return size / (double) MIB / secs;
  }

  /**
   * S5: N clients append 4 KiB with hsync after each, one file per client (HDFS has one writer
   * per file), then N readers read 4 KiB at random offsets of random files of those.
   */
  private String s5() throws Exception {
    List<String> appends = new ArrayList<>();
    List<String> reads = new ArrayList<>();
    byte[] small = Arrays.copyOf(data, 4096);
    for (int n : o.clients) {
      double[] ar = new double[o.runs];
      double[] rr = new double[o.runs];
      for (int r = 0; r < o.runs; r++) {
        List<org.apache.hadoop.fs.Path> files = new ArrayList<>();
        List<Task> appenders = new ArrayList<>();
        for (int i = 0; i < n; i++) {
          org.apache.hadoop.fs.Path p = new org.apache.hadoop.fs.Path("/s5/" + r + "-" + i);
          files.add(p);
          appenders.add(() -> {
            try (FSDataOutputStream out = create(p)) {
              for (long k = 0; k < o.smallOps; k++) {
                out.write(small);
                out.hsync();
              }
            }
          });
        }
        ar[r] = n * o.smallOps / timed(appenders);
        long fileSize = o.smallOps * 4096;
        for (org.apache.hadoop.fs.Path p : files) {
          long len = fs.getFileStatus(p).getLen();
          if (len != fileSize) {
            throw new IOException("S5: " + p + " holds " + len + " bytes, expected " + fileSize);
          }
        }
        List<Task> readers = new ArrayList<>();
        for (int i = 0; i < n; i++) {
          long seed = i;
          readers.add(() -> {
            List<FSDataInputStream> ins = new ArrayList<>();
            try {
              for (org.apache.hadoop.fs.Path p : files) {
                ins.add(fs.open(p));
              }
              Random rnd = new Random(seed);
              byte[] buf = new byte[4096];
              for (long k = 0; k < o.smallOps; k++) {
                FSDataInputStream in = ins.get(rnd.nextInt(ins.size()));
                in.readFully(rnd.nextInt((int) o.smallOps) * 4096L, buf, 0, buf.length);
              }
            } finally {
              for (FSDataInputStream in : ins) {
                in.close();
              }
            }
          });
        }
        rr[r] = n * o.smallOps / timed(readers);
        fs.delete(new org.apache.hadoop.fs.Path("/s5"), true);
      }
      appends.add(point(n, ar, "ops/s"));
      reads.add(point(n, rr, "ops/s"));
    }
    return "{\"append_4k\": " + appends + ", \"read_4k\": " + reads
        + ", \"mode\": \"one file per client (one writer per file in HDFS), hsync after every"
        + " 4 KiB append; reads: positional 4 KiB reads of random files and offsets\"}";
  }

  private FSDataOutputStream create(org.apache.hadoop.fs.Path p) throws IOException {
    return fs.create(p, true, 1 << 16, (short) o.replication, o.blockSize);
  }

  /** Writes `len` bytes in 4 MiB writes; durable per --hsync; closes the file. */
  private void writeFile(org.apache.hadoop.fs.Path p, long len) throws IOException {
    try (FSDataOutputStream out = create(p)) {
      for (long at = 0; at < len; at += BLOCK) {
        out.write(data, 0, (int) Math.min(BLOCK, len - at));
        if (o.hsync.equals("write")) {
          out.hsync();
        }
      }
      if (!o.hsync.equals("write")) {
        out.hsync();
      }
    }
  }

  /** Reads `len` bytes of `p` from `from`, `window` bytes per call. */
  private void readRange(org.apache.hadoop.fs.Path p, long from, long len, int window)
      throws IOException {
    byte[] buf = new byte[(int) Math.min(window, len)];
    try (FSDataInputStream in = fs.open(p)) {
      in.seek(from);
      for (long got = 0; got < len; ) {
        int n = (int) Math.min(buf.length, len - got);
        in.readFully(buf, 0, n);
        got += n;
      }
    }
  }

  interface Task {
    void run() throws Exception;
  }

  /** Runs the tasks concurrently, one thread each; seconds until all ended. */
  private double timed(List<Task> tasks) throws Exception {
    long start = System.nanoTime();
    List<Future<Object>> fs = new ArrayList<>();
    for (Task t : tasks) {
      fs.add(pool.submit(() -> {
        t.run();
        return null;
      }));
    }
    for (Future<Object> f : fs) {
      f.get();
    }
    return (System.nanoTime() - start) / 1e9;
  }

  private static String point(int clients, double[] runs, String unit) {
    double[] s = runs.clone();
    Arrays.sort(s);
    StringBuilder r = new StringBuilder();
    for (int i = 0; i < runs.length; i++) {
      r.append(i == 0 ? "" : ", ").append(String.format(Locale.ROOT, "%.3f", runs[i]));
    }
    return String.format(Locale.ROOT,
        "{\"clients\": %d, \"median\": %.3f, \"runs\": [%s], \"unit\": \"%s\"}", clients,
        s[s.length / 2], r, unit);
  }

  private static void deleteTree(File f) {
    File[] kids = f.listFiles();
    if (kids != null) {
      for (File k : kids) {
        deleteTree(k);
      }
    }
    if (!f.delete() && f.exists()) {
      System.err.println("hdfs-bench: could not remove " + f);
    }
  }

  /** Command-line options, named as tomus bench's. */
  static final class Opts {
    static final String USAGE = "usage: java -jar hdfs-bench.jar [--clients 1,8] [--runs 3]"
        + " [--per-client 64MiB] [--small-ops 1000] [--scenarios s2,s3s4,s5] [--datanodes 4]"
        + " [--replication 1] [--block-size 128MiB] [--hsync write|file] [--out FILE]"
        + " [--then OPTIONS OF ANOTHER PASS ...]";
    int[] clients = {1, 2, 4, 8, 16};
    int runs = 3;
    long perClient = 64 * MIB;
    long smallOps = 1000;
    String[] scenarios = {"s2", "s3s4", "s5"};
    int datanodes = 4;
    int replication = 1;
    long blockSize = 128 * MIB;
    String hsync = "write";
    String out;

    static Opts parse(String[] a) {
      Opts o = new Opts();
      for (int i = 0; i < a.length; i++) {
        String k = a[i];
        if (i + 1 >= a.length) {
          throw new IllegalArgumentException("missing value for " + k);
        }
        String v = a[++i];
        switch (k) {
          case "--clients":
            o.clients = Arrays.stream(v.split(",")).mapToInt(Integer::parseInt).toArray();
            break;
          case "--runs":
            o.runs = Integer.parseInt(v);
            break;
          case "--per-client":
            o.perClient = size(v);
            break;
          case "--small-ops":
            o.smallOps = Long.parseLong(v);
            break;
          case "--scenarios":
            o.scenarios = v.split(",");
            break;
          case "--datanodes":
            o.datanodes = Integer.parseInt(v);
            break;
          case "--replication":
            o.replication = Integer.parseInt(v);
            break;
          case "--block-size":
            o.blockSize = size(v);
            break;
          case "--hsync":
            if (!v.equals("write") && !v.equals("file")) {
              throw new IllegalArgumentException("--hsync is write or file");
            }
            o.hsync = v;
            break;
          case "--out":
            o.out = v;
            break;
          default:
            throw new IllegalArgumentException("unknown option " + k);
        }
      }
      if (o.runs < 1 || Arrays.stream(o.clients).anyMatch(c -> c < 1)) {
        throw new IllegalArgumentException("--clients must be positive and --runs at least 1");
      }
      return o;
    }

    /** "64MiB", "4KiB", "1GiB" or plain bytes. */
    static long size(String v) {
      String s = v.trim();
      long mult = 1;
      String[][] units = {{"GiB", "1073741824"}, {"MiB", "1048576"}, {"KiB", "1024"}};
      for (String[] u : units) {
        if (s.endsWith(u[0])) {
          mult = Long.parseLong(u[1]);
          s = s.substring(0, s.length() - u[0].length());
          break;
        }
      }
      return Long.parseLong(s.trim()) * mult;
    }
  }
}
