//! Writes that may have put data on a draining provider after the maintenance service last
//! looked: a drain is complete only when a repair pass started after every such write was
//! published (or will never be).
//!
//! A client learns that a provider drains from its provider list, which it keeps for up to
//! [`PROVIDER_VIEW_TTL`]; until then its chunks and metadata nodes may still go there. Those
//! writes began storing their data before the drain's start plus that TTL (the drain
//! horizon), and the manager knows when each write's data began storing (its age, sent with
//! the assignment). A pass that planned before such a write was published did not see its
//! references, so its "nothing left" says nothing about them.
//!
//! A write assigned only after such a provider was removed is refused instead: its data may
//! have gone to the removed provider, and no pass can move it off any more. Removals hold
//! assignments off while they decide, so each write is either seen pending (the removal
//! waits) or refused.

use std::sync::atomic::Ordering;
use std::sync::RwLockReadGuard;

use tomus_wire::PROVIDER_VIEW_TTL;

use super::*;

/// What the version manager tracks of writes around drains.
#[derive(Default)]
pub(super) struct DrainWatch {
    /// Writes whose data began storing at or before this (manager ms) may have data on a
    /// draining provider (0: no provider has drained since the manager started).
    horizon_ms: AtomicU64,
    /// When the last such write was published (manager ms).
    last_published_ms: AtomicU64,
    /// Writes whose data began storing before this (manager ms) may have data on a provider
    /// that drained and was removed (kept in the store with the removal, so a restart keeps
    /// refusing them). Assignments read it while they check a writer's data and record it
    /// pending; a removal writes it while it looks for pending writes.
    removed_before_ms: RwLock<u64>,
}

/// The drain horizon of a drain that started at `started_ms`.
pub fn drain_horizon(started_ms: u64) -> u64 {
    started_ms + PROVIDER_VIEW_TTL.as_millis() as u64 + LATENCY_SLACK_MS
}

/// Writes whose data began storing before this may have data on providers removed now whose
/// latest drain horizon is `horizon` (0: none drained). A removal comes after the horizon,
/// unless the clock stepped back: data stored since the removal cannot be on the removed
/// providers either.
pub fn removal_fence(horizon: u64) -> u64 {
    horizon.min(now_ms())
}

impl DrainWatch {
    /// Watching no drain yet, and refusing writes whose data began storing before
    /// `removed_before` (what the store recorded of earlier removals).
    pub(super) fn removed_before(removed_before: u64) -> DrainWatch {
        DrainWatch {
            removed_before_ms: RwLock::new(removed_before),
            ..DrainWatch::default()
        }
    }

    /// What an assignment checks its writer's data against (see `writes::check_data_age`),
    /// held until the write is recorded pending.
    pub(super) fn removals_read(&self) -> RwLockReadGuard<'_, u64> {
        self.removed_before_ms
            .read()
            .unwrap_or_else(|p| p.into_inner())
    }

    /// Notes the publication of a version whose data began storing at `stored_since`.
    pub(super) fn published(&self, stored_since: u64) {
        let horizon = self.horizon_ms.load(Ordering::Relaxed);
        if horizon != 0 && stored_since <= horizon {
            self.last_published_ms
                .fetch_max(now_ms(), Ordering::Relaxed);
        }
    }
}

impl VersionManager {
    /// Runs `remove`, which removes drained providers if what
    /// [`VersionManager::drains_settled_at`] says allows it and returns their
    /// [`removal_fence`], with assignments held off; from then on, writes whose data began
    /// storing before that fence are refused.
    pub fn remove_drained<T>(
        &self,
        remove: impl FnOnce(Option<u64>) -> Result<(T, u64)>,
    ) -> Result<T> {
        let mut before = self
            .drains
            .removed_before_ms
            .write()
            .unwrap_or_else(|p| p.into_inner());
        let (removed, fence) = remove(self.drains_settled_at())?;
        *before = (*before).max(fence);
        Ok(removed)
    }

    /// Watches writes that may have put data on a provider whose drain has `horizon_ms`.
    pub fn watch_drain(&self, horizon_ms: u64) {
        self.drains
            .horizon_ms
            .fetch_max(horizon_ms, Ordering::Relaxed);
    }

    /// The time (manager ms) after which a repair pass must have started for its findings
    /// about draining providers to hold: after every drain horizon, and after the
    /// publication of every write that may have data on a draining provider. `None` while
    /// such a write is assigned and not published yet. Looks at every pending version, so it
    /// is for status and removal requests, not for the write path.
    pub fn drains_settled_at(&self) -> Option<u64> {
        let horizon = self.drains.horizon_ms.load(Ordering::Relaxed);
        if horizon == 0 {
            return Some(0);
        }
        for (_, slot) in self.active_slots() {
            if slot
                .lock()
                .pending
                .values()
                .any(|p| p.stored_since <= horizon)
            {
                return None;
            }
        }
        Some(horizon.max(self.drains.last_published_ms.load(Ordering::Relaxed)))
    }
}
