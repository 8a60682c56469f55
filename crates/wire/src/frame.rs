//! Frames: `[u32 header length][u64 body length][header][raw body]`.
//!
//! The header is an encoded message ([`crate::rpc`]); the body carries chunk bytes
//! unencoded, read straight into a buffer of the exact size.

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use crate::error::{Error, Result};

/// Upper bound of an encoded header (metadata batches); larger frames are refused.
pub const MAX_HEADER: u32 = 64 << 20;
/// Upper bound of a body: the largest chunk.
pub const MAX_BODY: u64 = crate::types::MAX_CHUNK_SIZE;
/// A header's buffer starts this large and grows as its bytes arrive.
const HEADER_START: usize = 64 << 10;
/// Bodies up to this size are copied next to the header so a frame is one write.
const INLINE_BODY: usize = 64 << 10;

/// The length prefix and header of a frame whose body has `body_len` bytes, followed by
/// `inline` (a small body sent in the same write).
fn encode_head(header: &[u8], body_len: u64, inline: &[u8]) -> Result<Vec<u8>> {
    if header.len() as u64 > MAX_HEADER as u64 {
        return Err(Error::invalid(format!(
            "message header of {} bytes exceeds the {} byte limit",
            header.len(),
            MAX_HEADER
        )));
    }
    let mut buf = Vec::with_capacity(12 + header.len() + inline.len());
    buf.extend_from_slice(&(header.len() as u32).to_le_bytes());
    buf.extend_from_slice(&body_len.to_le_bytes());
    buf.extend_from_slice(header);
    buf.extend_from_slice(inline);
    Ok(buf)
}

/// Writes the prefix and header of a frame; the caller sends the `body_len` body bytes.
pub async fn write_head<W: AsyncWrite + Unpin>(
    w: &mut W,
    header: &[u8],
    body_len: u64,
) -> Result<()> {
    w.write_all(&encode_head(header, body_len, &[])?).await?;
    Ok(())
}

pub async fn write_frame<W: AsyncWrite + Unpin>(
    w: &mut W,
    header: &[u8],
    body: &[u8],
) -> Result<()> {
    let inline = if body.len() <= INLINE_BODY { body } else { &[] };
    let buf = encode_head(header, body.len() as u64, inline)?;
    w.write_all(&buf).await?;
    if body.len() > INLINE_BODY {
        w.write_all(body).await?;
    }
    Ok(())
}

/// Where a frame's body goes.
pub enum BodySink<'a> {
    /// A new buffer of the body's size.
    Owned,
    /// The caller's buffer, when the body has exactly its length (chunk reads land in their
    /// final place without an intermediate copy); other bodies go to a new buffer. The
    /// CRC32C of what lands there is computed as each piece arrives, while it is still in
    /// the cache (a pass over the whole buffer afterwards reads it back from memory).
    Into(&'a mut [u8], &'a mut u32),
}

impl BodySink<'_> {
    /// The same sink for another attempt.
    pub fn reborrow(&mut self) -> BodySink<'_> {
        match self {
            BodySink::Owned => BodySink::Owned,
            BodySink::Into(out, crc) => BodySink::Into(out, crc),
        }
    }
}

/// What became of a frame's body.
pub enum Body {
    Owned(Bytes),
    /// Written into the caller's buffer.
    Placed,
}

/// Reads one frame: its encoded header and its body. `Ok(None)` on a clean end of stream
/// before a frame starts.
pub async fn read_frame<R: AsyncRead + Unpin>(r: &mut R) -> Result<Option<(Vec<u8>, Bytes)>> {
    Ok(read_frame_to(r, BodySink::Owned)
        .await?
        .map(|(h, body)| match body {
            Body::Owned(b) => (h, b),
            Body::Placed => (h, Bytes::new()),
        }))
}

/// Reads one frame, its body into `sink`.
pub async fn read_frame_to<R: AsyncRead + Unpin>(
    r: &mut R,
    sink: BodySink<'_>,
) -> Result<Option<(Vec<u8>, Body)>> {
    let Some((header_len, body_len)) = read_prefix(r).await? else {
        return Ok(None);
    };
    let header = read_header(r, header_len).await?;
    let body = read_body(r, body_len, sink).await?;
    Ok(Some((header, body)))
}

/// Reads a frame's length prefix: its header and body lengths, checked against the limits
/// before anything is allocated. `Ok(None)` on a clean end of stream before a frame starts.
pub async fn read_prefix<R: AsyncRead + Unpin>(r: &mut R) -> Result<Option<(u32, u64)>> {
    let mut prefix = [0u8; 12];
    match r.read_exact(&mut prefix).await {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e.into()),
    }
    let header_len = u32::from_le_bytes([prefix[0], prefix[1], prefix[2], prefix[3]]);
    let mut body_len_bytes = [0u8; 8];
    body_len_bytes.copy_from_slice(&prefix[4..]);
    let body_len = u64::from_le_bytes(body_len_bytes);
    if header_len > MAX_HEADER || body_len > MAX_BODY {
        return Err(Error::protocol(format!(
            "frame too large (header {header_len} bytes, body {body_len} bytes; limits \
             {MAX_HEADER} and {MAX_BODY})"
        )));
    }
    Ok(Some((header_len, body_len)))
}

/// Reads a header of `len` bytes. Its buffer grows as the bytes arrive, so a peer that
/// declares a large header and sends little of it makes the reader allocate little.
pub async fn read_header<R: AsyncRead + Unpin>(r: &mut R, len: u32) -> Result<Vec<u8>> {
    let mut header = Vec::with_capacity((len as usize).min(HEADER_START));
    let read = r.take(len as u64).read_to_end(&mut header).await?;
    if read < len as usize {
        return Err(Error::protocol(
            "connection closed in the middle of a frame",
        ));
    }
    Ok(header)
}

/// Reads a body of `len` bytes into `sink`.
pub async fn read_body<R: AsyncRead + Unpin>(
    r: &mut R,
    len: u64,
    sink: BodySink<'_>,
) -> Result<Body> {
    match sink {
        BodySink::Into(out, crc) if out.len() as u64 == len && len > 0 => {
            *crc = 0;
            let mut filled = 0;
            while filled < out.len() {
                let n = r.read(&mut out[filled..]).await?;
                if n == 0 {
                    return Err(Error::protocol(
                        "connection closed in the middle of a frame",
                    ));
                }
                *crc = crc32c::crc32c_append(*crc, &out[filled..filled + n]);
                filled += n;
            }
            Ok(Body::Placed)
        }
        _ => {
            let mut body = BytesMut::with_capacity(len as usize);
            let mut limited = r.take(len);
            while (body.len() as u64) < len {
                if limited.read_buf(&mut body).await? == 0 {
                    return Err(Error::protocol(
                        "connection closed in the middle of a frame",
                    ));
                }
            }
            Ok(Body::Owned(body.freeze()))
        }
    }
}
