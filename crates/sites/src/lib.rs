//! tomus sites: geo-replication of namespace subtrees to other tomus clusters ("sites").
//! The TomusBlobs/DataSteward "geographical replication" service: the backup engine's
//! incremental, version-aware pass with a tomus cluster as the target. Each source version
//! of a replicated file becomes one version on the site with the same bytes, in publication
//! order (appends stay appends), asynchronously, resumable across manager restarts, and a
//! site that is down is waited for, never skipped.
//!
//! Entry points for other services (DataSteward's data services): [`add_site`] and
//! [`replicate`] set up continuous replication that the manager's service carries out,
//! [`status`] reads how far behind each rule is, and [`replicate_once`] runs one catch-up
//! pass between two clients without the service.

/// Sites and replication rules: what `tomus sites add|replicate` store, and connecting.
pub mod config;
/// Files gone from the source, removed from the site (and the directories that empties).
mod deletions;
/// The site files a pass creates, given up unless published however the pass ends.
mod pending;
/// Registered files (workflows), copied to the site as ordinary files.
mod registered;
/// The engine: replaying a scan's versions on the site in order.
pub mod replay;
/// Scanning a subtree of the source for the versions the site lacks.
mod scan;
/// The background service in the manager process: one task per rule, status, metrics.
pub mod service;

pub use config::{add_site, remove_site, replicate, stop_replicating, Rule, Site, SitesConfig};
pub use replay::{replicate_once, Cursor, PassReport, REPLICA_OF};
pub use service::{caught_up_now, status, RuleStatus};

/// The reserved directory where the service keeps its configuration, cursors and status.
pub const STATE_DIR: &str = ".tomus-sites";
