//! Snapshots of the tree held for the pages of one listing (`FsListSnapshot`): each page of a
//! listing of many reads the namespace table as the first page did, so a file moved while a
//! backup or a replication scan walks the tree is listed once, not twice or not at all.
//!
//! A snapshot is a redb read transaction's table: cheap to hold, but redb cannot reuse the
//! pages it still sees, so few are held and not for long.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use redb::ReadOnlyTable;
use tomus_wire::{Error, ErrorKind, Result};

pub(super) type Tree = Arc<ReadOnlyTable<&'static str, &'static [u8]>>;

/// A snapshot unused for this long is dropped.
const IDLE: Duration = Duration::from_secs(60);
/// Snapshots held at once; a new one pushes out the one used least recently.
const MAX_HELD: usize = 64;

struct Held {
    tree: Tree,
    used: Instant,
}

type HeldMap = HashMap<u64, Held>;

#[derive(Default)]
pub(super) struct Snapshots {
    /// With whether a sweeper thread is running for it (changed under the same lock).
    held: Arc<Mutex<(HeldMap, bool)>>,
}

impl Snapshots {
    /// Holds `tree` for later pages; returns its id. Ids are random, so an id held by a
    /// client from before a restart names nothing rather than another snapshot.
    pub(super) fn hold(&self, tree: Tree) -> u64 {
        let mut guard = lock(&self.held);
        let (held, sweeping) = &mut *guard;
        let now = Instant::now();
        held.retain(|_, h| now.duration_since(h.used) < IDLE);
        if held.len() >= MAX_HELD {
            if let Some(oldest) = held.iter().min_by_key(|(_, h)| h.used).map(|(id, _)| *id) {
                held.remove(&oldest);
            }
        }
        let mut id = rand::random::<u64>();
        while held.contains_key(&id) {
            id = rand::random::<u64>();
        }
        held.insert(id, Held { tree, used: now });
        // A listing whose client went away never names its snapshot again: swept once idle,
        // or the manager's writes would grow its database behind it for as long as no other
        // listing came.
        if !*sweeping {
            *sweeping = true;
            let weak = Arc::downgrade(&self.held);
            let started = std::thread::Builder::new()
                .name("listing-snapshots".into())
                .spawn(move || sweep(weak));
            if let Err(e) = started {
                *sweeping = false;
                tracing::warn!("listing snapshots: no sweeper thread ({e})");
            }
        }
        id
    }

    /// The snapshot `id`, still held.
    pub(super) fn get(&self, id: u64) -> Result<Tree> {
        let mut guard = lock(&self.held);
        let held = &mut guard.0;
        let now = Instant::now();
        match held.get_mut(&id) {
            Some(h) if now.duration_since(h.used) < IDLE => {
                h.used = now;
                Ok(h.tree.clone())
            }
            _ => {
                held.remove(&id);
                Err(Error::new(
                    ErrorKind::PreconditionFailed,
                    format!(
                        "listing snapshot {id:x} is no longer held (idle for {}s, or pushed \
                         out by newer listings); start the listing again",
                        IDLE.as_secs()
                    ),
                ))
            }
        }
    }

    /// The listing of snapshot `id` reached its end: nothing more will name it.
    pub(super) fn release(&self, id: u64) {
        lock(&self.held).0.remove(&id);
    }
}

fn lock(held: &Mutex<(HeldMap, bool)>) -> std::sync::MutexGuard<'_, (HeldMap, bool)> {
    held.lock().unwrap_or_else(|p| p.into_inner())
}

/// Drops idle snapshots every quarter of [`IDLE`] until none is held (or the namespace is
/// gone).
fn sweep(held: std::sync::Weak<Mutex<(HeldMap, bool)>>) {
    loop {
        std::thread::sleep(IDLE / 4);
        let Some(held) = held.upgrade() else { return };
        let mut guard = lock(&held);
        let (map, sweeping) = &mut *guard;
        let now = Instant::now();
        map.retain(|_, h| now.duration_since(h.used) < IDLE);
        if map.is_empty() {
            *sweeping = false;
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use redb::backends::InMemoryBackend;
    use redb::{Database, TableDefinition};

    const T: TableDefinition<&str, &[u8]> = TableDefinition::new("t");

    #[test]
    fn the_least_recently_used_snapshot_makes_room_for_a_new_one() {
        let db = Database::builder()
            .create_with_backend(InMemoryBackend::new())
            .unwrap();
        let txn = db.begin_write().unwrap();
        txn.open_table(T).unwrap();
        txn.commit().unwrap();
        let tree = || -> Tree { Arc::new(db.begin_read().unwrap().open_table(T).unwrap()) };
        let snapshots = Snapshots::default();
        let ids: Vec<u64> = (0..MAX_HELD).map(|_| snapshots.hold(tree())).collect();
        // The first is used again, so the second is now the least recently used.
        snapshots.get(ids[0]).unwrap();
        let newest = snapshots.hold(tree());
        assert!(snapshots.get(ids[0]).is_ok());
        assert!(snapshots.get(newest).is_ok());
        let e = snapshots.get(ids[1]).err().unwrap();
        assert_eq!(e.kind, ErrorKind::PreconditionFailed);
        snapshots.release(newest);
        assert!(snapshots.get(newest).is_err());
        assert_eq!(lock(&snapshots.held).0.len(), MAX_HELD - 1);
    }
}
