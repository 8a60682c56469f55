//! An embedded cluster: one manager and N providers as real child processes of this binary on
//! loopback, data under one directory. Used by `tomus up`, `tomus demo`, `tomus bench` and the
//! integration tests (which kill and restart its processes).

use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{mpsc, OnceLock};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};

/// How an embedded cluster is laid out.
#[derive(Clone, Debug)]
pub struct ClusterSpec {
    pub providers: usize,
    pub data_dir: PathBuf,
    /// Manager address; port 0 picks a free port.
    pub manager_addr: String,
    pub memory_tier: u64,
    pub fsync: bool,
    pub heartbeat_ms: u64,
    /// The manager's writer lease (`None`: its default).
    pub writer_lease_ms: Option<u64>,
    /// More arguments for `tomus manager` (e.g. `--provider-timeout-ms 2000`).
    pub manager_args: Vec<String>,
    /// More arguments for every `tomus provider`.
    pub provider_args: Vec<String>,
}

impl ClusterSpec {
    pub fn new(data_dir: impl Into<PathBuf>, providers: usize) -> Self {
        ClusterSpec {
            providers,
            data_dir: data_dir.into(),
            manager_addr: "127.0.0.1:0".into(),
            memory_tier: 0,
            fsync: true,
            heartbeat_ms: 1000,
            writer_lease_ms: None,
            manager_args: Vec::new(),
            provider_args: Vec::new(),
        }
    }
}

/// How to start a `tomus` server process: a program and the arguments that come before the
/// subcommand (the Python package runs servers as `python -m tomus ...`).
#[derive(Clone, Debug)]
pub struct Launcher {
    pub program: PathBuf,
    pub prefix: Vec<String>,
}

static PROCESS_LAUNCHER: OnceLock<Launcher> = OnceLock::new();

impl Launcher {
    /// Runs servers with the `tomus` executable at `path`.
    pub fn binary(path: impl Into<PathBuf>) -> Self {
        Launcher {
            program: path.into(),
            prefix: Vec::new(),
        }
    }

    /// The launcher set for this process by [`Launcher::set_for_process`], else this executable.
    pub fn current() -> Result<Self> {
        if let Some(l) = PROCESS_LAUNCHER.get() {
            return Ok(l.clone());
        }
        let exe = std::env::current_exe().context("cannot find the tomus executable")?;
        Ok(Launcher::binary(exe))
    }

    /// Makes clusters started by this process use `launcher` (first call wins): for hosts such
    /// as the Python interpreter, whose own executable is not `tomus`.
    pub fn set_for_process(launcher: Launcher) {
        let _ = PROCESS_LAUNCHER.set(launcher);
    }
}

pub struct EmbeddedCluster {
    launcher: Launcher,
    spec: ClusterSpec,
    /// The manager's bound address.
    pub addr: String,
    manager: Option<Child>,
    providers: Vec<Option<Child>>,
    provider_addrs: Vec<String>,
    /// The lock on the data directory, held while the cluster lives ([`lock_data_dir`]).
    _lock: std::fs::File,
}

/// A server process of the cluster that ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Exited {
    Manager(ExitStatus),
    Provider(usize, ExitStatus),
}

impl std::fmt::Display for Exited {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Exited::Manager(s) => write!(f, "manager exited ({s})"),
            Exited::Provider(i, s) => write!(f, "provider {i} exited ({s})"),
        }
    }
}

/// The lock file in a cluster's data directory; it holds the PID of the process running the
/// cluster.
const LOCK_FILE: &str = "tomus.lock";

/// Locks `dir` for one embedded cluster: a second one on the same directory would share the
/// manager's database and the providers' chunks with the first. The lock is an flock on
/// [`LOCK_FILE`], so it goes with the process however it ends; the file's content (this
/// process's id) only names the holder in the error.
fn lock_data_dir(dir: &Path) -> Result<std::fs::File> {
    use std::io::{Read, Seek, Write};
    let path = dir.join(LOCK_FILE);
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
        .with_context(|| format!("cannot open {}", path.display()))?;
    match file.try_lock() {
        Ok(()) => {}
        Err(std::fs::TryLockError::WouldBlock) => {
            let mut holder = String::new();
            let _ = file.read_to_string(&mut holder);
            let holder = match holder.trim() {
                "" => "another process".to_string(),
                pid => format!("PID {pid}"),
            };
            bail!(
                "data directory {} is in use by {holder} (another `tomus up`?); stop it or \
                 pass another --data",
                dir.display()
            );
        }
        Err(std::fs::TryLockError::Error(e)) => {
            return Err(e).with_context(|| format!("cannot lock {}", path.display()))
        }
    }
    file.set_len(0)
        .and_then(|()| file.rewind())
        .and_then(|()| writeln!(file, "{}", std::process::id()))
        .with_context(|| format!("cannot write {}", path.display()))?;
    Ok(file)
}

/// How long a child may take to print its address.
const READY_TIMEOUT: Duration = Duration::from_secs(30);

impl EmbeddedCluster {
    /// Starts the manager, then the providers side by side, and waits until each is serving.
    pub fn start(launcher: &Launcher, spec: ClusterSpec) -> Result<Self> {
        std::fs::create_dir_all(&spec.data_dir)
            .with_context(|| format!("cannot create {}", spec.data_dir.display()))?;
        // Before anything is written there, logs included.
        let lock = lock_data_dir(&spec.data_dir)?;
        std::fs::create_dir_all(spec.data_dir.join("logs"))
            .with_context(|| format!("cannot create {}", spec.data_dir.display()))?;
        let mut cluster = EmbeddedCluster {
            _lock: lock,
            launcher: launcher.clone(),
            addr: spec.manager_addr.clone(),
            spec,
            manager: None,
            providers: Vec::new(),
            provider_addrs: Vec::new(),
        };
        cluster.start_manager()?;
        // Each provider opens its stores and registers on its own: started one after the
        // other, a cluster of Python-launched servers spent most of its start-up importing
        // the interpreter four times in a row. A provider that fails to start ends the
        // others (`Starting` kills its child when dropped).
        let n = cluster.spec.providers;
        cluster.providers.resize_with(n, || None);
        cluster.provider_addrs = vec!["127.0.0.1:0".into(); n];
        let starting = (0..n)
            .map(|i| cluster.launch_provider(i))
            .collect::<Result<Vec<_>>>()?;
        for (i, s) in starting.into_iter().enumerate() {
            let (child, addr) = s.ready()?;
            cluster.provider_addrs[i] = addr;
            cluster.providers[i] = Some(child);
        }
        Ok(cluster)
    }

    pub fn data_dir(&self) -> &Path {
        &self.spec.data_dir
    }

    pub fn provider_dir(&self, i: usize) -> PathBuf {
        self.spec.data_dir.join(format!("provider-{i}"))
    }

    pub fn provider_addr(&self, i: usize) -> &str {
        &self.provider_addrs[i]
    }

    pub fn provider_count(&self) -> usize {
        self.providers.len()
    }

    /// The manager's process id, while it runs.
    pub fn manager_pid(&self) -> Option<u32> {
        self.manager.as_ref().map(Child::id)
    }

    /// Provider `i`'s process id, while it runs.
    pub fn provider_pid(&self, i: usize) -> Option<u32> {
        self.providers.get(i)?.as_ref().map(Child::id)
    }

    /// (Re)starts the manager on the cluster's address and state directory.
    pub fn start_manager(&mut self) -> Result<()> {
        let mut args = vec![
            "manager".to_string(),
            "--data".into(),
            path_arg(&self.spec.data_dir.join("manager")),
            "--addr".into(),
            self.addr.clone(),
        ];
        if let Some(ms) = self.spec.writer_lease_ms {
            args.push("--writer-lease-ms".into());
            args.push(ms.to_string());
        }
        args.extend(self.spec.manager_args.iter().cloned());
        let (child, addr) = self.launch("manager", &args)?.ready()?;
        self.addr = addr;
        self.manager = Some(child);
        Ok(())
    }

    /// Starts one more provider (joining the running cluster); returns its index.
    pub fn add_provider(&mut self) -> Result<usize> {
        let i = self.providers.len();
        self.providers.push(None);
        self.provider_addrs.push("127.0.0.1:0".into());
        if let Err(e) = self.start_provider(i) {
            self.providers.pop();
            self.provider_addrs.pop();
            return Err(e);
        }
        Ok(i)
    }

    /// Whether provider `i` was started and not killed since.
    pub fn is_running(&self, i: usize) -> bool {
        self.providers.get(i).is_some_and(Option::is_some)
    }

    /// (Re)starts provider `i` on its previous address and directory.
    pub fn start_provider(&mut self, i: usize) -> Result<()> {
        let (child, addr) = self.launch_provider(i)?.ready()?;
        self.provider_addrs[i] = addr;
        self.providers[i] = Some(child);
        Ok(())
    }

    /// Launches provider `i` on its previous address and directory, without waiting for it.
    fn launch_provider(&self, i: usize) -> Result<Starting> {
        let mut args = vec![
            "provider".to_string(),
            "--manager".into(),
            self.addr.clone(),
            "--data".into(),
            path_arg(&self.provider_dir(i)),
            "--addr".into(),
            self.provider_addrs[i].clone(),
            "--heartbeat-ms".into(),
            self.spec.heartbeat_ms.to_string(),
        ];
        if self.spec.memory_tier > 0 {
            args.push("--memory-tier".into());
            args.push(self.spec.memory_tier.to_string());
        }
        if !self.spec.fsync {
            args.push("--no-fsync".into());
        }
        args.extend(self.spec.provider_args.iter().cloned());
        self.launch(&format!("provider-{i}"), &args)
    }

    /// SIGKILLs the manager (no clean shutdown).
    pub fn kill_manager(&mut self) {
        if let Some(c) = self.manager.take() {
            kill(c);
        }
    }

    /// SIGKILLs provider `i`.
    pub fn kill_provider(&mut self, i: usize) {
        if let Some(c) = self.providers.get_mut(i).and_then(Option::take) {
            kill(c);
        }
    }

    /// The children that exited since the last call, reaped: their slots are empty until
    /// they are started again ([`Self::start_manager`], [`Self::start_provider`]).
    pub fn reap(&mut self) -> Vec<Exited> {
        let mut out = Vec::new();
        if let Some(Ok(Some(status))) = self.manager.as_mut().map(Child::try_wait) {
            self.manager = None;
            out.push(Exited::Manager(status));
        }
        for (i, p) in self.providers.iter_mut().enumerate() {
            if let Some(Ok(Some(status))) = p.as_mut().map(Child::try_wait) {
                *p = None;
                out.push(Exited::Provider(i, status));
            }
        }
        out
    }

    /// Stops the cluster cleanly: SIGTERM to the manager first, so that its maintenance
    /// finishes its rounds while the providers still serve (instead of finding their data
    /// unreadable), then to the providers the moment the manager is gone (a heartbeat that
    /// lands in between is a quiet miss). Each gets `grace` before SIGKILL.
    pub fn stop(&mut self, grace: Duration) {
        let providers: Vec<Child> = self.providers.iter_mut().filter_map(Option::take).collect();
        let pids: Vec<u32> = providers.iter().map(Child::id).collect();
        match self.manager.take() {
            Some(mut manager) => {
                signal(manager.id(), libc::SIGTERM);
                let pid = manager.id();
                let (done, exited) = mpsc::channel();
                let waiter = std::thread::spawn(move || {
                    let _ = manager.wait();
                    for &p in &pids {
                        signal(p, libc::SIGTERM);
                    }
                    let _ = done.send(());
                });
                if exited.recv_timeout(grace).is_err() {
                    // Not reaped yet: the waiter reaps it once it is gone.
                    signal(pid, libc::SIGKILL);
                }
                let _ = waiter.join();
            }
            None => pids.iter().for_each(|&p| signal(p, libc::SIGTERM)),
        }
        for c in providers {
            terminate(c, grace);
        }
    }

    /// Starts a server process, from this thread (its children die with the thread that
    /// started them: [`die_with_parent`]); [`Starting::ready`] waits for its address.
    fn launch(&self, name: &str, args: &[String]) -> Result<Starting> {
        let log_path = self.spec.data_dir.join("logs").join(format!("{name}.log"));
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)
            .with_context(|| format!("cannot open {}", log_path.display()))?;
        let mut cmd = Command::new(&self.launcher.program);
        cmd.args(&self.launcher.prefix)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(log));
        die_with_parent(&mut cmd);
        // Out of the terminal's process group: Ctrl-C reaches only the process running the
        // cluster, which then stops the servers in order ([`Self::stop`]).
        cmd.process_group(0);
        let mut child = cmd
            .spawn()
            .with_context(|| format!("cannot start {} {name}", self.launcher.program.display()))?;
        let Some(stdout) = child.stdout.take() else {
            kill(child);
            bail!("no stdout for {name}");
        };
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut lines = BufReader::new(stdout).lines();
            if let Some(Ok(first)) = lines.next() {
                let _ = tx.send(first);
            }
            // Keep draining so the child never blocks on a full pipe.
            for _ in lines {}
        });
        Ok(Starting {
            name: name.to_string(),
            child: Some(child),
            first_line: rx,
            log_path,
        })
    }
}

/// A server process launched and not yet known to serve; killed if dropped before
/// [`Starting::ready`] returned it.
struct Starting {
    name: String,
    child: Option<Child>,
    first_line: mpsc::Receiver<String>,
    log_path: PathBuf,
}

impl Starting {
    /// Waits until the server prints its address: the child and that address.
    fn ready(mut self) -> Result<(Child, String)> {
        let name = &self.name;
        match self.first_line.recv_timeout(READY_TIMEOUT) {
            Ok(line) => match line.rsplit_once(' ') {
                Some((_, addr)) if line.contains("listening on") => {
                    let child = self.child.take().ok_or_else(|| anyhow!("{name} is gone"))?;
                    Ok((child, addr.to_string()))
                }
                _ => bail!("{name} printed {line:?} instead of its address"),
            },
            Err(_) => {
                let log = std::fs::read_to_string(&self.log_path).unwrap_or_default();
                let tail: Vec<&str> = log.lines().rev().take(5).collect();
                bail!(
                    "{name} did not start (log {}): {}",
                    self.log_path.display(),
                    tail.into_iter().rev().collect::<Vec<_>>().join(" | ")
                )
            }
        }
    }
}

impl Drop for Starting {
    fn drop(&mut self) {
        if let Some(c) = self.child.take() {
            kill(c);
        }
    }
}

/// Makes the child started by `cmd` die with the thread that starts it, so a crashed test or
/// `tomus up` never leaves servers behind.
pub fn die_with_parent(cmd: &mut Command) {
    // SAFETY: prctl is async-signal-safe.
    unsafe {
        cmd.pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            Ok(())
        });
    }
}

fn path_arg(p: &Path) -> String {
    p.to_string_lossy().into_owned()
}

fn kill(mut c: Child) {
    let _ = c.kill();
    let _ = c.wait();
}

/// Sends `sig` to the child `pid`, which must not have been reaped yet (so its pid is not
/// reused).
fn signal(pid: u32, sig: libc::c_int) {
    if let Ok(pid) = libc::pid_t::try_from(pid) {
        // SAFETY: a plain syscall.
        unsafe {
            libc::kill(pid, sig);
        }
    }
}

/// SIGTERM, then SIGKILL if `c` has not exited after `grace`.
fn terminate(mut c: Child, grace: Duration) {
    signal(c.id(), libc::SIGTERM);
    let deadline = Instant::now() + grace;
    while Instant::now() < deadline {
        if !matches!(c.try_wait(), Ok(None)) {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    kill(c);
}

impl Drop for EmbeddedCluster {
    fn drop(&mut self) {
        for p in self.providers.iter_mut() {
            if let Some(c) = p.take() {
                kill(c);
            }
        }
        self.kill_manager();
    }
}
