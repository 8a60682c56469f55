//! DataSteward (../shared/papers/datasteward-dedicated-nodes.txt): keeping storage on a few
//! dedicated nodes chosen by measuring the network.
//!
//! Measurement runs on every node (providers, and `tomus agent` on compute-only nodes) and is
//! driven by the manager; selection is pure and also runs offline on a matrix file.

/// The light agent process of compute-only nodes: answers probes, announces itself.
pub mod agent;
/// Heat-map PNG of a throughput matrix.
pub mod heatmap;
/// The throughput matrix: its JSON file format and each node's quality of service.
pub mod matrix;
/// The manager's side of a measurement: which pairs are probed when.
pub mod measure;
/// A bounded throughput probe from one node to another, and the agent requests' handler.
pub mod probe;
/// Choosing storage nodes: the paper's Algorithm 2 and the two baselines it is compared with.
pub mod select;

pub use matrix::Matrix;
pub use select::{select, Plan, SelectOptions, Strategy};
