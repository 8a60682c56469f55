//! The consistent-hash ring of the metadata DHT: where a node key lives. Every process must
//! agree on it, so the hash is stable across processes and builds.

use tomus_metadata::{NodeKey, ProviderId};

/// Points per provider on the ring, so keys spread evenly over few providers.
const VIRTUAL_NODES: u64 = 64;
/// Consecutive versions of a blob sharing a ring position: writers committing to one blob
/// at the same moment store their metadata on the same providers, whose group commit makes it
/// durable with one disk sync; the next run of versions goes elsewhere on the ring.
const VERSION_RUN: u64 = 64;

/// SplitMix64 finalizer: a stable hash (the ring must agree across processes and builds).
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Ring position of a node: all nodes of one version (and of its run of `VERSION_RUN`
/// versions) share it, so a writer stores a version's nodes with one request per replica, and
/// runs of versions spread over the providers.
pub fn key_hash(key: &NodeKey) -> u64 {
    mix(mix(key.blob) ^ (key.node.version / VERSION_RUN))
}

/// Consistent-hash ring over provider ids.
#[derive(Clone, Debug, Default)]
pub struct Ring {
    points: Vec<(u64, ProviderId)>,
    providers: usize,
}

impl Ring {
    pub fn new(providers: &[ProviderId]) -> Self {
        let mut points: Vec<(u64, ProviderId)> = providers
            .iter()
            .flat_map(|&p| (0..VIRTUAL_NODES).map(move |i| (mix(((p as u64) << 32) | i), p)))
            .collect();
        points.sort_unstable();
        Ring {
            points,
            providers: providers.len(),
        }
    }

    /// Every provider in ring order starting at `key`'s position: the first `r` are its owners,
    /// the rest are where to look when membership changed since the node was written.
    pub fn walk(&self, key: &NodeKey) -> Vec<ProviderId> {
        let mut out = Vec::with_capacity(self.providers);
        if self.points.is_empty() {
            return out;
        }
        let h = key_hash(key);
        let start = self.points.partition_point(|(p, _)| *p < h);
        for i in 0..self.points.len() {
            let (_, id) = self.points[(start + i) % self.points.len()];
            if !out.contains(&id) {
                out.push(id);
                if out.len() == self.providers {
                    break;
                }
            }
        }
        out
    }
}
