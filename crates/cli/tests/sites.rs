//! Geo-replication between two real clusters (`tomus sites`): site A replicates `/data` to
//! site B. Checked after each phase: every published version of every file under `/data`
//! on A is one version on B, in the same order, with the same bytes (and nothing else is
//! there), and deletions follow.
//!
//! - `replicates_through_outages_and_restarts`: two loopback clusters. B's manager killed
//!   while A keeps writing (the status shows the backlog and the unreachable site), then
//!   back: B catches up. A's manager SIGKILLed in the middle of a replication burst: the
//!   restarted service resumes from its cursor and the site's own record, with no version
//!   written twice. The lag gauges on A's `/metrics`.
//! - `an_append_waits_out_a_dead_writers_version_on_the_site`: a version in flight on the
//!   site that nobody will finish delays the next append's replay; it stays an append.
//! - `replicates_over_a_cut_and_shaped_link`: the two sites on two network namespaces joined
//!   by a `tc`-limited link (loopback and SIGSTOP without namespaces; see common/hosts/);
//!   the link is cut while A keeps writing, then restored.

#![allow(clippy::unwrap_used, reason = "a test stops at its first error")]

mod common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use rand::{Rng, SeedableRng};
use tomus_client::{Blob, Client, CreateOptions};
use tomus_sites::replay::{apply, scan, Cursor, Progress};
use tomus_sites::REPLICA_OF;
use tomus_wire::{Retention, VersionState};

use common::hosts::{Hosts, LinkSide};
use common::{free_port, json, ok, scrape_metrics, tomus, TestCluster};

const ROOT: &str = "data";
const CATCH_UP: Duration = Duration::from_secs(90);
/// The files the tests write: small chunks, one copy.
const SMALL_FILES: CreateOptions = CreateOptions {
    chunk_size: 64 << 10,
    replication: 1,
    exclusive: false,
};

/// A's published versions of every file under ROOT: path → [(blob, version, append, bytes)].
type History = BTreeMap<String, Vec<(u64, u64, bool, Vec<u8>)>>;
/// B's versions of every file under ROOT: path → [(replica-of, append, bytes)].
type Replicas = BTreeMap<String, Vec<(String, bool, Vec<u8>)>>;

async fn history(c: &Client) -> History {
    let ns = c.internal_namespace();
    let mut out = History::new();
    for e in ns.walk(ROOT).await.unwrap() {
        let Some(info) = e.blob else { continue };
        if info.latest == 0 {
            continue;
        }
        let blob = c.blob(&info);
        let mut versions = Vec::new();
        for (v, _) in blob.versions_attrs().await.unwrap() {
            if v.version == 0 || v.state != VersionState::Published || v.version > info.latest {
                continue;
            }
            let data = blob.read(0, v.size, Some(v.version)).await.unwrap();
            versions.push((info.id, v.version, v.append, data));
        }
        out.insert(e.path, versions);
    }
    out
}

async fn replicas(c: &Client) -> Replicas {
    let ns = c.internal_namespace();
    let mut out = BTreeMap::new();
    let entries = match ns.walk(ROOT).await {
        Ok(e) => e,
        Err(_) => return out,
    };
    for e in entries {
        let Some(info) = e.blob else { continue };
        let blob = c.blob(&info);
        let mut versions = Vec::new();
        // A file the replicator is creating right now may not answer yet: the next look
        // sees it (the comparison fails meanwhile).
        let Ok(listed) = blob.versions_attrs().await else {
            continue;
        };
        for (v, attrs) in listed {
            if v.version == 0 || v.state != VersionState::Published {
                continue;
            }
            let data = blob.read(0, v.size, Some(v.version)).await.unwrap();
            let of = attrs.get(REPLICA_OF).cloned().unwrap_or_default();
            versions.push((of, v.append, data));
        }
        out.insert(e.path, versions);
    }
    out
}

/// Waits until B holds A's history exactly: same files, each A version once, in order,
/// byte-identical, appends as appends. Panics with the difference after `CATCH_UP`.
async fn wait_synced(a: &Client, b: &Client, what: &str) -> usize {
    let started = Instant::now();
    loop {
        let want = history(a).await;
        let got = replicas(b).await;
        let expected: Replicas = want
            .iter()
            .map(|(p, vs)| {
                let vs = vs
                    .iter()
                    .map(|(blob, v, app, d)| (format!("{blob}:{v}"), *app, d.clone()))
                    .collect();
                (p.clone(), vs)
            })
            .collect();
        if got == expected {
            return expected.values().map(Vec::len).sum();
        }
        if started.elapsed() > CATCH_UP {
            let summary = |m: &Replicas| {
                m.iter()
                    .map(|(p, vs)| {
                        let v: Vec<String> = vs
                            .iter()
                            .map(|(o, app, d)| {
                                format!("{o}/{}B{}", d.len(), if *app { "/append" } else { "" })
                            })
                            .collect();
                        format!("{p}: {}", v.join(" "))
                    })
                    .collect::<Vec<_>>()
                    .join("\n")
            };
            panic!(
                "{what}: site B did not catch up in {CATCH_UP:?}\nA:\n{}\nB:\n{}",
                summary(&expected),
                summary(&got)
            );
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

/// A mixed workload on A: appends to a log, replacements of an object, writes at offsets,
/// a new file now and then. Returns the versions published.
async fn workload(a: &Client, rng: &mut rand::rngs::StdRng, ops: usize, big: bool) -> usize {
    let ns = a.namespace();
    let opts = SMALL_FILES;
    let (_, log) = ns.create(&format!("{ROOT}/log"), opts).await.unwrap();
    let (_, obj) = ns.create(&format!("{ROOT}/obj"), opts).await.unwrap();
    let (_, img) = ns.create(&format!("{ROOT}/sub/img"), opts).await.unwrap();
    for i in 0..ops {
        let size = if big {
            rng.gen_range(100_000..300_000)
        } else {
            rng.gen_range(1..5_000)
        };
        let data: Vec<u8> = (0..size).map(|_| rng.gen()).collect();
        match i % 4 {
            0 | 1 => {
                log.append(&data).await.unwrap();
            }
            2 => {
                obj.replace(&data).await.unwrap();
            }
            _ => {
                let at = rng.gen_range(0..20_000);
                img.write(at, &data).await.unwrap();
            }
        }
        if i % 7 == 6 {
            let (_, f) = ns
                .create(&format!("{ROOT}/sub/new-{}", rng.gen::<u32>()), opts)
                .await
                .unwrap();
            f.append(&data).await.unwrap();
        }
    }
    ops + ops / 7
}

async fn keep_all(a: &Client) {
    let ns = a.namespace();
    ns.mkdir(ROOT, true).await.unwrap();
    ns.set_retention(ROOT, Some(Retention::KeepAll))
        .await
        .unwrap();
}

fn rule_status(addr: &str) -> serde_json::Value {
    let st = json(tomus(addr, &["--json", "sites", "status"]));
    st["rules"]["b:/data"].clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn replicates_through_outages_and_restarts() {
    let http = format!("127.0.0.1:{}", free_port());
    let mut a = TestCluster::start_with(2, |s| {
        s.manager_args = vec!["--http-addr".into(), http.clone()];
    });
    let mut b = TestCluster::start(2);
    let (ca, cb) = (a.client().await, b.client().await);
    let mut rng = rand::rngs::StdRng::seed_from_u64(14);

    // Every version kept at A, so every one is checked at B (the copies get the same
    // policy). Versions written before replication starts are replicated too.
    keep_all(&ca).await;
    workload(&ca, &mut rng, 6, false).await;
    replicate_to_b(&a, &b);
    workload(&ca, &mut rng, 12, false).await;
    let n = wait_synced(&ca, &cb, "first replication").await;
    assert_eq!(n, 19, "versions replicated");
    ok(tomus(
        &a.addr(),
        &["sites", "status", "--wait", "--timeout", "30"],
    ));
    let text = String::from_utf8(ok(tomus(&a.addr(), &["status"]))).unwrap();
    assert!(text.contains("replication b:/data: caught up"), "{text}");
    // The service is a worker of the manager process, listed by `tomus status` with what
    // its rules are doing.
    let started = Instant::now();
    loop {
        let st = json(tomus(&a.addr(), &["--json", "status"]));
        let worker = st["workers"]
            .as_array()
            .unwrap()
            .iter()
            .find(|w| w["name"] == "geo-replication")
            .cloned()
            .unwrap_or_else(|| panic!("no geo-replication worker: {st}"));
        if worker["summary"] == "1 rule: 1 caught up; 0 versions behind" {
            assert_ne!(worker["state"], "stopped", "{worker}");
            assert!(worker["rounds"].as_u64().unwrap() > 0, "{worker}");
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(10), "{worker}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // Site B down: A keeps writing; the status shows the backlog and the unreachable site.
    b.cluster.kill_manager();
    let during = workload(&ca, &mut rng, 10, false).await;
    let started = Instant::now();
    loop {
        let r = rule_status(&a.addr());
        if r["versions_behind"].as_u64().unwrap_or(0) >= during as u64
            && r["state"] == "site unreachable"
            && r["error"].is_string()
        {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "status while B is down: {r}"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let m = scrape_metrics(&http);
    assert!(
        m.lines()
            .any(|l| l.starts_with("tomus_replication_lag_versions{") && !l.ends_with(" 0")),
        "{m}"
    );
    b.cluster.start_manager().unwrap();
    let cb = b.client().await;
    wait_synced(&ca, &cb, "after B's outage").await;

    // A's manager SIGKILLed in the middle of a burst of large versions (replication held
    // to 1 MiB/s so the kill lands mid-way): the restarted service resumes; nothing is
    // lost, nothing is written twice (checked by wait_synced: B's versions are A's, each
    // once).
    let rate = ["sites", "replicate", "/data", "--to", "b", "--rate"];
    ok(tomus(&a.addr(), &[&rate[..], &["1MiB/s"]].concat()));
    // The running rule takes the new rate at the service's next round, keeping its counters.
    let started = Instant::now();
    loop {
        let r = rule_status(&a.addr());
        if r["rate"] == 1 << 20 {
            assert!(r["versions_replicated"].as_u64().unwrap() > 0, "{r}");
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(10), "{r}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    workload(&ca, &mut rng, 16, true).await;
    // The kill waits until the service has seen the burst (its status follows by up to a
    // round: on a loaded machine the first reads still show the state from before it).
    let started = Instant::now();
    loop {
        let r = rule_status(&a.addr());
        if r["versions_behind"].as_u64().unwrap_or(0) > 0 {
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(30), "{r}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    a.cluster.kill_manager();
    a.cluster.start_manager().unwrap();
    ok(tomus(&a.addr(), &[&rate[..], &["0"]].concat()));
    let ca = a.client().await;
    workload(&ca, &mut rng, 5, false).await;
    wait_synced(&ca, &cb, "after A's manager restart").await;

    // Deletions follow.
    ca.namespace()
        .delete(&format!("{ROOT}/obj"), false)
        .await
        .unwrap();
    wait_synced(&ca, &cb, "after a deletion").await;
    assert!(cb.namespace().stat(&format!("{ROOT}/obj")).await.is_err());
    // The status file follows the replay by up to a round of the service.
    let started = Instant::now();
    let r = loop {
        let r = rule_status(&a.addr());
        if r["files_deleted"].as_u64().unwrap_or(0) > 0 {
            break r;
        }
        assert!(started.elapsed() < Duration::from_secs(10), "{r}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert!(r["versions_replicated"].as_u64().unwrap() > 0, "{r}");
    // Only the one deletion (counted since A's manager restarted).
    assert_eq!(r["files_deleted"], 1, "{r}");
    let m = scrape_metrics(&http);
    assert!(m.contains("tomus_replication_versions_total{"), "{m}");
}

/// The site holds a version of a replica in flight that no one will finish, as a service run
/// killed mid-publication leaves: the next append is replayed as an append once the site
/// gives that version up (its writer's lease), not rewritten whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_append_waits_out_a_dead_writers_version_on_the_site() {
    let a = TestCluster::start(1);
    let b = TestCluster::start_with(1, |s| s.writer_lease_ms = Some(1500));
    let (ca, cb) = (a.client().await, b.client().await);
    keep_all(&ca).await;
    let log = create(&ca, "log").await;
    log.append(&[1u8; 3000]).await.unwrap();
    replicate_to_b(&a, &b);
    wait_synced(&ca, &cb, "first replication").await;

    let replica = cb.namespace().stat(&format!("{ROOT}/log")).await.unwrap();
    let pool = tomus_wire::Pool::new(tomus_wire::RpcConfig::default());
    common::raw_assign(&pool, &b.addr(), replica.blob.unwrap().id, 50).await;
    log.append(&[2u8; 2000]).await.unwrap();
    // wait_synced fails on a version replayed whole: appends must stay appends.
    assert_eq!(wait_synced(&ca, &cb, "after the dead writer").await, 2);
}

/// `tomus sites status --wait`, for a minute at most.
const WAIT: [&str; 5] = ["sites", "status", "--wait", "--timeout", "60"];

/// Adds `b` as the site "b" of `a` and replicates ROOT there.
fn replicate_to_b(a: &TestCluster, b: &TestCluster) {
    ok(tomus(&a.addr(), &["sites", "add", "b", &b.addr()]));
    ok(tomus(
        &a.addr(),
        &["sites", "replicate", "/data", "--to", "b"],
    ));
}

/// The tree under ROOT: files with their latest bytes, and the directories.
async fn tree(c: &Client) -> (BTreeMap<String, Vec<u8>>, Vec<String>) {
    let (mut files, mut dirs) = (BTreeMap::new(), Vec::new());
    for e in c.namespace().walk(ROOT).await.unwrap() {
        match e.blob {
            Some(info) => {
                let data = c.blob(&info).read(0, info.size, None).await.unwrap();
                files.insert(e.path, data);
            }
            None => dirs.push(e.path),
        }
    }
    (files, dirs)
}

/// One pass from `a` to `b` over what a scan of ROOT finds, throttled to `rate` bytes/s (0:
/// not at all), stopping once `budget` is spent; whether it finished.
async fn one_pass(
    a: &Client,
    b: &Client,
    cursor: &mut Cursor,
    rate: u64,
    budget: Duration,
) -> bool {
    let found = scan(a, ROOT, cursor).await.unwrap();
    let throttle = std::sync::Arc::new(tomus_maintenance::throttle::Throttle::new(rate));
    apply(a, b, found, cursor, &throttle, &Progress::default(), budget)
        .await
        .unwrap()
}

/// The file ROOT/`path`, made of small chunks if new.
async fn create(c: &Client, path: &str) -> Blob {
    let ns = c.namespace();
    ns.create(&format!("{ROOT}/{path}"), SMALL_FILES)
        .await
        .unwrap()
        .1
}

/// Writes `data` as the whole content of ROOT/`path`.
async fn put(c: &Client, path: &str, data: &[u8]) {
    create(c, path).await.replace(data).await.unwrap();
}

/// A directory replaced by a file and a file by a directory at the source, a directory tree
/// removed, and a file where the site has an empty directory: once `tomus sites status
/// --wait` returns, the site holds exactly the source's files, and none of the directories
/// the source no longer has. (A file where the site still had a directory stopped
/// replication for good: every pass failed on "is a directory". And `--wait` could return on
/// a status from before the changes.)
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn paths_that_change_kind_and_removed_directories_are_followed() {
    let a = TestCluster::start(1);
    let b = TestCluster::start(1);
    let (ca, cb) = (a.client().await, b.client().await);
    let ns = ca.namespace();
    put(&ca, "d/x", b"x1").await;
    put(&ca, "f", b"f1").await;
    put(&ca, "e/z", b"z1").await;
    put(&ca, "keep", b"k1").await;
    replicate_to_b(&a, &b);
    ok(tomus(&a.addr(), &WAIT));
    assert_eq!(tree(&cb).await, tree(&ca).await);

    ns.delete(&format!("{ROOT}/d"), true).await.unwrap();
    put(&ca, "d", b"d2").await;
    ns.delete(&format!("{ROOT}/f"), false).await.unwrap();
    put(&ca, "f/y", b"y2").await;
    ns.delete(&format!("{ROOT}/e"), true).await.unwrap();
    // An empty directory on the site where the source now has a file gives way too.
    cb.namespace()
        .mkdir(&format!("{ROOT}/g"), false)
        .await
        .unwrap();
    put(&ca, "g", b"g2").await;
    ok(tomus(&a.addr(), &WAIT));
    let (files, dirs) = tree(&cb).await;
    assert_eq!((files, dirs.clone()), tree(&ca).await);
    assert_eq!(dirs, [format!("{ROOT}/f")]);
}

/// A pass whose task goes away in the middle (its rule changed or removed aborts it) gives up
/// the site files it made too: they no longer hold their paths on the site until the GC grace.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_pass_that_goes_away_leaves_no_pending_file_on_the_site() {
    let a = TestCluster::start(1);
    let b = TestCluster::start(1);
    let (ca, cb) = (a.client().await, b.client().await);
    put(&ca, "a", &vec![7u8; 4 << 20]).await;
    put(&ca, "c", b"c1").await;
    let mut cursor = Cursor::default();
    // 256 KiB/s: the pass is still reading a's bytes when it is dropped, both site files made.
    let pass = one_pass(&ca, &cb, &mut cursor, 256 << 10, Duration::MAX);
    assert!(
        tokio::time::timeout(Duration::from_secs(2), pass)
            .await
            .is_err(),
        "the pass should still be running"
    );
    assert!(cursor.files.is_empty(), "{cursor:?}");
    // Both paths are free on the site again (a pending file refuses a directory there).
    let site = cb.namespace();
    let deadline = Instant::now() + Duration::from_secs(10);
    for name in ["a", "c"] {
        let dir = format!("{ROOT}/{name}");
        loop {
            match site.mkdir(&dir, true).await {
                Ok(_) => break,
                Err(e) => assert!(Instant::now() < deadline, "/{dir} still held: {e}"),
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// A registered file no holder can give intact fails its pass only after everything else
/// in it is done, deletions included: the rule keeps following the rest of the subtree.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_registered_file_no_holder_can_give_does_not_hold_up_the_rest() {
    let a = TestCluster::start(1);
    let b = TestCluster::start(1);
    let (ca, cb) = (a.client().await, b.client().await);
    let work = a.dir.join("work");
    std::fs::create_dir_all(&work).unwrap();
    // Past the 15 MiB a holder keeps in memory, so it reads its copy from disk.
    let size = (16 << 20) + 1;
    let local = work.join("bad");
    std::fs::write(&local, vec![1u8; size]).unwrap();
    let path = format!("/{ROOT}/bad");
    ok(tomus(
        &a.addr(),
        &["fs", "register", local.to_str().unwrap(), &path],
    ));
    common::row_with_checksum(&a.addr(), &path);
    // Its only copy is a hard link of this file: other bytes now.
    std::fs::write(&local, vec![2u8; size]).unwrap();
    put(&ca, "plain", b"p").await;
    let mut cursor = Cursor::default();
    let e = tomus_sites::replicate_once(&ca, &cb, ROOT, &mut cursor)
        .await
        .unwrap_err();
    assert!(e.message.contains("/data/bad"), "{e}");
    assert_eq!(
        file_bytes(&cb).await.keys().collect::<Vec<_>>(),
        ["data/plain"]
    );
    ca.namespace()
        .delete(&format!("{ROOT}/plain"), false)
        .await
        .unwrap();
    tomus_sites::replicate_once(&ca, &cb, ROOT, &mut cursor)
        .await
        .unwrap_err();
    assert!(file_bytes(&cb).await.is_empty());
}

/// The bytes of every file under ROOT on `c` (ordinary files only).
async fn file_bytes(c: &Client) -> BTreeMap<String, Vec<u8>> {
    tree(c).await.0
}

/// Registered files (workflow outputs kept in place on their holders) under a replicated
/// subtree reach the site as ordinary files with their bytes; one deleted at the source goes
/// from the site, one persisted keeps its bytes there, and one registered again at the same
/// path with other bytes replaces the site's copy. (Before, they were skipped silently.)
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn registered_files_are_replicated_as_ordinary_files() {
    let a = TestCluster::start(1);
    let b = TestCluster::start(1);
    let (ca, cb) = (a.client().await, b.client().await);
    let work = a.dir.join("work");
    std::fs::create_dir_all(&work).unwrap();
    let register = |name: &str, bytes: &[u8]| {
        let local = work.join(name.replace('/', "_") + &format!(".{}", bytes.len()));
        std::fs::write(&local, bytes).unwrap();
        let path = format!("/{ROOT}/{name}");
        ok(tomus(
            &a.addr(),
            &["fs", "register", local.to_str().unwrap(), &path],
        ));
    };
    let big: Vec<u8> = (0..(17 << 20) + 3).map(|i: u32| (i % 251) as u8).collect();
    register("wf/big", &big);
    register("wf/one", b"1");
    register("wf/empty", b"");
    register("wf/gone", b"soon gone");
    put(&ca, "plain", b"p").await;
    replicate_to_b(&a, &b);
    ok(tomus(&a.addr(), &WAIT));
    let site = file_bytes(&cb).await;
    let expect = |entries: &[(&str, &[u8])]| -> BTreeMap<String, Vec<u8>> {
        entries
            .iter()
            .map(|(p, b)| (format!("{ROOT}/{p}"), b.to_vec()))
            .collect()
    };
    let want = expect(&[
        ("plain", b"p"),
        ("wf/big", &big),
        ("wf/empty", b""),
        ("wf/gone", b"soon gone"),
        ("wf/one", b"1"),
    ]);
    assert!(site == want, "site: {:?}", site.keys().collect::<Vec<_>>());

    // Deleted, persisted, registered again with other bytes.
    ok(tomus(&a.addr(), &["fs", "rm", &format!("/{ROOT}/wf/gone")]));
    ok(tomus(
        &a.addr(),
        &["fs", "persist", &format!("/{ROOT}/wf/one")],
    ));
    ok(tomus(
        &a.addr(),
        &["fs", "rm", &format!("/{ROOT}/wf/empty")],
    ));
    register("wf/empty", b"not empty now");
    ok(tomus(&a.addr(), &WAIT));
    let site = file_bytes(&cb).await;
    let want = expect(&[
        ("plain", b"p"),
        ("wf/big", &big),
        ("wf/empty", b"not empty now"),
        ("wf/one", b"1"),
    ]);
    assert!(site == want, "site: {:?}", site.keys().collect::<Vec<_>>());
}

/// A pass that stops early gives up the site files it made and did not publish: left
/// pending, the file `c` held its path on the site for the GC grace (an hour by default), and
/// the source's new `c/x` could not be replayed meanwhile ("/data/c is a file").
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_pass_cut_short_leaves_no_pending_file_on_the_site() {
    let a = TestCluster::start(1);
    let b = TestCluster::start(1);
    let (ca, cb) = (a.client().await, b.client().await);
    put(&ca, "d", b"d1").await;
    put(&ca, "c", b"c1").await;
    // No time budget: the pass stops after its first version, d's, having made c on the site.
    let mut cursor = Cursor::default();
    let pass = one_pass(&ca, &cb, &mut cursor, 0, Duration::ZERO);
    assert!(!pass.await, "the pass stops early");
    assert_eq!(cursor.files.len(), 1, "{cursor:?}");
    // c becomes a directory at the source.
    ca.namespace()
        .delete(&format!("{ROOT}/c"), false)
        .await
        .unwrap();
    put(&ca, "c/x", b"x2").await;
    tomus_sites::replicate_once(&ca, &cb, ROOT, &mut cursor)
        .await
        .unwrap();
    assert_eq!(tree(&cb).await, tree(&ca).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn replicates_over_a_cut_and_shaped_link() {
    let mut hosts = Hosts::new("sites", 2);
    let mut managers = Vec::new();
    for (h, name) in [(0usize, "a"), (1, "b")] {
        let (_, addr) = hosts.spawn_manager(h, &format!("manager-{name}"), &[]);
        let provider = format!("provider-{name}");
        hosts.spawn_provider(h, &provider, &addr, &provider, &["--no-fsync"]);
        managers.push(addr);
    }
    if hosts.is_netns() {
        // Site B's link: 20 Mbit/s each way.
        hosts.shape_host(1, 20).unwrap();
    }
    let options = hosts.client_options();
    let ca = Client::connect(&managers[0], options.clone())
        .await
        .unwrap();
    let cb = Client::connect(&managers[1], options).await.unwrap();
    let secret = hosts.secret_file.to_string_lossy().into_owned();
    let cli = |args: &[&str]| {
        let mut full = vec!["--secret-file", secret.as_str()];
        full.extend_from_slice(args);
        tomus(&managers[0], &full)
    };
    ok(cli(&[
        "sites",
        "add",
        "b",
        &managers[1],
        "--site-secret-file",
        &secret,
    ]));
    ok(cli(&["sites", "replicate", "/data", "--to", "b"]));
    let mut rng = rand::rngs::StdRng::seed_from_u64(41);
    keep_all(&ca).await;
    workload(&ca, &mut rng, 12, true).await;
    wait_synced(&ca, &cb, "over the shaped link").await;

    // The link cut while A keeps writing, then restored.
    hosts.cut(1, LinkSide::Bridge);
    workload(&ca, &mut rng, 12, false).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let st = json(cli(&["--json", "sites", "status"]));
    assert!(
        st["rules"]["b:/data"]["versions_behind"]
            .as_u64()
            .unwrap_or(0)
            > 0,
        "{st}"
    );
    hosts.restore(1);
    wait_synced(&ca, &cb, "after the link came back").await;
    assert!(hosts.exited().is_empty(), "{:?}", hosts.exited());
}
