//! Data types of the dedicated-storage mode (DataSteward): the storage class a blob is
//! created in, the memory providers report for the memory class, and the placement plan
//! that maps compute hosts to their storage nodes.

use serde::{Deserialize, Serialize};
use tomus_metadata::ProviderId;

/// Where a blob's chunks live on its providers. Chosen when the blob (or file) is created,
/// kept for its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
pub enum StorageClass {
    /// Checksummed chunk files and the small-chunk log on the providers' disks.
    #[default]
    Disk,
    /// In the RAM of `replication` providers, bounded by their memory-class capacity: lost
    /// only when every provider holding a copy dies (repair makes new copies in memory).
    Memory,
}

impl StorageClass {
    /// `disk` or `memory`, as the CLI and the S3 gateway spell it.
    pub fn name(self) -> &'static str {
        match self {
            StorageClass::Disk => "disk",
            StorageClass::Memory => "memory",
        }
    }

    /// Parses [`StorageClass::name`] (case-insensitive).
    pub fn parse(s: &str) -> Option<StorageClass> {
        match s.to_ascii_lowercase().as_str() {
            "disk" => Some(StorageClass::Disk),
            "memory" | "mem" | "ram" => Some(StorageClass::Memory),
            _ => None,
        }
    }
}

/// A provider's memory-class store as it last reported it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemoryUsage {
    pub provider: ProviderId,
    pub addr: String,
    /// Bytes of chunk data it may keep in memory (0: it keeps none).
    pub capacity: u64,
    /// Bytes of chunk data it keeps now.
    pub used: u64,
    pub chunks: u64,
    /// Milliseconds since its report (as the manager answered).
    pub age_ms: u64,
}

/// Which storage node serves which compute nodes (`tomus topology select`'s clusters), as
/// `tomus deploy` gives it to the manager. Names are resolved to hosts by the manager when
/// the plan is set (`hosts`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct PlacementPlan {
    pub clusters: Vec<PlanCluster>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlanCluster {
    /// The storage node's name in the plan, and the host its providers run on.
    pub storage: String,
    pub storage_host: String,
    /// The compute nodes it serves: names and hosts, in the same order.
    pub members: Vec<String>,
    pub member_hosts: Vec<String>,
}

impl PlacementPlan {
    /// The storage host of the cluster `host` belongs to (a compute member, or the storage
    /// node itself).
    pub fn storage_host_of(&self, host: &str) -> Option<&str> {
        self.clusters
            .iter()
            .find(|c| c.storage_host == host || c.member_hosts.iter().any(|h| h == host))
            .map(|c| c.storage_host.as_str())
    }
}
