//! What one server lets its peers hold: the limits (connections, time, in-flight bytes), the
//! descriptor budget they are derived from, and the table of connections that enforces the
//! caps by closing the idlest.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::Notify;

/// What one server lets its peers hold: connections, time and memory. No request, however
/// formed, makes a server allocate more than [`ServerLimits::max_in_flight_bytes`] for
/// requests or keep more than [`ServerLimits::max_connections`] sockets.
#[derive(Clone, Debug)]
pub struct ServerLimits {
    /// Connections served at once. At the cap, the connection idle the longest is closed to
    /// make room; a new connection is refused only when every one is busy.
    pub max_connections: usize,
    /// Connections from one IP address at once (the same rule within that address).
    pub max_connections_per_peer: usize,
    /// A connection with no request for this long is closed (clients reconnect).
    pub idle_timeout: Duration,
    /// Once a frame's first byte arrived, its prefix and header must arrive within this;
    /// bodies and answers get this plus their size at [`ServerLimits::min_transfer_rate`].
    pub frame_timeout: Duration,
    /// Bytes per second a body or an answer must move at least.
    pub min_transfer_rate: u64,
    /// Request bytes (headers and bodies) held at once over all connections; a request that
    /// would pass it waits (its connection is not read meanwhile, so its sender is held back
    /// by TCP).
    pub max_in_flight_bytes: u64,
}

impl Default for ServerLimits {
    fn default() -> Self {
        ServerLimits::for_descriptors(descriptor_limit())
    }
}

impl ServerLimits {
    /// Limits for a process allowed `descriptors` open files: connections take at most
    /// three quarters of what is left after a reserve for the server's own files.
    pub fn for_descriptors(descriptors: u64) -> Self {
        let room = descriptors.saturating_sub(DESCRIPTOR_RESERVE) * 3 / 4;
        let max_connections = (room as usize).clamp(MIN_CONNECTIONS, MAX_CONNECTIONS);
        ServerLimits {
            max_connections,
            max_connections_per_peer: (max_connections * 3 / 4).max(1),
            idle_timeout: Duration::from_secs(120),
            frame_timeout: Duration::from_secs(10),
            min_transfer_rate: 1 << 20,
            max_in_flight_bytes: 1 << 30,
        }
    }

    pub(super) fn transfer_timeout(&self, bytes: u64) -> Duration {
        let secs = bytes as f64 / self.min_transfer_rate.max(1) as f64;
        self.frame_timeout + Duration::from_secs_f64(secs)
    }
}

/// Descriptors kept for a server's own files (chunk files being sent, logs, databases).
const DESCRIPTOR_RESERVE: u64 = 64;
const MIN_CONNECTIONS: usize = 16;
const MAX_CONNECTIONS: usize = 4096;

/// The soft limit on open files, raised to the hard limit first (servers hold many sockets).
pub fn descriptor_limit() -> u64 {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit and setrlimit only read and write the struct passed.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) != 0 {
            return 1024;
        }
        if lim.rlim_cur < lim.rlim_max {
            let raised = libc::rlimit {
                rlim_cur: lim.rlim_max.min(1 << 16),
                rlim_max: lim.rlim_max,
            };
            if raised.rlim_cur > lim.rlim_cur && libc::setrlimit(libc::RLIMIT_NOFILE, &raised) == 0
            {
                lim = raised;
            }
        }
    }
    lim.rlim_cur
}

/// The connections a server holds, for its caps and for closing idle ones to make room.
pub(super) struct Connections {
    limits: ServerLimits,
    table: Mutex<HashMap<u64, Connection>>,
    next: AtomicU64,
}

struct Connection {
    peer: IpAddr,
    busy: bool,
    idle_since: Instant,
    close: Arc<Notify>,
}

impl Connections {
    pub(super) fn new(limits: ServerLimits) -> Self {
        Connections {
            limits,
            table: Mutex::new(HashMap::new()),
            next: AtomicU64::new(0),
        }
    }

    /// Admits a connection from `peer`: its id and the signal that closes it. At a cap, the
    /// connection idle the longest (of that peer, for the per-peer cap) is closed to make
    /// room; `None` when every candidate is busy.
    pub(super) fn admit(&self, peer: IpAddr) -> Option<(u64, Arc<Notify>)> {
        let mut table = self.table.lock().unwrap_or_else(|p| p.into_inner());
        let from_peer = table.values().filter(|c| c.peer == peer).count();
        if from_peer >= self.limits.max_connections_per_peer
            && !evict_idlest(&mut table, |c| c.peer == peer)
        {
            return None;
        }
        if table.len() >= self.limits.max_connections && !evict_idlest(&mut table, |_| true) {
            return None;
        }
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let close = Arc::new(Notify::new());
        table.insert(
            id,
            Connection {
                peer,
                busy: false,
                idle_since: Instant::now(),
                close: close.clone(),
            },
        );
        Some((id, close))
    }

    pub(super) fn set_busy(&self, id: u64, busy: bool) {
        let mut table = self.table.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(c) = table.get_mut(&id) {
            c.busy = busy;
            c.idle_since = Instant::now();
        }
    }

    pub(super) fn leave(&self, id: u64) {
        let mut table = self.table.lock().unwrap_or_else(|p| p.into_inner());
        table.remove(&id);
    }
}

/// Closes the idle connection matching `which` that has been idle the longest; whether
/// there was one.
fn evict_idlest(table: &mut HashMap<u64, Connection>, which: impl Fn(&Connection) -> bool) -> bool {
    let victim = table
        .iter()
        .filter(|(_, c)| !c.busy && which(c))
        .min_by_key(|(_, c)| c.idle_since)
        .map(|(id, _)| *id);
    match victim.and_then(|id| table.remove(&id)) {
        Some(c) => {
            c.close.notify_one();
            true
        }
        None => false,
    }
}

/// Logs at most one warning per interval (a flood of refused connections must not become
/// a flood of log lines).
pub(super) struct WarnEvery {
    last: Mutex<Option<Instant>>,
    every: Duration,
}

impl WarnEvery {
    pub(super) fn new(every: Duration) -> Self {
        WarnEvery {
            last: Mutex::new(None),
            every,
        }
    }

    pub(super) fn allow(&self) -> bool {
        let mut last = self.last.lock().unwrap_or_else(|p| p.into_inner());
        if last.is_some_and(|t| t.elapsed() < self.every) {
            return false;
        }
        *last = Some(Instant::now());
        true
    }
}
