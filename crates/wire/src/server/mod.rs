//! The server side: the accept loop, one task per connection answering one request at a
//! time, and responses whose body may be a file range sent with sendfile.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::auth::{self, ClusterSecret};
use crate::error::{Error, Result};
use crate::frame::{read_prefix, write_frame, write_head};
use crate::rpc::{decode, Envelope, Ping, Reply, Rpc};
pub use limits::{descriptor_limit, ServerLimits};
use limits::{Connections, WarnEvery};

/// Caps on connections, time and memory, and the table of connections that enforces them.
mod limits;

/// Read buffer of a connection: a small frame (prefix, header and body) arrives with one
/// `recv`; larger bodies bypass it and land in their destination directly.
pub(crate) const READ_BUFFER: usize = 16 << 10;

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

    pub fn len(&self) -> u64 {
        match self {
            Payload::Bytes(b) => b.len() as u64,
            Payload::File(f) => f.len,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

pub struct FileRange {
    pub file: std::fs::File,
    pub offset: u64,
    pub len: u64,
}

/// A service answering requests. Implemented by the manager and the provider; each
/// refuses envelopes meant for another service.
pub trait Handler: Send + Sync + 'static {
    fn handle(&self, req: Envelope, body: Bytes) -> impl Future<Output = Reply> + Send;
}

/// The refusal of a request that reached the wrong kind of server.
pub fn wrong_service(server: &str, req: &Envelope) -> Reply {
    Reply::error(Error::invalid(format!(
        "this is a {server}; {} requests go elsewhere",
        req.service()
    )))
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

async fn write_reply(stream: &mut TcpStream, reply: &Reply) -> Result<()> {
    match &reply.payload {
        Payload::Bytes(b) => write_frame(stream, &reply.header, b).await,
        Payload::File(range) => {
            write_head(stream, &reply.header, range.len).await?;
            send_file(stream, range).await
        }
    }
}

/// Counts requests in progress, reported as load in heartbeats, and tells the server's
/// [`RequestObserver`] (its metrics), if it has one, about every request answered.
#[derive(Default)]
pub struct LoadGauge {
    in_progress: AtomicU32,
    observer: std::sync::OnceLock<Arc<dyn RequestObserver>>,
}

impl LoadGauge {
    /// A gauge whose server reports each request it answers to `observer`.
    pub fn observed(observer: Arc<dyn RequestObserver>) -> Self {
        let gauge = LoadGauge::default();
        let _ = gauge.observer.set(observer);
        gauge
    }

    pub fn current(&self) -> u32 {
        self.in_progress.load(Ordering::Relaxed)
    }
}

/// One request a server answered, as its metrics see it.
pub struct Served<'a> {
    /// The request's service ("manager", "provider", ...) and name ("PutChunk").
    pub service: &'static str,
    pub kind: &'static str,
    /// The error kind answered, `None` for success.
    pub failure: Option<&'a Error>,
    /// From the frame's first byte to the answer written.
    pub elapsed: Duration,
    /// Frame bytes (headers and bodies) received and sent.
    pub bytes_in: u64,
    pub bytes_out: u64,
}

/// Told about every request a server answered (the metrics of `tomus_metrics` implement it;
/// the wire crate itself keeps no metrics).
pub trait RequestObserver: Send + Sync + 'static {
    fn served(&self, request: &Served<'_>);
}

/// What every connection task of one server shares.
struct Shared<H> {
    handler: Arc<H>,
    secret: Option<ClusterSecret>,
    limits: ServerLimits,
    load: Arc<LoadGauge>,
    connections: Connections,
    /// Request bytes in flight, in KiB.
    budget: Arc<Semaphore>,
    refusals: WarnEvery,
}

/// Permits of the in-flight budget for `bytes` bytes (in KiB, rounded up).
fn kib(bytes: u64) -> u32 {
    u32::try_from(bytes.div_ceil(1024)).unwrap_or(u32::MAX)
}

/// Accepts connections until the listener fails; each connection gets its own task.
pub async fn serve<H: Handler>(
    listener: TcpListener,
    secret: Option<ClusterSecret>,
    limits: ServerLimits,
    handler: Arc<H>,
    load: Arc<LoadGauge>,
) {
    let budget = Arc::new(Semaphore::new(kib(limits.max_in_flight_bytes) as usize));
    let shared = Arc::new(Shared {
        handler,
        secret,
        connections: Connections::new(limits.clone()),
        limits,
        load,
        budget,
        refusals: WarnEvery::new(Duration::from_secs(10)),
    });
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(x) => x,
            Err(e) => {
                if shared.refusals.allow() {
                    tracing::warn!("accept failed: {e}");
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let Some((id, close)) = shared.connections.admit(peer.ip()) else {
            if shared.refusals.allow() {
                tracing::warn!(
                    "refused a connection from {peer}: every connection (at most {}, {} per \
                     address) is busy",
                    shared.limits.max_connections,
                    shared.limits.max_connections_per_peer
                );
            }
            continue;
        };
        let shared = shared.clone();
        tokio::spawn(async move {
            tokio::select! {
                _ = close.notified() => {}
                _ = connection(&shared, id, stream, peer) => {}
            }
            shared.connections.leave(id);
        });
    }
}

/// Serves one connection: the handshake, then one request at a time until the peer leaves,
/// stays idle too long or breaks a limit.
async fn connection<H: Handler>(
    shared: &Shared<H>,
    id: u64,
    mut stream: TcpStream,
    peer: SocketAddr,
) {
    if let Err(e) = stream.set_nodelay(true) {
        tracing::debug!("set_nodelay for {peer}: {e}");
    }
    let handshake = auth::accept(&mut stream, shared.secret.as_ref());
    match tokio::time::timeout(shared.limits.frame_timeout, handshake).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => {
            tracing::warn!("refused connection from {peer}: {e}");
            return;
        }
        Err(_) => {
            tracing::debug!("refused connection from {peer}: handshake timed out");
            return;
        }
    }
    let mut stream = BufReader::with_capacity(READ_BUFFER, stream);
    loop {
        // Idle until the next frame's first byte.
        match tokio::time::timeout(shared.limits.idle_timeout, stream.fill_buf()).await {
            Err(_) => return,
            Ok(Ok([])) => return,
            Ok(Ok(_)) => {}
            Ok(Err(e)) => {
                tracing::debug!("reading from {peer}: {e}");
                return;
            }
        }
        shared.connections.set_busy(id, true);
        let outcome = exchange(shared, &mut stream).await;
        shared.connections.set_busy(id, false);
        if let Err(e) = outcome {
            tracing::debug!("connection from {peer} closed: {e}");
            return;
        }
    }
}

/// Reads one request under the server's limits, answers it and writes the answer. An error
/// ends the connection (after telling the peer why, when it can still listen).
async fn exchange<H: Handler>(shared: &Shared<H>, stream: &mut BufReader<TcpStream>) -> Result<()> {
    let limits = &shared.limits;
    // Every deadline of the frame runs from its first byte, waits for the budget included:
    // a peer cannot hold the budget, or a place in its queue, past the frame's deadline.
    let started = tokio::time::Instant::now();
    let header_due = started + limits.frame_timeout;
    let prefix = tokio::time::timeout_at(header_due, read_prefix(stream)).await;
    let (header_len, body_len) = match prefix {
        Err(_) => return Err(Error::protocol("frame prefix not sent in time")),
        Ok(Ok(Some(lens))) => lens,
        Ok(Ok(None)) => return Err(Error::unavailable("peer left")),
        Ok(Err(e)) => return refuse(stream, e).await,
    };
    let size = header_len as u64 + body_len;
    let size_in = size;
    if size > limits.max_in_flight_bytes {
        let e = Error::invalid(format!(
            "a request of {size} bytes is larger than this server holds at once ({})",
            limits.max_in_flight_bytes
        ));
        return refuse(stream, e).await;
    }
    // Held until the answer is written.
    let mut held = Held::default();
    let header = tokio::time::timeout_at(
        header_due,
        read_budgeted(stream, header_len as u64, &shared.budget, &mut held),
    )
    .await
    .map_err(|_| Error::protocol("frame header not sent in time"))??;
    if body_len > FREE_BYTES {
        // A body is read into one buffer of its size (no copies as it grows): its budget is
        // taken before. Small requests never wait for it.
        let permit = tokio::time::timeout_at(
            header_due,
            shared.budget.clone().acquire_many_owned(kib(body_len)),
        )
        .await
        .map_err(|_| Error::unavailable("the server holds too many request bytes; try again"))?
        .map_err(|_| Error::internal("request budget closed"))?;
        held.add(permit);
    }
    let body = read_paced(stream, body_len, header_due, limits.min_transfer_rate).await?;
    let mut named = ("any", "Malformed");
    let reply = match decode::<Envelope>(&header).map(Envelope::untraced) {
        Ok((Envelope::Ping, _)) => {
            named.1 = "Ping";
            Reply::of::<Ping>(Ok(()))
        }
        Ok((req, id)) => {
            named = (req.service(), req.name());
            shared.load.in_progress.fetch_add(1, Ordering::Relaxed);
            let reply = match id {
                None => shared.handler.handle(req, body).await,
                // Under the client's request id: the handler's log lines carry it, and so do
                // the requests it makes to other servers.
                Some(id) => {
                    let kind = named.1;
                    crate::trace::scope(id, async {
                        let reply = shared.handler.handle(req, body).await;
                        let outcome = reply.failed().map(|e| format!("{:?}", e.kind));
                        tracing::debug!(
                            kind,
                            outcome = outcome.as_deref().unwrap_or("ok"),
                            elapsed_us = started.elapsed().as_micros() as u64,
                            "served"
                        );
                        reply
                    })
                    .await
                }
            };
            shared.load.in_progress.fetch_sub(1, Ordering::Relaxed);
            reply
        }
        // The frame itself was whole: the connection can go on.
        Err(e) => Reply::error(e),
    };
    let size = reply.header.len() as u64 + reply.payload.len();
    let written = tokio::time::timeout(
        limits.transfer_timeout(size),
        write_reply(stream.get_mut(), &reply),
    )
    .await
    .map_err(|_| Error::protocol("answer not taken in time"))?;
    // Pings (liveness probes) are not requests worth counting.
    if let (Some(observer), false) = (shared.load.observer.get(), named.1 == "Ping") {
        observer.served(&Served {
            service: named.0,
            kind: named.1,
            failure: reply.failed().or(written.as_ref().err()),
            elapsed: started.elapsed(),
            bytes_in: size_in,
            bytes_out: size,
        });
    }
    written
}

/// Reads a body of `len` bytes that must keep pace: by `due`, and then at `rate` bytes per
/// second, so a sender that trickles is cut off as soon as it falls behind, not at the end of
/// its whole body's time.
async fn read_paced(
    stream: &mut BufReader<TcpStream>,
    len: u64,
    due: tokio::time::Instant,
    rate: u64,
) -> Result<Bytes> {
    let mut body = BytesMut::with_capacity(len as usize);
    while (body.len() as u64) < len {
        let behind = Duration::from_secs_f64(body.len() as f64 / rate.max(1) as f64);
        let mut rest = (&mut *stream).take(len - body.len() as u64);
        match tokio::time::timeout_at(due + behind, rest.read_buf(&mut body)).await {
            Err(_) => return Err(Error::protocol("frame body sent too slowly")),
            Ok(Ok(0)) => {
                return Err(Error::protocol(
                    "connection closed in the middle of a frame",
                ))
            }
            Ok(Ok(_)) => {}
            Ok(Err(e)) => return Err(e.into()),
        }
    }
    Ok(body.freeze())
}

/// Permits of the in-flight budget a request holds.
#[derive(Default)]
struct Held(Option<OwnedSemaphorePermit>);

impl Held {
    fn add(&mut self, permit: OwnedSemaphorePermit) {
        match &mut self.0 {
            Some(held) => held.merge(permit),
            None => self.0 = Some(permit),
        }
    }
}

/// Bytes of a header, and of a body, a request may hold without taking from the budget:
/// small requests, by far the most, never wait behind large ones.
const FREE_BYTES: u64 = 64 << 10;
/// Budget taken, and buffer grown, this much at a time as a large header arrives.
const BUDGET_STEP: u64 = 1 << 20;

/// Reads a header of `len` bytes, growing the buffer as they arrive and taking the in-flight
/// budget for everything past [`FREE_BYTES`] before it is read: a peer that declares a large
/// header and sends little of it holds little.
async fn read_budgeted(
    stream: &mut BufReader<TcpStream>,
    len: u64,
    budget: &Arc<Semaphore>,
    held: &mut Held,
) -> Result<Vec<u8>> {
    let mut buf = Vec::with_capacity(len.min(FREE_BYTES) as usize);
    while (buf.len() as u64) < len {
        let step = (len - buf.len() as u64).min(if buf.is_empty() {
            FREE_BYTES
        } else {
            BUDGET_STEP
        });
        if buf.len() as u64 + step > FREE_BYTES {
            let permit = budget
                .clone()
                .acquire_many_owned(kib(step))
                .await
                .map_err(|_| Error::internal("request budget closed"))?;
            held.add(permit);
        }
        let want = buf.len() + step as usize;
        let got = (&mut *stream).take(step).read_to_end(&mut buf).await?;
        if buf.len() < want || got == 0 {
            return Err(Error::protocol(
                "connection closed in the middle of a frame",
            ));
        }
    }
    Ok(buf)
}

/// Tells the peer why its frame is refused, then ends the connection.
async fn refuse(stream: &mut BufReader<TcpStream>, e: Error) -> Result<()> {
    let _ = tokio::time::timeout(
        Duration::from_secs(1),
        write_reply(stream.get_mut(), &Reply::error(e.clone())),
    )
    .await;
    Err(e)
}

/// The answer a handler gives `req`, decoded as a client would: for tests and in-process
/// callers that hold the service itself.
pub async fn call_handler<H: Handler, R: Rpc>(
    handler: &H,
    req: R,
    body: Bytes,
) -> Result<R::Response> {
    Ok(call_handler_payload(handler, req, body).await?.0)
}

/// [`call_handler`] with the body of the answer.
pub async fn call_handler_payload<H: Handler, R: Rpc>(
    handler: &H,
    req: R,
    body: Bytes,
) -> Result<(R::Response, Payload)> {
    let reply = handler.handle(req.into_envelope(), body).await;
    let answer = decode::<Result<R::Response>>(&reply.header)??;
    Ok((answer, reply.payload))
}
