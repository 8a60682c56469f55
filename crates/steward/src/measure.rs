//! The manager's side of a topology measurement: every ordered pair of nodes is probed
//! `rounds` times. A round probes each pair once, at most `parallel` probes at a time and
//! never two touching the same node (a node's link is measured alone); rounds follow one
//! another, so a pair's samples are spread over the whole measurement and its standard
//! deviation says how much the link varies in time.

use std::time::Duration;

use futures::future::join_all;
use tomus_wire::topology::Probe;
use tomus_wire::{now_ms, Error, Pool, Result, TopologyMatrix};

/// A node to measure: its name in the matrix and where it answers probes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Node {
    pub name: String,
    pub addr: String,
}

#[derive(Clone, Copy, Debug)]
pub struct MeasureParams {
    pub rounds: u32,
    pub duration_ms: u32,
    pub parallel: u32,
    pub frame_bytes: u32,
}

/// Most nodes one measurement covers (N² probes per round).
pub const MAX_NODES: usize = 256;
/// Most rounds one measurement runs.
pub const MAX_ROUNDS: u32 = 100;
/// Time a probe request may take beyond its own duration (pings, the last frame).
const PROBE_GRACE: Duration = Duration::from_secs(30);

impl MeasureParams {
    pub fn check(&self, nodes: usize) -> Result<()> {
        if self.rounds == 0 || self.rounds > MAX_ROUNDS {
            return Err(Error::invalid(format!("rounds must be 1 to {MAX_ROUNDS}")));
        }
        if self.parallel == 0 {
            return Err(Error::invalid("parallel must be at least 1"));
        }
        if nodes > MAX_NODES {
            return Err(Error::invalid(format!(
                "{nodes} nodes; one measurement covers at most {MAX_NODES}"
            )));
        }
        if nodes < 2 {
            return Err(Error::invalid(format!(
                "{nodes} live node(s): a measurement needs two (providers or `tomus agent`s)"
            )));
        }
        Ok(())
    }
}

/// Batches of pairs for one round: each pair once, at most `parallel` per batch, no node in
/// two pairs of a batch. `round` rotates the order so rounds do not repeat one schedule.
pub fn schedule(n: usize, parallel: usize, round: usize) -> Vec<Vec<(usize, usize)>> {
    let mut pending: Vec<(usize, usize)> = (0..n)
        .flat_map(|i| (0..n).filter(move |&j| j != i).map(move |j| (i, j)))
        .collect();
    if !pending.is_empty() {
        let shift = (round * 7) % pending.len();
        pending.rotate_left(shift);
    }
    let mut batches = Vec::new();
    while !pending.is_empty() {
        let mut busy = vec![false; n];
        let mut batch = Vec::new();
        pending.retain(|&(a, b)| {
            if batch.len() < parallel && !busy[a] && !busy[b] {
                busy[a] = true;
                busy[b] = true;
                batch.push((a, b));
                false
            } else {
                true
            }
        });
        batches.push(batch);
    }
    batches
}

/// Runs the measurement (see the module docs) and answers the matrix.
pub async fn measure(pool: &Pool, nodes: &[Node], p: MeasureParams) -> Result<TopologyMatrix> {
    p.check(nodes.len())?;
    let n = nodes.len();
    let mut samples = vec![vec![Vec::new(); n]; n];
    let mut rtts = vec![vec![Vec::new(); n]; n];
    let mut errors: Vec<Vec<Option<String>>> = vec![vec![None; n]; n];
    let timeout = Duration::from_millis(u64::from(p.duration_ms)) + PROBE_GRACE;
    for round in 0..p.rounds as usize {
        for batch in schedule(n, p.parallel as usize, round) {
            let probes = batch.iter().map(|&(a, b)| {
                let req = Probe {
                    target: nodes[b].addr.clone(),
                    duration_ms: p.duration_ms,
                    frame_bytes: p.frame_bytes,
                };
                pool.call_timeout(&nodes[a].addr, req, &[], timeout)
            });
            for (&(a, b), got) in batch.iter().zip(join_all(probes).await) {
                match got {
                    Ok((s, _)) => {
                        let secs = s.elapsed_us.max(1) as f64 / 1e6;
                        samples[a][b].push(s.bytes as f64 / secs / f64::from(1 << 20));
                        rtts[a][b].push(s.rtt_us as f64 / 1e3);
                    }
                    Err(e) => {
                        tracing::warn!("probe {} -> {}: {e}", nodes[a].name, nodes[b].name);
                        errors[a][b].get_or_insert(e.to_string());
                    }
                }
            }
        }
    }
    let mut m = TopologyMatrix {
        nodes: nodes.iter().map(|x| x.name.clone()).collect(),
        addrs: nodes.iter().map(|x| x.addr.clone()).collect(),
        throughput: vec![vec![0.0; n]; n],
        stddev: vec![vec![0.0; n]; n],
        latency_ms: vec![vec![0.0; n]; n],
        rounds: p.rounds,
        duration_ms: p.duration_ms,
        measured_ms: now_ms(),
        failures: Vec::new(),
    };
    for a in 0..n {
        for b in (0..n).filter(|&b| b != a) {
            let (mean, sd) = mean_stddev(&samples[a][b]);
            m.throughput[a][b] = mean;
            m.stddev[a][b] = sd;
            m.latency_ms[a][b] = median(&mut rtts[a][b]);
            if samples[a][b].is_empty() {
                let why = errors[a][b].take().unwrap_or_default();
                m.failures
                    .push(format!("{} -> {}: {why}", nodes[a].name, nodes[b].name));
            }
        }
    }
    Ok(m)
}

/// Mean and sample standard deviation (0 for fewer than two samples).
pub fn mean_stddev(xs: &[f64]) -> (f64, f64) {
    if xs.is_empty() {
        return (0.0, 0.0);
    }
    let n = xs.len() as f64;
    let mean = xs.iter().sum::<f64>() / n;
    if xs.len() < 2 {
        return (mean, 0.0);
    }
    let var = xs.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / (n - 1.0);
    (mean, var.sqrt())
}

fn median(xs: &mut [f64]) -> f64 {
    if xs.is_empty() {
        return 0.0;
    }
    xs.sort_by(f64::total_cmp);
    xs[xs.len() / 2]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_round_probes_every_ordered_pair_once_and_no_node_twice_at_a_time() {
        for n in 2..9 {
            for parallel in 1..5 {
                let batches = schedule(n, parallel, 3);
                let mut seen: Vec<(usize, usize)> = batches.iter().flatten().copied().collect();
                seen.sort_unstable();
                let mut want: Vec<(usize, usize)> = (0..n)
                    .flat_map(|i| (0..n).filter(move |&j| j != i).map(move |j| (i, j)))
                    .collect();
                want.sort_unstable();
                assert_eq!(seen, want);
                for b in &batches {
                    assert!(!b.is_empty() && b.len() <= parallel);
                    let mut nodes: Vec<usize> = b.iter().flat_map(|&(x, y)| [x, y]).collect();
                    nodes.sort_unstable();
                    nodes.dedup();
                    assert_eq!(nodes.len(), 2 * b.len(), "a node in two probes: {b:?}");
                }
            }
        }
    }

    #[test]
    fn mean_and_sample_stddev() {
        assert_eq!(mean_stddev(&[]), (0.0, 0.0));
        assert_eq!(mean_stddev(&[5.0]), (5.0, 0.0));
        let (m, s) = mean_stddev(&[2.0, 4.0, 4.0, 4.0, 5.0, 5.0, 7.0, 9.0]);
        assert!((m - 5.0).abs() < 1e-12);
        assert!((s - 2.138_089_935).abs() < 1e-6);
    }
}
