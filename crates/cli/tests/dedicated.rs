//! Dedicated deployment end to end (DataSteward), on 8 hosts in network namespaces behind 2
//! switches: the manager on host 0, a `tomus agent` on each other host (so the plan's node
//! names resolve to hosts), a placement plan chosen by `tomus topology select` (offline, on a
//! matrix file with the two switches planted in it), and `tomus deploy --plan --json`, whose
//! provider commands are started on the storage hosts it names (its Dask worker lines, a
//! `storage` one beside each provider and a `compute` one on every other host, are checked
//! as printed: Dask is not needed here).
//!
//! Checked: providers run on the storage hosts only; files written by clients on the compute
//! hosts land only there (the providers' chunk counts add up to every replica written) and
//! each chunk has a replica on the storage node of its writer's own cluster; reads from
//! another compute host and appends work; killing a storage host's provider is repaired
//! (every chunk back to two copies on the survivors, every file still reads back exactly).
//! Without network namespaces every host is 127.0.0.1 and the per-cluster check is skipped.

#![allow(clippy::unwrap_used, reason = "a test stops at its first error")]

mod common;

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use common::hosts::Hosts;
use common::{json, ok};
use serde_json::Value;

const HOSTS: usize = 8;
const SWITCHES: usize = 2;
const STORAGE_NODES: usize = 3;
const CHUNK: usize = 64 << 10;
/// Every file is this many chunks, written with replication 2.
const FILE_CHUNKS: usize = 4;
const REPLICATION: usize = 2;
const REPAIR_LIMIT: Duration = Duration::from_secs(60);

/// Deterministic, distinct content per writer.
fn content(seed: usize, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| ((i * 31 + seed * 7919) % 251) as u8)
        .collect()
}

/// A matrix file over h1..h7 with the switches planted: fast inside one, slow across.
fn matrix_file(hosts: &Hosts) -> std::path::PathBuf {
    let names: Vec<String> = (1..HOSTS).map(|h| format!("h{h}")).collect();
    let t: Vec<Vec<f64>> = (1..HOSTS)
        .map(|a| {
            (1..HOSTS)
                .map(|b| {
                    if a == b {
                        0.0
                    } else if hosts.switch_of(a, SWITCHES) == hosts.switch_of(b, SWITCHES) {
                        100.0
                    } else {
                        30.0
                    }
                })
                .collect()
        })
        .collect();
    let path = hosts.dir.join("matrix.json");
    let m = serde_json::json!({"nodes": names, "throughput": t});
    std::fs::write(&path, m.to_string()).unwrap();
    path
}

/// The providers' chunk counts by address, as the manager last heard them.
fn chunk_counts(hosts: &Hosts, manager: &str) -> HashMap<String, u64> {
    let s = json(hosts.run(0, manager, &["--json", "status"]));
    s["providers"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["alive"].as_bool().unwrap())
        .map(|p| {
            (
                p["addr"].as_str().unwrap().to_string(),
                p["chunks"].as_u64().unwrap(),
            )
        })
        .collect()
}

/// Each range of `path`: its offset and the provider addresses holding a replica.
fn locations(hosts: &Hosts, manager: &str, path: &str) -> Vec<(u64, Vec<String>)> {
    let stat = json(hosts.run(0, manager, &["--json", "fs", "stat", path]));
    let blob = stat["blob"].as_u64().expect("a file's blob id").to_string();
    let rows = json(hosts.run(0, manager, &["--json", "blob", "locations", &blob]));
    rows.as_array()
        .unwrap()
        .iter()
        .map(|r| {
            let providers = serde_json::from_value(r["providers"].clone()).unwrap();
            (r["offset"].as_u64().unwrap(), providers)
        })
        .collect()
}

#[test]
fn dedicated_deployment_places_by_plan_and_repairs() {
    let mut hosts = Hosts::with_switches("dedicated", HOSTS, SWITCHES);
    let netns = hosts.is_netns();
    let (_, manager) = hosts.spawn_manager(
        0,
        "manager",
        &[
            "--provider-timeout-ms",
            "1500",
            "--maintenance-interval-ms",
            "300",
            "--repair-rate",
            "0",
        ],
    );
    for h in 1..HOSTS {
        let (name, label) = (format!("agent-{h}"), format!("h{h}"));
        hosts.spawn_role(
            h,
            &name,
            "agent",
            &["--manager", &manager, "--name", &label],
        );
    }

    // The plan: K storage nodes by Algorithm 2 on the planted matrix.
    let matrix = matrix_file(&hosts);
    let plan = json(hosts.run(
        0,
        &manager,
        &[
            "--json",
            "topology",
            "select",
            "--matrix",
            matrix.to_str().unwrap(),
            "--storage-nodes",
            &STORAGE_NODES.to_string(),
        ],
    ));
    let plan_file = hosts.dir.join("plan.json");
    std::fs::write(&plan_file, plan.to_string()).unwrap();
    let storage_names: Vec<String> = serde_json::from_value(plan["storage_nodes"].clone()).unwrap();
    assert_eq!(storage_names.len(), STORAGE_NODES, "{plan}");
    let host_index = |name: &str| -> usize { name[1..].parse().unwrap() };
    let storage_hosts: HashSet<usize> = storage_names.iter().map(|n| host_index(n)).collect();
    let compute: Vec<usize> = (1..HOSTS).filter(|h| !storage_hosts.contains(h)).collect();
    // Each compute host's storage node, by the plan.
    let mut cluster_of: HashMap<usize, usize> = HashMap::new();
    for (s, members) in plan["clusters"].as_object().unwrap() {
        for m in members.as_array().unwrap() {
            cluster_of.insert(host_index(m.as_str().unwrap()), host_index(s));
        }
    }

    // Deploy: the manager gets the plan, and we start what it says on the storage hosts.
    let data = hosts.dir.join("data-{name}");
    let deployed = json(hosts.run(
        0,
        &manager,
        &[
            "--json",
            "deploy",
            "--plan",
            plan_file.to_str().unwrap(),
            "--provider-port",
            "0",
            "--data",
            data.to_str().unwrap(),
            "--memory-class",
            "1MiB",
            "--provider-arg=--heartbeat-ms",
            "--provider-arg=200",
            "--provider-arg=--no-fsync",
        ],
    ));
    let roles = deployed["hosts"].as_array().unwrap();
    let mut provider_of: HashMap<usize, (usize, String)> = HashMap::new();
    let mut services_on = HashSet::new();
    let mut compute_on = Vec::new();
    for r in roles {
        let name = r["name"].as_str().unwrap();
        let host = r["host"].as_str().unwrap();
        let h = host_index(name);
        if netns {
            assert_eq!(host, hosts.ip(h), "{name} resolved to the wrong host: {r}");
        }
        match r["role"].as_str().unwrap() {
            "storage" => {
                assert!(storage_hosts.contains(&h), "{r}");
                let a: Vec<String> = serde_json::from_value(r["args"].clone()).unwrap();
                let p = hosts.spawn_server(h, &format!("provider-{name}"), &a);
                provider_of.insert(h, (p, hosts.proc(p).addr.clone()));
            }
            "services" => {
                // The data services' Dask worker, beside the provider.
                assert!(storage_hosts.contains(&h), "{r}");
                let command = r["command"].as_str().unwrap();
                assert!(
                    command.starts_with(&format!("TOMUS_ADDR={manager} dask worker "))
                        && command
                            .ends_with(&format!("--name {name}-services --resources storage=1")),
                    "{r}"
                );
                assert!(services_on.insert(h), "two service workers on {name}");
            }
            "compute" => {
                assert!(!storage_hosts.contains(&h), "{r}");
                let command = r["command"].as_str().unwrap();
                assert!(
                    command.contains("dask worker") && command.ends_with("--resources compute=1"),
                    "{r}"
                );
                compute_on.push(h);
            }
            other => panic!("unknown role {other}"),
        }
    }
    assert_eq!(provider_of.len(), STORAGE_NODES);
    assert_eq!(
        services_on, storage_hosts,
        "a service worker on every storage node"
    );
    compute_on.sort_unstable();
    assert_eq!(compute_on, compute, "a compute worker on every other host");
    let storage_addrs: HashSet<String> = provider_of.values().map(|(_, a)| a.clone()).collect();

    // Clients on the compute hosts write; with a plan, each writer's first replica goes to
    // its cluster's storage node.
    let started = Instant::now();
    while chunk_counts(&hosts, &manager).len() < STORAGE_NODES {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "providers did not join"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let mut expected: HashMap<String, Vec<u8>> = HashMap::new();
    for &c in &compute {
        let data = content(c, FILE_CHUNKS * CHUNK);
        let local = hosts.dir.join(format!("in-{c}"));
        std::fs::write(&local, &data).unwrap();
        let path = format!("/results/h{c}");
        ok(hosts.run(
            c,
            &manager,
            &[
                "fs",
                "put",
                local.to_str().unwrap(),
                &path,
                "--chunk-size",
                "64KiB",
                "--replication",
                "2",
            ],
        ));
        expected.insert(path, data);
    }
    // An append from another compute host.
    let appender = compute[compute.len() - 1];
    let first = format!("/results/h{}", compute[0]);
    let extra = content(99, 10_000);
    let extra_file = hosts.dir.join("extra");
    std::fs::write(&extra_file, &extra).unwrap();
    ok(hosts.run(
        appender,
        &manager,
        &[
            "fs",
            "put",
            "--append",
            extra_file.to_str().unwrap(),
            &first,
        ],
    ));
    expected.get_mut(&first).unwrap().extend_from_slice(&extra);
    let total_chunks = (compute.len() * FILE_CHUNKS + 1) * REPLICATION;

    // Only storage hosts run providers, and they hold every replica.
    let providers = json(hosts.run(0, &manager, &["--json", "providers"]));
    for p in providers.as_array().unwrap() {
        let addr = p["addr"].as_str().unwrap();
        assert!(storage_addrs.contains(addr), "a provider off the plan: {p}");
    }
    let wait_counts = |hosts: &Hosts, want: u64, live: usize| {
        let started = Instant::now();
        loop {
            let counts = chunk_counts(hosts, &manager);
            let sum: u64 = counts.values().sum();
            if sum == want && counts.len() == live {
                return counts;
            }
            assert!(
                started.elapsed() < REPAIR_LIMIT,
                "providers hold {counts:?} chunks, {want} expected on {live}: {}",
                String::from_utf8_lossy(&hosts.run(0, &manager, &["status"]).stdout)
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    };
    let counts = wait_counts(&hosts, total_chunks as u64, STORAGE_NODES);
    eprintln!("chunks per storage provider: {counts:?}");

    if netns {
        let own = |c: usize| &provider_of[&cluster_of[&c]].1;
        for &c in &compute {
            for (offset, replicas) in locations(&hosts, &manager, &format!("/results/h{c}")) {
                assert_eq!(replicas.len(), REPLICATION);
                // The appended tail was written by the appender, from its own cluster.
                let writer = if offset >= (FILE_CHUNKS * CHUNK) as u64 {
                    appender
                } else {
                    c
                };
                let own = own(writer);
                assert!(
                    replicas.contains(own),
                    "h{writer}'s chunk at {offset} is on {replicas:?}, not on its cluster's \
                     storage node {own}"
                );
            }
        }
    }

    // Reads from another compute host.
    let reader = compute[0];
    let read_all = |hosts: &Hosts| {
        for (path, want) in &expected {
            let got = ok(hosts.run(reader, &manager, &["fs", "cat", path]));
            assert!(got == *want, "{path}: {} bytes read back differ", got.len());
        }
    };
    read_all(&hosts);

    // A storage host dies: repair brings every chunk back to two copies on the others.
    let victim = *storage_hosts.iter().next().unwrap();
    let victim_addr = provider_of[&victim].1.clone();
    let lost = counts[&victim_addr];
    let survivors_before: u64 = counts
        .iter()
        .filter(|(a, _)| **a != victim_addr)
        .map(|(_, n)| n)
        .sum();
    hosts.kill(provider_of[&victim].0);
    let after = wait_counts(&hosts, total_chunks as u64, STORAGE_NODES - 1);
    eprintln!("after repair: {after:?}");
    assert!(!after.contains_key(&victim_addr));
    assert_eq!(
        after.values().sum::<u64>() - survivors_before,
        lost,
        "the survivors gained a copy of each of the {lost} chunks the dead provider held"
    );
    // The repair pass after the copies finds nothing left to do, and nothing lost.
    let started = Instant::now();
    loop {
        let status = json(hosts.run(0, &manager, &["--json", "status"]));
        let m: &Value = &status["maintenance"];
        assert_eq!(m["lost_chunks"].as_u64(), Some(0), "{m}");
        if m["under_replicated_chunks"].as_u64() == Some(0)
            && m["repaired_chunks"].as_u64() >= Some(lost)
        {
            break;
        }
        assert!(
            started.elapsed() < REPAIR_LIMIT,
            "repair did not settle: {m}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    read_all(&hosts);
}
