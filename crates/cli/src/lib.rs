//! The `tomus` command as a library: the command line itself (run by the binary and by the
//! Python package), the embedded cluster, the demo and the benchmarks (shared with the
//! integration tests).

#[macro_use]
pub mod out;

pub mod app;
pub mod backup_cmd;
pub mod bench;
pub mod bench_ceiling;
pub mod bench_cleanup;
pub mod bench_maintenance;
pub mod bench_manager;
pub mod bench_memory;
pub mod bench_objects;
pub mod bench_repair;
pub mod demo;
pub mod deploy_cmd;
pub mod embedded;
pub mod fs_cmd;
pub mod ops_cmd;
pub mod pattern;
pub mod s3_cmd;
pub mod sites_cmd;
pub mod size;
pub mod topology_cmd;
pub mod transfer;

/// A fresh directory under the system temp dir, for clusters that should not outlive a run.
pub fn scratch_dir(tag: &str) -> std::path::PathBuf {
    let n: u64 = rand::random();
    std::env::temp_dir().join(format!("tomus-{tag}-{}-{n:x}", std::process::id()))
}
