//! Streaming between local files (or stdin/stdout) and blobs, with progress bars on a
//! terminal: nothing is held whole in memory.

use std::io::{IsTerminal, Read, Write};
use std::path::Path;
use std::time::Instant;

use anyhow::{Context, Result};
use indicatif::{ProgressBar, ProgressStyle};
use tomus_client::{Blob, BlobWriter};
use tomus_wire::{Error, VersionInfo};

use crate::size::format_size;

/// Reads are fetched in windows of this size, all at one version.
pub const READ_WINDOW: u64 = 64 << 20;
/// Input is read and handed to the writer in pieces of this size.
const INPUT_PIECE: usize = 8 << 20;

/// A byte-count progress bar on stderr (drawn only when stderr is a terminal).
pub fn bytes_bar(total: u64, label: &str) -> ProgressBar {
    let pb = ProgressBar::new(total);
    pb.set_style(
        ProgressStyle::with_template(
            "{prefix:>12} [{bar:30}] {bytes}/{total_bytes} {bytes_per_sec} {elapsed}",
        )
        .unwrap_or_else(|_| ProgressStyle::default_bar())
        .progress_chars("=> "),
    );
    pb.set_prefix(label.to_string());
    pb
}

/// A file's name as a bar's label: its last 32 characters.
fn short_label(name: &str) -> String {
    let n = name.chars().count();
    if n <= 32 {
        return name.to_string();
    }
    let tail: String = name.chars().skip(n - 31).collect();
    format!("…{tail}")
}

/// What a put or a get moved, for the summary line that ends it on a terminal.
pub struct Tally {
    started: Instant,
    files: u64,
    bytes: u64,
}

impl Default for Tally {
    fn default() -> Self {
        Tally {
            started: Instant::now(),
            files: 0,
            bytes: 0,
        }
    }
}

impl Tally {
    pub fn add(&mut self, bytes: u64) {
        self.files += 1;
        self.bytes += bytes;
    }

    /// `VERB WHAT: 12.0 MiB in 0.50 s (24.0 MiB/s)` on stderr, only when stderr is a
    /// terminal (WHAT is `name` for one file, `N files` for several).
    pub fn finish(&self, verb: &str, name: &str) {
        if !std::io::stderr().is_terminal() {
            return;
        }
        let secs = self.started.elapsed().as_secs_f64();
        let rate = if secs > 0.0 {
            format_size((self.bytes as f64 / secs) as u64)
        } else {
            "-".into()
        };
        let what = if self.files == 1 {
            name.to_string()
        } else {
            format!("{} files", self.files)
        };
        eprintln!(
            "{verb} {what}: {} in {secs:.2} s ({rate}/s)",
            format_size(self.bytes)
        );
    }
}

/// Opens `file` for reading (`None` or `-`: stdin) with its size when known.
pub fn open_input(file: Option<&Path>) -> Result<(Box<dyn Read>, Option<u64>)> {
    match file {
        Some(p) if p.as_os_str() != "-" => {
            let f =
                std::fs::File::open(p).with_context(|| format!("cannot read {}", p.display()))?;
            let meta = f
                .metadata()
                .with_context(|| format!("cannot read {}", p.display()))?;
            if meta.is_dir() {
                anyhow::bail!("cannot read {}: it is a directory", p.display());
            }
            let size = Some(meta.len());
            Ok((Box::new(f), size))
        }
        _ => Ok((Box::new(std::io::stdin()), None)),
    }
}

/// Streams `input` into `writer`, storing chunks as they fill.
pub async fn fill_writer(
    input: Box<dyn Read>,
    size_hint: Option<u64>,
    writer: &mut BlobWriter,
) -> Result<()> {
    fill_writer_as(input, size_hint, writer, "upload").await
}

/// [`fill_writer`] with a progress bar labelled `label` (the file's name).
pub async fn fill_writer_as(
    mut input: Box<dyn Read>,
    size_hint: Option<u64>,
    writer: &mut BlobWriter,
    label: &str,
) -> Result<()> {
    let pb = bytes_bar(size_hint.unwrap_or(0), &short_label(label));
    let mut piece = vec![0u8; INPUT_PIECE];
    loop {
        let n = fill(&mut input, &mut piece).context("cannot read the input")?;
        if n == 0 {
            break;
        }
        writer.write(&piece[..n]).await?;
        pb.inc(n as u64);
    }
    pb.finish_and_clear();
    Ok(())
}

/// Reads until `buf` is full or the input ends; returns the bytes read.
fn fill(input: &mut dyn Read, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match input.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

/// The range `[offset, offset + size)` of `version` (size `None`: to the end), checked.
pub async fn pinned_range(
    blob: &Blob,
    version: Option<u64>,
    offset: u64,
    size: Option<u64>,
) -> Result<(VersionInfo, u64)> {
    // Pin the version first so every window comes from the same snapshot.
    let info = blob.stat(version).await?;
    let size = match size {
        Some(s) => s,
        None => info.size.checked_sub(offset).ok_or_else(|| {
            Error::out_of_range(format!(
                "offset {offset} is past the end of version {} (size {})",
                info.version, info.size
            ))
        })?,
    };
    match offset.checked_add(size) {
        Some(end) if end <= info.size => Ok((info, size)),
        end => Err(Error::out_of_range(format!(
            "the range {offset}..{} ends past the end of version {} (size {})",
            end.map_or_else(|| "2^64".to_string(), |e| e.to_string()),
            info.version,
            info.size
        ))
        .into()),
    }
}

/// Copies a range of one version of `blob` to `out`, window by window.
pub async fn copy_range(
    blob: &Blob,
    version: Option<u64>,
    offset: u64,
    size: Option<u64>,
    out: &mut dyn Write,
) -> Result<VersionInfo> {
    copy_range_as(blob, version, offset, size, out, "download").await
}

/// [`copy_range`] with a progress bar labelled `label` (the file's name).
pub async fn copy_range_as(
    blob: &Blob,
    version: Option<u64>,
    offset: u64,
    size: Option<u64>,
    out: &mut dyn Write,
    label: &str,
) -> Result<VersionInfo> {
    let (info, size) = pinned_range(blob, version, offset, size).await?;
    let pb = bytes_bar(size, &short_label(label));
    let mut buf = vec![0u8; READ_WINDOW.min(size) as usize];
    let mut at = offset;
    let end = offset + size;
    while at < end {
        let n = READ_WINDOW.min(end - at) as usize;
        blob.read_into(at, &mut buf[..n], Some(info.version))
            .await?;
        out.write_all(&buf[..n])
            .context("cannot write the output")?;
        at += n as u64;
        pb.inc(n as u64);
    }
    out.flush().context("cannot write the output")?;
    pb.finish_and_clear();
    Ok(info)
}
