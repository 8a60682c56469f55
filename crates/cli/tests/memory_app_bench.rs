//! Benchmark (ignored by default; `bench/dedicated_app.sh` runs it): the makespan of a
//! memory-hungry application with collocated storage (a provider on every host, holding
//! memory-class data) against dedicated storage (providers on 3 storage hosts only), on 8
//! hosts in network namespaces behind 2 switches with shaped host links, where every host
//! also has its own CPU quota and memory limit in a cgroup (v1 `cpu.cfs_quota_us` and
//! `memory.limit_in_bytes`, or v2 `cpu.max` and `memory.max`), holding that host's tomus
//! processes and application. What this emulates on one machine: hosts with a small CPU and
//! memory budget each; the application (`bench/memory_app.py`: KMeans passes with
//! tomus.compute's kernel over the host's partition, keeping in RAM what fits in the memory
//! its host has left and reading the rest again from tomus on every pass) runs on the same 4
//! compute hosts in both modes. Collocated, the provider on a compute host takes part of its
//! memory (its share of the memory-class data) and CPU (serving reads); dedicated, the same
//! data sits on the storage hosts. Medians of alternating rounds to `$TOMUS_BENCH_OUT`.
//! Needs root (namespaces, tc, cgroups) and a Python with tomus and numpy
//! (`$TOMUS_BENCH_PYTHON`, default `.venv-test/bin/python`). The cgroups are removed at the
//! end, the namespaces by `Hosts`.

#![allow(clippy::unwrap_used, reason = "a test stops at its first error")]

mod common;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Instant;

use common::hosts::Hosts;
use common::{json, ok};

const HOSTS: usize = 8;
const SWITCHES: usize = 2;
const HOST_MBIT: u32 = 200;
const STORAGE: [usize; 3] = [1, 4, 6];
const COMPUTE: [usize; 4] = [2, 3, 5, 7];
/// Each host's budget: CPU (in hundredths of a core) and memory.
const HOST_CPU_PERCENT: u64 = 30;
const HOST_MEM_MIB: u64 = 352;
/// Points per compute host (the application's working set).
const PART_MIB: usize = 192;
/// Memory-class data per provider in collocated mode (the same total on the storage hosts
/// in dedicated mode).
const BALLAST_MIB: usize = 80;
const PASSES: usize = 3;
const ROUNDS: usize = 3;

/// One cgroup per emulated host, in the cpu and memory hierarchies (v1) or the unified one
/// (v2); removed on drop (their processes must be gone by then).
struct HostGroups {
    dirs: Vec<PathBuf>,
    v2: bool,
}

impl HostGroups {
    fn new(label: &str, hosts: usize) -> HostGroups {
        let v2 = !Path::new("/sys/fs/cgroup/memory/memory.limit_in_bytes").exists();
        let mut dirs = Vec::new();
        if v2 {
            let top = PathBuf::from(format!("/sys/fs/cgroup/{label}"));
            std::fs::create_dir_all(&top).unwrap();
            std::fs::write(top.join("cgroup.subtree_control"), "+cpu +memory").unwrap();
            for h in 0..hosts {
                let d = top.join(format!("h{h}"));
                std::fs::create_dir_all(&d).unwrap();
                std::fs::write(
                    d.join("cpu.max"),
                    format!("{} 100000", HOST_CPU_PERCENT * 1000),
                )
                .unwrap();
                std::fs::write(d.join("memory.max"), (HOST_MEM_MIB << 20).to_string()).unwrap();
                dirs.push(d);
            }
        } else {
            for h in 0..hosts {
                for ctl in ["cpu", "memory"] {
                    let d = PathBuf::from(format!("/sys/fs/cgroup/{ctl}/{label}/h{h}"));
                    std::fs::create_dir_all(&d).unwrap();
                    if ctl == "cpu" {
                        std::fs::write(
                            d.join("cpu.cfs_quota_us"),
                            (HOST_CPU_PERCENT * 1000).to_string(),
                        )
                        .unwrap();
                    } else {
                        std::fs::write(
                            d.join("memory.limit_in_bytes"),
                            (HOST_MEM_MIB << 20).to_string(),
                        )
                        .unwrap();
                    }
                    dirs.push(d);
                }
            }
        }
        HostGroups { dirs, v2 }
    }

    /// The cgroup directories of host `h`.
    fn of(&self, h: usize) -> Vec<&PathBuf> {
        if self.v2 {
            vec![&self.dirs[h]]
        } else {
            vec![&self.dirs[2 * h], &self.dirs[2 * h + 1]]
        }
    }

    fn join(&self, h: usize, pid: u32) {
        for d in self.of(h) {
            std::fs::write(d.join("cgroup.procs"), pid.to_string()).unwrap();
        }
    }
}

impl Drop for HostGroups {
    fn drop(&mut self) {
        for d in &self.dirs {
            let _ = std::fs::remove_dir(d);
        }
        let parents: std::collections::BTreeSet<PathBuf> = self
            .dirs
            .iter()
            .filter_map(|d| d.parent().map(Path::to_path_buf))
            .collect();
        for p in parents {
            let _ = std::fs::remove_dir(p);
        }
    }
}

/// A manager on host 0 and a provider on each of `on`, put in its host's cgroup.
fn cluster(
    hosts: &mut Hosts,
    groups: &HostGroups,
    label: &str,
    on: &[usize],
) -> (String, Vec<usize>) {
    let (m, manager) = hosts.spawn_manager(0, &format!("manager-{label}"), &["--no-maintenance"]);
    let memory = (1usize << 30).to_string();
    let mut procs = vec![m];
    for &h in on {
        let (name, data) = (format!("provider-{label}-{h}"), format!("data-{label}-{h}"));
        let args = ["--no-fsync", "--memory-class", &memory];
        let p = hosts.spawn_provider(h, &name, &manager, &data, &args);
        groups.join(h, hosts.pid(p).unwrap());
        procs.push(p);
    }
    let started = Instant::now();
    while json(hosts.run(0, &manager, &["--json", "providers"]))
        .as_array()
        .unwrap()
        .len()
        < on.len()
    {
        assert!(started.elapsed().as_secs() < 30, "providers did not join");
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    (manager, procs)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

#[test]
#[ignore = "benchmark: bench/dedicated_app.sh"]
fn bench_memory_app_dedicated_vs_collocated() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let python = std::env::var("TOMUS_BENCH_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|_| root.join(".venv-test/bin/python"));
    let app = root.join("bench/memory_app.py");
    // Made before the hosts so it is dropped after them (their processes gone by then).
    let groups = HostGroups::new(&format!("tomus-dedapp-{}", std::process::id()), HOSTS);
    let mut hosts = Hosts::with_switches("dedapp", HOSTS, SWITCHES);
    if !hosts.is_netns() {
        eprintln!("no network namespaces: the benchmark needs them");
        return;
    }
    for h in 0..HOSTS {
        hosts.shape_host(h, HOST_MBIT).unwrap();
    }
    let points = hosts.dir.join("points");
    let gen = std::process::Command::new(&python)
        .arg(&app)
        .args(["gen", points.to_str().unwrap(), &PART_MIB.to_string()])
        .status()
        .unwrap();
    assert!(
        gen.success(),
        "{} cannot run {}",
        python.display(),
        app.display()
    );
    let ballast = hosts.dir.join("ballast");
    std::fs::write(&ballast, vec![3u8; BALLAST_MIB << 20]).unwrap();
    let mut plan = serde_json::Map::new();
    for &s in &STORAGE {
        let members: Vec<String> = COMPUTE
            .iter()
            .filter(|&&c| {
                STORAGE
                    .iter()
                    .find(|&&s2| hosts.switch_of(s2, SWITCHES) == hosts.switch_of(c, SWITCHES))
                    == Some(&s)
            })
            .map(|&c| hosts.ip(c))
            .collect();
        plan.insert(hosts.ip(s), members.into());
    }
    let plan_file = hosts.dir.join("plan.json");
    std::fs::write(
        &plan_file,
        serde_json::json!({"clusters": plan}).to_string(),
    )
    .unwrap();

    let all: Vec<usize> = (1..HOSTS).collect();
    let mut makespan = [Vec::new(), Vec::new()];
    let mut detail = [Vec::new(), Vec::new()];
    for round in 0..ROUNDS {
        for k in 0..2 {
            let mode = (k + round) % 2;
            let label = format!("{}-{round}", ["dedicated", "collocated"][mode]);
            let on: &[usize] = if mode == 0 { &STORAGE } else { &all };
            let (manager, procs) = cluster(&mut hosts, &groups, &label, on);
            // Dedicated writes go by the plan; collocated ones first to the writer's host.
            let local: &[&str] = if mode == 0 { &[] } else { &["--local"] };
            if mode == 0 {
                ok(hosts.run(
                    0,
                    &manager,
                    &["deploy", "--plan", plan_file.to_str().unwrap()],
                ));
            }
            // A blob of `file` written from host `h` (first replica on h's provider when
            // collocated, on h's cluster's storage node when dedicated).
            let put = |h: usize, storage: &str, file: &Path| -> String {
                let b = json(hosts.run(
                    h,
                    &manager,
                    &["--json", "blob", "create", "--storage", storage],
                ));
                let id = b["id"].as_u64().unwrap().to_string();
                let mut a = vec!["blob", "write", &id, "0", file.to_str().unwrap()];
                a.extend(local);
                ok(hosts.run(h, &manager, &a));
                id
            };
            // The memory-class data: BALLAST_MIB per host collocated, the same total spread
            // over the storage hosts dedicated.
            for i in 0..all.len() {
                put(on[i % on.len()], "memory", &ballast);
            }
            // Each compute host's partition, written from that host.
            let parts: Vec<String> = COMPUTE.iter().map(|&c| put(c, "disk", &points)).collect();
            let start = Instant::now();
            let children: Vec<_> = COMPUTE
                .iter()
                .zip(&parts)
                .map(|(&c, part)| {
                    // Join the host's cgroups, then become the application in its namespace
                    // (here: `ip netns exec` mounts its own /sys, without the cgroups).
                    let mut script = String::new();
                    for d in groups.of(c) {
                        script.push_str(&format!("echo $$ > {}/cgroup.procs && ", d.display()));
                    }
                    // What the host's memory cgroup holds before the application (the
                    // provider, collocated), for the application's budget (it cannot read
                    // the cgroup files under the namespace's /sys).
                    let mem = groups.of(c).last().unwrap().display().to_string();
                    let (limit, stat_key) = if groups.v2 {
                        ("memory.max", "anon")
                    } else {
                        ("memory.limit_in_bytes", "total_rss")
                    };
                    script.push_str(&format!(
                        "export TOMUS_BENCH_MEM_LIMIT=$(cat {mem}/{limit}) \
                         TOMUS_BENCH_MEM_USED=$(awk '$1==\"{stat_key}\" {{print $2}}' \
                         {mem}/memory.stat) && exec \"$@\""
                    ));
                    let mut cmd = std::process::Command::new("sh");
                    cmd.arg("-c").arg(script).arg("app");
                    cmd.args(["ip", "netns", "exec", hosts.netns(c).unwrap()]);
                    cmd.arg(&python).arg(&app).args([
                        "run",
                        "--blob",
                        part,
                        "--passes",
                        &PASSES.to_string(),
                    ]);
                    cmd.env("TOMUS_ADDR", &manager)
                        .env("TOMUS_SECRET_FILE", &hosts.secret_file)
                        .stdin(Stdio::null())
                        .stdout(Stdio::piped())
                        .stderr(Stdio::piped())
                        .spawn()
                        .unwrap()
                })
                .collect();
            let mut runs = Vec::new();
            for child in children {
                let out = child.wait_with_output().unwrap();
                assert!(
                    out.status.success(),
                    "{label}: the application failed ({}): {}",
                    out.status,
                    String::from_utf8_lossy(&out.stderr)
                );
                runs.push(serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap());
            }
            let secs = start.elapsed().as_secs_f64();
            eprintln!("{label}: makespan {secs:.1} s; {runs:?}");
            makespan[mode].push(secs);
            detail[mode].push(serde_json::json!({"round": round, "makespan_s": secs,
                                                  "hosts": runs}));
            for p in procs {
                hosts.kill(p);
            }
        }
    }
    let (d, c) = (median(makespan[0].clone()), median(makespan[1].clone()));
    let out = serde_json::json!({
        "config": {"hosts": HOSTS, "switches": SWITCHES, "host_mbit": HOST_MBIT,
                   "storage_hosts_dedicated": STORAGE, "compute_hosts": COMPUTE,
                   "host_cpu_percent": HOST_CPU_PERCENT, "host_mem_mib": HOST_MEM_MIB,
                   "cgroup": if groups.v2 { "v2" } else { "v1" },
                   "partition_mib_per_compute_host": PART_MIB,
                   "memory_class_mib_per_provider_collocated": BALLAST_MIB,
                   "memory_class_mib_total": BALLAST_MIB * all.len(),
                   "kmeans_passes": PASSES, "k": 8, "dims": 16, "rounds": ROUNDS,
                   "build_profile": if cfg!(debug_assertions) { "debug" } else { "release" }},
        "dedicated": {"makespan_s": d, "runs": makespan[0], "detail": detail[0]},
        "collocated": {"makespan_s": c, "runs": makespan[1], "detail": detail[1]},
        "collocated_over_dedicated": c / d,
    });
    let text = serde_json::to_string_pretty(&out).unwrap();
    println!("{text}");
    if let Ok(path) = std::env::var("TOMUS_BENCH_OUT") {
        std::fs::write(path, &text).unwrap();
    }
}
