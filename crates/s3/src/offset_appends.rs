//! S3 Express One Zone appends (`x-amz-write-offset-bytes`) that lose are refused before their
//! body moves.
//!
//! An append at offset `o` succeeds only if the object's size is `o` when it commits. When that
//! was checked only at the commit, an appender that had lost the race had already uploaded its
//! body and the gateway had stored it on the providers, for nothing: with 8 appenders on one
//! object, most of the work went into appends that were then refused. So before reading a byte
//! of the body the gateway refuses:
//! - an offset that is not the object's current size (the caller's view is stale);
//! - an offset append to an object that already has one in flight through this gateway. Both
//!   passed the first check, so both are at the same offset, and at most one of them can
//!   commit. If the one in flight fails after all, the refused one would have succeeded; its
//!   client sees a conflict and retries, as after any lost race.
//!
//! The commit still checks the size (`expect_size`), which covers writers through other
//! gateways or the native client.

use std::collections::HashSet;
use std::sync::Mutex;

/// The objects (file paths) with an offset append in flight through this gateway.
#[derive(Default)]
pub(crate) struct InFlight {
    paths: Mutex<HashSet<String>>,
}

/// An offset append's claim on its object, released when dropped (committed, failed or
/// cancelled by a client that went away).
pub(crate) struct Claim<'a> {
    set: &'a InFlight,
    path: String,
}

impl InFlight {
    /// Claims `path` for one offset append; `None` if another one holds it.
    pub(crate) fn claim(&self, path: &str) -> Option<Claim<'_>> {
        let mut paths = self.paths.lock().unwrap_or_else(|p| p.into_inner());
        paths.insert(path.to_string()).then(|| Claim {
            set: self,
            path: path.to_string(),
        })
    }
}

impl Drop for Claim<'_> {
    fn drop(&mut self) {
        let mut paths = self.set.paths.lock().unwrap_or_else(|p| p.into_inner());
        paths.remove(&self.path);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_claim_per_path_until_dropped() {
        let set = InFlight::default();
        let a = set.claim("b/log");
        assert!(a.is_some());
        assert!(set.claim("b/log").is_none());
        assert!(
            set.claim("b/other").is_some(),
            "other objects are not held up"
        );
        drop(a);
        assert!(set.claim("b/log").is_some(), "released on drop");
    }
}
