//! Short-circuit reads and writes, the provider's side: clients on this host may read its
//! chunk files directly (one copy from the page cache into their buffer, checked against the
//! block checksums) instead of through its socket (a copy into the provider, one into the
//! socket and one out of it), and write new chunks as files it adopts (see
//! `chunk_store/adopt.rs`). Chunk files are immutable once in place, so reads need no
//! coordination: a file removed by garbage collection or quarantine after a client opened it
//! still reads whole, and one gone before is read through the provider as before.
//!
//! What this module does is publish where the chunk files are, with a token written in that
//! directory at each start: a client that finds the same token there shares this file
//! system (see [`tomus_wire::LocalChunks`]).

use std::path::Path;

use tomus_wire::chunk_file::{net_namespace, TOKEN_FILE};
use tomus_wire::{LocalChunks, Result};

use crate::io_error;

/// Writes a fresh token into the chunk directory `dir` and returns what the provider
/// answers to [`tomus_wire::provider::LocalChunkDir`].
pub fn publish(dir: &Path) -> Result<LocalChunks> {
    let dir = dir
        .canonicalize()
        .map_err(|e| io_error(format_args!("resolving {}", dir.display()), e))?;
    let token = format!("{:032x}", rand::random::<u128>());
    // Written under a temporary name and renamed: a client never reads half a token.
    let tmp = dir.join(format!("{TOKEN_FILE}.new"));
    std::fs::write(&tmp, &token)
        .and_then(|()| std::fs::rename(&tmp, dir.join(TOKEN_FILE)))
        .map_err(|e| io_error(format_args!("writing {}", tmp.display()), e))?;
    Ok(LocalChunks {
        dir: dir.to_string_lossy().into_owned(),
        token,
        net_ns: net_namespace(),
    })
}
