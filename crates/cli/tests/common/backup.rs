//! Backup test helpers: what a cluster holds (every file and blob with every retained version
//! and its bytes, retention policies), `tomus backup` runs, and restored clusters.

use std::collections::BTreeMap;
use std::hash::{Hash, Hasher};
use std::path::Path;
use std::time::Duration;

use tomus_cli::embedded::{ClusterSpec, EmbeddedCluster, Launcher};
use tomus_client::{Client, ClientOptions};
use tomus_wire::EntryKind;

use super::{exe, json, ok, tomus, TestCluster};

/// One file or blob: its id, policy, and each retained version's number, size and a hash of
/// its bytes.
pub type Held = BTreeMap<String, (u64, String, Vec<(u64, u64, u64)>)>;

fn digest(data: &[u8]) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    data.hash(&mut h);
    h.finish()
}

/// Everything the cluster behind `client` holds that a user sees (the backup service's own
/// files left out): `file:/path` and `blob:<id>` entries (id, retention policy and storage
/// class, versions) and `dir:/path` policies.
pub async fn held(client: &Client) -> Held {
    let mut out = Held::new();
    // Listed first: a new file gets its name with its first version, so a blob listed with a
    // version that no walk below names is a raw blob. One listed without a version may be a
    // file the restored cluster's backup service is creating right now: left out.
    let listed = client.list_blobs().await.unwrap();
    let internal = client.internal_namespace().walk("").await.unwrap();
    let files: Vec<u64> = internal
        .iter()
        .filter_map(|e| e.blob.as_ref().map(|b| b.id))
        .collect();
    let ns = client.namespace();
    let mut blobs: Vec<(String, tomus_wire::BlobInfo)> = Vec::new();
    for e in ns.walk("").await.unwrap() {
        match (&e.kind, &e.blob) {
            (EntryKind::File, Some(b)) => blobs.push((format!("file:/{}", e.path), b.clone())),
            _ => {
                let r = ns.retention(&e.path).await.unwrap();
                if r.from.as_deref() == Some(e.path.as_str()) {
                    out.insert(
                        format!("dir:/{}", e.path),
                        (0, format!("{:?}", r.retention), vec![]),
                    );
                }
            }
        }
    }
    for b in listed {
        if !files.contains(&b.id) && b.latest > 0 {
            blobs.push((format!("blob:{}", b.id), b));
        }
    }
    for (key, info) in blobs {
        let blob = client.blob(&info);
        let mut versions = Vec::new();
        for v in blob.versions().await.unwrap().versions {
            if v.version == 0 {
                continue;
            }
            let data = blob.read(0, v.size, Some(v.version)).await.unwrap();
            versions.push((v.version, v.size, digest(&data)));
        }
        let info = client.blob_info(info.id).await.unwrap();
        let class = client.storage_class(info.id).await.unwrap();
        let kept = format!("{:?} in {class:?}", info.retention);
        out.insert(key, (info.id, kept, versions));
    }
    out
}

/// What a whole restore of a point taken of `held` gives back: memory-class blobs on disk
/// (a restored data directory starts its providers afresh, and the memory class would hold
/// nothing).
pub fn on_disk(held: &Held) -> Held {
    let mut out = held.clone();
    for (_, kept, _) in out.values_mut() {
        *kept = kept.replace("in Memory", "in Disk");
    }
    out
}

/// Turns backup on to `url` for the cluster at `addr` (no rate limit, a point an hour).
pub fn enable(addr: &str, url: &str, extra: &[&str]) {
    let mut args = vec!["backup", "enable", "--target", url, "--rate", "0"];
    args.extend_from_slice(extra);
    ok(tomus(addr, &args));
}

/// Asks for a point and waits for it; returns its id.
pub fn point_now(addr: &str) -> String {
    let st = json(tomus(
        addr,
        &["backup", "now", "--wait", "--timeout", "120", "--json"],
    ));
    st["last_point"].as_str().unwrap().to_string()
}

/// `tomus backup list --json` at `url`: the point ids.
pub fn points(addr: &str, url: &str) -> Vec<String> {
    json(tomus(addr, &["backup", "list", "--target", url, "--json"]))
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["point"].as_str().unwrap().to_string())
        .collect()
}

/// Restores point `id` of `url` into the new directory `dir` (2 providers), starts a cluster
/// there as `tomus up --data dir` would, and returns what it holds.
pub async fn restore_and_read(url: &str, id: &str, dir: &Path) -> Held {
    let out = std::process::Command::new(exe())
        .args([
            "backup",
            "restore",
            "--target",
            url,
            "--at",
            id,
            "--providers",
            "2",
            "--json",
        ])
        .arg("--data")
        .arg(dir)
        .output()
        .unwrap();
    ok(out);
    let mut spec = ClusterSpec::new(dir, 2);
    spec.heartbeat_ms = 200;
    let mut cluster = EmbeddedCluster::start(&Launcher::binary(exe()), spec).unwrap();
    let client = Client::connect(&cluster.addr, ClientOptions::default())
        .await
        .unwrap();
    let held = held(&client).await;
    cluster.stop(Duration::from_secs(5));
    held
}

fn pattern(seed: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(7).wrapping_add(seed))
        .collect()
}

/// A cluster backed up to `url` across three points (write, overwrite, append, delete
/// between them), destroyed, then each point restored into a fresh cluster: every file and
/// version must be what existed at that point, and `verify` must pass. Returns the points.
pub async fn three_points_restore_exactly(url: &str, tag: &str) -> Vec<String> {
    let tc = TestCluster::start(2);
    let addr = tc.addr();
    let client = tc.client().await;
    let ns = client.namespace();
    let opts = tomus_client::CreateOptions {
        chunk_size: 128 << 10,
        ..tomus_client::CreateOptions::default()
    };
    enable(&addr, url, &[]);
    let (_, a) = ns.create("/a", opts).await.unwrap();
    a.replace(&pattern(1, 500_000)).await.unwrap();
    let (_, b) = ns.create("/dir/b", opts).await.unwrap();
    b.append(&pattern(2, 200_000)).await.unwrap();
    let mut expected = vec![held(&client).await];
    let mut ids = vec![point_now(&addr)];

    a.write(10, &pattern(3, 300_000)).await.unwrap();
    b.append(&pattern(4, 100)).await.unwrap();
    expected.push(held(&client).await);
    ids.push(point_now(&addr));

    ns.delete("/dir/b", false).await.unwrap();
    a.append(&pattern(5, 100_000)).await.unwrap();
    expected.push(held(&client).await);
    ids.push(point_now(&addr));
    assert_eq!(points(&addr, url), ids);
    drop(client);
    drop(tc);

    restore_each_and_verify(url, tag, &ids, &expected).await;
    ids
}

/// Restores each point `ids[i]` of `url` into a fresh cluster and checks it holds
/// `expected[i]`; then `tomus backup verify` of the newest point finds its chunks.
pub async fn restore_each_and_verify(url: &str, tag: &str, ids: &[String], expected: &[Held]) {
    for (i, (id, want)) in ids.iter().zip(expected).enumerate() {
        let restored = tomus_cli::scratch_dir(&format!("restored-{tag}-{i}"));
        let got = restore_and_read(url, id, &restored).await;
        assert_eq!(&got, want, "point {i} ({id}) restored differently");
        let _ = std::fs::remove_dir_all(&restored);
    }
    let report = json(tomus(
        "127.0.0.1:1",
        &["backup", "verify", "--target", url, "--json"],
    ));
    assert!(report["chunks"].as_u64().unwrap() > 0, "{report}");
}
