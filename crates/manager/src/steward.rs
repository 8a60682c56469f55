//! The manager's part in the dedicated-storage mode (DataSteward): which blobs are in the
//! memory storage class, how much memory-class room each provider reported, and the
//! placement plan that sends a writer's chunks to the storage node of its own cluster.
//!
//! The classes and the plan are durable (tables of their own in the manager's store); the
//! memory figures come back with the providers' next reports after a restart.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use redb::TableDefinition;
use tomus_metadata::{BlobId, ProviderId};
use tomus_wire::{
    Error, MemoryUsage, PlacementPlan, ProviderInfo, Result, StorageClass, MAX_ADDR_LEN, MAX_ITEMS,
};

use crate::store::{db_err, decode, encode, Store};

/// Blob -> storage class (only blobs not in the default disk class have a row).
const CLASSES: TableDefinition<u64, &[u8]> = TableDefinition::new("storage_classes");
/// The placement plan: one record.
const PLAN: TableDefinition<&str, &[u8]> = TableDefinition::new("placement_plan");
const PLAN_KEY: &str = "plan";

/// A provider's last memory report, and what placement charged it since.
struct Reported {
    capacity: u64,
    used: u64,
    chunks: u64,
    at: Instant,
    charged: u64,
}

pub struct Steward {
    store: std::sync::Arc<Store>,
    /// Storage classes read so far (they never change once set).
    classes: Mutex<HashMap<BlobId, StorageClass>>,
    memory: Mutex<HashMap<ProviderId, Reported>>,
    plan: Mutex<Option<PlacementPlan>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Each holder updates whole entries: nothing half-done for a panic to leave behind.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Steward {
    /// Loads the placement plan from `store`.
    pub fn open(store: std::sync::Arc<Store>) -> Result<Self> {
        let plan = {
            let txn = store.read()?;
            match txn.open_table(PLAN) {
                Ok(t) => match t.get(PLAN_KEY).map_err(db_err)? {
                    Some(v) => Some(decode::<PlacementPlan>(v.value())?),
                    None => None,
                },
                Err(redb::TableError::TableDoesNotExist(_)) => None,
                Err(e) => return Err(db_err(e)),
            }
        };
        Ok(Steward {
            store,
            classes: Mutex::new(HashMap::new()),
            memory: Mutex::new(HashMap::new()),
            plan: Mutex::new(plan),
        })
    }

    /// Records the class of a new blob (durably, before the creation is answered).
    pub fn set_class(&self, blob: BlobId, class: StorageClass) -> Result<()> {
        if class != StorageClass::Disk {
            let txn = self.store.write()?;
            {
                let mut t = txn.open_table(CLASSES).map_err(db_err)?;
                t.insert(blob, encode(&class)?.as_slice()).map_err(db_err)?;
            }
            txn.commit().map_err(db_err)?;
        }
        lock(&self.classes).insert(blob, class);
        Ok(())
    }

    /// The class of `blob` (disk unless recorded otherwise).
    pub fn class(&self, blob: BlobId) -> Result<StorageClass> {
        if let Some(c) = lock(&self.classes).get(&blob) {
            return Ok(*c);
        }
        let txn = self.store.read()?;
        let class = match txn.open_table(CLASSES) {
            Ok(t) => match t.get(blob).map_err(db_err)? {
                Some(v) => decode(v.value())?,
                None => StorageClass::Disk,
            },
            Err(redb::TableError::TableDoesNotExist(_)) => StorageClass::Disk,
            Err(e) => return Err(db_err(e)),
        };
        lock(&self.classes).insert(blob, class);
        Ok(class)
    }

    /// A provider's memory report.
    pub fn report_memory(&self, id: ProviderId, capacity: u64, used: u64, chunks: u64) {
        lock(&self.memory).insert(
            id,
            Reported {
                capacity,
                used,
                chunks,
                at: Instant::now(),
                charged: 0,
            },
        );
    }

    /// The memory-class stores of `providers` (those that reported one).
    pub fn memory_status(&self, providers: &[ProviderInfo]) -> Vec<MemoryUsage> {
        let memory = lock(&self.memory);
        providers
            .iter()
            .filter_map(|p| {
                let r = memory.get(&p.id)?;
                Some(MemoryUsage {
                    provider: p.id,
                    addr: p.addr.clone(),
                    capacity: r.capacity,
                    used: r.used,
                    chunks: r.chunks,
                    age_ms: r.at.elapsed().as_millis() as u64,
                })
            })
            .collect()
    }

    /// `candidates` (for a memory-class placement) keep only the providers that reported a
    /// memory-class store within `timeout`, each with its free memory instead of disk.
    pub fn memory_candidates(
        &self,
        candidates: Vec<(ProviderInfo, u64)>,
        timeout: Duration,
    ) -> Vec<(ProviderInfo, u64)> {
        let memory = lock(&self.memory);
        candidates
            .into_iter()
            .filter_map(|(p, _)| {
                let r = memory.get(&p.id)?;
                if r.capacity == 0 || r.at.elapsed() > timeout {
                    return None;
                }
                let free = r.capacity.saturating_sub(r.used + r.charged);
                Some((p, free))
            })
            .collect()
    }

    /// Counts placed memory-class chunks against their providers until they report again.
    pub fn charge_memory(&self, placed: &[(ProviderId, u64)]) {
        let mut memory = lock(&self.memory);
        for (id, bytes) in placed {
            if let Some(r) = memory.get_mut(id) {
                r.charged += bytes;
            }
        }
    }

    /// Stores `plan` (or clears it) with every name resolved to a host by `host_of`.
    pub fn set_plan(
        &self,
        plan: Option<PlacementPlan>,
        host_of: impl Fn(&str) -> String,
    ) -> Result<Option<PlacementPlan>> {
        let resolved = match plan {
            Some(mut plan) => {
                check_plan(&plan)?;
                for c in &mut plan.clusters {
                    c.storage_host = host_of(&c.storage);
                    c.member_hosts = c.members.iter().map(|m| host_of(m)).collect();
                }
                Some(plan)
            }
            None => None,
        };
        let txn = self.store.write()?;
        {
            let mut t = txn.open_table(PLAN).map_err(db_err)?;
            match &resolved {
                Some(p) => {
                    t.insert(PLAN_KEY, encode(p)?.as_slice()).map_err(db_err)?;
                }
                None => {
                    t.remove(PLAN_KEY).map_err(db_err)?;
                }
            }
        }
        txn.commit().map_err(db_err)?;
        *lock(&self.plan) = resolved.clone();
        Ok(resolved)
    }

    pub fn plan(&self) -> Option<PlacementPlan> {
        lock(&self.plan).clone()
    }

    /// The host whose providers get a writer's first replica: the storage node of the
    /// writer's cluster in the plan (`None`: no plan, or the writer is in none of its
    /// clusters).
    pub fn preferred_host(&self, client_host: Option<&str>) -> Option<String> {
        let host = client_host?;
        lock(&self.plan)
            .as_ref()?
            .storage_host_of(host)
            .map(str::to_string)
    }
}

/// A plan's names are bounded like addresses, and there are not too many.
fn check_plan(plan: &PlacementPlan) -> Result<()> {
    let names = plan.clusters.len() + plan.clusters.iter().map(|c| c.members.len()).sum::<usize>();
    if names > MAX_ITEMS {
        return Err(Error::invalid(format!(
            "a placement plan names at most {MAX_ITEMS} nodes"
        )));
    }
    let all = plan
        .clusters
        .iter()
        .flat_map(|c| std::iter::once(&c.storage).chain(&c.members));
    for name in all {
        if name.is_empty() || name.len() > MAX_ADDR_LEN {
            return Err(Error::invalid(format!(
                "a plan's node names are 1 to {MAX_ADDR_LEN} bytes"
            )));
        }
    }
    Ok(())
}

/// The host part of `host:port` (`[v6]:port` too); anything else is taken as a host name.
pub fn host_part(name: &str) -> String {
    if let Some(rest) = name.strip_prefix('[') {
        if let Some((host, _)) = rest.split_once(']') {
            return host.to_string();
        }
    }
    match name.rsplit_once(':') {
        Some((host, port)) if !host.contains(':') && port.parse::<u16>().is_ok() => {
            host.to_string()
        }
        _ => name.to_string(),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "a test stops at its first error")]

    use std::sync::Arc;

    use tomus_wire::PlanCluster;

    use super::*;

    fn dir() -> std::path::PathBuf {
        std::env::temp_dir().join(format!(
            "tomus-steward-unit-{}-{:x}",
            std::process::id(),
            rand::random::<u64>()
        ))
    }

    fn provider(id: ProviderId, host: &str) -> (ProviderInfo, u64) {
        let info = ProviderInfo {
            id,
            addr: format!("{host}:7000"),
            host: host.into(),
            capacity: 1 << 40,
            free: 1 << 40,
            chunks: 0,
            load: 0,
            alive: true,
            draining: false,
            fault: None,
        };
        (info, 1 << 40)
    }

    #[test]
    fn host_parts() {
        assert_eq!(host_part("10.0.0.1:7000"), "10.0.0.1");
        assert_eq!(host_part("[::1]:7000"), "::1");
        assert_eq!(host_part("node-3"), "node-3");
    }

    #[test]
    fn classes_and_the_plan_survive_a_reopen() {
        let d = dir();
        {
            let s = Steward::open(Arc::new(Store::open(&d).unwrap())).unwrap();
            s.set_class(7, StorageClass::Memory).unwrap();
            s.set_class(8, StorageClass::Disk).unwrap();
            let plan = PlacementPlan {
                clusters: vec![PlanCluster {
                    storage: "s1".into(),
                    storage_host: String::new(),
                    members: vec!["c1".into(), "c2".into()],
                    member_hosts: Vec::new(),
                }],
            };
            let hosts = |n: &str| format!("10.0.0.{}", &n[1..]);
            let stored = s.set_plan(Some(plan), hosts).unwrap().unwrap();
            assert_eq!(stored.clusters[0].storage_host, "10.0.0.1");
            assert_eq!(stored.clusters[0].member_hosts, ["10.0.0.1", "10.0.0.2"]);
        }
        let s = Steward::open(Arc::new(Store::open(&d).unwrap())).unwrap();
        assert_eq!(s.class(7).unwrap(), StorageClass::Memory);
        assert_eq!(s.class(8).unwrap(), StorageClass::Disk);
        assert_eq!(s.class(9).unwrap(), StorageClass::Disk);
        assert_eq!(
            s.preferred_host(Some("10.0.0.2")).as_deref(),
            Some("10.0.0.1")
        );
        assert_eq!(s.preferred_host(Some("10.0.0.9")), None);
        assert_eq!(s.preferred_host(None), None);
        s.set_plan(None, |n| n.to_string()).unwrap();
        assert_eq!(s.preferred_host(Some("10.0.0.2")), None);
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn memory_placement_sees_reported_room_and_charges_it() {
        let d = dir();
        let s = Steward::open(Arc::new(Store::open(&d).unwrap())).unwrap();
        let all = vec![provider(1, "a"), provider(2, "b"), provider(3, "c")];
        s.report_memory(1, 1000, 200, 2);
        s.report_memory(2, 0, 0, 0);
        let timeout = Duration::from_secs(5);
        let got = s.memory_candidates(all.clone(), timeout);
        // Provider 2 keeps no memory class, provider 3 never reported one.
        assert_eq!(got.len(), 1);
        assert_eq!((got[0].0.id, got[0].1), (1, 800));
        s.charge_memory(&[(1, 300)]);
        assert_eq!(s.memory_candidates(all.clone(), timeout)[0].1, 500);
        // A new report replaces the estimate.
        s.report_memory(1, 1000, 100, 1);
        assert_eq!(s.memory_candidates(all, timeout)[0].1, 900);
        let status = s.memory_status(&[provider(1, "a").0]);
        assert_eq!((status[0].used, status[0].chunks), (100, 1));
        std::fs::remove_dir_all(&d).unwrap();
    }
}
