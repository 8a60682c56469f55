//! Retention: policies set per blob, and the removal of the versions they no longer keep
//! (the latest is always kept).

use super::*;

/// A retention policy in words, for messages.
pub fn describe(policy: Retention) -> String {
    match policy {
        Retention::KeepAll => "keep all".into(),
        Retention::KeepLast(n) => format!("keep last {n}"),
        Retention::KeepNewerThan(ms) => format!("keep versions newer than {ms} ms"),
    }
}

/// Blobs whose old versions one retention round removes in one transaction (one sync).
const EXPIRY_BATCH: usize = 1024;

/// Refuses policies that keep nothing.
pub(crate) fn check_retention(policy: Retention) -> Result<()> {
    match policy {
        Retention::KeepLast(0) => Err(Error::invalid(
            "retention keep-last needs at least 1 version",
        )),
        Retention::KeepNewerThan(0) => Err(Error::invalid(
            "retention keep-newer-than needs at least 1 ms",
        )),
        _ => Ok(()),
    }
}

impl VersionManager {
    /// Sets the retention policy of `blob` durably and applies it at once. Blocks on fsync.
    pub fn set_retention(&self, blob: BlobId, policy: Retention) -> Result<BlobInfo> {
        check_retention(policy)?;
        let slot = self.slot(blob)?;
        let _expiry = self.expiry.lock().unwrap_or_else(|p| p.into_inner());
        if slot.lock().deleted {
            return Err(blob_deleted(blob));
        }
        self.store.set_retention(blob, policy)?;
        {
            let mut s = slot.lock();
            s.retention = policy;
            self.mark_expiry_due(&mut s);
        }
        // The policy is durable; if removing versions fails, the periodic round retries.
        self.expire_locked(&[(blob, slot.clone())], now_ms());
        let info = blob_info(&slot.lock());
        Ok(info)
    }

    /// Removes the versions the blobs' policies no longer retain at `now_ms`, up to
    /// `EXPIRY_BATCH` blobs per transaction. Returns how many blobs lost versions; a blob
    /// that fails is logged and retried next time.
    pub fn enforce_retention(&self, now_ms: u64) -> usize {
        let due: Vec<(BlobId, Arc<BlobSlot>)> = self
            .expiry_candidates(now_ms)
            .into_iter()
            .filter(|(_, slot)| {
                let s = slot.lock();
                match s.retention {
                    Retention::KeepAll => false,
                    Retention::KeepLast(_) => s.expiry_due,
                    // Time alone moves its cutoff: looked at again once it passes a version
                    // kept now, not every round (each look reads the store).
                    Retention::KeepNewerThan(_) => {
                        s.expiry_due || s.expiry_at_ms.is_some_and(|at| now_ms >= at)
                    }
                }
            })
            .collect();
        let mut changed = 0;
        for batch in due.chunks(EXPIRY_BATCH) {
            let _expiry = self.expiry.lock().unwrap_or_else(|p| p.into_inner());
            changed += self.expire_locked(batch, now_ms);
        }
        changed
    }

    /// Applies the policies of `blobs` at `now_ms`, in one transaction; the caller holds
    /// `self.expiry`. Returns how many blobs lost versions.
    fn expire_locked(&self, blobs: &[(BlobId, Arc<BlobSlot>)], now_ms: u64) -> usize {
        let mut planned = Vec::new();
        for (blob, slot) in blobs {
            match self.plan_locked(*blob, slot, now_ms) {
                Ok(Some(keep_from)) => planned.push((*blob, slot, keep_from)),
                Ok(None) => {}
                Err(e) => {
                    self.mark_expiry_due(&mut slot.lock());
                    tracing::error!("blob {blob}: applying its retention failed: {e}");
                }
            }
        }
        if planned.is_empty() {
            return 0;
        }
        let rows: Vec<(BlobId, Version)> = planned.iter().map(|(b, _, k)| (*b, *k)).collect();
        if let Err(e) = self.store.expire(&rows) {
            for (_, slot, _) in &planned {
                self.mark_expiry_due(&mut slot.lock());
            }
            tracing::error!("applying the retention of {} blobs failed: {e}", rows.len());
            return 0;
        }
        for (blob, slot, keep_from) in &planned {
            tracing::debug!(
                "blob {blob}: versions below {keep_from} removed ({})",
                describe(slot.lock().retention)
            );
        }
        planned.len()
    }

    /// Where the policy of `blob` moves its first retained version at `now_ms` (`None`:
    /// nothing to remove); from here on, reads answer "removed" below it, before the rows go.
    /// The caller holds `self.expiry`.
    fn plan_locked(&self, blob: BlobId, slot: &BlobSlot, now_ms: u64) -> Result<Option<Version>> {
        let policy = {
            let mut s = slot.lock();
            if s.deleted {
                return Ok(None);
            }
            s.expiry_due = false;
            s.retention
        };
        // Planned on the durable rows (not the in-memory mark), so a failed removal is
        // planned again next time.
        let plan = self.store.plan_expiry(blob, policy, now_ms)?;
        let mut s = slot.lock();
        self.set_expiry_at(&mut s, plan.recheck_at_ms);
        let Some(keep_from) = plan.keep_from else {
            return Ok(None);
        };
        // A pending writer's metadata may refer to any node of the tree it builds on:
        // that version stays until the writer is done (garbage collection relies on it).
        let held = s.pending.values().map(|p| p.base.max(1)).min();
        let planned = keep_from;
        let keep_from = held.map_or(planned, |h| planned.min(h));
        if keep_from < planned {
            // Looked at again once the writer is done.
            self.mark_expiry_due(&mut s);
        }
        if keep_from <= s.retained_from.max(1) {
            return Ok(None);
        }
        // Reads answer "removed" from here on, before the rows go.
        s.retained_from = keep_from;
        Ok(Some(keep_from))
    }
}
