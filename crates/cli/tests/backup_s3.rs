//! Backup to an S3 endpoint (issue 14): the target is the project's own S3 gateway on a
//! separate cluster, reached with signed requests through the AWS environment variables.
//! Points restore exactly into fresh clusters; with the gateway down, the status says the
//! target is unreachable and the service retries, no partial point is listed, and the point
//! completes once the gateway is back.
//!
//! One test in this binary: it sets the AWS variables for the processes it starts.

#![allow(clippy::unwrap_used, reason = "a test stops at its first error")]

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use tomus_client::CreateOptions;

use common::backup::{enable, held, point_now, points, restore_each_and_verify};
use common::{exe, json, ok, tomus, TestCluster};

const ACCESS: &str = "backup-test";
const SECRET: &str = "backup-test-secret-key";

/// The gateway of the cluster at `manager`, serving on `listen`.
fn gateway(manager: &str, listen: &str) -> Child {
    let mut child = Command::new(exe())
        .args(["s3", "--addr", manager, "--listen", listen])
        .env("TOMUS_S3_ACCESS_KEY", ACCESS)
        .env("TOMUS_S3_SECRET_KEY", SECRET)
        .env_remove("TOMUS_CLUSTER_SECRET")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut first = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    assert!(first.contains("listening on"), "{first:?}");
    child
}

fn free_port() -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().to_string()
}

fn data(seed: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(7).wrapping_add(seed))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn points_at_an_s3_endpoint_restore_and_survive_its_outage() {
    let store = TestCluster::start(1);
    let s3_addr = free_port();
    let mut gw = gateway(&store.addr(), &s3_addr);
    ok(tomus(&store.addr(), &["fs", "mkdir", "/backups"]));
    // The only test of this binary: the servers and commands it starts inherit these.
    std::env::set_var("AWS_ACCESS_KEY_ID", ACCESS);
    std::env::set_var("AWS_SECRET_ACCESS_KEY", SECRET);
    std::env::set_var("AWS_REGION", "us-east-1");
    std::env::set_var("AWS_ENDPOINT_URL", format!("http://{s3_addr}"));
    let url = "s3://backups/cluster-a";

    let tc = TestCluster::start(2);
    let addr = tc.addr();
    let client = tc.client().await;
    let ns = client.namespace();
    let opts = CreateOptions {
        chunk_size: 128 << 10,
        ..CreateOptions::default()
    };
    enable(&addr, url, &[]);
    let (_, a) = ns.create("/a", opts).await.unwrap();
    a.replace(&data(1, 500_000)).await.unwrap();
    let (_, b) = ns.create("/dir/b", opts).await.unwrap();
    b.append(&data(2, 200_000)).await.unwrap();
    let mut expected = vec![held(&client).await];
    let mut ids = vec![point_now(&addr)];

    a.write(10, &data(3, 300_000)).await.unwrap();
    b.append(&data(4, 100)).await.unwrap();
    ns.delete("/dir/b", false).await.unwrap();
    expected.push(held(&client).await);
    ids.push(point_now(&addr));

    // The target goes away: a requested point fails, says why, and is retried.
    let _ = gw.kill();
    let _ = gw.wait();
    a.append(&data(5, 100_000)).await.unwrap();
    expected.push(held(&client).await);
    ok(tomus(&addr, &["backup", "now"]));
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let st = json(tomus(&addr, &["backup", "status", "--json"]));
        let s = &st["status"];
        if s["attempts"].as_u64().unwrap_or(0) >= 2 {
            assert_eq!(s["state"], "retrying", "{st}");
            assert!(s["error"].as_str().unwrap().contains("unreachable"), "{st}");
            assert_eq!(s["last_point"].as_str().unwrap(), ids[1], "{st}");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no failed attempts reported: {st}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let out = tomus(&addr, &["backup", "list"]);
    assert!(
        !out.status.success(),
        "listing an unreachable target succeeded"
    );
    gw = gateway(&store.addr(), &s3_addr);
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let listed = points(&addr, url);
        if listed.len() == 3 {
            ids.push(listed[2].clone());
            break;
        }
        assert!(listed.len() == 2, "{listed:?}");
        assert!(Instant::now() < deadline, "the point never completed");
        std::thread::sleep(Duration::from_millis(300));
    }
    let st = json(tomus(&addr, &["backup", "status", "--json"]));
    assert!(st["status"]["error"].is_null(), "{st}");
    drop(client);
    drop(tc);

    restore_each_and_verify(url, "s3", &ids, &expected).await;

    // Keys from the AWS shared credentials file instead of the environment: the right ones
    // list the same points, wrong ones are refused.
    let list_with = |keys: &str| {
        let file = store.dir.join(format!("credentials-{}", keys.len()));
        std::fs::write(&file, keys).unwrap();
        Command::new(exe())
            .env_remove("AWS_ACCESS_KEY_ID")
            .env_remove("AWS_SECRET_ACCESS_KEY")
            .env("AWS_SHARED_CREDENTIALS_FILE", &file)
            .env("AWS_PROFILE", "backup")
            .args(["--json", "backup", "list", "--target", url])
            .output()
            .unwrap()
    };
    let good = format!(
        "[default]\naws_access_key_id = nobody\naws_secret_access_key = nothing\n\n\
         [backup]\naws_access_key_id = {ACCESS}\naws_secret_access_key = {SECRET}\n"
    );
    let listed = json(list_with(&good));
    assert_eq!(listed.as_array().map(Vec::len), Some(3), "{listed}");
    let wrong = format!("[backup]\naws_access_key_id = {ACCESS}\naws_secret_access_key = x\n");
    assert!(!list_with(&wrong).status.success());
    let _ = gw.kill();
    let _ = gw.wait();
}
