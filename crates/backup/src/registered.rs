//! Registered files (workflows: kept in place on their holders' disks, with no blob) in a
//! point. Their bytes are read from a holder, checked against the file's CRC32C, and uploaded
//! in pieces stored like chunks: each piece's object is named by its content (its id is the
//! first 32 hex digits of its SHA-256), so a file backed up once is not uploaded again, and
//! verify and prune treat the pieces as they treat chunks. A restore brings such a file back
//! as an ordinary file: the restored cluster has none of the holders.

use std::collections::HashMap;

use bytes::Bytes;
use tomus_client::Client;
use tomus_wire::{Error, Holder, Result};

use crate::format::{self, Piece, RegisteredContent};
use crate::target::Target;

/// Bytes read from a holder and uploaded at a time.
const PIECE: u64 = 8 << 20;

/// What a point knows of a registered file: immutable, so its content once backed up is
/// found again by path, size and checksum (kept between points, like version records).
pub(crate) type KnownFiles = HashMap<(String, u64, u32), RegisteredContent>;

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
    let mut holders: Vec<Holder> = file
        .holders
        .iter()
        .filter(|h| !h.addr.is_empty())
        .cloned()
        .collect();
    holders.sort_by_key(|h| !h.alive);
    if holders.is_empty() {
        return Err(Error::unavailable(format!(
            "/{}: registered file with no holder left to read it from",
            file.path
        )));
    }
    // A copy that does not match the checksum: the next holder, from the start.
    let mut failures = Vec::new();
    for first in 0..holders.len() {
        let mut order = holders.clone();
        order.rotate_left(first);
        match upload_pieces(client, target, file.size, &order, index).await {
            Ok((pieces, got, names, uploaded)) if got == crc => {
                let content = RegisteredContent {
                    size: file.size,
                    crc32c: crc,
                    holders: holders.len() as u32,
                    pieces,
                };
                objects.extend(names);
                known.insert(key, content.clone());
                return Ok((content, uploaded));
            }
            Ok((_, got, _, _)) => failures.push(format!(
                "read from {} first: checksum {got:08x}, expected {crc:08x}",
                order[0].addr
            )),
            Err(e) => failures.push(format!("read from {} first: {e}", order[0].addr)),
        }
    }
    Err(Error::unavailable(format!(
        "/{}: no holder gave its bytes intact ({})",
        file.path,
        failures.join("; ")
    )))
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

/// Reads the file piece by piece (each piece from the first holder in `order` that answers)
/// and uploads the pieces `index` lacks; returns the pieces, the CRC32C of the bytes read,
/// the objects named and the bytes uploaded.
async fn upload_pieces(
    client: &Client,
    target: &Target,
    size: u64,
    order: &[Holder],
    index: &HashMap<String, (u64, String)>,
) -> Result<(Vec<Piece>, u32, Vec<(String, String)>, u64)> {
    let mut pieces = Vec::new();
    let mut names = Vec::new();
    let mut crc = 0u32;
    let mut uploaded = 0u64;
    let mut start = 0u64;
    while start < size {
        let len = PIECE.min(size - start);
        let mut data = vec![0u8; len as usize];
        read_from_any(client, order, start, &mut data).await?;
        crc = crc32c::crc32c_append(crc, &data);
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
        start += len;
    }
    Ok((pieces, crc, names, uploaded))
}

async fn read_from_any(
    client: &Client,
    order: &[Holder],
    offset: u64,
    out: &mut [u8],
) -> Result<()> {
    let mut last = None;
    for h in order {
        match client.read_registered(&h.addr, &h.name, offset, out).await {
            Ok(_) => return Ok(()),
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| Error::unavailable("no holder to read from")))
}
