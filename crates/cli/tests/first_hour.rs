//! What a new user trips over in the first hour with the `tomus` command (issue 19): output
//! into a closed pipe, a provider of `tomus up` that dies, the logs and the data directory
//! lock of `tomus up`, and the hints of connection errors.

#![allow(clippy::unwrap_used, reason = "a test stops at its first error")]

mod common;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;

use common::{exe, stderr, tomus};

/// A `tomus up` in its own process group (as a shell job would be), with its address and,
/// when asked for, its S3 gateway's.
struct Up {
    child: Child,
    addr: String,
    s3: Option<String>,
    dir: PathBuf,
    /// What `tomus up` said on stderr so far, line by line.
    said: Arc<Mutex<Vec<String>>>,
}

impl Up {
    fn start(providers: usize, extra: &[&str]) -> Self {
        let dir = tomus_cli::scratch_dir("first-hour");
        let mut child = up_command(&dir, providers, extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let addr = address(&lines.next().unwrap().unwrap());
        let s3 = extra
            .contains(&"--s3")
            .then(|| address(&lines.next().unwrap().unwrap()));
        // Keep draining both outputs so `tomus up` never blocks on a full pipe.
        std::thread::spawn(move || lines.for_each(drop));
        let said = Arc::new(Mutex::new(Vec::new()));
        let stderr = BufReader::new(child.stderr.take().unwrap());
        let kept = Arc::clone(&said);
        std::thread::spawn(move || {
            for line in stderr.lines().map_while(Result::ok) {
                kept.lock().unwrap().push(line);
            }
        });
        Up {
            child,
            addr,
            s3,
            dir,
            said,
        }
    }

    fn tomus(&self, args: &[&str]) -> Output {
        tomus(&self.addr, args)
    }

    /// What `tomus status --json` says of the providers: (address, state).
    fn provider_states(&self) -> Vec<(String, String)> {
        self.try_provider_states()
            .unwrap_or_else(|err| panic!("tomus status: {err}"))
    }

    /// The same, or what `tomus status` said when it failed: a manager that was just restarted
    /// runs before it listens, so a status right then is refused.
    fn try_provider_states(&self) -> Result<Vec<(String, String)>, String> {
        let out = self.tomus(&["status", "--json"]);
        if !out.status.success() {
            return Err(stderr(&out));
        }
        let status: Value = serde_json::from_slice(&out.stdout).unwrap();
        let states = status["providers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| {
                (
                    p["addr"].as_str().unwrap().to_string(),
                    p["state"].as_str().unwrap().to_string(),
                )
            })
            .collect();
        Ok(states)
    }

    /// Ctrl-C as a terminal sends it: SIGINT to the whole foreground process group.
    fn interrupt(&mut self) -> std::process::ExitStatus {
        let pgid = i32::try_from(self.child.id()).unwrap();
        // SAFETY: a plain syscall.
        unsafe {
            libc::kill(-pgid, libc::SIGINT);
        }
        self.child.wait().unwrap()
    }
}

impl Drop for Up {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            eprintln!("the cluster's data and logs are in {}", self.dir.display());
        } else {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

fn up_command(dir: &Path, providers: usize, extra: &[&str]) -> Command {
    let mut cmd = Command::new(exe());
    cmd.args(["up", "--addr", "127.0.0.1:0", "--providers"])
        .arg(providers.to_string())
        .arg("--data")
        .arg(dir)
        .args(extra);
    std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
    cmd
}

/// The address at the end of a `... listening on ADDR` line.
fn address(line: &str) -> String {
    assert!(line.contains("listening on"), "{line}");
    line.trim().rsplit(' ').next().unwrap().to_string()
}

/// Polls `f` until it holds, for at most a minute.
fn eventually(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !f() {
        assert!(Instant::now() < deadline, "{what}: not within a minute");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The process id of provider `i` of the cluster in `dir`, found by its command line.
fn provider_pid(dir: &Path, i: usize) -> Option<u32> {
    server_pid("provider", &dir.join(format!("provider-{i}")))
}

/// The process id of the `kind` server ("manager", "provider") working in `data`.
fn server_pid(kind: &str, data: &Path) -> Option<u32> {
    let data = data.to_str().unwrap();
    std::fs::read_dir("/proc").ok()?.flatten().find_map(|e| {
        let pid: u32 = e.file_name().to_str()?.parse().ok()?;
        let cmdline = std::fs::read(e.path().join("cmdline")).ok()?;
        let args: Vec<&[u8]> = cmdline.split(|&b| b == 0).collect();
        let is_it = args.contains(&kind.as_bytes()) && args.contains(&data.as_bytes());
        // A zombie (killed, not reaped yet) has an empty command line.
        is_it.then_some(pid)
    })
}

fn sigkill(pid: u32) {
    // SAFETY: a plain syscall.
    unsafe {
        libc::kill(i32::try_from(pid).unwrap(), libc::SIGKILL);
    }
}

/// Runs `tomus args` with its stdout a pipe whose reader is already gone.
fn into_closed_pipe(addr: &str, args: &[&str]) -> Output {
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    Command::new(exe())
        .env("TOMUS_ADDR", addr)
        .args(args)
        .stdout(writer)
        .stderr(Stdio::piped())
        .output()
        .unwrap()
}

#[test]
fn output_into_a_closed_pipe_ends_quietly() {
    let up = Up::start(2, &[]);
    let file = up.dir.join("input");
    std::fs::write(&file, vec![5u8; 200_000]).unwrap();
    for name in ["/d/a", "/d/b", "/d/e/f"] {
        let out = up.tomus(&["fs", "put", file.to_str().unwrap(), name]);
        assert!(out.status.success(), "{}", stderr(&out));
    }
    let commands: [&[&str]; 8] = [
        &["fs", "ls", "-r", "/"],
        &["fs", "ls", "-r", "/", "--json"],
        &["fs", "cat", "/d/a"],
        &["fs", "stat", "/d/a"],
        &["fs", "put", file.to_str().unwrap(), "/d/g"],
        &["providers"],
        &["status"],
        &["blob", "list"],
    ];
    for args in commands {
        let out = into_closed_pipe(&up.addr, args);
        assert_eq!(
            (out.status.code(), stderr(&out)),
            (Some(0), String::new()),
            "tomus {args:?} into a closed pipe"
        );
    }
    // As users write it: the first line, and nothing on stderr.
    let out = Command::new("sh")
        .arg("-c")
        .arg(format!("'{}' fs ls -r / | head -1", exe().display()))
        .env("TOMUS_ADDR", &up.addr)
        .output()
        .unwrap();
    assert!(out.status.success());
    assert_eq!(String::from_utf8_lossy(&out.stdout).lines().count(), 1);
    assert_eq!(stderr(&out), "");
}

/// Writes a file of replication 2 and returns its content.
fn replicated_file(up: &Up) -> Vec<u8> {
    let data: Vec<u8> = (0..300_000u32).map(|i| (i % 241) as u8).collect();
    let local = up.dir.join("replicated");
    std::fs::write(&local, &data).unwrap();
    let out = up.tomus(&[
        "fs",
        "put",
        local.to_str().unwrap(),
        "/r/file",
        "--replication",
        "2",
        "--chunk-size",
        "64KiB",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    data
}

fn reads_back(up: &Up, data: &[u8]) {
    let out = up.tomus(&["fs", "cat", "/r/file"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(out.stdout == data, "the file read back differs");
}

#[test]
fn up_restarts_a_provider_that_dies() {
    let mut up = Up::start(3, &[]);
    let data = replicated_file(&up);
    let before = up.provider_states();
    assert!(before.iter().all(|(_, s)| s == "up"), "{before:?}");

    let pid = provider_pid(&up.dir, 1).unwrap();
    sigkill(pid);
    reads_back(&up, &data);
    // `tomus up` says which server died, and that it is started again.
    let said = |what: &str| up.said.lock().unwrap().iter().any(|l| l.contains(what));
    eventually("tomus up reported the death and the restart", || {
        said("provider 1 exited (signal: 9") && said("provider 1 restarted")
    });
    // Started again: another process on the same directory, known to the manager under the
    // same address (no provider was added), and up.
    eventually("provider 1 restarted", || {
        provider_pid(&up.dir, 1).is_some_and(|p| p != pid)
    });
    eventually("every provider up again", || {
        let now = up.provider_states();
        now.len() == before.len()
            && now.iter().all(|(_, s)| s == "up")
            && now.iter().all(|(a, _)| before.iter().any(|(b, _)| a == b))
    });
    reads_back(&up, &data);
    assert!(
        up.child.try_wait().unwrap().is_none(),
        "tomus up itself keeps running"
    );
}

#[test]
fn up_restarts_its_manager_and_the_data_stays() {
    let mut up = Up::start(3, &[]);
    let data = replicated_file(&up);
    let manager = up.dir.join("manager");
    let pid = server_pid("manager", &manager).unwrap();
    sigkill(pid);
    eventually("the manager restarted", || {
        server_pid("manager", &manager).is_some_and(|p| p != pid)
    });
    // Same address and state: the file written before is there, every provider re-registers.
    eventually("every provider up again", || {
        let Ok(now) = up.try_provider_states() else {
            return false;
        };
        now.len() == 3 && now.iter().all(|(_, s)| s == "up")
    });
    reads_back(&up, &data);
    assert!(
        up.child.try_wait().unwrap().is_none(),
        "tomus up itself keeps running"
    );
}

/// The manager's directory emptied under `tomus up` (a cleanup): the manager it restarts is
/// another cluster, which would collect every chunk of the providers as garbage. They stop
/// instead, `tomus up` says why and leaves them down, and their chunks stay on disk.
#[test]
fn up_leaves_down_providers_whose_manager_became_another_cluster() {
    let up = Up::start(2, &[]);
    replicated_file(&up);
    let chunks = || {
        (0..2)
            .map(|i| common::chunk_files(&up.dir.join(format!("provider-{i}"))).len())
            .collect::<Vec<_>>()
    };
    let before = chunks();
    assert!(before.iter().all(|&n| n > 0), "{before:?}");
    let manager = up.dir.join("manager");
    let pid = server_pid("manager", &manager).unwrap();
    std::fs::remove_dir_all(&manager).unwrap();
    sigkill(pid);

    let said = |what: &str| up.said.lock().unwrap().iter().any(|l| l.contains(what));
    eventually("tomus up reported both providers refused", || {
        (0..2).all(|i| said(&format!("provider {i} exited"))) && said("belongs to another cluster")
    });
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(
        provider_pid(&up.dir, 0),
        None,
        "provider 0 was started again"
    );
    assert_eq!(
        provider_pid(&up.dir, 1),
        None,
        "provider 1 was started again"
    );
    assert!(
        !said("provider 0 restarted"),
        "{:?}",
        up.said.lock().unwrap()
    );
    assert_eq!(chunks(), before, "chunks went");
    assert!(
        up.provider_states().is_empty(),
        "the new manager took providers"
    );
}

#[test]
fn up_without_restarts_keeps_serving_with_a_provider_down() {
    let mut up = Up::start(3, &["--no-restart"]);
    let data = replicated_file(&up);
    let pid = provider_pid(&up.dir, 2).unwrap();
    sigkill(pid);
    reads_back(&up, &data);
    eventually("tomus status shows one provider down", || {
        let states = up.provider_states();
        states.iter().filter(|(_, s)| s == "down").count() == 1
            && states.iter().filter(|(_, s)| s == "up").count() == 2
    });
    assert_eq!(provider_pid(&up.dir, 2), None, "it stays down");
    reads_back(&up, &data);
    // As a person reads it: the workers' states in one column, whatever their names.
    let out = up.tomus(&["status"]);
    let text = String::from_utf8(out.stdout).unwrap();
    let workers: Vec<&str> = text.lines().filter(|l| l.contains(" worker ")).collect();
    assert!(workers.len() >= 4, "{text}");
    let state_at = |l: &str| {
        let gap = l.find("  ").unwrap_or(l.len());
        l.len() - l[gap..].trim_start().len()
    };
    let columns: std::collections::BTreeSet<usize> = workers.iter().map(|l| state_at(l)).collect();
    assert_eq!(columns.len(), 1, "{text}");
    assert!(
        up.child.try_wait().unwrap().is_none(),
        "tomus up keeps running"
    );
}

/// Every log file of the cluster in `dir`: (name, content).
fn logs(dir: &Path) -> Vec<(String, String)> {
    let mut out: Vec<_> = std::fs::read_dir(dir.join("logs"))
        .unwrap()
        .flatten()
        .map(|e| {
            (
                e.file_name().to_string_lossy().into_owned(),
                std::fs::read_to_string(e.path()).unwrap(),
            )
        })
        .collect();
    out.sort();
    out
}

#[test]
fn up_logs_plainly_guards_its_data_and_stops_cleanly() {
    let mut up = Up::start(2, &[]);
    let data = replicated_file(&up);
    reads_back(&up, &data);

    // A second `tomus up` on the same directory: refused at once, naming the holder, and
    // nothing written into the running cluster's logs.
    let before = logs(&up.dir);
    let second = up_command(&up.dir, 2, &[]).output().unwrap();
    assert!(!second.status.success());
    let msg = stderr(&second);
    assert!(
        msg.contains(&format!(
            "data directory {} is in use by PID {}",
            up.dir.display(),
            up.child.id()
        )),
        "{msg}"
    );
    assert!(!msg.contains('\x1b'), "{msg:?}");
    assert_eq!(logs(&up.dir), before);
    reads_back(&up, &data);

    // Ctrl-C: `tomus up` stops its servers in order and exits 0, without warnings.
    let status = up.interrupt();
    assert_eq!(status.code(), Some(0));
    let logs = logs(&up.dir);
    assert!(logs.len() >= 3, "{logs:?}");
    for (name, text) in &logs {
        assert!(!text.contains('\x1b'), "colour codes in {name}: {text:?}");
        assert!(
            !text.contains(" WARN ") && !text.contains(" ERROR "),
            "{name} warns:\n{text}"
        );
        assert!(!text.contains("unreadable"), "{name}:\n{text}");
    }
}

#[test]
fn connection_errors_say_what_to_do() {
    // Nobody listens there: how to start a cluster, or where to point the command.
    let out = tomus("127.0.0.1:1", &["fs", "ls", "/"]);
    assert_eq!(out.status.code(), Some(4));
    let msg = stderr(&out);
    assert_eq!(msg.lines().count(), 1, "{msg}");
    for hint in [
        "cannot reach 127.0.0.1:1",
        "tomus up",
        "TOMUS_ADDR",
        "--addr",
    ] {
        assert!(msg.contains(hint), "{hint:?} missing from {msg}");
    }

    // Something else listens there (the S3 gateway's HTTP port): said as such.
    let up = Up::start(1, &["--s3", "127.0.0.1:0", "--s3-anonymous"]);
    assert!(tomus(&up.addr, &["fs", "ls", "/"]).status.success());
    let s3 = up.s3.clone().unwrap();
    let out = tomus(&s3, &["fs", "ls", "/"]);
    assert!(!out.status.success());
    let msg = stderr(&out);
    assert!(
        msg.contains(&format!("{s3} is not a tomus manager")),
        "{msg}"
    );
    assert!(msg.contains("HTTP/1.1"), "what it answered: {msg}");
}
