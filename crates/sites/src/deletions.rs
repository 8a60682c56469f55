//! Files gone from the source, removed from the site.
//!
//! A file is deleted on the site only while the site's file at that path is still the copy
//! the rule wrote (the cursor's `dst_blob`): what a user of the site wrote there is left
//! alone. The directories such a deletion empties go too, up to the rule's root, unless the
//! source still has them: `rm -r` of a directory at the source leaves no empty directory on
//! the site.
//!
//! Deletions normally follow a pass's versions, so a renamed file is on the site under its
//! new name before its old name goes. A path that changed kind at the source is the
//! exception: a file where a directory was (`rm -r d; put d`), or a directory where a file
//! was. The site's old entry is in the way of the new one, and only the deletion can move
//! it, so such deletions go first ([`in_the_way`]). Before, the pass failed on "is a
//! directory" and was retried forever.

use std::collections::HashSet;
use std::sync::atomic::Ordering;

use tomus_client::Client;
use tomus_wire::{EntryKind, ErrorKind, Result};

use crate::replay::{Cursor, Progress};

/// Splits `gone` into the deletions that must go before the versions of the files at
/// `items` (a gone path above or below one of them) and the others.
pub(crate) fn in_the_way<'a>(
    gone: Vec<String>,
    items: impl IntoIterator<Item = &'a str>,
) -> (Vec<String>, Vec<String>) {
    let paths: HashSet<&str> = items.into_iter().collect();
    let parents: HashSet<&str> = paths.iter().flat_map(|p| ancestors(p)).collect();
    gone.into_iter()
        .partition(|g| parents.contains(g.as_str()) || ancestors(g).any(|a| paths.contains(a)))
}

/// The directories above `path`, nearest first (the root, `""`, excluded).
fn ancestors(path: &str) -> impl Iterator<Item = &str> {
    path.char_indices()
        .rev()
        .filter(|&(_, c)| c == '/')
        .map(move |(i, _)| &path[..i])
}

/// Deletes the site's copy of `path`, gone from the source, if the site's file there is
/// still the one the rule wrote, then the directories that leaves empty below `root`; drops
/// `path` from the cursor.
pub(crate) async fn delete_on_site(
    source: &Client,
    target: &Client,
    root: &str,
    path: &str,
    cursor: &mut Cursor,
    progress: &Progress,
) -> Result<()> {
    let Some(c) = cursor.files.get(path) else {
        return Ok(());
    };
    let ns = target.namespace();
    let gone = match ns.stat(path).await {
        Ok(e) if e.blob.as_ref().is_some_and(|b| b.id == c.dst_blob) => {
            match ns.delete(path, false).await {
                Ok(()) => {
                    tracing::info!("sites: /{path} is gone from the source: deleted on the site");
                    progress.files_deleted.fetch_add(1, Ordering::Relaxed);
                    true
                }
                Err(e) if e.kind == ErrorKind::NotFound => true,
                Err(e) => return Err(e),
            }
        }
        // Another file now (a user of the site wrote it): left, with its directories.
        Ok(_) => false,
        // Deleted by an earlier pass that failed before the cursor was saved.
        Err(e) if e.kind == ErrorKind::NotFound => true,
        Err(e) => return Err(e),
    };
    if gone {
        remove_emptied_dirs(source, target, root, path).await?;
    }
    cursor.files.remove(path);
    Ok(())
}

/// Removes the site's directories above the deleted `path`, nearest first, while they are
/// empty, below `root`, and no longer directories at the source.
async fn remove_emptied_dirs(
    source: &Client,
    target: &Client,
    root: &str,
    path: &str,
) -> Result<()> {
    let (src, site) = (source.namespace(), target.namespace());
    for dir in ancestors(path) {
        if dir.len() <= root.len() {
            break;
        }
        match src.stat(dir).await {
            Ok(e) if e.kind == EntryKind::Dir => break,
            Ok(_) => {}
            Err(e) if e.kind == ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        match site.stat(dir).await {
            Ok(e) if e.kind == EntryKind::Dir => {}
            Ok(_) => break,
            Err(e) if e.kind == ErrorKind::NotFound => continue,
            Err(e) => return Err(e),
        }
        match site.delete(dir, false).await {
            Ok(()) => tracing::info!("sites: /{dir} is gone from the source: removed on the site"),
            Err(e) if e.kind == ErrorKind::NotFound => {}
            Err(e) if e.kind == ErrorKind::NotEmpty => break,
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ancestors_come_nearest_first() {
        assert_eq!(ancestors("a/b/c").collect::<Vec<_>>(), ["a/b", "a"]);
        assert_eq!(ancestors("a").count(), 0);
    }

    #[test]
    fn only_deletions_above_or_below_a_written_path_go_first() {
        let gone = ["d/b/x", "d/f", "d/g", "d/bb"].map(String::from).to_vec();
        // d/b is now a file (d/b/x went with its directory), d/f a directory.
        let (first, later) = in_the_way(gone, ["d/b", "d/f/y", "d/z"]);
        assert_eq!(first, ["d/b/x", "d/f"]);
        assert_eq!(later, ["d/g", "d/bb"]);
    }
}
