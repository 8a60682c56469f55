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
            s.expiry_due = true;
        }
        // The policy is durable; if removing versions fails, the periodic round retries.
        if let Err(e) = self.expire_locked(blob, &slot, now_ms()) {
            tracing::error!("blob {blob}: applying its new retention failed: {e}");
        }
        let info = blob_info(&slot.lock());
        Ok(info)
    }

    /// Removes the versions the blobs' policies no longer retain at `now_ms`. Returns how
    /// many blobs lost versions; a blob that fails is logged and retried next time.
    pub fn enforce_retention(&self, now_ms: u64) -> usize {
        let slots: Vec<(BlobId, Arc<BlobSlot>)> = {
            let blobs = self.blobs.read().unwrap_or_else(|p| p.into_inner());
            blobs.iter().map(|(id, s)| (*id, s.clone())).collect()
        };
        let mut changed = 0;
        for (blob, slot) in slots {
            let due = {
                let s = slot.lock();
                match s.retention {
                    Retention::KeepAll => false,
                    Retention::KeepLast(_) => s.expiry_due,
                    // Time alone moves its cutoff.
                    Retention::KeepNewerThan(_) => true,
                }
            };
            if !due {
                continue;
            }
            let _expiry = self.expiry.lock().unwrap_or_else(|p| p.into_inner());
            match self.expire_locked(blob, &slot, now_ms) {
                Ok(true) => changed += 1,
                Ok(false) => {}
                Err(e) => tracing::error!("blob {blob}: applying its retention failed: {e}"),
            }
        }
        changed
    }

    /// Applies the policy of `blob` at `now_ms`; the caller holds `self.expiry`. Returns
    /// whether versions were removed.
    fn expire_locked(&self, blob: BlobId, slot: &BlobSlot, now_ms: u64) -> Result<bool> {
        let policy = {
            let mut s = slot.lock();
            if s.deleted {
                return Ok(false);
            }
            s.expiry_due = false;
            s.retention
        };
        // Planned on the durable rows (not the in-memory mark), so a failed removal is
        // planned again next time.
        let Some(keep_from) = self.store.plan_expiry(blob, policy, now_ms)? else {
            return Ok(false);
        };
        let keep_from = {
            let mut s = slot.lock();
            // A pending writer's metadata may refer to any node of the tree it builds on:
            // that version stays until the writer is done (garbage collection relies on it).
            let held = s.pending.values().map(|p| p.base.max(1)).min();
            let planned = keep_from;
            let keep_from = held.map_or(planned, |h| planned.min(h));
            if keep_from < planned {
                // Looked at again once the writer is done.
                s.expiry_due = true;
            }
            if keep_from <= s.retained_from.max(1) {
                return Ok(false);
            }
            // Reads answer "removed" from here on, before the rows go.
            s.retained_from = keep_from;
            keep_from
        };
        if let Err(e) = self.store.expire(blob, keep_from) {
            slot.lock().expiry_due = true;
            return Err(e);
        }
        tracing::debug!(
            "blob {blob}: versions below {keep_from} removed ({})",
            describe(policy)
        );
        Ok(true)
    }
}
