//! Client connection pool and server accept loop.
//!
//! One request at a time per connection; concurrency comes from pooling several connections per
//! peer. Every socket has TCP_NODELAY (small requests must not wait for Nagle + delayed ACK).

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use tokio::io::BufReader;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::auth::{self, ClusterSecret};
use crate::error::{Error, ErrorKind, Result};
use crate::frame::{read_frame, read_frame_to, write_frame, write_head, Body, BodySink};
use crate::messages::{Request, Response};

/// Connections open to one peer at most (busy or idle): more would only queue at the peer,
/// and a burst beyond its listen backlog would fail handshakes instead of waiting.
const MAX_CONNS_PER_PEER: usize = 64;

#[derive(Clone, Debug)]
pub struct RpcConfig {
    pub connect_timeout: Duration,
    pub request_timeout: Duration,
    pub secret: Option<ClusterSecret>,
}

impl Default for RpcConfig {
    fn default() -> Self {
        RpcConfig {
            connect_timeout: Duration::from_secs(3),
            request_timeout: Duration::from_secs(30),
            secret: None,
        }
    }
}

/// Read buffer of a connection: a small frame (prefix, header and body) arrives with one
/// `recv`; larger bodies bypass it and land in their destination directly.
const READ_BUFFER: usize = 16 << 10;

/// An authenticated connection, buffered for reading (writes go straight to the socket).
type Conn = BufReader<TcpStream>;

/// The connections to one peer: idle ones, and permits for every open one.
struct Peer {
    idle: Vec<Conn>,
    slots: Arc<Semaphore>,
}

/// A pool of authenticated connections to any number of peers.
pub struct Pool {
    config: RpcConfig,
    peers: Mutex<HashMap<String, Peer>>,
}

impl Pool {
    pub fn new(config: RpcConfig) -> Arc<Self> {
        Arc::new(Pool {
            config,
            peers: Mutex::new(HashMap::new()),
        })
    }

    /// Waits for one of the peer's connection slots (held until the call ends).
    async fn slot(&self, addr: &str) -> Result<OwnedSemaphorePermit> {
        let slots = {
            let mut peers = self.peers.lock().unwrap_or_else(|p| p.into_inner());
            let peer = peers.entry(addr.to_string()).or_insert_with(|| Peer {
                idle: Vec::new(),
                slots: Arc::new(Semaphore::new(MAX_CONNS_PER_PEER)),
            });
            peer.slots.clone()
        };
        slots
            .acquire_owned()
            .await
            .map_err(|_| Error::internal("connection pool closed"))
    }

    pub fn config(&self) -> &RpcConfig {
        &self.config
    }

    /// Sends `req` (with `body`) to `addr` and returns the response and its body. Error
    /// responses come back as `Err` with the server's kind.
    pub async fn call(&self, addr: &str, req: &Request, body: &[u8]) -> Result<(Response, Bytes)> {
        self.call_timeout(addr, req, body, self.config.request_timeout)
            .await
    }

    pub async fn call_timeout(
        &self,
        addr: &str,
        req: &Request,
        body: &[u8],
        timeout: Duration,
    ) -> Result<(Response, Bytes)> {
        let (resp, body) = self
            .call_with(addr, req, body, timeout, BodySink::Owned)
            .await?;
        match body {
            Body::Owned(b) => Ok((resp, b)),
            Body::Placed => Ok((resp, Bytes::new())),
        }
    }

    /// Like [`Pool::call`], but a response body of exactly `out.len()` bytes is read straight
    /// into `out` (the returned body is `None` then) instead of a new buffer.
    pub async fn call_into(
        &self,
        addr: &str,
        req: &Request,
        out: &mut [u8],
    ) -> Result<(Response, Option<Bytes>)> {
        let timeout = self.config.request_timeout;
        let (resp, body) = self
            .call_with(addr, req, &[], timeout, BodySink::Into(out))
            .await?;
        match body {
            Body::Owned(b) => Ok((resp, Some(b))),
            Body::Placed => Ok((resp, None)),
        }
    }

    async fn call_with(
        &self,
        addr: &str,
        req: &Request,
        body: &[u8],
        timeout: Duration,
        mut sink: BodySink<'_>,
    ) -> Result<(Response, Body)> {
        let _slot = self.slot(addr).await?;
        let pooled = self.take_idle(addr);
        let reused = pooled.is_some();
        let stream = match pooled {
            Some(s) => s,
            None => self.connect(addr).await?,
        };
        let first = tokio::time::timeout(
            timeout,
            self.exchange(addr, stream, req, body, sink.reborrow()),
        )
        .await;
        match first {
            // A silent peer (cut off, frozen): another try would only wait as long again.
            Err(_) => Err(timed_out(addr, timeout)),
            // A pooled connection may have been closed by the peer while idle (restart, idle
            // timeout): retry once on a fresh one when repeating the request is harmless.
            Ok(Err(e)) if reused && e.kind == ErrorKind::Unavailable && is_idempotent(req) => {
                let stream = self.connect(addr).await?;
                tokio::time::timeout(timeout, self.exchange(addr, stream, req, body, sink))
                    .await
                    .unwrap_or_else(|_| Err(timed_out(addr, timeout)))
            }
            Ok(other) => other,
        }
    }

    async fn exchange(
        &self,
        addr: &str,
        mut stream: Conn,
        req: &Request,
        body: &[u8],
        sink: BodySink<'_>,
    ) -> Result<(Response, Body)> {
        let outcome = async {
            write_frame(&mut stream, req, body).await?;
            read_frame_to::<_, Response>(&mut stream, sink).await
        }
        .await;
        match outcome {
            Err(e) => Err(match e.kind {
                ErrorKind::Internal => Error::unavailable(format!("connection to {addr}: {e}")),
                _ => e,
            }),
            Ok(None) => Err(Error::unavailable(format!("{addr} closed the connection"))),
            Ok(Some((resp, resp_body))) => {
                self.put_idle(addr, stream);
                Ok((resp.into_result()?, resp_body))
            }
        }
    }

    async fn connect(&self, addr: &str) -> Result<Conn> {
        let attempt = async {
            let s = TcpStream::connect(addr).await?;
            s.set_nodelay(true)?;
            Ok::<_, std::io::Error>(s)
        };
        let mut stream = match tokio::time::timeout(self.config.connect_timeout, attempt).await {
            Err(_) => {
                return Err(Error::unavailable(format!(
                    "connecting to {addr} timed out after {:.1}s",
                    self.config.connect_timeout.as_secs_f64()
                )))
            }
            Ok(Err(e)) => return Err(Error::unavailable(format!("cannot reach {addr}: {e}"))),
            Ok(Ok(s)) => s,
        };
        let handshake = auth::connect(&mut stream, self.config.secret.as_ref());
        match tokio::time::timeout(self.config.connect_timeout, handshake).await {
            Err(_) => Err(Error::unavailable(format!(
                "handshake with {addr} timed out"
            ))),
            Ok(r) => r.map(|_| BufReader::with_capacity(READ_BUFFER, stream)),
        }
    }

    fn take_idle(&self, addr: &str) -> Option<Conn> {
        let mut peers = self.peers.lock().unwrap_or_else(|p| p.into_inner());
        peers.get_mut(addr).and_then(|p| p.idle.pop())
    }

    /// Keeps a connection for reuse; there are never more than the peer's slots.
    fn put_idle(&self, addr: &str, stream: Conn) {
        let mut peers = self.peers.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(peer) = peers.get_mut(addr) {
            peer.idle.push(stream);
        }
    }
}

/// The error of a request that got no answer in time.
fn timed_out(addr: &str, timeout: Duration) -> Error {
    Error::unavailable(format!(
        "{addr} did not answer within {:.1}s",
        timeout.as_secs_f64()
    ))
}

/// Requests that may be sent twice without changing the outcome.
fn is_idempotent(req: &Request) -> bool {
    !matches!(req, Request::CreateBlob { .. } | Request::Assign { .. })
}

/// A response body: bytes in memory, or a range of a file sent with `sendfile` (chunk data goes
/// from the page cache to the socket without a copy through user space).
pub enum Payload {
    Bytes(Bytes),
    File(FileRange),
}

impl Payload {
    pub fn empty() -> Self {
        Payload::Bytes(Bytes::new())
    }
}

pub struct FileRange {
    pub file: std::fs::File,
    pub offset: u64,
    pub len: u64,
}

/// A service answering requests. Implemented by the manager and the provider.
pub trait Handler: Send + Sync + 'static {
    fn handle(&self, req: Request, body: Bytes)
        -> impl Future<Output = (Response, Payload)> + Send;
}

/// Sends `range` on `stream` with sendfile(2), waiting for the socket to drain as needed.
async fn send_file(stream: &TcpStream, range: &FileRange) -> Result<()> {
    use std::os::fd::AsRawFd;
    let socket = stream.as_raw_fd();
    let file = range.file.as_raw_fd();
    let mut offset = libc::off_t::try_from(range.offset)
        .map_err(|_| Error::internal("file offset out of range"))?;
    let mut left = range.len;
    while left > 0 {
        stream.writable().await?;
        let step = left.min(1 << 30) as usize;
        let sent = stream.try_io(tokio::io::Interest::WRITABLE, || {
            // SAFETY: both descriptors are open for the duration of the call and `offset`
            // is a valid pointer to an off_t.
            let n = unsafe { libc::sendfile(socket, file, &mut offset, step) };
            if n < 0 {
                Err(std::io::Error::last_os_error())
            } else {
                Ok(n as u64)
            }
        });
        match sent {
            Ok(0) => {
                return Err(Error::internal(
                    "file ended before the promised range was sent",
                ))
            }
            Ok(n) => left -= n,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

async fn write_response(stream: &mut TcpStream, resp: &Response, payload: &Payload) -> Result<()> {
    match payload {
        Payload::Bytes(b) => write_frame(stream, resp, b).await,
        Payload::File(range) => {
            write_head(stream, resp, range.len).await?;
            send_file(stream, range).await
        }
    }
}

/// Counts requests in progress, reported as load in heartbeats.
#[derive(Default)]
pub struct LoadGauge(AtomicU32);

impl LoadGauge {
    pub fn current(&self) -> u32 {
        self.0.load(Ordering::Relaxed)
    }
}

/// Accepts connections until the listener fails; each connection gets its own task.
pub async fn serve<H: Handler>(
    listener: TcpListener,
    secret: Option<ClusterSecret>,
    handler: Arc<H>,
    load: Arc<LoadGauge>,
) {
    let secret = secret.map(Arc::new);
    loop {
        let (mut stream, peer) = match listener.accept().await {
            Ok(x) => x,
            Err(e) => {
                tracing::warn!("accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let handler = handler.clone();
        let secret = secret.clone();
        let load = load.clone();
        tokio::spawn(async move {
            if let Err(e) = stream.set_nodelay(true) {
                tracing::debug!("set_nodelay for {peer}: {e}");
            }
            let handshake = auth::accept(&mut stream, secret.as_deref());
            match tokio::time::timeout(Duration::from_secs(5), handshake).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => {
                    tracing::warn!("refused connection from {peer}: {e}");
                    return;
                }
                Err(_) => {
                    tracing::warn!("refused connection from {peer}: handshake timed out");
                    return;
                }
            }
            let mut stream = BufReader::with_capacity(READ_BUFFER, stream);
            loop {
                let frame = match read_frame::<_, Request>(&mut stream).await {
                    Ok(Some(f)) => f,
                    Ok(None) => return,
                    Err(e) => {
                        // Tell the peer why before dropping it (malformed frame, too large).
                        tracing::debug!("bad frame from {peer}: {e}");
                        let _ = write_frame(&mut stream, &Response::Err(e), &[]).await;
                        return;
                    }
                };
                load.0.fetch_add(1, Ordering::Relaxed);
                let (resp, payload) = handler.handle(frame.0, frame.1).await;
                load.0.fetch_sub(1, Ordering::Relaxed);
                if let Err(e) = write_response(stream.get_mut(), &resp, &payload).await {
                    tracing::debug!("write to {peer} failed: {e}");
                    return;
                }
            }
        });
    }
}
