//! The client side: a pool of authenticated connections to any number of peers, and typed
//! calls over them.
//!
//! One request at a time per connection; concurrency comes from pooling several connections per
//! peer. Every socket has TCP_NODELAY (small requests must not wait for Nagle + delayed ACK).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use tokio::io::BufReader;
use tokio::net::TcpStream;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::auth::{self, ClusterSecret};
use crate::error::{Error, ErrorKind, Result};
use crate::frame::{read_frame_to, write_frame, Body, BodySink};
use crate::rpc::{decode, encode, Envelope, Rpc};
use crate::server::READ_BUFFER;

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

/// An authenticated connection, buffered for reading (writes go straight to the socket).
type Conn = BufReader<TcpStream>;

/// A pooled connection idle longer than this is not reused: servers close idle connections
/// (after two minutes by default), and a request sent on a closed one fails.
const IDLE_REUSE: Duration = Duration::from_secs(30);

/// The connections to one peer: idle ones (with when they went idle), and permits for every
/// open one.
struct Peer {
    idle: Vec<(Conn, Instant)>,
    slots: Arc<Semaphore>,
}

/// Where [`Pool::call_into`] put an answer's body.
pub enum Placed {
    /// In the caller's buffer, which it filled; `crc` is the CRC32C of what arrived.
    Filled { crc: u32 },
    /// In a buffer of its own: its length was not the caller's (a protocol error for a
    /// caller that knows the length).
    Elsewhere(Bytes),
}

/// A pool of authenticated connections to any number of peers.
pub struct Pool {
    config: RpcConfig,
    peers: Mutex<HashMap<String, Peer>>,
}

/// An encoded request, ready to be sent (and sent again).
struct Encoded {
    header: Vec<u8>,
    idempotent: bool,
}

fn encoded<R: Rpc>(req: R) -> Result<Encoded> {
    let envelope = match crate::trace::current() {
        Some(id) => Envelope::Traced(id, Box::new(req.into_envelope())),
        None => req.into_envelope(),
    };
    Ok(Encoded {
        header: encode(&envelope)?,
        idempotent: R::IDEMPOTENT,
    })
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

    /// Sends `req` to `addr` and returns its answer. Error answers come back as `Err` with
    /// the server's kind.
    pub async fn call<R: Rpc>(&self, addr: &str, req: R) -> Result<R::Response> {
        Ok(self.call_with_body(addr, req, &[]).await?.0)
    }

    /// [`Pool::call`] with a body after the request (chunk data), returning the answer's
    /// body too.
    pub async fn call_with_body<R: Rpc>(
        &self,
        addr: &str,
        req: R,
        body: &[u8],
    ) -> Result<(R::Response, Bytes)> {
        self.call_timeout(addr, req, body, self.config.request_timeout)
            .await
    }

    pub async fn call_timeout<R: Rpc>(
        &self,
        addr: &str,
        req: R,
        body: &[u8],
        timeout: Duration,
    ) -> Result<(R::Response, Bytes)> {
        let req = encoded(req)?;
        let (header, body) = self
            .call_with(addr, &req, body, timeout, BodySink::Owned)
            .await?;
        let body = match body {
            Body::Owned(b) => b,
            Body::Placed => Bytes::new(),
        };
        Ok((answer::<R>(&header)?, body))
    }

    /// Like [`Pool::call`], but an answer body of exactly `out.len()` bytes is read straight
    /// into `out`, with its CRC32C computed as it arrives, instead of a new buffer.
    pub async fn call_into<R: Rpc>(
        &self,
        addr: &str,
        req: R,
        out: &mut [u8],
    ) -> Result<(R::Response, Placed)> {
        let req = encoded(req)?;
        let timeout = self.config.request_timeout;
        let mut crc = 0;
        let (header, body) = self
            .call_with(addr, &req, &[], timeout, BodySink::Into(out, &mut crc))
            .await?;
        let placed = match body {
            Body::Owned(b) => Placed::Elsewhere(b),
            Body::Placed => Placed::Filled { crc },
        };
        Ok((answer::<R>(&header)?, placed))
    }

    async fn call_with(
        &self,
        addr: &str,
        req: &Encoded,
        body: &[u8],
        timeout: Duration,
        mut sink: BodySink<'_>,
    ) -> Result<(Vec<u8>, Body)> {
        let _slot = self.slot(addr).await?;
        let pooled = self.take_idle(addr);
        let reused = pooled.is_some();
        let stream = match pooled {
            Some(s) => s,
            None => self.connect(addr).await?,
        };
        let first = tokio::time::timeout(
            timeout,
            self.exchange(addr, stream, &req.header, body, sink.reborrow()),
        )
        .await;
        match first {
            // A silent peer (cut off, frozen): another try would only wait as long again.
            Err(_) => Err(timed_out(addr, timeout)),
            // A pooled connection may have been closed by the peer while idle (restart, idle
            // timeout): retry once on a fresh one when repeating the request is harmless.
            Ok(Err(e)) if reused && e.kind == ErrorKind::Unavailable && req.idempotent => {
                let stream = self.connect(addr).await?;
                tokio::time::timeout(
                    timeout,
                    self.exchange(addr, stream, &req.header, body, sink),
                )
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
        header: &[u8],
        body: &[u8],
        sink: BodySink<'_>,
    ) -> Result<(Vec<u8>, Body)> {
        let outcome = async {
            write_frame(&mut stream, header, body).await?;
            read_frame_to(&mut stream, sink).await
        }
        .await;
        match outcome {
            Err(e) => Err(match e.kind {
                ErrorKind::Internal => Error::unavailable(format!("connection to {addr}: {e}")),
                _ => e,
            }),
            Ok(None) => Err(Error::unavailable(format!("{addr} closed the connection"))),
            Ok(Some(frame)) => {
                self.put_idle(addr, stream);
                Ok(frame)
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
                "handshake with {addr} timed out (is it a tomus server?)"
            ))),
            Ok(r) => r.map(|_| BufReader::with_capacity(READ_BUFFER, stream)),
        }
    }

    /// The most recently used idle connection to `addr` that is still open; older and
    /// closed ones are dropped.
    fn take_idle(&self, addr: &str) -> Option<Conn> {
        let mut peers = self.peers.lock().unwrap_or_else(|p| p.into_inner());
        let peer = peers.get_mut(addr)?;
        peer.idle.retain(|(_, since)| since.elapsed() < IDLE_REUSE);
        while let Some((conn, _)) = peer.idle.pop() {
            if still_open(&conn) {
                return Some(conn);
            }
        }
        None
    }

    /// Keeps a connection for reuse; there are never more than the peer's slots.
    fn put_idle(&self, addr: &str, stream: Conn) {
        let mut peers = self.peers.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(peer) = peers.get_mut(addr) {
            peer.idle.push((stream, Instant::now()));
        }
    }
}

/// Whether an idle connection can carry a request: nothing has arrived on it since its last
/// answer (an end of stream says the server closed it; stray bytes say it is out of step).
fn still_open(conn: &Conn) -> bool {
    if !conn.buffer().is_empty() {
        return false;
    }
    let mut probe = [0u8; 1];
    matches!(
        conn.get_ref().try_read(&mut probe),
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock
    )
}

/// The answer in an answer frame's header: the server's error as `Err`.
fn answer<R: Rpc>(header: &[u8]) -> Result<R::Response> {
    decode::<Result<R::Response>>(header)?
}

/// The error of a request that got no answer in time.
fn timed_out(addr: &str, timeout: Duration) -> Error {
    Error::unavailable(format!(
        "{addr} did not answer within {:.1}s",
        timeout.as_secs_f64()
    ))
}
