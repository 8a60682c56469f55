//! A throughput probe from this node to another, and the handler of the agent requests that
//! every provider and every `tomus agent` serves.
//!
//! A probe pings the target a few times (round-trip time, and a warm pooled connection),
//! then sends `ProbeSink` frames one after the other for the probe's duration. Only bytes
//! whose frame was answered count, and the time is taken at the last answer: what arrived,
//! over how long it took to arrive (bytes still in socket buffers are not counted as moved).
//! The first quarter of the probe is a warm-up left out of the rate (slow start, and the
//! burst a token-bucket-shaped link lets through after idling).

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use tomus_wire::topology::*;
use tomus_wire::{ClusterSecret, Error, Ping, Pool, ProbeSample, Reply, Result, RpcConfig};

/// Bounds on a probe a request may ask for.
pub const MAX_PROBE_MS: u32 = 60_000;
pub const MIN_FRAME_BYTES: u32 = 4 << 10;
pub const MAX_FRAME_BYTES: u32 = 8 << 20;
/// Pings before a probe: the median is its round-trip time.
const PINGS: usize = 3;
/// Time a frame may take on top of the probe: a frame started just before the end on a
/// slow link still counts.
const FRAME_GRACE: Duration = Duration::from_secs(30);

/// What a node needs to answer agent requests: its name and connections to the others.
pub struct Agent {
    name: String,
    pool: Arc<Pool>,
}

impl Agent {
    pub fn new(name: String, secret: Option<ClusterSecret>) -> Agent {
        let pool = Pool::new(RpcConfig {
            connect_timeout: Duration::from_secs(3),
            request_timeout: FRAME_GRACE,
            secret,
        });
        Agent { name, pool }
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// Answers one agent request (a [`ProbeSink`]'s body is simply dropped).
    pub async fn handle(&self, req: AgentRequest, _body: Bytes) -> Reply {
        match req {
            AgentRequest::Probe(r) => Reply::of::<Probe>(self.probe(&r).await),
            AgentRequest::ProbeSink(_) => Reply::of::<ProbeSink>(Ok(())),
            AgentRequest::AgentHello(_) => Reply::of::<AgentHello>(Ok(self.name.clone())),
        }
    }

    async fn probe(&self, r: &Probe) -> Result<ProbeSample> {
        if r.duration_ms == 0 || r.duration_ms > MAX_PROBE_MS {
            return Err(Error::invalid(format!(
                "a probe lasts 1 to {MAX_PROBE_MS} ms, not {}",
                r.duration_ms
            )));
        }
        if !(MIN_FRAME_BYTES..=MAX_FRAME_BYTES).contains(&r.frame_bytes) {
            return Err(Error::invalid(format!(
                "probe frames are {MIN_FRAME_BYTES} to {MAX_FRAME_BYTES} bytes, not {}",
                r.frame_bytes
            )));
        }
        probe(&self.pool, &r.target, r.duration_ms, r.frame_bytes).await
    }
}

/// Probes `target` for `duration_ms` with frames of `frame_bytes` (see the module docs).
pub async fn probe(
    pool: &Pool,
    target: &str,
    duration_ms: u32,
    frame_bytes: u32,
) -> Result<ProbeSample> {
    let mut rtts = Vec::with_capacity(PINGS);
    for _ in 0..PINGS {
        let t = Instant::now();
        pool.call(target, Ping).await?;
        rtts.push(t.elapsed().as_micros() as u64);
    }
    rtts.sort_unstable();
    // Incompressible content is not needed (nothing compresses frames), but a fixed pattern
    // costs nothing either.
    let frame = vec![0x5a_u8; frame_bytes as usize];
    let duration = Duration::from_millis(u64::from(duration_ms));
    let warmup = duration / 4;
    let start = Instant::now();
    let mut bytes = 0u64;
    let mut last = Duration::ZERO;
    // Where the counted window starts: the first answer after the warm-up.
    let mut window: Option<(u64, Duration)> = None;
    while start.elapsed() < duration {
        pool.call_timeout(target, ProbeSink {}, &frame, duration + FRAME_GRACE)
            .await?;
        bytes += u64::from(frame_bytes);
        last = start.elapsed();
        if window.is_none() && last >= warmup {
            window = Some((bytes, last));
        }
    }
    // The steady rate: a token bucket's initial burst (and TCP's slow start) fall in the
    // warm-up, which a short probe would otherwise overstate (a 96 KiB burst is a third of
    // a 150 ms probe at 16 Mbit/s). A link too slow to answer twice counts whole.
    let (bytes, elapsed) = match window {
        Some((b0, t0)) if bytes > b0 => (bytes - b0, last - t0),
        _ => (bytes, last),
    };
    Ok(ProbeSample {
        bytes,
        elapsed_us: elapsed.as_micros().max(1) as u64,
        rtt_us: rtts[PINGS / 2],
    })
}
