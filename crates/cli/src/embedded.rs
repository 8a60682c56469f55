//! An embedded cluster: one manager and N providers as real child processes of this binary on
//! loopback, data under one directory. Used by `tomus up`, `tomus demo`, `tomus bench` and the
//! integration tests (which kill and restart its processes).

use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{mpsc, OnceLock};
use std::time::Duration;

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
}

/// How long a child may take to print its address.
const READY_TIMEOUT: Duration = Duration::from_secs(30);

impl EmbeddedCluster {
    /// Starts the manager, then the providers, and waits until each is serving.
    pub fn start(launcher: &Launcher, spec: ClusterSpec) -> Result<Self> {
        std::fs::create_dir_all(spec.data_dir.join("logs"))
            .with_context(|| format!("cannot create {}", spec.data_dir.display()))?;
        let mut cluster = EmbeddedCluster {
            launcher: launcher.clone(),
            addr: spec.manager_addr.clone(),
            spec,
            manager: None,
            providers: Vec::new(),
            provider_addrs: Vec::new(),
        };
        cluster.start_manager()?;
        for i in 0..cluster.spec.providers {
            cluster.providers.push(None);
            cluster.provider_addrs.push("127.0.0.1:0".into());
            cluster.start_provider(i)?;
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
        let (child, addr) = self.spawn("manager", &args)?;
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
        let (child, addr) = self.spawn(&format!("provider-{i}"), &args)?;
        self.provider_addrs[i] = addr;
        self.providers[i] = Some(child);
        Ok(())
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

    /// Returns a description of the first child that exited, if any did.
    pub fn exited(&mut self) -> Option<String> {
        if let Some(c) = self.manager.as_mut() {
            if let Ok(Some(status)) = c.try_wait() {
                return Some(format!("manager exited ({status})"));
            }
        }
        for (i, p) in self.providers.iter_mut().enumerate() {
            if let Some(c) = p.as_mut() {
                if let Ok(Some(status)) = c.try_wait() {
                    return Some(format!("provider {i} exited ({status})"));
                }
            }
        }
        None
    }

    fn spawn(&self, name: &str, args: &[String]) -> Result<(Child, String)> {
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
        let mut child = cmd
            .spawn()
            .with_context(|| format!("cannot start {} {name}", self.launcher.program.display()))?;
        let stdout = child
            .stdout
            .take()
            .ok_or_else(|| anyhow!("no stdout for {name}"))?;
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut lines = BufReader::new(stdout).lines();
            if let Some(Ok(first)) = lines.next() {
                let _ = tx.send(first);
            }
            // Keep draining so the child never blocks on a full pipe.
            for _ in lines {}
        });
        match rx.recv_timeout(READY_TIMEOUT) {
            Ok(line) => match line.rsplit_once(' ') {
                Some((_, addr)) if line.contains("listening on") => Ok((child, addr.to_string())),
                _ => {
                    kill(child);
                    bail!("{name} printed {line:?} instead of its address")
                }
            },
            Err(_) => {
                kill(child);
                let log = std::fs::read_to_string(&log_path).unwrap_or_default();
                let tail: Vec<&str> = log.lines().rev().take(5).collect();
                bail!(
                    "{name} did not start (log {}): {}",
                    log_path.display(),
                    tail.into_iter().rev().collect::<Vec<_>>().join(" | ")
                )
            }
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
