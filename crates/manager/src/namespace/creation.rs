//! New files created in batches. Each creation used to hold the namespace lock through an
//! fsync of its own, so concurrent creators went one sync at a time (about 1,000 new files per
//! second here however many wrote). Now the blobs and pending entries of every file whose
//! creation was checked while the previous batch committed go into the next transaction: one
//! sync for all of them, as publications share theirs (the version manager's committer).
//!
//! A creation is checked under the namespace lock as before, then queued, and its path stays
//! *in flight* until its batch is committed. Meanwhile creating the same path again waits for
//! the batch and starts over (it then finds the pending entry: it joins, or an exclusive
//! create is refused), a path below it is refused as below a pending file, and every other
//! change of the namespace first waits for the queue to drain ([`Creations::settle`]): each
//! sees the namespace as if every creation had committed under the lock.
//!
//! One writer of the namespace does not take the lock: the group commit of publications,
//! whose new files make their missing parent directories. So a batch checks each path again
//! in its own transaction, and a path made a directory since its check is refused there
//! (`taken_since_checked`), not overwritten by the new file's entry.

use std::collections::{HashMap, HashSet};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Condvar, Mutex, MutexGuard};

use tomus_wire::{BlobInfo, Error, Result};

use super::records::ancestors;
use crate::versions::NewBlob;

/// A checked creation waiting for its batch.
pub(super) struct Queued {
    id: u64,
    pub path: String,
    pub blob: NewBlob,
    pub created_ms: u64,
}

#[derive(Default)]
struct State {
    queue: Vec<Queued>,
    /// A batch is being committed (by the creator that took it).
    committing: bool,
    /// The paths queued or being committed.
    in_flight: HashSet<String>,
    /// Outcomes of committed creations, until their creators take them.
    done: HashMap<u64, Result<BlobInfo>>,
    next_id: u64,
}

#[derive(Default)]
pub(super) struct Creations {
    state: Mutex<State>,
    changed: Condvar,
}

impl Creations {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn wait<'a>(&self, s: MutexGuard<'a, State>) -> MutexGuard<'a, State> {
        self.changed.wait(s).unwrap_or_else(|p| p.into_inner())
    }

    /// Whether the creation of `path` is queued or being committed.
    pub fn in_flight(&self, path: &str) -> bool {
        self.state().in_flight.contains(path)
    }

    /// An ancestor of `path` whose creation as a file is in flight.
    pub fn ancestor_in_flight(&self, path: &str) -> Option<String> {
        let s = self.state();
        ancestors(path)
            .find(|a| s.in_flight.contains(*a))
            .map(str::to_string)
    }

    /// Queues the checked creation of `path` (the caller holds the namespace lock); its id.
    pub fn queue(&self, path: String, blob: NewBlob, created_ms: u64) -> u64 {
        let mut s = self.state();
        let id = s.next_id;
        s.next_id += 1;
        s.in_flight.insert(path.clone());
        s.queue.push(Queued {
            id,
            path,
            blob,
            created_ms,
        });
        id
    }

    /// The outcome of creation `id`, once its batch is committed. A creator that finds no
    /// batch committing and creations queued commits them itself with `commit`, which
    /// returns one outcome per queued creation, in order (not holding the namespace lock).
    pub fn outcome(
        &self,
        id: u64,
        commit: impl Fn(&[Queued]) -> Vec<Result<BlobInfo>>,
    ) -> Result<BlobInfo> {
        let mut s = self.state();
        loop {
            if let Some(outcome) = s.done.remove(&id) {
                return outcome;
            }
            if s.committing || s.queue.is_empty() {
                s = self.wait(s);
                continue;
            }
            let batch = std::mem::take(&mut s.queue);
            s.committing = true;
            drop(s);
            let outcomes =
                catch_unwind(AssertUnwindSafe(|| commit(&batch))).unwrap_or_else(|_| Vec::new());
            s = self.state();
            let mut outcomes = outcomes.into_iter();
            for q in &batch {
                let outcome = outcomes.next().unwrap_or_else(|| {
                    Err(Error::internal(format!("creating /{} failed", q.path)))
                });
                s.in_flight.remove(&q.path);
                s.done.insert(q.id, outcome);
            }
            s.committing = false;
            self.changed.notify_all();
        }
    }

    /// Waits until `path` is no longer in flight.
    pub fn wait_for(&self, path: &str) {
        let mut s = self.state();
        while s.in_flight.contains(path) {
            s = self.wait(s);
        }
    }

    /// Waits until every queued creation is committed (the caller holds the namespace lock,
    /// so none is queued meanwhile).
    pub fn settle(&self) {
        let mut s = self.state();
        while s.committing || !s.queue.is_empty() {
            s = self.wait(s);
        }
    }
}
