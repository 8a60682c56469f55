//! Benchmark (ignored by default; `bench/dedicated_netns.sh` runs it): N concurrent clients
//! (N = 4, 8, 16, 32, 50, spread round-robin over the 4 compute hosts) writing then reading
//! files, against dedicated storage (providers on the
//! plan's 3 storage hosts only, placement by the plan) and against collocated storage (a
//! provider on every host, each client's first replica on its own host), on 8 hosts in
//! network namespaces behind 2 switches with every host link shaped to HOST_MBIT. Both modes
//! run in one sitting, alternating rounds; JSON (medians, MiB/s summed over the clients) to
//! `$TOMUS_BENCH_OUT` and stdout.
//!
//! What it measures is the storage path alone: every process shares this machine's cores,
//! so the paper's point for dedicated nodes (the application keeps the compute nodes' CPU
//! and memory) is not reproduced here; collocated writes skip the network for the first
//! replica, which is what this set-up can show.

#![allow(clippy::unwrap_used, reason = "a test stops at its first error")]

mod common;

use std::time::Instant;

use common::hosts::Hosts;
use common::{json, ok};

const HOSTS: usize = 8;
const SWITCHES: usize = 2;
const HOST_MBIT: u32 = 200;
/// Storage hosts of the dedicated mode (one or two per switch) and the compute hosts.
const STORAGE: [usize; 3] = [1, 4, 6];
const COMPUTE: [usize; 4] = [2, 3, 5, 7];
const FILE_MIB: usize = 4;
/// The sweep of concurrent clients.
const CLIENTS: [usize; 5] = [4, 8, 16, 32, 50];
const ROUNDS: usize = 3;

/// A manager on host 0 and providers on `on`; answers the manager's address and the
/// processes to stop after the round.
fn cluster(hosts: &mut Hosts, label: &str, on: &[usize]) -> (String, Vec<usize>) {
    let (m, manager) = hosts.spawn_manager(0, &format!("manager-{label}"), &["--no-maintenance"]);
    let mut procs = vec![m];
    for &h in on {
        let (name, data) = (format!("provider-{label}-{h}"), format!("data-{label}-{h}"));
        procs.push(hosts.spawn_provider(h, &name, &manager, &data, &["--no-fsync"]));
    }
    let started = Instant::now();
    loop {
        let s = json(hosts.run(0, &manager, &["--json", "providers"]));
        if s.as_array().unwrap().len() == on.len() {
            break;
        }
        assert!(started.elapsed().as_secs() < 20, "providers did not join");
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    (manager, procs)
}

/// `n` clients run `tomus ARGS(client)` at once, client i on compute host i mod 4; answers
/// MiB/s over all of them.
fn concurrent(hosts: &Hosts, manager: &str, n: usize, a: impl Fn(usize) -> Vec<String>) -> f64 {
    let start = Instant::now();
    let children: Vec<_> = (0..n)
        .map(|i| {
            let c = COMPUTE[i % COMPUTE.len()];
            let owned = a(i);
            let refs: Vec<&str> = owned.iter().map(String::as_str).collect();
            hosts
                .command(c, manager, &refs)
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for child in children {
        let out = child.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    (n * FILE_MIB) as f64 / start.elapsed().as_secs_f64()
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

#[test]
#[ignore = "benchmark: bench/dedicated_netns.sh"]
fn bench_dedicated_vs_collocated_clients() {
    let mut hosts = Hosts::with_switches("dedbench", HOSTS, SWITCHES);
    if !hosts.is_netns() {
        eprintln!("no network namespaces: the benchmark needs them");
        return;
    }
    for h in 0..HOSTS {
        hosts.shape_host(h, HOST_MBIT).unwrap();
    }
    let input = hosts.dir.join("input");
    std::fs::write(&input, vec![7u8; FILE_MIB << 20]).unwrap();
    let input = input.to_string_lossy().into_owned();
    // The plan: each compute host served by a storage host of its own switch.
    let mut clusters = serde_json::Map::new();
    for &s in &STORAGE {
        let members: Vec<String> = COMPUTE
            .iter()
            .filter(|&&c| {
                let own = STORAGE
                    .iter()
                    .find(|&&s2| hosts.switch_of(s2, SWITCHES) == hosts.switch_of(c, SWITCHES))
                    .copied();
                own == Some(s)
            })
            .map(|&c| hosts.ip(c))
            .collect();
        clusters.insert(hosts.ip(s), members.into());
    }
    let plan = serde_json::json!({"clusters": clusters});
    let plan_file = hosts.dir.join("plan.json");
    std::fs::write(&plan_file, plan.to_string()).unwrap();

    let all: Vec<usize> = (1..HOSTS).collect();
    // [mode][sweep point] -> one MiB/s per round.
    let mut w = vec![vec![Vec::new(); CLIENTS.len()]; 2];
    let mut r = w.clone();
    for round in 0..ROUNDS {
        for k in 0..2 {
            let mode = (k + round) % 2;
            let label = format!("{}-{round}", ["dedicated", "collocated"][mode]);
            let on: &[usize] = if mode == 0 { &STORAGE } else { &all };
            let (manager, procs) = cluster(&mut hosts, &label, on);
            if mode == 0 {
                ok(hosts.run(
                    0,
                    &manager,
                    &["deploy", "--plan", plan_file.to_str().unwrap()],
                ));
            }
            for (point, &n) in CLIENTS.iter().enumerate() {
                let ids: Vec<String> = (0..n)
                    .map(|_| {
                        let b = json(hosts.run(0, &manager, &["--json", "blob", "create"]));
                        b["id"].as_u64().unwrap().to_string()
                    })
                    .collect();
                w[mode][point].push(concurrent(&hosts, &manager, n, |i| {
                    let mut a = vec!["blob".to_string(), "write".into(), ids[i].clone()];
                    a.extend(["0".to_string(), input.clone()]);
                    if mode == 1 {
                        a.push("--local".into());
                    }
                    a
                }));
                // Each client reads another's blob (written from the next compute host).
                r[mode][point].push(concurrent(&hosts, &manager, n, |i| {
                    vec!["blob".into(), "read".into(), ids[(i + 1) % n].clone()]
                }));
                eprintln!(
                    "{label} {n} clients: write {:.1} read {:.1} MiB/s",
                    w[mode][point].last().unwrap(),
                    r[mode][point].last().unwrap()
                );
            }
            for p in procs {
                hosts.kill(p);
            }
        }
    }
    let side = |mode: usize| -> serde_json::Value {
        CLIENTS
            .iter()
            .enumerate()
            .map(|(p, n)| {
                serde_json::json!({"clients": n,
                    "write_mib_s": median(w[mode][p].clone()),
                    "read_mib_s": median(r[mode][p].clone()),
                    "write_runs": w[mode][p], "read_runs": r[mode][p]})
            })
            .collect::<Vec<_>>()
            .into()
    };
    let out = serde_json::json!({
        "config": {"hosts": HOSTS, "switches": SWITCHES, "host_mbit": HOST_MBIT,
                   "storage_hosts_dedicated": STORAGE.len(), "compute_hosts": COMPUTE.len(),
                   "clients": CLIENTS, "file_mib_per_client": FILE_MIB, "rounds": ROUNDS,
                   "replication": 1,
                   "build_profile": if cfg!(debug_assertions) { "debug" } else { "release" }},
        "dedicated": side(0),
        "collocated": side(1),
    });
    let text = serde_json::to_string_pretty(&out).unwrap();
    println!("{text}");
    if let Ok(path) = std::env::var("TOMUS_BENCH_OUT") {
        std::fs::write(path, &text).unwrap();
    }
}
