//! Multi-host harness: N Linux network namespaces ("hosts") on one bridge, each with its own
//! address, running real `tomus` processes; the test process (the client) stays in the root
//! namespace and reaches them through the bridge's own address.
//!
//! [`Hosts::with_switches`] spreads the hosts over several bridges ("switches", one subnet),
//! each extra one joined to the first by a veth pair (its uplink); `tc` token buckets on a
//! host's link or on an uplink shape the network (`shape_host`, `shape_uplink`).
//!
//! Faults: SIGKILL a process, or cut a host off the network by setting one end of its veth
//! pair down (and back up). Everything (processes, namespaces, veths, bridge) is removed on
//! drop, also when the test panics; the scratch directory with the processes' logs is kept
//! then, and its path printed.
//!
//! Without permission for network namespaces (or with `TOMUS_TEST_NO_NETNS=1`) the harness
//! says why on stderr and runs every "host" on loopback instead: processes start directly on
//! 127.0.0.1, and cutting a host off freezes its processes (SIGSTOP; SIGCONT restores them),
//! which looks the same to its peers: no answers, no heartbeats.
//!
//! Names and the subnet are unique per harness: a harness claims 10.77.C.0/24 by creating the
//! bridge `tmsb77xC` (creating an existing link fails, so concurrent tests and concurrent test
//! processes never share one), and names its namespaces `tmsn-PID-C-I` and veths `tmvCbI`
//! (bridge side) / `tmvCnI` (host side). Leftovers of test processes that were SIGKILLed
//! (their PID is gone) are swept once per process.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use tomus_client::ClientOptions;
use tomus_wire::ClusterSecret;

use network::ip;

/// Namespaces, veths, bridges and `tc` shaping: the network the hosts are plugged into.
mod network;

/// How long a server may take to print its address.
const READY_TIMEOUT: Duration = Duration::from_secs(30);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// One network namespace per host.
    Netns,
    /// Every host is 127.0.0.1 (namespaces not available).
    Loopback,
}

/// Which end of a host's veth pair a cut sets down.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LinkSide {
    /// Inside the host's namespace (its "NIC").
    Host,
    /// The bridge port in the root namespace (the "switch port" / the cable).
    Bridge,
}

struct Host {
    /// The bridge it is plugged into (index into `Hosts::bridges`).
    switch: usize,
    ns: String,
    veth_br: String,
    veth_ns: String,
    ip: String,
}

pub struct Proc {
    pub name: String,
    pub host: usize,
    /// The address the process printed when it was ready.
    pub addr: String,
    pub log: PathBuf,
    child: Option<Child>,
}

pub struct Hosts {
    mode: Mode,
    /// Scratch directory: the secret, the processes' data and logs (`logs/NAME.log`).
    pub dir: PathBuf,
    pub secret: ClusterSecret,
    pub secret_file: PathBuf,
    bridge: Option<String>,
    /// Bridges of the other switches, and their uplinks to the first one (bridge side of
    /// the first switch, bridge side of theirs).
    bridges: Vec<String>,
    uplinks: Vec<(String, String)>,
    hosts: Vec<Host>,
    procs: Vec<Proc>,
    /// Hosts currently cut off.
    cut: Vec<Option<LinkSide>>,
}

impl Hosts {
    /// `n` hosts for the test `label`. Never skips: falls back to loopback (saying why on
    /// stderr) when namespaces cannot be created.
    pub fn new(label: &str, n: usize) -> Hosts {
        Hosts::with_switches(label, n, 1)
    }

    /// [`Hosts::new`] with the hosts spread over `switches` bridges in consecutive groups
    /// (host i on switch i * switches / n).
    pub fn with_switches(label: &str, n: usize, switches: usize) -> Hosts {
        let dir = tomus_cli::scratch_dir(&format!("netns-{label}"));
        std::fs::create_dir_all(dir.join("logs")).expect("create scratch dir");
        let secret_bytes = format!("netns-test-secret-{:032x}", rand::random::<u128>());
        let secret_file = dir.join("cluster.secret");
        std::fs::write(&secret_file, &secret_bytes).expect("write secret file");
        let secret = ClusterSecret::load(Some(&secret_file))
            .expect("load secret")
            .expect("secret present");
        let mut hosts = Hosts {
            mode: Mode::Loopback,
            dir,
            secret,
            secret_file,
            bridge: None,
            bridges: Vec::new(),
            uplinks: Vec::new(),
            hosts: Vec::new(),
            procs: Vec::new(),
            cut: vec![None; n],
        };
        let reason = if std::env::var_os("TOMUS_TEST_NO_NETNS").is_some_and(|v| v != "0") {
            Some("TOMUS_TEST_NO_NETNS is set".to_string())
        } else {
            match hosts.setup_netns(n, switches.max(1)) {
                Ok(()) => None,
                Err(e) => {
                    hosts.teardown_network();
                    Some(e)
                }
            }
        };
        match reason {
            None => {
                hosts.mode = Mode::Netns;
                eprintln!(
                    "[{label}] {n} hosts in network namespaces on bridge {} (root side {}), hosts {}; logs in {}",
                    hosts.bridge.as_deref().unwrap_or("?"),
                    hosts.bridge_ip().unwrap_or_default(),
                    hosts
                        .hosts
                        .iter()
                        .map(|h| h.ip.as_str())
                        .collect::<Vec<_>>()
                        .join(", "),
                    hosts.dir.display()
                );
            }
            Some(why) => {
                eprintln!(
                    "[{label}] netns not permitted: {why}; running the same scenario on loopback \
                     (hosts are 127.0.0.1, a network cut is SIGSTOP/SIGCONT); logs in {}",
                    hosts.dir.display()
                );
                hosts.mode = Mode::Loopback;
            }
        }
        hosts
    }

    /// The switch host `i` is plugged into.
    pub fn switch_of(&self, i: usize, switches: usize) -> usize {
        self.hosts
            .get(i)
            .map_or(i * switches / self.len().max(1), |h| h.switch)
    }

    pub fn mode(&self) -> Mode {
        self.mode
    }

    pub fn is_netns(&self) -> bool {
        self.mode == Mode::Netns
    }

    pub fn len(&self) -> usize {
        self.cut.len()
    }

    pub fn is_empty(&self) -> bool {
        self.cut.is_empty()
    }

    fn bridge_ip(&self) -> Option<String> {
        let h = self.hosts.first()?;
        let (net, _) = h.ip.rsplit_once('.')?;
        Some(format!("{net}.254"))
    }

    /// The IP address of host `i`.
    pub fn ip(&self, i: usize) -> String {
        match self.mode {
            Mode::Netns => self.hosts[i].ip.clone(),
            Mode::Loopback => "127.0.0.1".into(),
        }
    }

    /// Client options carrying the cluster secret.
    pub fn client_options(&self) -> ClientOptions {
        ClientOptions {
            secret: Some(self.secret.clone()),
            ..ClientOptions::default()
        }
    }

    /// `tomus --secret-file F` on host `host` (in its namespace), arguments to follow.
    fn tomus_on(&self, host: usize) -> Command {
        let exe = super::exe();
        let mut cmd = match self.mode {
            Mode::Netns => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", &self.hosts[host].ns]).arg(&exe);
                c
            }
            Mode::Loopback => Command::new(&exe),
        };
        cmd.arg("--secret-file").arg(&self.secret_file);
        cmd
    }

    /// Starts `tomus --secret-file F ARGS...` on host `host` and waits until it prints
    /// `... listening on ADDR`; returns the process's index. Its stdout and stderr go to
    /// `logs/NAME.log` in the scratch directory.
    pub fn spawn_server(&mut self, host: usize, name: &str, args: &[String]) -> usize {
        let log_path = self.dir.join("logs").join(format!("{name}.log"));
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)
            .expect("open log file");
        let mut cmd = self.tomus_on(host);
        cmd.args(args)
            .env_remove("TOMUS_ADDR")
            .env_remove("TOMUS_MANAGER")
            .env_remove("TOMUS_CLUSTER_SECRET")
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(log.try_clone().expect("clone log handle")));
        // `ip netns exec` execs the server in place, keeping the PID and this setting.
        tomus_cli::embedded::die_with_parent(&mut cmd);
        let mut child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {name}: {e}"));
        let stdout = child.stdout.take().expect("piped stdout");
        let (tx, rx) = mpsc::channel();
        let mut drain_log = log;
        std::thread::spawn(move || {
            let mut lines = BufReader::new(stdout).lines();
            if let Some(Ok(first)) = lines.next() {
                let _ = writeln!(drain_log, "[stdout] {first}");
                let _ = tx.send(first);
            }
            // Keep draining so the child never blocks on a full pipe.
            for line in lines.map_while(Result::ok) {
                let _ = writeln!(drain_log, "[stdout] {line}");
            }
        });
        let line = match rx.recv_timeout(READY_TIMEOUT) {
            Ok(line) => line,
            Err(e) => {
                let _ = child.kill();
                let status = child.wait().ok();
                panic!(
                    "{name} on host {host} did not start ({e}, exit {status:?}): {}",
                    log_tail(&log_path, 10)
                );
            }
        };
        let addr = match line.rsplit_once(' ') {
            Some((_, addr)) if line.contains("listening on") => addr.to_string(),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                panic!("{name} printed {line:?} instead of its address");
            }
        };
        self.procs.push(Proc {
            name: name.to_string(),
            host,
            addr,
            log: log_path,
            child: Some(child),
        });
        self.procs.len() - 1
    }

    /// Starts the server `role` (`manager`, `provider`, `agent`) as `name` on `host`,
    /// listening on any port of the host's address, with `args` after the role (see
    /// [`Hosts::spawn_server`]); returns the process's index.
    pub fn spawn_role(&mut self, host: usize, name: &str, role: &str, args: &[&str]) -> usize {
        let mut all = vec![
            "--addr".to_string(),
            format!("{}:0", self.ip(host)),
            role.into(),
        ];
        all.extend(args.iter().map(|a| a.to_string()));
        self.spawn_server(host, name, &all)
    }

    /// A manager named `name` on `host` keeping its state in `name` under the scratch
    /// directory, with `args`; its process index and address.
    pub fn spawn_manager(&mut self, host: usize, name: &str, args: &[&str]) -> (usize, String) {
        let data = self.dir.join(name).to_string_lossy().into_owned();
        let mut all = vec!["--data", data.as_str()];
        all.extend_from_slice(args);
        let m = self.spawn_role(host, name, "manager", &all);
        (m, self.proc(m).addr.clone())
    }

    /// A provider named `name` on `host`, registered with `manager`, its data in `data` under
    /// the scratch directory, sending a heartbeat every 200 ms, with `args`.
    pub fn spawn_provider(
        &mut self,
        host: usize,
        name: &str,
        manager: &str,
        data: &str,
        args: &[&str],
    ) -> usize {
        let data = self.dir.join(data).to_string_lossy().into_owned();
        let mut all = vec![
            "--manager",
            manager,
            "--data",
            &data,
            "--heartbeat-ms",
            "200",
        ];
        all.extend_from_slice(args);
        self.spawn_role(host, name, "provider", &all)
    }

    /// `tomus --secret-file F ARGS...` as a client on host `host` against the manager at
    /// `manager`, ready to run or spawn.
    pub fn command(&self, host: usize, manager: &str, args: &[&str]) -> Command {
        let mut cmd = self.tomus_on(host);
        cmd.args(args)
            .env("TOMUS_ADDR", manager)
            .env_remove("TOMUS_MANAGER")
            .env_remove("TOMUS_CLUSTER_SECRET")
            .env("NO_COLOR", "1")
            .stdin(Stdio::null());
        cmd
    }

    /// Runs [`Hosts::command`] to completion.
    pub fn run(&self, host: usize, manager: &str, args: &[&str]) -> std::process::Output {
        self.command(host, manager, args)
            .output()
            .unwrap_or_else(|e| panic!("cannot run tomus on host {host}: {e}"))
    }

    /// The OS process id of process `p` while it runs (`ip netns exec` execs in place, so
    /// it is the server's own: benchmarks put it in a cgroup).
    pub fn pid(&self, p: usize) -> Option<u32> {
        self.procs[p].child.as_ref().map(Child::id)
    }

    /// The network namespace of host `i` (None without namespaces), to run other programs
    /// there with `ip netns exec`.
    pub fn netns(&self, i: usize) -> Option<&str> {
        match self.mode {
            Mode::Netns => Some(&self.hosts[i].ns),
            Mode::Loopback => None,
        }
    }

    pub fn proc(&self, p: usize) -> &Proc {
        &self.procs[p]
    }

    pub fn procs(&self) -> &[Proc] {
        &self.procs
    }

    /// SIGKILLs process `p` and reaps it.
    pub fn kill(&mut self, p: usize) {
        if let Some(mut c) = self.procs[p].child.take() {
            // A frozen (loopback "cut") process dies from SIGKILL as well.
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Whether process `p` is still running (not killed, not exited).
    pub fn running(&mut self, p: usize) -> bool {
        match self.procs[p].child.as_mut() {
            Some(c) => matches!(c.try_wait(), Ok(None)),
            None => false,
        }
    }

    /// Descriptions of processes that exited without being killed by the test.
    pub fn exited(&mut self) -> Vec<String> {
        let mut out = Vec::new();
        for p in &mut self.procs {
            if let Some(c) = p.child.as_mut() {
                if let Ok(Some(status)) = c.try_wait() {
                    out.push(format!("{} exited ({status})", p.name));
                }
            }
        }
        out
    }

    /// Cuts host `host` off the network: its veth goes down on `side` (loopback: its
    /// processes are frozen).
    pub fn cut(&mut self, host: usize, side: LinkSide) {
        match self.mode {
            Mode::Netns => {
                let h = &self.hosts[host];
                let res = match side {
                    LinkSide::Host => ip(&["-n", &h.ns, "link", "set", "dev", &h.veth_ns, "down"]),
                    LinkSide::Bridge => ip(&["link", "set", "dev", &h.veth_br, "down"]),
                };
                res.unwrap_or_else(|e| panic!("cutting host {host} off: {e}"));
            }
            Mode::Loopback => self.signal_host(host, libc::SIGSTOP),
        }
        self.cut[host] = Some(side);
    }

    /// Brings host `host` back onto the network.
    pub fn restore(&mut self, host: usize) {
        match self.mode {
            Mode::Netns => {
                let h = &self.hosts[host];
                ip(&["link", "set", "dev", &h.veth_br, "up"])
                    .and_then(|_| ip(&["-n", &h.ns, "link", "set", "dev", &h.veth_ns, "up"]))
                    .unwrap_or_else(|e| panic!("restoring host {host}: {e}"));
            }
            Mode::Loopback => self.signal_host(host, libc::SIGCONT),
        }
        self.cut[host] = None;
    }

    fn signal_host(&mut self, host: usize, sig: libc::c_int) {
        for p in self.procs.iter().filter(|p| p.host == host) {
            if let Some(c) = &p.child {
                // SAFETY: plain kill(2) on our own child's PID (still unreaped, so not reused).
                unsafe {
                    libc::kill(c.id() as libc::pid_t, sig);
                }
            }
        }
    }

    fn kill_all(&mut self) {
        for p in &mut self.procs {
            if let Some(mut c) = p.child.take() {
                let _ = c.kill();
                let _ = c.wait();
            }
        }
    }

    /// The last `n` lines of every process's log, for failure messages.
    pub fn log_tails(&self, n: usize) -> String {
        self.procs
            .iter()
            .map(|p| {
                format!(
                    "--- {} ({})\n{}",
                    p.name,
                    p.log.display(),
                    log_tail(&p.log, n)
                )
            })
            .collect::<Vec<_>>()
            .join("\n")
    }
}

impl Drop for Hosts {
    fn drop(&mut self) {
        // Frozen processes are killed as well (SIGKILL works on stopped processes).
        self.kill_all();
        if self.mode == Mode::Netns {
            self.teardown_network();
        }
        if std::thread::panicking() || std::env::var_os("TOMUS_TEST_KEEP").is_some() {
            eprintln!("kept logs and data in {}", self.dir.display());
        } else {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

fn log_tail(path: &Path, n: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}
