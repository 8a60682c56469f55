//! What tomus's redb stores (the manager's, the maintenance ledger) need beyond redb's API.

/// redb's errors as tomus errors: a full disk, and a store that must be reopened.
mod failure;
/// Removing a range of rows without rewriting the tree once per row.
mod range;

pub use failure::{store_error, EXIT_REOPEN_STORE};
pub use range::{remove_range, remove_range_at_most};
