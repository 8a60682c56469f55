//! What garbage collection asks of the version manager: the fate of versions, and cutoffs
//! held back by the writers in progress.

use super::*;

impl VersionManager {
    /// What is positively known of each (blob, version), for garbage collection: only an
    /// [`Fate::Deleted`], [`Fate::Aborted`] or [`Fate::Expired`] answer allows deleting data,
    /// and an absent blob is [`Fate::Unknown`] unless its tombstone says it was deleted (it
    /// may be in the middle of its creation).
    pub fn fates(&self, items: &[(BlobId, Version)]) -> Result<Vec<Fate>> {
        let mut by_blob: BTreeMap<BlobId, Vec<usize>> = BTreeMap::new();
        for (i, (blob, _)) in items.iter().enumerate() {
            by_blob.entry(*blob).or_default().push(i);
        }
        let mut out = vec![Fate::Unknown; items.len()];
        for (blob, indexes) in by_blob {
            let Ok(slot) = self.slot(blob) else {
                if self.store.deleted(&[blob])?.first() == Some(&true) {
                    for i in indexes {
                        out[i] = Fate::Deleted;
                    }
                }
                continue;
            };
            let aborted = self.store.aborted_ranges(blob)?;
            let s = slot.lock();
            for i in indexes {
                let v = items[i].1;
                out[i] = if s.deleted {
                    Fate::Deleted
                } else if v == 0 || v >= s.next_version {
                    Fate::Unknown
                } else if s.pending.contains_key(&v) {
                    Fate::Live
                } else if s.given_up.contains_key(&v)
                    || aborted.iter().any(|&(from, to)| (from..to).contains(&v))
                {
                    Fate::Aborted
                } else if v < s.retained_from {
                    Fate::Expired
                } else if v <= s.record.published {
                    Fate::Live
                } else {
                    // Assigned, neither pending nor published nor recorded as given up:
                    // being handed over to the committer right now.
                    Fate::Unknown
                };
            }
        }
        Ok(out)
    }

    /// Grants garbage collection cutoffs no later than `proposed`, held back to before the
    /// data of every writer in progress, and never earlier than those granted before.
    /// Recorded durably before they are returned; from the moment they are set, writers with
    /// older data are refused. Blocks on fsync.
    pub fn grant_cutoffs(&self, proposed: Cutoffs) -> Result<Cutoffs> {
        let granted = {
            let mut cutoffs = self.cutoffs.write().unwrap_or_else(|p| p.into_inner());
            let mut fresh = proposed.fresh_ms;
            let mut reused = proposed.reused_ms;
            for (_, slot) in self.active_slots() {
                for p in slot.lock().pending.values() {
                    fresh = fresh.min(p.stored_since.saturating_sub(LATENCY_SLACK_MS));
                    if let Some(r) = p.reused_since {
                        reused = reused.min(r.saturating_sub(LATENCY_SLACK_MS));
                    }
                }
            }
            let granted = Cutoffs {
                fresh_ms: fresh.max(cutoffs.fresh_ms),
                reused_ms: reused.max(cutoffs.reused_ms),
            };
            *cutoffs = granted;
            granted
        };
        self.store.put_cutoffs(granted)?;
        Ok(granted)
    }
}
