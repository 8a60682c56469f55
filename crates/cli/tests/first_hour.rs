//! What a new user trips over in the first hour with the `tomus` command (issue 19): output
//! into a closed pipe, and the hints of connection errors.

#![allow(clippy::unwrap_used, reason = "a test stops at its first error")]

mod common;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};

use common::exe;

/// A `tomus up` in its own process group (as a shell job would be), with its address and,
/// when asked for, its S3 gateway's.
struct Up {
    child: Child,
    addr: String,
    s3: Option<String>,
    dir: PathBuf,
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
        let mut stderr = child.stderr.take().unwrap();
        std::thread::spawn(move || std::io::copy(&mut stderr, &mut std::io::sink()));
        Up {
            child,
            addr,
            s3,
            dir,
        }
    }

    fn tomus(&self, args: &[&str]) -> Output {
        tomus(&self.addr, args)
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

fn tomus(addr: &str, args: &[&str]) -> Output {
    Command::new(exe())
        .env("TOMUS_ADDR", addr)
        .args(args)
        .output()
        .unwrap()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
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
