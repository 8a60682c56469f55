//! tomus backup: incremental, version-aware backup points of a cluster in object storage
//! (S3-compatible endpoints, Azure Blob, Google Cloud Storage, a local directory), their verification, and restore (a fresh
//! cluster from a point, or one file into a running cluster). The paper's background
//! checkpoint of ephemeral storage to persistent BLOBs (TomusBlobs, section 3).

/// Azure Blob and Google Cloud Storage stores from a URL and the environment.
pub mod cloud;
/// What a target holds and the names it holds it under.
pub mod format;
/// Taking one point, listing and pruning points.
pub mod point;
/// Registered files (workflows) in a point: their bytes read from a holder.
mod registered;
/// Restoring a point.
pub mod restore;
/// The background service in the manager process: schedule, requests, status.
pub mod service;
/// Object stores named by URL, throttled.
pub mod target;
/// Checking a point's objects against their checksums.
pub mod verify;

pub use point::{list_points, prune, read_point, take_point, Known, Progress};
pub use target::Target;

/// Upload throttling: the token bucket maintenance uses for repair.
pub(crate) use tomus_maintenance::throttle;
