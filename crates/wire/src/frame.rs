//! Frames: `[u32 header length][u64 body length][bincode header][raw body]`.
//!
//! The body carries chunk bytes unencoded, read straight into a buffer of the exact size.

use bytes::{Bytes, BytesMut};
use serde::de::DeserializeOwned;
use serde::Serialize;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use crate::error::{Error, Result};

/// Upper bound of an encoded header (metadata batches); larger frames are refused.
pub const MAX_HEADER: u32 = 64 << 20;
/// Upper bound of a body: the largest chunk plus slack.
pub const MAX_BODY: u64 = 512 << 20;
/// Bodies up to this size are copied next to the header so a frame is one write.
const INLINE_BODY: usize = 64 << 10;

/// Encodes the length prefix and header of a frame whose body has `body_len` bytes.
fn encode_head<T: Serialize>(header: &T, body_len: u64, inline: &[u8]) -> Result<Vec<u8>> {
    let encoded =
        bincode::serialize(header).map_err(|e| Error::internal(format!("encode: {e}")))?;
    if encoded.len() as u64 > MAX_HEADER as u64 {
        return Err(Error::invalid(format!(
            "request header of {} bytes exceeds the {} byte limit",
            encoded.len(),
            MAX_HEADER
        )));
    }
    let mut buf = Vec::with_capacity(12 + encoded.len() + inline.len());
    buf.extend_from_slice(&(encoded.len() as u32).to_le_bytes());
    buf.extend_from_slice(&body_len.to_le_bytes());
    buf.extend_from_slice(&encoded);
    buf.extend_from_slice(inline);
    Ok(buf)
}

/// Writes the prefix and header of a frame; the caller sends the `body_len` body bytes.
pub async fn write_head<W, T>(w: &mut W, header: &T, body_len: u64) -> Result<()>
where
    W: AsyncWrite + Unpin,
    T: Serialize,
{
    w.write_all(&encode_head(header, body_len, &[])?).await?;
    Ok(())
}

pub async fn write_frame<W, T>(w: &mut W, header: &T, body: &[u8]) -> Result<()>
where
    W: AsyncWrite + Unpin,
    T: Serialize,
{
    let inline = if body.len() <= INLINE_BODY { body } else { &[] };
    let buf = encode_head(header, body.len() as u64, inline)?;
    if body.len() <= INLINE_BODY {
        w.write_all(&buf).await?;
    } else {
        w.write_all(&buf).await?;
        w.write_all(body).await?;
    }
    Ok(())
}

/// Where a frame's body goes.
pub enum BodySink<'a> {
    /// A new buffer of the body's size.
    Owned,
    /// The caller's buffer, when the body has exactly its length (chunk reads land in their
    /// final place without an intermediate copy); other bodies go to a new buffer.
    Into(&'a mut [u8]),
}

impl BodySink<'_> {
    /// The same sink for another attempt.
    pub fn reborrow(&mut self) -> BodySink<'_> {
        match self {
            BodySink::Owned => BodySink::Owned,
            BodySink::Into(out) => BodySink::Into(out),
        }
    }
}

/// What became of a frame's body.
pub enum Body {
    Owned(Bytes),
    /// Written into the caller's buffer.
    Placed,
}

/// Reads one frame. `Ok(None)` on a clean end of stream before a frame starts.
pub async fn read_frame<R, T>(r: &mut R) -> Result<Option<(T, Bytes)>>
where
    R: AsyncRead + Unpin,
    T: DeserializeOwned,
{
    Ok(read_frame_to(r, BodySink::Owned)
        .await?
        .map(|(h, body)| match body {
            Body::Owned(b) => (h, b),
            Body::Placed => (h, Bytes::new()),
        }))
}

/// Reads one frame, its body into `sink`.
pub async fn read_frame_to<R, T>(r: &mut R, sink: BodySink<'_>) -> Result<Option<(T, Body)>>
where
    R: AsyncRead + Unpin,
    T: DeserializeOwned,
{
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
            "frame too large (header {header_len} bytes, body {body_len} bytes)"
        )));
    }
    let mut header = vec![0u8; header_len as usize];
    r.read_exact(&mut header).await?;
    let body = match sink {
        BodySink::Into(out) if out.len() as u64 == body_len && body_len > 0 => {
            r.read_exact(out).await?;
            Body::Placed
        }
        _ => {
            let mut body = BytesMut::with_capacity(body_len as usize);
            let mut limited = r.take(body_len);
            while (body.len() as u64) < body_len {
                if limited.read_buf(&mut body).await? == 0 {
                    return Err(Error::protocol(
                        "connection closed in the middle of a frame",
                    ));
                }
            }
            Body::Owned(body.freeze())
        }
    };
    let header = bincode::deserialize(&header)
        .map_err(|e| Error::protocol(format!("malformed frame header: {e}")))?;
    Ok(Some((header, body)))
}
