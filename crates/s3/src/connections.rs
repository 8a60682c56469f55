//! The gateway's connections: how many it holds at once, and when it lets one go, so that no
//! number of idle or silent clients locks real ones out (issue 20: the cluster's servers had
//! this already; the gateway held a connection that never sent a byte forever, and refused
//! everyone once such connections filled its cap).
//!
//! - At the cap, the oldest connections are asked to close once idle (hyper's graceful
//!   shutdown: an idle one closes at once, a busy one after its current exchange) and the
//!   newcomer waits a moment for the room that makes.
//! - A connection that started no request for an idle timeout is asked the same. (hyper's
//!   header timeout, set to the same value, cuts HTTP/1 clients that send a request head too
//!   slowly, but not one that never sends its first byte.)

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};

/// How long a new connection may wait at the cap for an old one to close.
const ADMIT_WAIT: Duration = Duration::from_secs(1);

/// What the gateway lets its clients hold.
#[derive(Clone, Debug)]
pub struct ConnectionLimits {
    /// Connections served at once.
    pub max_connections: usize,
    /// A connection that starts no request for this long is closed once idle; a request
    /// head must arrive within it too.
    pub idle_timeout: Duration,
}

impl Default for ConnectionLimits {
    /// As many connections as the cluster's servers take (from the open-file limit), idle
    /// for at most 30 s.
    fn default() -> Self {
        ConnectionLimits {
            max_connections: tomus_wire::ServerLimits::default().max_connections,
            idle_timeout: Duration::from_secs(30),
        }
    }
}

/// What a connection's requests tell its watchdog.
#[derive(Default)]
pub(crate) struct Activity {
    started: AtomicU64,
    in_progress: AtomicU32,
}

impl Activity {
    /// Marks a request started; it counts as in progress until the guard is dropped (when its
    /// answer is ready).
    pub fn begin(self: &Arc<Self>) -> InProgress {
        self.started.fetch_add(1, Ordering::Relaxed);
        self.in_progress.fetch_add(1, Ordering::Relaxed);
        InProgress(self.clone())
    }

    /// Whether no request started since `seen` (the count at the last look, updated) and
    /// none is in progress.
    pub fn idle_since(&self, seen: &mut u64) -> bool {
        let started = self.started.load(Ordering::Relaxed);
        let idle = started == *seen && self.in_progress.load(Ordering::Relaxed) == 0;
        *seen = started;
        idle
    }
}

pub(crate) struct InProgress(Arc<Activity>);

impl Drop for InProgress {
    fn drop(&mut self) {
        self.0.in_progress.fetch_sub(1, Ordering::Relaxed);
    }
}

/// The connections open, oldest first, and the room for more.
pub(crate) struct Connections {
    limits: ConnectionLimits,
    slots: Arc<Semaphore>,
    open: Mutex<BTreeMap<u64, Open>>,
    next: AtomicU64,
}

struct Open {
    close: Arc<Notify>,
    asked: bool,
}

/// A connection's place: it leaves the table when dropped.
pub(crate) struct Admitted {
    id: u64,
    /// Signalled when the gateway needs the room: close once idle.
    pub close: Arc<Notify>,
    connections: Arc<Connections>,
    _slot: OwnedSemaphorePermit,
}

impl Drop for Admitted {
    fn drop(&mut self) {
        self.connections.table().remove(&self.id);
    }
}

impl Connections {
    pub fn new(limits: ConnectionLimits) -> Arc<Self> {
        Arc::new(Connections {
            slots: Arc::new(Semaphore::new(limits.max_connections.max(1))),
            limits,
            open: Mutex::new(BTreeMap::new()),
            next: AtomicU64::new(0),
        })
    }

    pub fn limits(&self) -> &ConnectionLimits {
        &self.limits
    }

    fn table(&self) -> std::sync::MutexGuard<'_, BTreeMap<u64, Open>> {
        self.open.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A place for a new connection: at once if there is room; at the cap, once one of the
    /// oldest connections (asked to close when idle) has closed, waiting at most
    /// [`ADMIT_WAIT`]. `None`: every connection stayed busy.
    pub async fn admit(self: &Arc<Self>) -> Option<Admitted> {
        let slot = match self.slots.clone().try_acquire_owned() {
            Ok(slot) => slot,
            Err(_) => {
                self.ask_oldest();
                let wait = self.slots.clone().acquire_owned();
                tokio::time::timeout(ADMIT_WAIT, wait).await.ok()?.ok()?
            }
        };
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let close = Arc::new(Notify::new());
        self.table().insert(
            id,
            Open {
                close: close.clone(),
                asked: false,
            },
        );
        Some(Admitted {
            id,
            close,
            connections: self.clone(),
            _slot: slot,
        })
    }

    /// Asks the oldest connections not asked yet (a sixteenth of the cap) to close once
    /// idle: the idle ones make room at once.
    fn ask_oldest(&self) {
        let batch = (self.limits.max_connections / 16).max(1);
        let mut table = self.table();
        for open in table.values_mut().filter(|o| !o.asked).take(batch) {
            open.asked = true;
            open.close.notify_one();
        }
    }
}
