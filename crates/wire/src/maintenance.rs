//! Requests the maintenance service (repair, garbage collection) makes of the manager it
//! runs beside.

use tomus_metadata::{BlobId, ChunkId, ProviderId, Version};

use crate::rpc::service;
use crate::types::*;

service! {
    /// What the maintenance service asks of and reports to the manager.
    pub enum MaintenanceRequest in Envelope::Maintenance {
        /// Its current state, for `tomus status`.
        ReportMaintenance { status: Box<MaintenanceStatus> } -> ();
        /// The current replica sets of repaired chunks.
        RecordReplicas { entries: Vec<(ChunkId, Vec<ProviderId>)> } -> ();
        /// What the manager positively knows of each (blob, version), asked before anything
        /// of it is deleted.
        Fates { items: Vec<(BlobId, Version)> } -> Vec<Fate>;
        /// The change log after sequence number `after`, at most `limit` changes.
        Changes { after: u64, limit: u32 } -> ChangePage;
        /// The changes up to `upto` were applied durably: the log may drop them.
        TrimChanges { upto: u64 } -> ();
        /// Asks for cutoffs no later than these (now minus the graces); the manager holds
        /// them back for the writers in progress, records them durably and from then on
        /// refuses writers whose data is older. Answers the cutoffs granted.
        GrantCutoffs { proposed: Cutoffs } -> Cutoffs;
        /// The chunk copies providers reported lost since the last call.
        TakeLostChunks {} -> LostChunks;
    }
}
