//! Registered files (workflows: kept in place on their holders' disks, with no blob) in a
//! point. Their bytes are read from a holder, checked against the file's CRC32C, and uploaded
//! in pieces stored like chunks: each piece's object is named by its content (its id is the
//! first 32 hex digits of its SHA-256), so a file backed up once is not uploaded again, and
//! verify and prune treat the pieces as they treat chunks. A restore brings such a file back
//! as an ordinary file: the restored cluster has none of the holders.

use std::collections::{HashMap, HashSet};

use bytes::Bytes;
use tomus_client::registered::RegisteredPieces;
use tomus_client::Client;
use tomus_wire::{Error, Result};

use crate::format::{self, PathEntry, Piece, PointManifest, RegisteredContent};
use crate::target::Target;

/// What a point knows of a registered file: immutable, so its content once backed up is
/// found again by path, size and checksum (kept between points, like version records).
pub(crate) type KnownFiles = HashMap<(String, u64, u32), RegisteredContent>;

/// Adds the registered files `point` holds to `known`.
pub(crate) fn remember(known: &mut KnownFiles, point: &PointManifest) {
    for e in &point.namespace {
        if let Some(content) = &e.registered {
            let key = (e.path.clone(), content.size, content.crc32c);
            known.insert(key, content.clone());
        }
    }
}

/// Keeps in `known` only the registered files of `namespace` (a point's).
pub(crate) fn forget_all_but(known: &mut KnownFiles, namespace: &[PathEntry]) {
    let held: HashSet<(&str, u64, u32)> = namespace
        .iter()
        .filter_map(|e| {
            let c = e.registered.as_ref()?;
            Some((e.path.as_str(), c.size, c.crc32c))
        })
        .collect();
    known.retain(|(path, size, crc), _| held.contains(&(path.as_str(), *size, *crc)));
}

/// The content of the registered file `path`, its pieces uploaded unless `index` (chunk id
/// to its longest object: length, name) has them; adds the objects it names to `objects`
/// and returns the bytes uploaded.
pub(crate) async fn back_up(
    client: &Client,
    target: &Target,
    path: &str,
    index: &HashMap<String, (u64, String)>,
    known: &mut KnownFiles,
    objects: &mut Vec<(String, String)>,
) -> Result<(RegisteredContent, u64)> {
    // Its first holder computes the checksum after registration: waited for (bounded).
    let file = client.registered_checked(path).await?;
    let crc = file.checksum.unwrap_or_default();
    let key = (file.path.clone(), file.size, crc);
    if let Some(content) = known.get(&key) {
        if let Some(names) = names_in(index, &content.pieces) {
            objects.extend(names);
            return Ok((content.clone(), 0));
        }
    }
    // A copy that does not match the checksum: again, from the next holder on.
    let mut failures = Vec::new();
    let mut first = 0;
    loop {
        let mut reader = RegisteredPieces::new(client, &file, first)?;
        // The target failing fails the point (retried); only the holders' failures are
        // this file's.
        match upload_pieces(target, &mut reader, index).await? {
            Ok((pieces, names, uploaded)) if reader.crc() == crc => {
                let content = RegisteredContent {
                    size: file.size,
                    crc32c: crc,
                    holders: file.holders.len() as u32,
                    pieces,
                };
                objects.extend(names);
                known.insert(key, content.clone());
                return Ok((content, uploaded));
            }
            Ok(_) => failures.push(format!("checksum {:08x}, expected {crc:08x}", reader.crc())),
            Err(e) => failures.push(e.to_string()),
        }
        first += 1;
        if first >= reader.holders() {
            return Err(Error::unavailable(format!(
                "/{}: no holder gave its bytes intact ({})",
                file.path,
                failures.join("; ")
            )));
        }
    }
}

/// The object names of `pieces`, if `index` has all of them.
fn names_in(
    index: &HashMap<String, (u64, String)>,
    pieces: &[Piece],
) -> Option<Vec<(String, String)>> {
    pieces
        .iter()
        .filter_map(|p| match p {
            Piece::Data { chunk, len, .. } => Some((chunk, *len)),
            Piece::Zeros { .. } => None,
        })
        .map(|(chunk, len)| match index.get(chunk) {
            Some((have, name)) if *have >= len => Some((chunk.clone(), name.clone())),
            _ => None,
        })
        .collect()
}

/// The pieces of a registered file, the objects they name and the bytes uploaded.
type Uploaded = (Vec<Piece>, Vec<(String, String)>, u64);

/// Uploads the pieces `reader` reads that `index` lacks. The outer error is the target's;
/// the inner one says no holder could serve a piece.
async fn upload_pieces(
    target: &Target,
    reader: &mut RegisteredPieces,
    index: &HashMap<String, (u64, String)>,
) -> Result<Result<Uploaded>> {
    let mut pieces = Vec::new();
    let mut names = Vec::new();
    let mut uploaded = 0u64;
    loop {
        let (start, data) = match reader.next().await {
            Ok(Some(piece)) => piece,
            Ok(None) => break,
            Err(e) => return Ok(Err(e)),
        };
        let len = data.len() as u64;
        let sha = format::sha256_hex(&data);
        let id = sha[..32].to_string();
        let name = match index.get(&id) {
            Some((have, name)) if *have >= len => name.clone(),
            _ => {
                let name = format::chunk_key(&id, len, &sha);
                target.put(&name, Bytes::from(data)).await?;
                uploaded += len;
                name
            }
        };
        names.push((id.clone(), name));
        pieces.push(Piece::Data {
            start,
            len,
            chunk: id,
            chunk_offset: 0,
        });
    }
    Ok(Ok((pieces, names, uploaded)))
}
