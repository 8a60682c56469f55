//! The manager's part in DataSteward's topology measurement (the paper's Cloud Tracker
//! leader): it knows the nodes (live providers, and the `tomus agent`s that announced
//! themselves within the provider timeout), has them probe one another
//! ([`tomus_steward::measure`]), and keeps the matrix in its store.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tomus_steward::measure::{measure, MeasureParams, Node};
use tomus_wire::manager::MeasureTopology;
use tomus_wire::{Error, Pool, Result, RpcConfig, TopologyMatrix, MAX_ADDR_LEN};

use crate::registry::Registry;
use crate::store::Store;

/// Agents the manager keeps track of at most (announcements past it are refused).
const MAX_AGENTS: usize = 4096;

pub struct Topology {
    /// Agent address -> (name, last announcement).
    agents: Mutex<HashMap<String, (String, Instant)>>,
    /// An agent silent for this long is left out of measurements.
    timeout: Duration,
    pool: Arc<Pool>,
    store: Arc<Store>,
    /// One measurement at a time: two would disturb each other's probes.
    measuring: tokio::sync::Mutex<()>,
}

impl Topology {
    pub fn new(
        store: Arc<Store>,
        secret: Option<tomus_wire::ClusterSecret>,
        timeout: Duration,
    ) -> Self {
        Topology {
            agents: Mutex::new(HashMap::new()),
            timeout,
            pool: Pool::new(RpcConfig {
                secret,
                ..RpcConfig::default()
            }),
            store,
            measuring: tokio::sync::Mutex::new(()),
        }
    }

    fn agents(&self) -> MutexGuard<'_, HashMap<String, (String, Instant)>> {
        // The map holds no invariant a panicking holder could break halfway.
        self.agents.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// An agent announced itself.
    pub fn register(&self, name: String, addr: String) -> Result<()> {
        if name.is_empty()
            || name.len() > MAX_ADDR_LEN
            || addr.is_empty()
            || addr.len() > MAX_ADDR_LEN
        {
            return Err(Error::invalid(format!(
                "an agent's name and address are 1 to {MAX_ADDR_LEN} bytes"
            )));
        }
        let mut agents = self.agents();
        let now = Instant::now();
        let timeout = self.timeout;
        agents.retain(|_, (_, seen)| now.duration_since(*seen) < timeout);
        if agents.len() >= MAX_AGENTS && !agents.contains_key(&addr) {
            return Err(Error::invalid(format!("already {MAX_AGENTS} agents")));
        }
        agents.insert(addr, (name, now));
        Ok(())
    }

    /// The nodes a measurement covers now: live providers (named by their address) and
    /// agents heard from lately, in name order; one node per address.
    pub fn nodes(&self, registry: &Registry) -> Vec<Node> {
        let mut nodes: HashMap<String, String> = registry
            .list()
            .into_iter()
            .filter(|p| p.alive)
            .map(|p| (p.addr.clone(), p.addr))
            .collect();
        let now = Instant::now();
        for (addr, (name, seen)) in self.agents().iter() {
            if now.duration_since(*seen) < self.timeout {
                nodes.entry(addr.clone()).or_insert_with(|| name.clone());
            }
        }
        let mut out: Vec<Node> = nodes
            .into_iter()
            .map(|(addr, name)| Node { name, addr })
            .collect();
        out.sort_by(|a, b| a.name.cmp(&b.name).then(a.addr.cmp(&b.addr)));
        out
    }

    /// Measures the network between `nodes` and stores the matrix.
    pub async fn measure(&self, nodes: Vec<Node>, r: MeasureTopology) -> Result<TopologyMatrix> {
        let params = MeasureParams {
            rounds: r.rounds,
            duration_ms: r.duration_ms,
            parallel: r.parallel,
            frame_bytes: r.frame_bytes,
        };
        params.check(nodes.len())?;
        let mut names: Vec<&String> = nodes.iter().map(|n| &n.name).collect();
        names.sort();
        if let Some(w) = names.windows(2).find(|w| w[0] == w[1]) {
            return Err(Error::invalid(format!(
                "two nodes are called {:?}: give each `tomus agent` its own --name",
                w[0]
            )));
        }
        let Ok(_alone) = self.measuring.try_lock() else {
            return Err(Error::unavailable(
                "a topology measurement is already running",
            ));
        };
        tracing::info!("measuring the network between {} nodes", nodes.len());
        let m = measure(&self.pool, &nodes, params).await?;
        let store = self.store.clone();
        let stored = m.clone();
        tokio::task::spawn_blocking(move || store.put_topology(&stored))
            .await
            .map_err(|e| Error::internal(format!("manager task failed: {e}")))??;
        Ok(m)
    }

    pub fn get(&self) -> Result<Option<TopologyMatrix>> {
        self.store.topology()
    }

    /// Where the agent called `name` answers (any agent heard from since the start).
    pub fn agent_addr(&self, name: &str) -> Option<String> {
        self.agents()
            .iter()
            .find(|(_, (n, _))| n == name)
            .map(|(addr, _)| addr.clone())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "a test stops at its first error")]

    use super::*;

    fn open(timeout: Duration) -> (Topology, Registry, std::path::PathBuf) {
        let dir = std::env::temp_dir().join(format!(
            "tomus-topology-unit-{}-{:x}",
            std::process::id(),
            rand::random::<u64>()
        ));
        let store = Arc::new(Store::open(&dir).unwrap());
        let registry = Registry::open(store.clone(), timeout).unwrap();
        (Topology::new(store, None, timeout), registry, dir)
    }

    #[test]
    fn agents_are_nodes_until_they_fall_silent() {
        let (t, registry, dir) = open(Duration::from_millis(300));
        t.register("b".into(), "10.0.0.2:1".into()).unwrap();
        t.register("a".into(), "10.0.0.1:1".into()).unwrap();
        let names: Vec<String> = t.nodes(&registry).into_iter().map(|n| n.name).collect();
        assert_eq!(names, ["a", "b"]);
        assert!(t.register(String::new(), "x:1".into()).is_err());
        assert!(t
            .register("c".into(), "x".repeat(MAX_ADDR_LEN + 1))
            .is_err());
        std::thread::sleep(Duration::from_millis(400));
        t.register("a".into(), "10.0.0.1:1".into()).unwrap();
        let names: Vec<String> = t.nodes(&registry).into_iter().map(|n| n.name).collect();
        assert_eq!(names, ["a"], "b fell silent");
        let _ = std::fs::remove_dir_all(dir);
    }

    #[tokio::test]
    async fn a_measurement_needs_two_nodes_with_distinct_names() {
        let (t, _registry, dir) = open(Duration::from_secs(5));
        let req = MeasureTopology {
            rounds: 1,
            duration_ms: 10,
            parallel: 1,
            frame_bytes: 64 << 10,
        };
        let one = vec![Node {
            name: "a".into(),
            addr: "127.0.0.1:1".into(),
        }];
        assert!(t.measure(one, req.clone()).await.is_err());
        let twins = vec![
            Node {
                name: "a".into(),
                addr: "127.0.0.1:1".into(),
            },
            Node {
                name: "a".into(),
                addr: "127.0.0.1:2".into(),
            },
        ];
        let e = t.measure(twins, req).await.unwrap_err();
        assert!(e.message.contains("--name"), "{e}");
        assert!(t.get().unwrap().is_none(), "nothing stored");
        let _ = std::fs::remove_dir_all(dir);
    }
}
