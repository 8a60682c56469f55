//! Background work behind one abstraction. A [`Worker`] does its work in rounds; the runner
//! ([`Workers::spawn`]) calls it, pauses between rounds (not at all when it says more work is
//! waiting; until woken when it has a wake signal), records what it is doing for
//! `tomus status`, and stops it cleanly when asked: between rounds, never in the middle of
//! one.

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::{watch, Notify};
use tomus_wire::{now_ms, Result, WorkerStatus};

/// What a round of work found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Round {
    /// More is waiting: run again at once.
    Busy,
    /// Nothing waiting: pause, then run again.
    Idle,
    /// The worker has nothing more to do, ever (what fed it is gone).
    Done,
}

/// A piece of background work.
pub trait Worker: Send + 'static {
    /// A short name for `tomus status`.
    fn name(&self) -> &'static str;
    /// The pause between rounds when idle (shown by `tomus status`).
    fn interval(&self) -> Duration;
    /// Waits until the next round is due; by default for [`Worker::interval`]. A worker fed
    /// by a queue waits for its next item instead.
    fn pause(&mut self) -> impl Future<Output = ()> + Send {
        tokio::time::sleep(self.interval())
    }
    /// One round of work.
    fn work(&mut self) -> impl Future<Output = Result<Round>> + Send;
    /// What it did last, in a line.
    fn summary(&self) -> String {
        String::new()
    }
}

/// The statuses of a process's workers, shared with whatever reports them.
#[derive(Clone, Debug, Default)]
pub struct Workers {
    statuses: Arc<Mutex<Vec<WorkerStatus>>>,
}

impl Workers {
    /// Every worker's status, in start order.
    pub fn statuses(&self) -> Vec<WorkerStatus> {
        self.lock().clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<WorkerStatus>> {
        self.statuses.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn update(&self, slot: usize, f: impl FnOnce(&mut WorkerStatus)) {
        if let Some(s) = self.lock().get_mut(slot) {
            f(s)
        }
    }

    /// Starts `worker` on a task of its own; see [`Workers::run`].
    pub fn spawn<W: Worker>(
        &self,
        worker: W,
        stop: watch::Receiver<bool>,
        wake: Option<Arc<Notify>>,
    ) -> tokio::task::JoinHandle<()> {
        tokio::spawn(self.run(worker, stop, wake))
    }

    /// Runs `worker` in the returned future (listed at once). It stops once `stop` turns
    /// true or its sender is dropped, when a round says [`Round::Done`], or when the future
    /// is dropped. `wake` (when given) cuts a pause short. A failing worker is logged when
    /// it starts failing and when it works again, not at every round.
    pub fn run<W: Worker>(
        &self,
        mut worker: W,
        mut stop: watch::Receiver<bool>,
        wake: Option<Arc<Notify>>,
    ) -> impl Future<Output = ()> + Send + 'static {
        let slot = {
            let mut s = self.lock();
            s.push(WorkerStatus {
                name: worker.name().to_string(),
                state: "starting".into(),
                interval_ms: worker.interval().as_millis() as u64,
                ..WorkerStatus::default()
            });
            s.len() - 1
        };
        let workers = self.clone();
        async move {
            while !*stop.borrow() {
                workers.update(slot, |s| s.state = "working".into());
                let started = Instant::now();
                let outcome = worker.work().await;
                let summary = worker.summary();
                let round = outcome.as_ref().ok().copied();
                workers.update(slot, |s| record(s, outcome, started, summary));
                match round {
                    Some(Round::Done) => break,
                    Some(Round::Busy) => {
                        tokio::task::yield_now().await;
                        continue;
                    }
                    Some(Round::Idle) | None => {}
                }
                let woken = async {
                    match &wake {
                        Some(n) => n.notified().await,
                        None => std::future::pending().await,
                    }
                };
                tokio::select! {
                    _ = worker.pause() => {}
                    _ = woken => {}
                    changed = stop.changed() => if changed.is_err() { break },
                }
            }
            workers.update(slot, |s| s.state = "stopped".into());
        }
    }
}

fn record(s: &mut WorkerStatus, outcome: Result<Round>, started: Instant, summary: String) {
    s.rounds += 1;
    s.last_round_ms = now_ms();
    s.last_duration_ms = started.elapsed().as_millis() as u64;
    s.summary = summary;
    match outcome {
        Ok(round) => {
            if s.last_error.is_some() {
                tracing::info!("{} works again", s.name);
            }
            s.state = match round {
                Round::Busy => "busy",
                Round::Idle => "idle",
                Round::Done => "done",
            }
            .into();
            s.last_error = None;
        }
        Err(e) => {
            if s.last_error.is_none() {
                tracing::warn!("{}: {e} (retrying; logged again once it works)", s.name);
            } else {
                tracing::debug!("{}: {e}", s.name);
            }
            s.state = "failed, retrying".into();
            s.errors += 1;
            s.last_error = Some(e.to_string());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Counts rounds; says Busy for the first `busy` of them, then fails once, then Done.
    struct Counter {
        rounds: u32,
        busy: u32,
    }

    impl Worker for Counter {
        fn name(&self) -> &'static str {
            "counter"
        }
        fn interval(&self) -> Duration {
            Duration::from_millis(10)
        }
        async fn work(&mut self) -> Result<Round> {
            self.rounds += 1;
            match self.rounds {
                n if n <= self.busy => Ok(Round::Busy),
                n if n == self.busy + 1 => Err(tomus_wire::Error::internal("once")),
                _ => Ok(Round::Done),
            }
        }
        fn summary(&self) -> String {
            format!("{} rounds", self.rounds)
        }
    }

    #[tokio::test]
    async fn a_worker_reports_its_rounds_errors_and_end() {
        let workers = Workers::default();
        let (_tx, rx) = watch::channel(false);
        let task = workers.spawn(Counter { rounds: 0, busy: 3 }, rx, None);
        tokio::time::timeout(Duration::from_secs(10), task)
            .await
            .expect("the worker ends")
            .expect("it did not panic");
        let s = &workers.statuses()[0];
        assert_eq!((s.name.as_str(), s.state.as_str()), ("counter", "stopped"));
        assert_eq!((s.rounds, s.errors), (5, 1));
        assert_eq!(s.last_error, None, "the error was cleared by a good round");
        assert_eq!(s.summary, "5 rounds");
        assert_eq!(s.interval_ms, 10);
    }

    /// Never done; counts rounds in a shared cell.
    struct Forever(Arc<Mutex<u32>>);

    impl Worker for Forever {
        fn name(&self) -> &'static str {
            "forever"
        }
        fn interval(&self) -> Duration {
            Duration::from_secs(3600)
        }
        async fn work(&mut self) -> Result<Round> {
            *self.0.lock().unwrap() += 1;
            Ok(Round::Idle)
        }
    }

    #[tokio::test]
    async fn a_wake_cuts_the_pause_short_and_stop_ends_it() {
        let workers = Workers::default();
        let (tx, rx) = watch::channel(false);
        let wake = Arc::new(Notify::new());
        let rounds = Arc::new(Mutex::new(0));
        let task = workers.spawn(Forever(rounds.clone()), rx, Some(wake.clone()));
        let deadline = Instant::now() + Duration::from_secs(10);
        while *rounds.lock().unwrap() < 3 {
            assert!(Instant::now() < deadline, "woken rounds did not run");
            wake.notify_one();
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        tx.send(true).unwrap();
        tokio::time::timeout(Duration::from_secs(10), task)
            .await
            .expect("stop ends the worker within its pause")
            .unwrap();
        assert_eq!(workers.statuses()[0].state, "stopped");
    }

    #[tokio::test]
    async fn dropping_the_stop_sender_stops_the_worker() {
        let workers = Workers::default();
        let (tx, rx) = watch::channel(false);
        let task = workers.spawn(Forever(Default::default()), rx, None);
        drop(tx);
        tokio::time::timeout(Duration::from_secs(10), task)
            .await
            .expect("the worker ends")
            .unwrap();
    }
}
