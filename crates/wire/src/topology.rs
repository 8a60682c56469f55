//! Requests of a topology agent: every provider, and the light `tomus agent` of compute-only
//! nodes, answers them so the manager can measure the network between the nodes of a
//! deployment (DataSteward's Cloud Tracker). A probe is a bounded stream of `ProbeSink`
//! frames from one agent to another; the sender counts only bytes the receiver acknowledged.

use crate::rpc::service;
use crate::types::*;

service! {
    /// Every request a topology agent serves.
    pub enum AgentRequest in Envelope::Agent {
        /// Sends [`ProbeSink`] frames of `frame_bytes` to the agent at `target` for
        /// `duration_ms` (then waits for the last answer) and answers the throughput
        /// achieved, with the round-trip time of a few pings before it.
        Probe { target: String, duration_ms: u32, frame_bytes: u32 } -> ProbeSample;
        /// A probe frame: its body is read and dropped.
        ProbeSink {} -> ();
        /// Who this agent is: the name it reports for itself.
        AgentHello {} -> String;
    }
}
