//! Group commit for the provider's append-only logs (the metadata log and the small-chunk log).
//!
//! Callers hand items to one writer thread and wait for an acknowledgement. The writer takes
//! everything that queued up while it was busy with the previous group and commits it with one
//! call of the log's commit function (typically one write and one fdatasync), then
//! acknowledges every caller in the group with that call's result. Under load many callers
//! share one sync; alone, a caller pays for one sync as before.
//!
//! The writer is a plain thread rather than a tokio task: committing blocks on disk I/O, and a
//! dedicated thread avoids a hand-off to the blocking pool for every group.
//!
//! Logs keep written zeros ahead of their end ([`ZeroedAhead`]), refilled between groups
//! ([`GroupLog::after_group`], [`refill_zeros`]), so a group's fdatasync writes its data
//! alone. Startup cuts the zeros off with whatever a crash tore ([`drop_torn_tail`]),
//! quietly when they are nothing else.
//!
//! [`drop_torn_tail`]: tomus_wire::zeroed_ahead::drop_torn_tail

use std::fmt::Display;
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;

use tokio::sync::{mpsc, oneshot};
use tomus_wire::log_file::still_linked;
use tomus_wire::zeroed_ahead::ZeroedAhead;
use tomus_wire::{Error, Result};

/// Items waiting for the writer; beyond this, callers wait (backpressure).
const QUEUE_DEPTH: usize = 1024;
/// Upper bound of the bytes one group carries, so one write stays a bounded buffer.
const MAX_GROUP_BYTES: usize = 16 << 20;

struct Pending<T> {
    item: T,
    size: usize,
    done: oneshot::Sender<Result<()>>,
}

/// A log the writer thread commits groups to.
pub(crate) trait GroupLog<T>: Send + 'static {
    /// Makes all of `group` durable (or none of it visible) before returning; its result is
    /// what every caller in the group gets.
    fn commit(&mut self, group: Vec<T>) -> Result<()>;

    /// Upkeep done after a group is acknowledged and before the next is taken, so its cost
    /// stays off the latency of the group it follows.
    fn after_group(&mut self) {}
}

impl<T, F: FnMut(Vec<T>) -> Result<()> + Send + 'static> GroupLog<T> for F {
    fn commit(&mut self, group: Vec<T>) -> Result<()> {
        self(group)
    }
}

/// The submitting side of a group-committed log. Dropping it lets the writer thread drain
/// the queue and end, and waits (boundedly) for that: a closed log writes nothing more.
pub(crate) struct GroupCommit<T> {
    name: &'static str,
    /// `None` once dropped.
    tx: Option<mpsc::Sender<Pending<T>>>,
    writer: Option<std::thread::JoinHandle<()>>,
}

/// How long dropping a log waits for its writer thread (a hung disk must not hang shutdown).
const CLOSE_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

impl<T> Drop for GroupCommit<T> {
    fn drop(&mut self) {
        self.tx = None;
        let Some(writer) = self.writer.take() else {
            return;
        };
        let deadline = std::time::Instant::now() + CLOSE_WAIT;
        while !writer.is_finished() {
            if std::time::Instant::now() > deadline {
                tracing::warn!("the {} writer did not stop in {CLOSE_WAIT:?}", self.name);
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        let _ = writer.join();
    }
}

impl<T: Send + 'static> GroupCommit<T> {
    /// Starts the writer thread. `log` receives each group in submission order (see
    /// [`GroupLog`]). `name` names the log in errors and the thread.
    pub(crate) fn start(name: &'static str, mut log: impl GroupLog<T>) -> Result<Self> {
        let (tx, mut rx) = mpsc::channel::<Pending<T>>(QUEUE_DEPTH);
        let writer = std::thread::Builder::new()
            .name(format!("tomus-{name}"))
            .spawn(move || {
                while let Some(first) = rx.blocking_recv() {
                    let mut size = first.size;
                    let mut group = vec![first];
                    while size < MAX_GROUP_BYTES {
                        match rx.try_recv() {
                            Ok(next) => {
                                size += next.size;
                                group.push(next);
                            }
                            Err(_) => break,
                        }
                    }
                    let (items, acks): (Vec<T>, Vec<_>) =
                        group.into_iter().map(|p| (p.item, p.done)).unzip();
                    let metrics = tomus_metrics::provider();
                    let label = tomus_metrics::families::label("log", name);
                    metrics
                        .group_commit_batch
                        .get_or_create(&label)
                        .observe(items.len() as f64);
                    let started = std::time::Instant::now();
                    let result = log.commit(items);
                    metrics
                        .group_commit_duration
                        .get_or_create(&label)
                        .observe(started.elapsed().as_secs_f64());
                    for done in acks {
                        let _ = done.send(result.clone());
                    }
                    log.after_group();
                }
            })
            .map_err(|e| Error::internal(format!("cannot start the {name} writer: {e}")))?;
        Ok(GroupCommit {
            name,
            tx: Some(tx),
            writer: Some(writer),
        })
    }

    /// Queues `item` (`size` bytes, for bounding groups) and waits until its group is
    /// committed.
    pub(crate) async fn submit(&self, item: T, size: usize) -> Result<()> {
        let stopped = || Error::internal(format!("{} writer has stopped", self.name));
        let (done, ack) = oneshot::channel();
        self.tx
            .as_ref()
            .ok_or_else(stopped)?
            .send(Pending { item, size, done })
            .await
            .map_err(|_| stopped())?;
        ack.await.map_err(|_| stopped())?
    }
}

/// Writes `buf` at `pos` (the end of the valid log). On failure the file is cut back to `pos`
/// so a partial record cannot end up in front of later ones.
///
/// An append to a log removed under the provider (its directory `rm -rf`'ed) fails rather
/// than being acknowledged ([`still_linked`]).
pub(crate) fn append(file: &File, pos: u64, buf: &[u8], fsync: bool) -> io::Result<()> {
    let result = file
        .write_all_at(buf, pos)
        .and_then(|()| {
            if fsync {
                timed_sync(file, "log")
            } else {
                Ok(())
            }
        })
        .and_then(|()| still_linked(file));
    if result.is_err() {
        let _ = file.set_len(pos);
    }
    result
}

/// Refills the zeros written ahead of a log's records (`len` bytes) when its appends are
/// synced (unsynced appends gain nothing from them), the refill's sync timed as a log sync.
pub(crate) fn refill_zeros(
    zeroed: &mut ZeroedAhead,
    file: &File,
    len: u64,
    fsync: bool,
    log: &dyn Display,
) {
    if fsync {
        zeroed.refill(file, len, log, |f| timed_sync(f, "log"));
    }
}

/// [`append`] to a log with zeros written ahead: a failed append cut the file back to `pos`,
/// and the zeros with it.
pub(crate) fn append_zeroed(
    zeroed: &mut ZeroedAhead,
    file: &File,
    pos: u64,
    buf: &[u8],
    fsync: bool,
) -> io::Result<()> {
    append(file, pos, buf, fsync).inspect_err(|_| zeroed.forget())
}

/// `file.sync_data()`, its time recorded in `tomus_provider_fsync_duration_seconds{file}`.
pub(crate) fn timed_sync(file: &File, kind: &'static str) -> io::Result<()> {
    let started = std::time::Instant::now();
    let result = file.sync_data();
    tomus_metrics::provider()
        .fsync_duration
        .get_or_create(&tomus_metrics::families::label("file", kind))
        .observe(started.elapsed().as_secs_f64());
    result
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    use super::*;

    #[test]
    fn an_append_to_a_removed_log_fails_and_keeps_nothing() {
        let dir = crate::testutil::TempDir::new("removed-log");
        let path = dir.path().join("log");
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .unwrap();
        append(&file, 0, b"kept", true).unwrap();
        std::fs::remove_file(&path).unwrap();
        for fsync in [true, false] {
            let e = append(&file, 4, b"lost", fsync).unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::NotFound, "{e}");
            assert!(e.to_string().contains("removed while open"), "{e}");
            assert_eq!(
                file.metadata().unwrap().len(),
                4,
                "the failed append was kept"
            );
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn groups_concurrent_items_and_shares_results() {
        let groups = Arc::new(AtomicUsize::new(0));
        let seen = Arc::new(Mutex::new(Vec::new()));
        let (g, s) = (groups.clone(), seen.clone());
        let log = Arc::new(
            GroupCommit::start("test log", move |items: Vec<u32>| {
                g.fetch_add(1, Ordering::Relaxed);
                // A slow "sync" lets the others queue up behind it.
                std::thread::sleep(Duration::from_millis(5));
                let fail = items.contains(&u32::MAX);
                s.lock().unwrap().extend(items);
                if fail {
                    Err(Error::internal("disk on fire"))
                } else {
                    Ok(())
                }
            })
            .unwrap(),
        );
        let tasks: Vec<_> = (0..200u32)
            .map(|i| {
                let log = log.clone();
                tokio::spawn(async move { log.submit(i, 1).await })
            })
            .collect();
        for task in tasks {
            task.await.unwrap().unwrap();
        }
        let mut seen_items = seen.lock().unwrap().clone();
        seen_items.sort_unstable();
        assert_eq!(seen_items, (0..200).collect::<Vec<_>>());
        assert!(groups.load(Ordering::Relaxed) < 200);

        let err = log.submit(u32::MAX, 1).await.unwrap_err();
        assert!(err.message.contains("disk on fire"), "{err}");
    }
}
