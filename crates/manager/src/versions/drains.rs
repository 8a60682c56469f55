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

use std::sync::atomic::Ordering;

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
}

/// The drain horizon of a drain that started at `started_ms`.
pub fn drain_horizon(started_ms: u64) -> u64 {
    started_ms + PROVIDER_VIEW_TTL.as_millis() as u64 + LATENCY_SLACK_MS
}

impl DrainWatch {
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
        for (_, slot) in self.slots() {
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
