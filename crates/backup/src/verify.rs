//! Verifying a backup point at its target: every object it names is there and intact.
//!
//! A chunk object's name carries its length and SHA-256 (see [`crate::format`]), so each
//! object is downloaded once and checked against its own name: no second copy, no cluster
//! needed. Version records must be there and readable, and tile their version.

use std::collections::BTreeSet;

use serde::Serialize;
use tomus_wire::{ErrorKind, Result};

use crate::format::{self, Piece};
use crate::point::{read_point, version_record};
use crate::target::Target;

/// What `verify` found.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Report {
    pub point: String,
    pub chunks: u64,
    pub versions: u64,
    pub bytes: u64,
    /// Object names the point refers to that the target lacks.
    pub missing: Vec<String>,
    /// Objects whose content does not match their checksum or length (name: why).
    pub corrupt: Vec<String>,
}

impl Report {
    pub fn ok(&self) -> bool {
        self.missing.is_empty() && self.corrupt.is_empty()
    }
}

/// Checks point `id` at `target`.
pub async fn verify(target: &Target, id: &str) -> Result<Report> {
    let point = read_point(target, id).await?;
    let mut report = Report {
        point: id.to_string(),
        ..Default::default()
    };
    let mut used = BTreeSet::new();
    for b in &point.blobs {
        for v in &b.versions {
            let key = format::version_key(b.info.id, *v);
            report.versions += 1;
            match version_record(target, b.info.id, *v).await {
                Ok(rec) => {
                    let mut at = 0;
                    for p in &rec.pieces {
                        if p.start() != at {
                            report.corrupt.push(format!("{key}: pieces do not tile"));
                            break;
                        }
                        at += p.len();
                        if let Piece::Data { chunk, .. } = p {
                            used.insert(chunk.clone());
                        }
                    }
                    if at != rec.info.size && !rec.pieces.is_empty() {
                        report.corrupt.push(format!("{key}: pieces end at {at}"));
                    }
                }
                Err(e) if e.kind == ErrorKind::NotFound => report.missing.push(key),
                Err(e) if e.kind == ErrorKind::Corrupt => report.corrupt.push(e.message),
                Err(e) => return Err(e),
            }
        }
    }
    for chunk in used {
        let Some(name) = point.chunks.get(&chunk) else {
            report.missing.push(format!("{}/{chunk}.*", format::CHUNKS));
            continue;
        };
        report.chunks += 1;
        let Some((_, len, sha)) = format::parse_chunk_key(name) else {
            report
                .corrupt
                .push(format!("{name}: not a chunk object name"));
            continue;
        };
        match target.get(name).await {
            Ok(data) => {
                report.bytes += data.len() as u64;
                if data.len() as u64 != len {
                    report
                        .corrupt
                        .push(format!("{name}: {} bytes, its name says {len}", data.len()));
                } else if format::sha256_hex(&data) != sha {
                    report
                        .corrupt
                        .push(format!("{name}: content does not match its SHA-256"));
                }
            }
            Err(e) if e.kind == ErrorKind::NotFound => report.missing.push(name.clone()),
            Err(e) => return Err(e),
        }
    }
    Ok(report)
}
