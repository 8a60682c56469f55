//! The MD5 of many uploads at once.
//!
//! A PUT's ETag is the MD5 of its body, and the gateway must compute it for every byte it
//! takes in. One MD5 stream cannot use SIMD (each 64-byte block depends on the one before),
//! so a core hashes about 600 MB/s of it: a third or more of the gateway's CPU on large PUTs.
//! Concurrent uploads are independent streams, though, and a core hashes 8 of them side by
//! side in AVX2 lanes at about 3 GB/s together (`md5-many`; MinIO does the same with
//! `md5-simd`).
//!
//! So a body's bytes are copied into batches of [`BATCH`] bytes, and one hashing thread
//! hashes the batches of all uploads in one pass over the lanes. A request does not wait for
//! its batch: it goes on forwarding the next bytes, and wants its MD5 state back only when
//! its next batch is full. That slack lets the thread hold a pass until every upload in
//! flight has a batch queued, or until a request is waiting for one of the batches: under
//! steady load each pass fills the lanes. Bodies smaller than one batch (and the tail of
//! every body) are hashed on the request's task.
//!
//! Passes run groups of exactly 8 lanes: `md5-many` 0.1.0-alpha.4 hashed 5 to 7 streams at
//! 140-190 MB/s in all on this machine (one stream: 620 MB/s, 8: 3.3 GB/s), so a smaller
//! group is filled up with copies of one of its lanes, and a lone batch is hashed alone.
//!
//! The bytes are copied into the batch (about 0.1 ms per MiB) so that every lane gets one
//! contiguous run of the same length, and the body's own buffers go back to hyper at once.

use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard, OnceLock};

use md5_many::{Md5Many, Md5State};
use tokio::sync::oneshot;

/// Bytes of one upload handed to the hashing thread at a time: large enough that a pass
/// over the lanes hashes long runs of blocks, small enough that a request holds few.
pub const BATCH: usize = 1 << 20;

/// The lanes of one pass of `md5-many`'s AVX2 kernel.
const LANES: usize = 8;

/// A batch of one upload waiting to be hashed, and where its state and buffer go back.
struct Job {
    /// Which upload ([`BodyMd5::stream`]).
    stream: u64,
    /// Its request waits for it: hash now.
    wanted: bool,
    state: Md5State,
    batch: Vec<u8>,
    done: oneshot::Sender<(Md5State, Vec<u8>)>,
}

struct Lanes {
    queue: Mutex<Vec<Job>>,
    changed: Condvar,
    /// Uploads that have handed over a batch and are not finished: the batches a pass
    /// waits for.
    streams: AtomicUsize,
    next_stream: AtomicU64,
    /// The thread started (if not, every body is hashed on its own task).
    running: AtomicBool,
    engine: Md5Many,
}

/// The process's hashing thread, started with the first large upload.
fn global() -> &'static Lanes {
    static LANES: OnceLock<&'static Lanes> = OnceLock::new();
    LANES.get_or_init(Lanes::start)
}

fn lock(queue: &Mutex<Vec<Job>>) -> MutexGuard<'_, Vec<Job>> {
    // A panic while holding the lock cannot leave the queue half-changed (push and take
    // are single operations), so a poisoned lock is still good.
    queue
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl Lanes {
    fn new() -> Lanes {
        Lanes {
            queue: Mutex::new(Vec::new()),
            changed: Condvar::new(),
            streams: AtomicUsize::new(0),
            next_stream: AtomicU64::new(0),
            running: AtomicBool::new(true),
            engine: Md5Many::new(),
        }
    }

    /// A hashing thread and its queue, kept for the life of the process.
    fn start() -> &'static Lanes {
        let lanes: &'static Lanes = Box::leak(Box::new(Lanes::new()));
        let started = std::thread::Builder::new()
            .name("tomus-md5".into())
            .spawn(move || lanes.run());
        if let Err(e) = started {
            tracing::error!("cannot start the MD5 hashing thread, uploads hash alone: {e}");
            lanes.running.store(false, Ordering::Release);
        }
        lanes
    }

    fn run(&self) {
        loop {
            let mut jobs = self.gather();
            let hashed = std::panic::catch_unwind(AssertUnwindSafe(|| {
                for group in jobs.chunks_mut(LANES) {
                    self.hash(group);
                }
            }));
            if hashed.is_err() {
                // Dropping the jobs fails their requests (`LanesGone`); the thread goes on
                // for the others.
                tracing::error!("hashing {} uploads' MD5 panicked", jobs.len());
                continue;
            }
            for job in jobs {
                // The request may have given up (its client went away): nothing to do.
                let _ = job.done.send((job.state, job.batch));
            }
        }
    }

    /// Hashes the batches of up to [`LANES`] jobs into their states, side by side.
    fn hash(&self, group: &mut [Job]) {
        if let [job] = group {
            job.state.update(&job.batch);
            return;
        }
        let mut states = [Md5State::new(); LANES];
        let mut batches: [&[u8]; LANES] = [&[]; LANES];
        for (i, job) in group.iter().enumerate() {
            states[i] = job.state;
            batches[i] = &job.batch;
        }
        // Lanes left over hash a copy of the first batch into a state thrown away.
        for i in group.len()..LANES {
            states[i] = group[0].state;
            batches[i] = &group[0].batch;
        }
        self.engine.update_many(&mut states, &batches);
        for (job, state) in group.iter_mut().zip(states) {
            job.state = state;
        }
    }

    /// Waits until every upload in flight has a batch queued, or a request waits for a
    /// queued batch, and takes the queue.
    fn gather(&self) -> Vec<Job> {
        let mut queue = lock(&self.queue);
        loop {
            let full = queue.len() >= self.streams.load(Ordering::Acquire);
            if !queue.is_empty() && (full || queue.iter().any(|job| job.wanted)) {
                return std::mem::take(&mut *queue);
            }
            queue = self
                .changed
                .wait(queue)
                .unwrap_or_else(|poisoned| poisoned.into_inner());
        }
    }

    fn submit(&self, job: Job) {
        lock(&self.queue).push(job);
        self.changed.notify_one();
    }

    /// The request of `stream` waits for its batch: if it is still queued, hash it now.
    fn want(&self, stream: u64) {
        let mut queue = lock(&self.queue);
        if let Some(job) = queue.iter_mut().find(|job| job.stream == stream) {
            job.wanted = true;
            self.changed.notify_one();
        }
    }

    /// One upload fewer to wait for.
    fn done(&self) {
        let _queue = lock(&self.queue);
        self.streams.fetch_sub(1, Ordering::AcqRel);
        self.changed.notify_one();
    }
}

/// The MD5 of one request body, fed part by part as it arrives.
pub struct BodyMd5 {
    lanes: &'static Lanes,
    /// `None` while a batch is with the hashing thread.
    state: Option<Md5State>,
    in_flight: Option<oneshot::Receiver<(Md5State, Vec<u8>)>>,
    /// The batch being filled.
    batch: Vec<u8>,
    /// Its number once counted in [`Lanes::streams`] (with its first batch).
    stream: Option<u64>,
}

impl Default for BodyMd5 {
    fn default() -> Self {
        BodyMd5::on(global())
    }
}

/// The hashing thread dropped a batch: it panicked hashing it.
#[derive(Debug)]
pub struct LanesGone;

impl BodyMd5 {
    fn on(lanes: &'static Lanes) -> Self {
        BodyMd5 {
            lanes,
            state: Some(Md5State::new()),
            in_flight: None,
            batch: Vec::new(),
            stream: None,
        }
    }

    /// Adds `part` to the hash; hands each full batch to the hashing thread, first taking
    /// the state (and a buffer) back from the previous one.
    pub async fn update(&mut self, mut part: &[u8]) -> Result<(), LanesGone> {
        while !part.is_empty() {
            let take = part.len().min(BATCH - self.batch.len());
            self.batch.extend_from_slice(&part[..take]);
            part = &part[take..];
            if self.batch.len() < BATCH {
                continue;
            }
            match &mut self.state {
                Some(alone) if !self.lanes.running.load(Ordering::Acquire) => {
                    alone.update(&self.batch);
                    self.batch.clear();
                }
                _ => self.submit().await?,
            }
        }
        Ok(())
    }

    async fn submit(&mut self) -> Result<(), LanesGone> {
        let (state, mut spare) = self.take_state().await?;
        spare.clear();
        let lanes = self.lanes;
        let stream = *self.stream.get_or_insert_with(|| {
            lanes.streams.fetch_add(1, Ordering::AcqRel);
            lanes.next_stream.fetch_add(1, Ordering::Relaxed)
        });
        let (done, in_flight) = oneshot::channel();
        self.in_flight = Some(in_flight);
        self.lanes.submit(Job {
            stream,
            wanted: false,
            state,
            batch: std::mem::replace(&mut self.batch, spare),
            done,
        });
        Ok(())
    }

    /// The MD5 of everything added: the last batch comes back, the rest is hashed here.
    pub async fn finish(mut self) -> Result<[u8; 16], LanesGone> {
        let (mut state, _) = self.take_state().await?;
        self.uncount();
        state.update(&self.batch);
        Ok(state.finalize())
    }

    /// The state, once the hashing thread is done with the batch in flight, and a buffer
    /// for the next batch (that batch's, or a new one).
    async fn take_state(&mut self) -> Result<(Md5State, Vec<u8>), LanesGone> {
        if let Some(mut in_flight) = self.in_flight.take() {
            if let Ok(back) = in_flight.try_recv() {
                return Ok(back);
            }
            if let Some(stream) = self.stream {
                self.lanes.want(stream);
            }
            return in_flight.await.map_err(|_| LanesGone);
        }
        let state = self.state.take().ok_or(LanesGone)?;
        Ok((state, Vec::with_capacity(BATCH)))
    }

    fn uncount(&mut self) {
        if self.stream.take().is_some() {
            self.lanes.done();
        }
    }
}

impl Drop for BodyMd5 {
    fn drop(&mut self) {
        // A request that fails or is cancelled midway stops being waited for.
        self.uncount();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use md5_many::md5;

    fn body(len: usize, seed: u8) -> Vec<u8> {
        (0..len)
            .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
            .collect()
    }

    /// Feeds `data` in parts of the given sizes, cycling.
    async fn hashed(lanes: &'static Lanes, data: &[u8], sizes: &[usize]) -> [u8; 16] {
        let mut h = BodyMd5::on(lanes);
        let (mut at, mut i) = (0, 0);
        while at < data.len() {
            let end = (at + sizes[i % sizes.len()]).min(data.len());
            h.update(&data[at..end]).await.expect("lanes");
            at = end;
            i += 1;
        }
        h.finish().await.expect("lanes")
    }

    /// Hashes a body of each length, fed in parts of its sizes, all at once: what each got,
    /// its MD5, and its length.
    async fn side_by_side(
        lanes: &'static Lanes,
        bodies: Vec<(usize, Vec<usize>)>,
    ) -> Vec<([u8; 16], [u8; 16], usize)> {
        let tasks: Vec<_> = bodies
            .into_iter()
            .enumerate()
            .map(|(seed, (len, sizes))| {
                tokio::spawn(async move {
                    let data = body(len, seed as u8);
                    (hashed(lanes, &data, &sizes).await, md5(&data), len)
                })
            })
            .collect();
        let mut results = Vec::new();
        for t in tasks {
            results.push(t.await.expect("task"));
        }
        results
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn concurrent_bodies_of_uneven_parts_hash_as_md5_does() {
        let lanes = Lanes::start();
        // Lengths around the batch and block boundaries; parts that do not divide 64.
        let cases: Vec<(usize, Vec<usize>)> = vec![
            (0, vec![1]),
            (63, vec![7]),
            (BATCH - 1, vec![65_537]),
            (BATCH, vec![BATCH]),
            (BATCH + 1, vec![1000, 3]),
            (3 * BATCH + 12_345, vec![65_536, 17, 250_001]),
            (5 * BATCH / 2, vec![BATCH + 64]),
            (4 * BATCH + 7, vec![131_072]),
        ];
        for (got, want, len) in side_by_side(lanes, cases).await {
            assert_eq!(got, want, "body of {len} bytes");
        }
        assert_eq!(lanes.streams.load(Ordering::Acquire), 0);
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(24))]
        /// Any number of bodies, of any lengths, arriving in parts of any sizes, side by
        /// side: each gets the MD5 of its bytes.
        #[test]
        fn any_bodies_in_any_parts_hash_as_md5_does(
            bodies in proptest::collection::vec(
                (0..3 * BATCH, proptest::collection::vec(1..300_000usize, 1..4)),
                1..10,
            )
        ) {
            static LANES: OnceLock<&'static Lanes> = OnceLock::new();
            let lanes = *LANES.get_or_init(Lanes::start);
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .build()
                .expect("runtime");
            let results = runtime.block_on(side_by_side(lanes, bodies));
            for (got, want, _) in results {
                proptest::prop_assert_eq!(got, want);
            }
            proptest::prop_assert_eq!(lanes.streams.load(Ordering::Acquire), 0);
        }
    }

    #[tokio::test]
    async fn without_the_thread_bodies_are_hashed_on_their_task() {
        let lanes: &'static Lanes = Box::leak(Box::new(Lanes::new()));
        lanes.running.store(false, Ordering::Release);
        let data = body(3 * BATCH + 100, 3);
        assert_eq!(hashed(lanes, &data, &[300_000]).await, md5(&data));
        assert_eq!(lanes.streams.load(Ordering::Acquire), 0);
    }

    #[tokio::test]
    async fn a_body_dropped_midway_is_no_longer_waited_for() {
        let lanes = Lanes::start();
        let mut h = BodyMd5::on(lanes);
        h.update(&body(BATCH, 1)).await.expect("lanes");
        assert_eq!(lanes.streams.load(Ordering::Acquire), 1);
        drop(h);
        assert_eq!(lanes.streams.load(Ordering::Acquire), 0);
        let data = body(2 * BATCH + 5, 2);
        assert_eq!(hashed(lanes, &data, &[BATCH]).await, md5(&data));
    }
}
