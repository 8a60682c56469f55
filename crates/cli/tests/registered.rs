//! Registered files (workflows) through the `tomus` command, against real processes:
//! `fs register` links without copying (same inode, one more link), `ls` shows holders,
//! `get`/`cat` return the bytes, a second holder is added by registering the same bytes on
//! another provider, a damaged or dead holder is skipped for the next one, registered files
//! are immutable, and `fs persist` turns one into an ordinary file.

#![allow(clippy::unwrap_used, reason = "a test stops at its first error")]

mod common;

use std::os::unix::fs::MetadataExt;
use std::path::Path;

use common::{json, ok, row_with_checksum, stderr, tomus, TestCluster};

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

fn data(size: usize, seed: u8) -> Vec<u8> {
    (0..size)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

#[test]
fn register_links_serves_fails_over_and_persists() {
    let t = TestCluster::start(2);
    let addr = t.addr();
    let work = t.dir.join("work");
    std::fs::create_dir_all(&work).unwrap();
    let bytes = data((16 << 20) + 3, 7);
    let a = work.join("a.bin");
    std::fs::write(&a, &bytes).unwrap();
    let p0 = t.cluster.provider_addr(0).to_string();
    let p1 = t.cluster.provider_addr(1).to_string();

    let out = ok(tomus(
        &addr,
        &["fs", "register", s(&a), "/wf/a.bin", "--provider", &p0],
    ));
    assert_eq!(String::from_utf8(out).unwrap().trim(), "/wf/a.bin");
    // No copy: the provider's directory holds the same inode.
    let meta = std::fs::metadata(&a).unwrap();
    assert_eq!(meta.nlink(), 2);
    let linked: Vec<_> = std::fs::read_dir(t.cluster.provider_dir(0).join("registered"))
        .unwrap()
        .map(|e| e.unwrap().metadata().unwrap().ino())
        .collect();
    assert_eq!(linked, vec![meta.ino()]);

    let row = row_with_checksum(&addr, "/wf/a.bin");
    assert_eq!(row["type"], "registered");
    assert_eq!(row["size"], bytes.len() as u64);
    assert_eq!(row["holders"][0]["addr"], p0.as_str());
    let text = String::from_utf8(ok(tomus(&addr, &["fs", "ls", "/wf"]))).unwrap();
    assert!(text.contains("reg") && text.contains(&p0), "{text}");

    let got = work.join("got.bin");
    ok(tomus(&addr, &["fs", "get", "/wf/a.bin", s(&got)]));
    assert!(std::fs::read(&got).unwrap() == bytes);
    assert!(ok(tomus(&addr, &["fs", "cat", "/wf/a.bin"])) == bytes);

    // Immutable: other bytes at the same path are refused.
    let other = work.join("other.bin");
    std::fs::write(&other, b"different").unwrap();
    let refused = tomus(&addr, &["fs", "register", s(&other), "/wf/a.bin"]);
    assert!(!refused.status.success());
    assert!(
        stderr(&refused).contains("immutable"),
        "{}",
        stderr(&refused)
    );

    // A second holder: the same bytes registered on the other provider.
    let b = work.join("b.bin");
    std::fs::write(&b, &bytes).unwrap();
    ok(tomus(
        &addr,
        &["fs", "register", s(&b), "/wf/a.bin", "--provider", &p1],
    ));
    let row = json(tomus(&addr, &["fs", "ls", "/wf/a.bin", "--json"]))[0].clone();
    assert_eq!(row["holders"].as_array().unwrap().len(), 2);

    // The first holder dies: readers fail over to the second.
    let mut t = t;
    t.cluster.kill_provider(0);
    let got2 = work.join("got2.bin");
    ok(tomus(&addr, &["fs", "get", "/wf/a.bin", s(&got2)]));
    assert!(std::fs::read(&got2).unwrap() == bytes);

    // Persist: an ordinary file (a blob) at the same path, same bytes.
    ok(tomus(&addr, &["fs", "persist", "/wf/a.bin"]));
    let row = json(tomus(&addr, &["fs", "ls", "/wf/a.bin", "--json"]))[0].clone();
    assert_eq!(row["type"], "file");
    assert_eq!(row["size"], bytes.len() as u64);
    let got3 = work.join("got3.bin");
    ok(tomus(&addr, &["fs", "get", "/wf/a.bin", s(&got3)]));
    assert!(std::fs::read(&got3).unwrap() == bytes);
}

#[test]
fn register_refuses_what_it_cannot_link() {
    let t = TestCluster::start(1);
    let addr = t.addr();
    let missing = tomus(&addr, &["fs", "register", "/nonexistent/x", "/wf/x"]);
    assert!(!missing.status.success());
    let dir = t.dir.join("d");
    std::fs::create_dir_all(&dir).unwrap();
    let not_file = tomus(&addr, &["fs", "register", s(&dir), "/wf/d"]);
    assert!(
        stderr(&not_file).contains("not a regular file"),
        "{}",
        stderr(&not_file)
    );
    // A file system other than the providers' (when this machine has one): never copied.
    let shm = Path::new("/dev/shm");
    if shm.is_dir()
        && std::fs::metadata(shm).unwrap().dev() != std::fs::metadata(&t.dir).unwrap().dev()
    {
        let f = shm.join(format!("tomus-reg-test-{}", std::process::id()));
        std::fs::write(&f, b"x").unwrap();
        let out = tomus(&addr, &["fs", "register", s(&f), "/wf/shm"]);
        let _ = std::fs::remove_file(&f);
        assert!(
            stderr(&out).contains("another file system"),
            "{}",
            stderr(&out)
        );
    }
}
