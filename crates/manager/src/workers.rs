//! The manager's periodic work: writer leases, retention, the purge of what deletions and
//! expiries leave, and the removal of registered files' copies. (The committer, fed by a
//! queue, lives with the version manager.)

use std::sync::{Arc, Weak};
use std::time::Duration;

use tomus_wire::provider::DropRegistered;
use tomus_wire::{Error, Pool, Result, MAX_ITEMS};
use tomus_worker::{Round, Worker};

use crate::namespace::Namespace;
use crate::registry::Registry;
use crate::store::Store;
use crate::versions::{now_ms, VersionManager};

/// Runs `f`, which waits for the disk (a redb transaction), off the async workers; `what`
/// names it in the error if its task fails.
async fn blocking<T: Send + 'static>(
    what: &str,
    f: impl FnOnce() -> Result<T> + Send + 'static,
) -> Result<T> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| Error::internal(format!("{what} failed: {e}")))?
}

/// Drops new files (create-on-commit) whose writers showed no sign of life for `grace`: they
/// were never visible, and their blobs go like any deleted blob's.
pub struct AbandonedFiles {
    pub namespace: Weak<Namespace>,
    pub grace: Duration,
    pub dropped: u64,
}

impl Worker for AbandonedFiles {
    fn name(&self) -> &'static str {
        "abandoned new files"
    }

    fn interval(&self) -> Duration {
        (self.grace / 4).clamp(Duration::from_millis(50), Duration::from_secs(60))
    }

    async fn work(&mut self) -> Result<Round> {
        let Some(ns) = self.namespace.upgrade() else {
            return Ok(Round::Done);
        };
        let grace = self.grace;
        let n = blocking("dropping abandoned new files", move || {
            ns.collect_abandoned(grace)
        })
        .await?;
        self.dropped += n as u64;
        Ok(Round::Idle)
    }

    fn summary(&self) -> String {
        format!("{} abandoned new files dropped since start", self.dropped)
    }
}

/// Gives up the versions of writers whose lease ran out, a few times per lease period.
pub struct Leases {
    pub versions: Weak<VersionManager>,
    pub lease: Duration,
    pub given_up: u64,
}

impl Worker for Leases {
    fn name(&self) -> &'static str {
        "leases"
    }

    fn interval(&self) -> Duration {
        (self.lease / 4).max(Duration::from_millis(50))
    }

    async fn work(&mut self) -> Result<Round> {
        let Some(vm) = self.versions.upgrade() else {
            return Ok(Round::Done);
        };
        let lease = self.lease;
        // Giving versions up records them durably: off the async workers.
        let n = blocking("checking writer leases", move || vm.expire_leases(lease)).await?;
        self.given_up += n as u64;
        Ok(Round::Idle)
    }

    fn summary(&self) -> String {
        format!("{} versions given up since start", self.given_up)
    }
}

/// Applies retention policies every second (time-based policies expire versions without
/// any request).
pub struct Retention {
    pub versions: Weak<VersionManager>,
    pub expired: u64,
}

impl Worker for Retention {
    fn name(&self) -> &'static str {
        "retention"
    }

    fn interval(&self) -> Duration {
        Duration::from_secs(1)
    }

    async fn work(&mut self) -> Result<Round> {
        let Some(vm) = self.versions.upgrade() else {
            return Ok(Round::Done);
        };
        let n = blocking("applying retention policies", move || {
            Ok(vm.enforce_retention(now_ms()))
        })
        .await?;
        self.expired += n as u64;
        Ok(Round::Idle)
    }

    fn summary(&self) -> String {
        format!("versions expired in {} blobs since start", self.expired)
    }
}

/// Removes the version rows that deletions and expiries leave ([`Store::purge_rows`]), a
/// batch per transaction and batches back to back while any are left, so that deleting a
/// blob with many versions, or expiring them, holds publications for one batch at a time.
pub struct RowPurge {
    pub store: Weak<Store>,
    pub removed: u64,
}

/// Rows per transaction. 16,384 held other writers for up to 85-99 ms here.
const PURGE_BATCH: u64 = 4_096;

impl Worker for RowPurge {
    fn name(&self) -> &'static str {
        "row purge"
    }

    fn interval(&self) -> Duration {
        Duration::from_millis(500)
    }

    async fn work(&mut self) -> Result<Round> {
        let Some(store) = self.store.upgrade() else {
            return Ok(Round::Done);
        };
        let n = blocking("purging removed versions' rows", move || {
            store.purge_rows(PURGE_BATCH)
        })
        .await?;
        self.removed += n;
        Ok(if n == PURGE_BATCH {
            Round::Busy
        } else {
            Round::Idle
        })
    }

    fn summary(&self) -> String {
        format!(
            "{} rows of deleted blobs and expired versions removed since start",
            self.removed
        )
    }
}

/// Removes the copies of registered files that no entry names any more (deleted, replaced,
/// persisted) and of dropped holders: collects them (`namespace/registered.rs`), then asks
/// each holder to remove its copies; a holder that is down is asked again later.
pub struct RegisteredCopies {
    pub namespace: Weak<Namespace>,
    pub registry: Weak<Registry>,
    pub pool: Arc<Pool>,
    pub removed: u64,
    pub freed: u64,
}

impl Worker for RegisteredCopies {
    fn name(&self) -> &'static str {
        "registered copies"
    }

    fn interval(&self) -> Duration {
        Duration::from_secs(1)
    }

    async fn work(&mut self) -> Result<Round> {
        let (Some(ns), Some(registry)) = (self.namespace.upgrade(), self.registry.upgrade()) else {
            return Ok(Round::Done);
        };
        let collect = ns.clone();
        let garbage = blocking("collecting registered copies", move || {
            collect.collect_unnamed_registered()?;
            collect.registered_garbage()
        })
        .await?;
        if garbage.is_empty() {
            return Ok(Round::Idle);
        }
        let providers = registry.list();
        for (id, names) in garbage {
            let provider = providers.iter().find(|p| p.id == id);
            match provider {
                // A provider removed from the cluster took its copies with it.
                None => {}
                Some(p) if !p.alive => continue,
                Some(p) => {
                    for batch in names.chunks(MAX_ITEMS) {
                        let req = DropRegistered {
                            names: batch.to_vec(),
                        };
                        match self.pool.call(&p.addr, req).await {
                            Ok(bytes) => self.freed += bytes,
                            Err(e) => {
                                tracing::debug!("removing registered copies on {}: {e}", p.addr);
                                continue;
                            }
                        }
                        self.removed += batch.len() as u64;
                        let (ns, batch) = (ns.clone(), batch.to_vec());
                        blocking("forgetting removed copies", move || {
                            ns.forget_garbage(id, &batch)
                        })
                        .await?;
                    }
                    continue;
                }
            }
            let ns = ns.clone();
            blocking("forgetting removed copies", move || {
                ns.forget_garbage(id, &names)
            })
            .await?;
        }
        Ok(Round::Idle)
    }

    fn summary(&self) -> String {
        format!(
            "{} registered copies removed ({} bytes) since start",
            self.removed, self.freed
        )
    }
}
