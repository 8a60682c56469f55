//! Topology measurement on a shaped network: 8 hosts in network namespaces behind 2
//! switches (bridges), every host link limited to HOST_MBIT, the uplink between the
//! switches to UPLINK_MBIT, and one noisy host to NOISY_MBIT (`tc` token buckets). Two hosts
//! run providers, the others `tomus agent`; the manager runs on host 0.
//!
//! `tomus topology measure` must recover the structure (each pair's throughput, relative to
//! the median link inside a switch, within 20% of the configured ratio), the matrix must
//! survive a manager restart, and `tomus topology select --storage-nodes 2` (on the stored
//! matrix and offline on the `show --json` file) must pick one storage node per switch and
//! never the noisy host. Without network namespaces (see `common/hosts.rs`) everything runs
//! on loopback and only the plumbing is checked.
//!
//! `cargo test -p tomus-cli --test topology -- --nocapture` prints the matrix.

#![allow(clippy::unwrap_used, reason = "a test stops at its first error")]

mod common;

use common::hosts::Hosts;
use common::{json, ok, stderr, tomus};

const HOSTS: usize = 8;
const SWITCHES: usize = 2;
const NOISY: usize = 3;
/// Hosts running a provider instead of an agent (one per switch).
const PROVIDERS: [usize; 2] = [1, 5];
const HOST_MBIT: u32 = 80;
const UPLINK_MBIT: u32 = 32;
const NOISY_MBIT: u32 = 16;

fn args(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

fn spawn_manager(hosts: &mut Hosts) -> String {
    let dir = hosts.dir.join("manager");
    let m = hosts.spawn_server(
        0,
        "manager",
        &args(&[
            "--addr",
            &format!("{}:0", hosts.ip(0)),
            "manager",
            "--data",
            &dir.to_string_lossy(),
            "--no-maintenance",
        ]),
    );
    hosts.proc(m).addr.clone()
}

/// Runs `tomus ARGS` with the cluster secret against `manager`.
fn run(hosts: &Hosts, manager: &str, a: &[&str]) -> std::process::Output {
    let mut full = vec!["--secret-file", hosts.secret_file.to_str().unwrap()];
    full.extend_from_slice(a);
    tomus(manager, &full)
}

/// The configured rate between two hosts (Mbit/s).
fn expected(hosts: &Hosts, a: usize, b: usize) -> u32 {
    if a == NOISY || b == NOISY {
        NOISY_MBIT
    } else if hosts.switch_of(a, SWITCHES) != hosts.switch_of(b, SWITCHES) {
        UPLINK_MBIT
    } else {
        HOST_MBIT
    }
}

#[test]
fn measure_recovers_switches_and_the_noisy_host_and_select_uses_them() {
    let mut hosts = Hosts::with_switches("topology", HOSTS, SWITCHES);
    let shaped = hosts.is_netns();
    if shaped {
        for h in 0..HOSTS {
            let mbit = if h == NOISY { NOISY_MBIT } else { HOST_MBIT };
            hosts.shape_host(h, mbit).unwrap();
        }
        hosts.shape_uplink(1, UPLINK_MBIT).unwrap();
    }
    let manager = spawn_manager(&mut hosts);
    // Node name -> host.
    let mut host_of = std::collections::HashMap::new();
    for h in 0..HOSTS {
        let listen = format!("{}:0", hosts.ip(h));
        let p = if PROVIDERS.contains(&h) {
            let data = hosts.dir.join(format!("provider-{h}"));
            hosts.spawn_server(
                h,
                &format!("provider-{h}"),
                &args(&[
                    "--addr",
                    &listen,
                    "provider",
                    "--manager",
                    &manager,
                    "--data",
                    &data.to_string_lossy(),
                    "--no-fsync",
                ]),
            )
        } else {
            let name = format!("h{h}");
            hosts.spawn_server(
                h,
                &format!("agent-{h}"),
                &args(&[
                    "--addr",
                    &listen,
                    "agent",
                    "--manager",
                    &manager,
                    "--name",
                    &name,
                ]),
            )
        };
        let name = if PROVIDERS.contains(&h) {
            hosts.proc(p).addr.clone()
        } else {
            format!("h{h}")
        };
        host_of.insert(name, h);
    }

    // One probe at a time: two probes crossing the uplink together would each see half.
    let started = std::time::Instant::now();
    let measured = json(run(
        &hosts,
        &manager,
        &[
            "--json",
            "topology",
            "measure",
            "--rounds",
            "2",
            "--probe-ms",
            "150",
            "--parallel",
            "1",
        ],
    ));
    eprintln!("measured in {:.1} s", started.elapsed().as_secs_f64());
    let nodes: Vec<String> = serde_json::from_value(measured["nodes"].clone()).unwrap();
    let t: Vec<Vec<f64>> = serde_json::from_value(measured["throughput"].clone()).unwrap();
    let sd: Vec<Vec<f64>> = serde_json::from_value(measured["stddev"].clone()).unwrap();
    assert_eq!(
        nodes.len(),
        HOSTS,
        "every provider and agent is a node: {nodes:?}"
    );
    assert!(
        measured.get("failures").is_none(),
        "failed probes: {measured}"
    );
    let host: Vec<usize> = nodes.iter().map(|n| host_of[n]).collect();
    eprintln!(
        "{}",
        String::from_utf8_lossy(&ok(run(&hosts, &manager, &["topology", "show"])))
    );
    for (i, row) in t.iter().enumerate() {
        for (j, &v) in row.iter().enumerate() {
            assert!(
                i == j || v > 0.0,
                "{} -> {} carried nothing",
                nodes[i],
                nodes[j]
            );
        }
    }

    if shaped {
        // Each pair against the median link inside a switch, which is HOST_MBIT.
        let mut intra: Vec<f64> = Vec::new();
        for i in 0..HOSTS {
            for j in (0..HOSTS).filter(|&j| j != i) {
                if expected(&hosts, host[i], host[j]) == HOST_MBIT {
                    intra.push(t[i][j]);
                }
            }
        }
        intra.sort_by(f64::total_cmp);
        let base = intra[intra.len() / 2];
        // TCP over a token bucket carries a little less than the rate.
        let line = f64::from(HOST_MBIT) * 1e6 / 8.0 / f64::from(1 << 20);
        assert!(
            base > 0.7 * line && base < 1.05 * line,
            "links inside a switch carry {base:.2} MiB/s for {line:.2} configured"
        );
        let mut worst = 0.0_f64;
        for i in 0..HOSTS {
            for j in (0..HOSTS).filter(|&j| j != i) {
                let want = f64::from(expected(&hosts, host[i], host[j])) / f64::from(HOST_MBIT);
                let got = t[i][j] / base;
                worst = worst.max((got / want - 1.0).abs());
                assert!(
                    (got / want - 1.0).abs() <= 0.2,
                    "{} -> {}: {:.2} MiB/s (± {:.2}) is {got:.2} of a switch link, configured {want:.2}",
                    nodes[i], nodes[j], t[i][j], sd[i][j]
                );
            }
        }
        eprintln!(
            "largest deviation from the configured ratios: {:.1}%",
            worst * 100.0
        );
    }

    // The matrix is durable: a restarted manager (a new port) shows the same one.
    let m = hosts
        .procs()
        .iter()
        .position(|p| p.name == "manager")
        .unwrap();
    hosts.kill(m);
    let manager = spawn_manager(&mut hosts);
    let shown = json(run(&hosts, &manager, &["--json", "topology", "show"]));
    assert_eq!(shown["nodes"], measured["nodes"]);
    assert_eq!(shown["throughput"], measured["throughput"]);
    let png = hosts.dir.join("topology.png");
    ok(run(
        &hosts,
        &manager,
        &["topology", "show", "--png", png.to_str().unwrap()],
    ));
    assert_eq!(&std::fs::read(&png).unwrap()[..4], b"\x89PNG");

    // Select: on the stored matrix, and offline on the file `show --json` printed.
    let file = hosts.dir.join("matrix.json");
    std::fs::write(&file, serde_json::to_vec(&shown).unwrap()).unwrap();
    // Between the noisy host's mean (~NOISY_MBIT) and the others' (> 40 Mbit/s).
    let min = format!("{:.2}", 28.0 * 1e6 / 8.0 / f64::from(1 << 20));
    let select = [
        "--json",
        "topology",
        "select",
        "--storage-nodes",
        "2",
        "--seed",
        "3",
    ];
    let mut offline = select.to_vec();
    offline.extend(["--matrix", file.to_str().unwrap()]);
    for a in [select.to_vec(), offline] {
        let mut a = a.clone();
        if shaped {
            a.extend(["--min-throughput", &min]);
        }
        let plan = json(run(&hosts, &manager, &a));
        let storage: Vec<String> = serde_json::from_value(plan["storage_nodes"].clone()).unwrap();
        assert_eq!(storage.len(), 2, "{plan}");
        let clusters = plan["clusters"].as_object().unwrap();
        let members: usize = clusters.values().map(|v| v.as_array().unwrap().len()).sum();
        assert_eq!(members, HOSTS - 2, "every other node is a client: {plan}");
        if shaped {
            let mut switches: Vec<usize> = storage
                .iter()
                .map(|s| hosts.switch_of(host_of[s], SWITCHES))
                .collect();
            switches.sort_unstable();
            assert_eq!(switches, vec![0, 1], "one storage node per switch: {plan}");
            assert!(
                storage.iter().all(|s| host_of[s] != NOISY),
                "the noisy host was chosen: {plan}"
            );
            let filtered: Vec<String> = serde_json::from_value(plan["filtered"].clone()).unwrap();
            assert_eq!(
                filtered,
                vec![nodes[host.iter().position(|&h| h == NOISY).unwrap()].clone()]
            );
        }
    }
    // The baselines run on the same matrix; a bad request is refused with a reason.
    for strategy in ["random", "latency"] {
        let plan = json(run(
            &hosts,
            &manager,
            &[
                "--json",
                "topology",
                "select",
                "--storage-nodes",
                "2",
                "--strategy",
                strategy,
            ],
        ));
        assert_eq!(plan["strategy"], strategy);
    }
    let refused = run(
        &hosts,
        &manager,
        &["topology", "select", "--storage-nodes", "9"],
    );
    assert!(!refused.status.success());
    assert!(
        stderr(&refused).contains("cannot choose 9 storage nodes among 8"),
        "{}",
        stderr(&refused)
    );
}
