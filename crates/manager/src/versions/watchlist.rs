//! Which blobs the periodic rounds look at, so that a round costs what changed since the last
//! one, not the number of blobs. Walking every blob's slot (an `Arc` clone and a lock each)
//! cost the retention round (every second), the lease round and the cutoff grant about 15 ms
//! each at 200,000 idle blobs, with creations waiting on the blob map meanwhile; with this
//! list, under 0.3 ms (the grant's own sync).
//!
//! The list may name more blobs than need a look (a round checks each under its lock, as it
//! did when it walked them all), never fewer: a blob is put on it, under its slot's lock, by
//! whatever makes it need one. (A blob whose policy keeps every version needs no retention
//! look: a new policy is applied as it is set.)
//!
//! Its lock is a leaf: taken while a slot is locked, never the other way round, and nothing
//! else is locked while it is held.

use std::collections::{BTreeSet, HashSet};
use std::sync::{Arc, MutexGuard};

use tomus_metadata::BlobId;

use super::{BlobSlot, BlobState, VersionManager};

#[derive(Default)]
pub(super) struct Watchlist {
    /// Blobs whose retention may remove versions now (their `expiry_due` was set).
    expiry_due: HashSet<BlobId>,
    /// Blobs under a time-based policy, by when its cutoff next passes a version it keeps.
    expiry_at: BTreeSet<(u64, BlobId)>,
    /// Blobs with versions in flight or a new file's name waiting for its first version
    /// (or that had them: the rounds that look at these drop the idle ones).
    active: HashSet<BlobId>,
}

impl Watchlist {
    /// A list with `blobs` due for a look at their retention.
    pub(super) fn expiry_due_for(blobs: Vec<BlobId>) -> Self {
        Watchlist {
            expiry_due: blobs.into_iter().collect(),
            ..Watchlist::default()
        }
    }

    /// The blobs whose retention is due at `now_ms`, taken off the list, each once.
    fn take_expiry(&mut self, now_ms: u64) -> Vec<BlobId> {
        let later = self.expiry_at.split_off(&(now_ms.saturating_add(1), 0));
        let ripe = std::mem::replace(&mut self.expiry_at, later);
        let mut out: HashSet<BlobId> = std::mem::take(&mut self.expiry_due);
        out.extend(ripe.into_iter().map(|(_, blob)| blob));
        out.into_iter().collect()
    }
}

impl VersionManager {
    fn watchlist(&self) -> MutexGuard<'_, Watchlist> {
        self.watchlist.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Sets `s.expiry_due`: the next retention round looks at the blob. `s` is locked.
    pub(super) fn mark_expiry_due(&self, s: &mut BlobState) {
        s.expiry_due = true;
        self.watchlist().expiry_due.insert(s.record.id);
    }

    /// Sets when the time-based policy of the blob is looked at again. `s` is locked.
    pub(super) fn set_expiry_at(&self, s: &mut BlobState, at_ms: Option<u64>) {
        s.expiry_at_ms = at_ms;
        if let Some(at) = at_ms {
            self.watchlist().expiry_at.insert((at, s.record.id));
        }
    }

    /// The blob has, or is about to have, versions in flight or a name waiting: the lease,
    /// cutoff, drain and new-file rounds look at it. `s` is locked.
    pub(super) fn mark_active(&self, s: &BlobState) {
        self.watchlist().active.insert(s.record.id);
    }

    /// The slots of the blobs whose retention may be due at `now_ms` (each to be checked
    /// under its lock).
    pub(super) fn expiry_candidates(&self, now_ms: u64) -> Vec<(BlobId, Arc<BlobSlot>)> {
        let ids = self.watchlist().take_expiry(now_ms);
        self.slots_of(&ids)
    }

    /// The slots of the blobs with versions in flight or a new file's name waiting. Those
    /// found with neither are dropped from the list (a blob is put back when it gets one).
    pub(super) fn active_slots(&self) -> Vec<(BlobId, Arc<BlobSlot>)> {
        let ids: Vec<BlobId> = self.watchlist().active.iter().copied().collect();
        let mut out = self.slots_of(&ids);
        if out.len() < ids.len() {
            // Blobs deleted since they were listed.
            let live: HashSet<BlobId> = out.iter().map(|(b, _)| *b).collect();
            let mut list = self.watchlist();
            for id in ids.iter().filter(|id| !live.contains(id)) {
                list.active.remove(id);
            }
        }
        out.retain(|(blob, slot)| {
            let s = slot.lock();
            let active = !s.pending.is_empty() || s.naming.is_some();
            if !active {
                self.watchlist().active.remove(blob);
            }
            active
        });
        out
    }

    /// The slots of `ids` that still exist.
    fn slots_of(&self, ids: &[BlobId]) -> Vec<(BlobId, Arc<BlobSlot>)> {
        let blobs = self.blobs.read().unwrap_or_else(|p| p.into_inner());
        ids.iter()
            .filter_map(|id| blobs.get(id).map(|s| (*id, s.clone())))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expiry_is_taken_once_and_timed_entries_when_they_ripen() {
        let mut w = Watchlist::default();
        w.expiry_due.insert(1);
        w.expiry_due.insert(2);
        w.expiry_at.insert((100, 2));
        w.expiry_at.insert((100, 3));
        w.expiry_at.insert((200, 4));
        let mut now = w.take_expiry(99);
        now.sort();
        assert_eq!(now, vec![1, 2]);
        assert!(w.take_expiry(99).is_empty());
        let mut ripe = w.take_expiry(100);
        ripe.sort();
        assert_eq!(ripe, vec![2, 3]);
        assert_eq!(w.take_expiry(u64::MAX), vec![4]);
        assert!(w.expiry_at.is_empty());
    }
}
