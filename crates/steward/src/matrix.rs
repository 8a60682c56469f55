//! The throughput matrix between the nodes of a deployment, as `tomus topology show --json`
//! prints it and `tomus topology select --matrix FILE` reads it:
//!
//! ```json
//! {"nodes": ["a", "b"], "throughput": [[0, 110.5], [98.2, 0]], "stddev": [[0, 2.1], [3.4, 0]]}
//! ```
//!
//! Row = from, column = to, in MiB/s. `stddev` (MiB/s) and `latency_ms` (round trip, needed
//! only by the latency-clustering baseline) are optional; the diagonal is ignored. A measured
//! matrix carries a few more fields (`addrs`, `rounds`, `duration_ms`, `measured_ms`,
//! `failures`) that selection does not need.

use serde::{Deserialize, Serialize};
use tomus_wire::TopologyMatrix;

/// A throughput matrix (see the module docs for the format).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Matrix {
    pub nodes: Vec<String>,
    pub throughput: Vec<Vec<f64>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stddev: Option<Vec<Vec<f64>>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latency_ms: Option<Vec<Vec<f64>>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub addrs: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rounds: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration_ms: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub measured_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub failures: Vec<String>,
}

/// How well a node is connected, for the quality-of-service filter of storage candidates.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct NodeQos {
    /// Mean throughput between the node and every other node, both directions (MiB/s).
    pub throughput: f64,
    /// Mean coefficient of variation (stddev / mean) of those links; 0 without stddev. A
    /// link that carried nothing counts as 1.
    pub variability: f64,
}

impl Matrix {
    /// A matrix of throughputs only.
    pub fn new(nodes: Vec<String>, throughput: Vec<Vec<f64>>) -> Matrix {
        Matrix {
            nodes,
            throughput,
            stddev: None,
            latency_ms: None,
            addrs: None,
            rounds: None,
            duration_ms: None,
            measured_ms: None,
            failures: Vec::new(),
        }
    }

    /// The matrix the manager measured.
    pub fn from_measured(m: &TopologyMatrix) -> Matrix {
        Matrix {
            nodes: m.nodes.clone(),
            throughput: m.throughput.clone(),
            stddev: Some(m.stddev.clone()),
            latency_ms: Some(m.latency_ms.clone()),
            addrs: Some(m.addrs.clone()),
            rounds: Some(m.rounds),
            duration_ms: Some(m.duration_ms),
            measured_ms: Some(m.measured_ms),
            failures: m.failures.clone(),
        }
    }

    /// Reads and checks a matrix file.
    pub fn parse(json: &str) -> Result<Matrix, String> {
        let m: Matrix =
            serde_json::from_str(json).map_err(|e| format!("not a topology matrix: {e}"))?;
        m.check()?;
        Ok(m)
    }

    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// Square tables of the nodes' size, finite non-negative values, unique names.
    pub fn check(&self) -> Result<(), String> {
        let n = self.nodes.len();
        if n == 0 {
            return Err("the matrix has no nodes".into());
        }
        let mut names: Vec<&String> = self.nodes.iter().collect();
        names.sort();
        if let Some(w) = names.windows(2).find(|w| w[0] == w[1]) {
            return Err(format!("node {:?} appears twice", w[0]));
        }
        let tables = [
            ("throughput", Some(&self.throughput)),
            ("stddev", self.stddev.as_ref()),
            ("latency_ms", self.latency_ms.as_ref()),
        ];
        for (what, table) in tables {
            let Some(t) = table else { continue };
            if t.len() != n || t.iter().any(|row| row.len() != n) {
                return Err(format!(
                    "{what} must be {n}x{n}, one row and column per node"
                ));
            }
            if t.iter().flatten().any(|v| !v.is_finite() || *v < 0.0) {
                return Err(format!("{what} holds a negative or non-finite value"));
            }
        }
        Ok(())
    }

    /// Throughput from node `from` to node `to` (MiB/s).
    pub fn t(&self, from: usize, to: usize) -> f64 {
        self.throughput[from][to]
    }

    /// Each node's quality of service.
    pub fn qos(&self) -> Vec<NodeQos> {
        let n = self.len();
        (0..n)
            .map(|j| {
                let mut sum = 0.0;
                let mut cv = 0.0;
                let mut links = 0.0;
                for k in (0..n).filter(|&k| k != j) {
                    for (a, b) in [(j, k), (k, j)] {
                        let mean = self.throughput[a][b];
                        sum += mean;
                        cv += match &self.stddev {
                            None => 0.0,
                            Some(_) if mean <= 0.0 => 1.0,
                            Some(sd) => sd[a][b] / mean,
                        };
                        links += 1.0;
                    }
                }
                if links == 0.0 {
                    return NodeQos {
                        throughput: 0.0,
                        variability: 0.0,
                    };
                }
                NodeQos {
                    throughput: sum / links,
                    variability: cv / links,
                }
            })
            .collect()
    }
}
