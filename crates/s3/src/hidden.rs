//! Deleted versions. Versions are immutable and tomus has no garbage collection yet, so
//! DELETE of a version that is not the latest *hides* it: the version ids are appended to a
//! small log file per blob (`.tomus-deleted-versions/<blob id>`, one decimal id per line),
//! and GET/HEAD/CopyObject with that `versionId` answer `NoSuchVersion` while
//! ListObjectVersions skips it. The bytes stay on the providers until garbage collection.
//!
//! The log only grows (a version is never un-deleted), and concurrent appends never overlap,
//! so two gateways hiding versions of one object at once both land without any locking. It is
//! keyed by blob id, not by key, so a key deleted and written again (a new blob) starts clean;
//! the log goes with the key when the gateway removes the key.

use std::collections::BTreeSet;

use tomus_client::{Append, Blob, CommitOptions};
use tomus_metadata::{BlobId, Version};
use tomus_wire::{Attrs, ErrorKind, VersionInfo, VersionsFrom, MAX_ATTRS_LISTING};

use crate::errors::object_err;
use crate::paths;
use crate::service::Gateway;
use crate::writes::OBJECTS_KEEP;
use s3s::S3Result;

/// Parses a log: one version id a line; anything else (never written) is ignored.
pub(crate) fn parse_log(bytes: &[u8]) -> BTreeSet<Version> {
    String::from_utf8_lossy(bytes)
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect()
}

impl Gateway {
    /// The deleted versions of blob `blob` (empty when none was ever deleted).
    pub(crate) async fn hidden_versions(&self, blob: BlobId) -> S3Result<BTreeSet<Version>> {
        let (obj, log) = match self.ns.object(&paths::hidden_log(blob), None).await {
            Ok(x) => x,
            Err(e) if e.kind == ErrorKind::NotFound => return Ok(BTreeSet::new()),
            Err(e) => return Err(object_err(e)),
        };
        if obj.version.size == 0 {
            return Ok(BTreeSet::new());
        }
        let mut buf = vec![0u8; obj.version.size as usize];
        log.read_version_into(&obj.version, 0, &mut buf)
            .await
            .map_err(object_err)?;
        Ok(parse_log(&buf))
    }

    /// Records version `v` of blob `blob` as deleted (durably: the response waits for it).
    pub(crate) async fn hide_version(&self, blob: BlobId, v: Version) -> S3Result<()> {
        let (entry, log) = self
            .ns
            .create_retained(&paths::hidden_log(blob), self.files, OBJECTS_KEEP)
            .await
            .map_err(object_err)?;
        let mut writer = log.writer();
        let appended = match writer.write(format!("{v}\n").as_bytes()).await {
            Ok(()) => writer.commit(Append, &CommitOptions::default()).await,
            Err(e) => Err(e),
        };
        if let Err(e) = appended {
            // A new log appears only with its first line.
            self.ns.abandon(&entry).await;
            return Err(object_err(e));
        }
        Ok(())
    }

    /// Up to `count` versions of `blob` not in `hidden`, newest first, numbered below
    /// `before`, read a page at a time as far as needed. None when the blob is gone (its key
    /// was removed meanwhile).
    pub(crate) async fn visible_newest(
        &self,
        blob: &Blob,
        hidden: &BTreeSet<Version>,
        before: Version,
        count: usize,
    ) -> S3Result<Vec<(VersionInfo, Attrs)>> {
        let mut out = Vec::new();
        let mut cursor = before;
        while out.len() < count {
            // Hidden versions are skipped, so a page may need another request.
            let limit = (count - out.len()).min(MAX_ATTRS_LISTING as usize) as u32;
            let page = match blob
                .versions_attrs_page(VersionsFrom::Before(cursor), limit)
                .await
            {
                Ok(p) => p,
                Err(e) if e.kind == ErrorKind::NotFound => return Ok(Vec::new()),
                Err(e) => return Err(object_err(e)),
            };
            let last_page = page.len() < limit as usize;
            if let Some((v, _)) = page.last() {
                cursor = v.version;
            }
            out.extend(
                page.into_iter()
                    .filter(|(v, _)| !hidden.contains(&v.version)),
            );
            if last_page {
                break;
            }
        }
        out.truncate(count);
        Ok(out)
    }

    /// Drops the log of a blob whose file is gone (best effort: a stale log names versions
    /// of a blob nothing reaches any more).
    pub(crate) async fn forget_hidden(&self, blob: BlobId) {
        let _ = self.ns.delete(&paths::hidden_log(blob), false).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn logs_parse_to_version_sets() {
        let set = parse_log(b"3\n1\n3\n");
        assert_eq!(set.into_iter().collect::<Vec<_>>(), vec![1, 3]);
        assert!(parse_log(b"").is_empty());
    }
}
