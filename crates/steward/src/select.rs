//! Choosing K storage nodes among N from a throughput matrix, and which compute nodes each
//! serves (the placement plan).
//!
//! - [`Strategy::DataSteward`]: the paper's Algorithm 2. Centroids start at random among the
//!   nodes that pass the quality-of-service filter (throughput at least `min_throughput`,
//!   variability at most `max_variability`); then, until no centroid changes: every other
//!   node joins the centroid it reaches fastest among those with room (at most ceil(N/K)
//!   clients each, `assign`), and each cluster's centroid becomes the member that passes
//!   the filter and receives the highest summed throughput from the rest of its cluster.
//!   Several starts, the plan with the highest cumulative throughput kept: half drawn at
//!   random as in the paper, half spread over the network (k-means++-style, see
//!   `spread_start`), because random starts alone settle, now and then, with two
//!   centroids behind one switch. The kept plan is then polished by swaps on its own score
//!   (`improve_by_swaps`).
//! - [`Strategy::Random`]: K nodes drawn at random, blind to the network (the paper's
//!   random baseline).
//! - [`Strategy::Latency`]: k-medoids on round-trip latency (the paper's baseline, after Fan
//!   et al.): clusters of nodes close in latency, medoids as storage nodes. It needs the
//!   matrix's `latency_ms` and ignores throughput and the filter.
//!
//! Every strategy's plan is scored the same way: clients are assigned to its storage nodes by
//! `assign`, and the score is the sum over clients of the throughput from the client to its
//! storage node (writes: results go from compute to storage). Everything is deterministic
//! given the seed.

use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::SeedableRng;

use crate::matrix::Matrix;

/// Iterations of one start before it is taken as settled (a start cycling between two
/// equally good centroids stops here).
const MAX_ITERATIONS: usize = 64;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Strategy {
    DataSteward,
    Random,
    Latency,
}

impl Strategy {
    pub fn name(self) -> &'static str {
        match self {
            Strategy::DataSteward => "datasteward",
            Strategy::Random => "random",
            Strategy::Latency => "latency",
        }
    }

    pub fn parse(s: &str) -> Option<Strategy> {
        match s {
            "datasteward" => Some(Strategy::DataSteward),
            "random" => Some(Strategy::Random),
            "latency" => Some(Strategy::Latency),
            _ => None,
        }
    }
}

#[derive(Clone, Debug)]
pub struct SelectOptions {
    pub storage_nodes: usize,
    /// Storage candidates need at least this mean throughput with the others (MiB/s).
    pub min_throughput: Option<f64>,
    /// Storage candidates need at most this mean coefficient of variation.
    pub max_variability: Option<f64>,
    pub seed: u64,
    /// Random starts of Algorithm 2 (and of k-medoids).
    pub restarts: usize,
    pub strategy: Strategy,
}

impl Default for SelectOptions {
    fn default() -> Self {
        SelectOptions {
            storage_nodes: 1,
            min_throughput: None,
            max_variability: None,
            seed: 0,
            restarts: 16,
            strategy: Strategy::DataSteward,
        }
    }
}

/// A placement plan: storage nodes, and the compute nodes each one serves.
#[derive(Clone, Debug, PartialEq)]
pub struct Plan {
    pub strategy: Strategy,
    /// Node indices of the storage nodes.
    pub storage: Vec<usize>,
    /// `clusters[i]`: the compute nodes served by `storage[i]`.
    pub clusters: Vec<Vec<usize>>,
    /// Sum over compute nodes of their throughput to their storage node (MiB/s).
    pub cumulative: f64,
    /// Nodes the quality-of-service filter kept from being storage nodes.
    pub filtered: Vec<usize>,
}

impl Plan {
    /// The plan as JSON, with node names: `storage_nodes`, `compute_nodes`, `clusters`
    /// (storage node -> its compute nodes), `cumulative_throughput` (MiB/s), `filtered`.
    pub fn to_json(&self, m: &Matrix) -> serde_json::Value {
        let name = |i: &usize| m.nodes[*i].clone();
        let mut compute: Vec<usize> = self.clusters.iter().flatten().copied().collect();
        compute.sort_unstable();
        let clusters: serde_json::Map<String, serde_json::Value> = self
            .storage
            .iter()
            .zip(&self.clusters)
            .map(|(s, c)| (name(s), c.iter().map(name).collect::<Vec<_>>().into()))
            .collect();
        serde_json::json!({
            "strategy": self.strategy.name(),
            "storage_nodes": self.storage.iter().map(name).collect::<Vec<_>>(),
            "compute_nodes": compute.iter().map(name).collect::<Vec<_>>(),
            "clusters": clusters,
            "cumulative_throughput": self.cumulative,
            "filtered": self.filtered.iter().map(name).collect::<Vec<_>>(),
        })
    }
}

/// Most clients one storage node takes: ceil(N/K).
pub fn capacity(nodes: usize, storage: usize) -> usize {
    nodes.div_ceil(storage.max(1))
}

/// Balanced assignment of every node outside `storage` to a storage node: pairs are taken
/// by decreasing client-to-storage throughput and a client joins the storage node of its
/// best pair that still has room (at most `cap` clients each). Answers the clients of each
/// storage node (in `storage` order) and the cumulative throughput.
pub fn assign(m: &Matrix, storage: &[usize], cap: usize) -> (Vec<Vec<usize>>, f64) {
    let n = m.len();
    let mut is_storage = vec![false; n];
    for &s in storage {
        is_storage[s] = true;
    }
    let mut pairs: Vec<(usize, usize)> = (0..n)
        .filter(|&c| !is_storage[c])
        .flat_map(|c| (0..storage.len()).map(move |i| (c, i)))
        .collect();
    // Highest throughput first; ties by node and storage order (deterministic).
    pairs.sort_by(|&(c1, i1), &(c2, i2)| {
        m.t(c2, storage[i2])
            .total_cmp(&m.t(c1, storage[i1]))
            .then(c1.cmp(&c2))
            .then(i1.cmp(&i2))
    });
    let mut clusters = vec![Vec::new(); storage.len()];
    let mut placed = vec![false; n];
    let mut total = 0.0;
    for (c, i) in pairs {
        if placed[c] || clusters[i].len() >= cap {
            continue;
        }
        placed[c] = true;
        clusters[i].push(c);
        total += m.t(c, storage[i]);
    }
    for c in &mut clusters {
        c.sort_unstable();
    }
    (clusters, total)
}

/// Chooses `o.storage_nodes` storage nodes by `o.strategy`.
pub fn select(m: &Matrix, o: &SelectOptions) -> Result<Plan, String> {
    m.check()?;
    let n = m.len();
    let k = o.storage_nodes;
    if k == 0 || k > n {
        return Err(format!("cannot choose {k} storage nodes among {n}"));
    }
    let qos = m.qos();
    let passes = |j: usize| {
        o.min_throughput.is_none_or(|min| qos[j].throughput >= min)
            && o.max_variability
                .is_none_or(|max| qos[j].variability <= max)
    };
    let filtered: Vec<usize> = (0..n).filter(|&j| !passes(j)).collect();
    let mut rng = StdRng::seed_from_u64(o.seed);
    let storage = match o.strategy {
        Strategy::DataSteward => {
            let eligible: Vec<usize> = (0..n).filter(|&j| passes(j)).collect();
            if eligible.len() < k {
                return Err(format!(
                    "only {} of {n} nodes pass the throughput and variability thresholds; \
                     {k} storage nodes are needed",
                    eligible.len()
                ));
            }
            let mut best: Option<(f64, Vec<usize>)> = None;
            for r in 0..o.restarts.max(1) {
                let start = if r % 2 == 0 {
                    eligible.choose_multiple(&mut rng, k).copied().collect()
                } else {
                    spread_start(m, &eligible, k, &mut rng)
                };
                let servers = dedicate_nodes(m, start, &passes);
                let (_, score) = assign(m, &servers, capacity(n, k));
                if best.as_ref().is_none_or(|(b, _)| score > *b) {
                    best = Some((score, servers));
                }
            }
            let servers = best.map(|(_, s)| s).unwrap_or_default();
            improve_by_swaps(m, servers, &eligible)
        }
        Strategy::Random => {
            let all: Vec<usize> = (0..n).collect();
            all.choose_multiple(&mut rng, k).copied().collect()
        }
        Strategy::Latency => {
            let Some(latency) = &m.latency_ms else {
                return Err("the latency strategy needs the matrix's latency_ms".into());
            };
            k_medoids(latency, k, o.restarts.max(1), &mut rng)
        }
    };
    let (clusters, cumulative) = assign(m, &storage, capacity(n, k));
    Ok(Plan {
        strategy: o.strategy,
        storage,
        clusters,
        cumulative,
        filtered: if o.strategy == Strategy::DataSteward {
            filtered
        } else {
            Vec::new()
        },
    })
}

/// A start spread over the network (k-means++'s idea, on throughput): a random eligible
/// node, then repeatedly the eligible node whose best link with the centroids so far is the
/// slowest, so starts rarely put two centroids behind one switch.
fn spread_start(m: &Matrix, eligible: &[usize], k: usize, rng: &mut StdRng) -> Vec<usize> {
    let mut chosen: Vec<usize> = eligible.choose(rng).copied().into_iter().collect();
    while chosen.len() < k {
        let closeness = |j: usize| {
            chosen
                .iter()
                .map(|&c| m.t(j, c).max(m.t(c, j)))
                .fold(0.0, f64::max)
        };
        let next = eligible
            .iter()
            .copied()
            .filter(|j| !chosen.contains(j))
            .min_by(|&a, &b| closeness(a).total_cmp(&closeness(b)).then(a.cmp(&b)));
        match next {
            Some(j) => chosen.push(j),
            None => break,
        }
    }
    chosen
}

/// One start of Algorithm 2 from the centroids `servers` (all passing the filter): assign,
/// move each centroid to its cluster's best eligible member, until nothing moves.
fn dedicate_nodes(
    m: &Matrix,
    mut servers: Vec<usize>,
    passes: &dyn Fn(usize) -> bool,
) -> Vec<usize> {
    let cap = capacity(m.len(), servers.len());
    for _ in 0..MAX_ITERATIONS {
        let (clusters, _) = assign(m, &servers, cap);
        let mut changed = false;
        for (server, clients) in servers.iter_mut().zip(&clusters) {
            let members: Vec<usize> = clients.iter().copied().chain([*server]).collect();
            // What member `j` would receive from the rest of its cluster.
            let score = |j: usize| -> f64 {
                members
                    .iter()
                    .filter(|&&x| x != j)
                    .map(|&x| m.t(x, j))
                    .sum()
            };
            let mut best = *server;
            let mut best_score = score(best);
            for &j in clients.iter().filter(|&&j| passes(j)) {
                let s = score(j);
                // Strictly better only: a tie keeps the centroid, so a start settles.
                if s > best_score {
                    best = j;
                    best_score = s;
                }
            }
            if best != *server {
                *server = best;
                changed = true;
            }
        }
        if !changed {
            break;
        }
    }
    servers
}

/// Polishes the best start on the plan's own score (PAM's swap step): replaces a storage node
/// by an eligible node when the balanced assignment then moves strictly more, best swap
/// first, until no swap helps. Algorithm 2 moves each centroid on its own cluster's view;
/// a client it lost to another cluster (a noisy node, whose links are all slow, lands where
/// the greedy assignment puts it) makes that view differ from the plan's score now and then,
/// by a fraction of a percent. Run once on the kept plan: a pass costs K x N assignments.
fn improve_by_swaps(m: &Matrix, mut servers: Vec<usize>, eligible: &[usize]) -> Vec<usize> {
    let cap = capacity(m.len(), servers.len());
    let (_, mut score) = assign(m, &servers, cap);
    for _ in 0..MAX_ITERATIONS {
        let mut best: Option<(f64, usize, usize)> = None;
        for i in 0..servers.len() {
            for &j in eligible.iter().filter(|j| !servers.contains(j)) {
                let mut trial = servers.clone();
                trial[i] = j;
                let (_, s) = assign(m, &trial, cap);
                if s > best.map_or(score, |(b, _, _)| b) {
                    best = Some((s, i, j));
                }
            }
        }
        let Some((s, i, j)) = best else { break };
        servers[i] = j;
        score = s;
    }
    servers
}

/// k-medoids on the symmetrised latency: nodes join their nearest medoid; a cluster's new
/// medoid is the member with the least summed latency to the others; until stable. Keeps the
/// start with the least total latency.
fn k_medoids(latency: &[Vec<f64>], k: usize, restarts: usize, rng: &mut StdRng) -> Vec<usize> {
    let n = latency.len();
    let d = |a: usize, b: usize| (latency[a][b] + latency[b][a]) / 2.0;
    let nearest = |medoids: &[usize], x: usize| -> usize {
        (0..medoids.len())
            .min_by(|&i, &j| d(x, medoids[i]).total_cmp(&d(x, medoids[j])))
            .unwrap_or(0)
    };
    let all: Vec<usize> = (0..n).collect();
    let mut best: Option<(f64, Vec<usize>)> = None;
    for _ in 0..restarts {
        let mut medoids: Vec<usize> = all.choose_multiple(rng, k).copied().collect();
        for _ in 0..MAX_ITERATIONS {
            let mut clusters = vec![Vec::new(); k];
            for x in 0..n {
                clusters[nearest(&medoids, x)].push(x);
            }
            let mut changed = false;
            for (medoid, members) in medoids.iter_mut().zip(&clusters) {
                let cost = |c: usize| members.iter().map(|&x| d(c, x)).sum::<f64>();
                let mut best_m = *medoid;
                let mut best_cost = cost(best_m);
                for &c in members {
                    let v = cost(c);
                    if v < best_cost {
                        best_m = c;
                        best_cost = v;
                    }
                }
                if best_m != *medoid {
                    *medoid = best_m;
                    changed = true;
                }
            }
            if !changed {
                break;
            }
        }
        let total: f64 = (0..n).map(|x| d(x, medoids[nearest(&medoids, x)])).sum();
        if best.as_ref().is_none_or(|(b, _)| total < *b) {
            best = Some((total, medoids));
        }
    }
    best.map(|(_, m)| m).unwrap_or_default()
}
