//! What `tomus fs put` and `get` show a person at a terminal (issue 19, item 4): a progress
//! bar naming the file being moved, then one summary line (bytes, time, rate); with stderr
//! not a terminal, none of it. stderr is given a pseudo-terminal here, stdout stays a pipe.

#![allow(clippy::unwrap_used, reason = "a test stops at its first error")]

mod common;

use std::fs::File;
use std::io::Read;
use std::os::fd::{FromRawFd, OwnedFd};
use std::process::{Command, Stdio};

use common::{exe, stderr, tomus, TestCluster};

/// Runs `tomus args` with stderr on a pseudo-terminal of 120 columns: (exit status, stdout,
/// everything drawn on the terminal).
fn on_a_terminal(addr: &str, args: &[&str]) -> (Option<i32>, String, String) {
    let (mut master, mut slave) = (0, 0);
    let size = libc::winsize {
        ws_row: 40,
        ws_col: 120,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: openpty writes two descriptors into the integers given; the rest is read only.
    let rc = unsafe {
        libc::openpty(
            &mut master,
            &mut slave,
            std::ptr::null_mut(),
            std::ptr::null(),
            &size,
        )
    };
    assert_eq!(rc, 0, "openpty: {}", std::io::Error::last_os_error());
    // SAFETY: both descriptors were just opened and are owned by nothing else.
    let (master, slave) = unsafe { (File::from_raw_fd(master), OwnedFd::from_raw_fd(slave)) };
    // Drain the terminal while the command runs so it never blocks on a full buffer; the
    // read ends (EIO) once the command, the last holder of the other side, exits.
    let reader = std::thread::spawn(move || {
        let mut master = master;
        let mut drawn = Vec::new();
        let mut buf = [0u8; 4096];
        while let Ok(n) = master.read(&mut buf) {
            if n == 0 {
                break;
            }
            drawn.extend_from_slice(&buf[..n]);
        }
        String::from_utf8_lossy(&drawn).into_owned()
    });
    let out = Command::new(exe())
        .env("TOMUS_ADDR", addr)
        .args(args)
        .stdin(Stdio::null())
        .stderr(Stdio::from(slave))
        .output()
        .unwrap();
    let drawn = reader.join().unwrap();
    (
        out.status.code(),
        String::from_utf8(out.stdout).unwrap(),
        drawn,
    )
}

#[test]
fn progress_bars_name_the_file_and_end_with_a_summary() {
    let tc = TestCluster::start(2);
    let addr = tc.addr();
    let local = tc.dir.join("big.bin");
    let data: Vec<u8> = (0..(20u32 << 20)).map(|i| (i % 251) as u8).collect();
    std::fs::write(&local, &data).unwrap();
    let local = local.to_str().unwrap();

    // put: the bar carries the destination's name; stdout says what was written.
    let (code, out, drawn) = on_a_terminal(&addr, &["fs", "put", local, "/p/big.bin"]);
    assert_eq!(code, Some(0), "{drawn}");
    assert_eq!(out, "put /p/big.bin: version 1, 20.0 MiB\n");
    assert!(
        drawn.contains("/p/big.bin ["),
        "no bar naming the file: {drawn:?}"
    );
    assert!(
        drawn.contains("uploaded /p/big.bin: 20.0 MiB in "),
        "no summary line: {drawn:?}"
    );

    // get: the same, for the file read.
    let copy = tc.dir.join("copy.bin");
    let (code, out, drawn) =
        on_a_terminal(&addr, &["fs", "get", "/p/big.bin", copy.to_str().unwrap()]);
    assert_eq!(code, Some(0), "{drawn}");
    assert_eq!(out, "");
    assert!(
        drawn.contains("/p/big.bin ["),
        "no bar naming the file: {drawn:?}"
    );
    assert!(
        drawn.contains("downloaded /p/big.bin: 20.0 MiB in "),
        "no summary line: {drawn:?}"
    );
    assert!(std::fs::read(&copy).unwrap() == data, "the copy differs");

    // A tree: one line per file on stdout, one summary of them all.
    let tree = tc.dir.join("tree");
    std::fs::create_dir_all(tree.join("sub")).unwrap();
    std::fs::write(tree.join("a.txt"), b"hello").unwrap();
    std::fs::write(tree.join("sub/b.txt"), b"world!").unwrap();
    let (code, out, drawn) =
        on_a_terminal(&addr, &["fs", "put", "-r", tree.to_str().unwrap(), "/t"]);
    assert_eq!(code, Some(0), "{drawn}");
    assert_eq!(
        out,
        "put /t/a.txt: version 1, 5 B\nput /t/sub/b.txt: version 1, 6 B\n"
    );
    assert!(
        drawn.contains("uploaded 2 files: 11 B in "),
        "no summary line: {drawn:?}"
    );

    // Not a terminal: stderr stays empty, for scripts and logs.
    let out = tomus(&addr, &["fs", "put", local, "/p/quiet.bin"]);
    assert_eq!((out.status.code(), stderr(&out)), (Some(0), String::new()));
    let out = tomus(
        &addr,
        &["fs", "get", "/p/quiet.bin", copy.to_str().unwrap()],
    );
    assert_eq!((out.status.code(), stderr(&out)), (Some(0), String::new()));
}
