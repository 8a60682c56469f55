//! The HTTP server of `/metrics` (and, in the manager, of the dashboard's pages): HTTP/1.1
//! through hyper, GET and HEAD only, a capped number of connections and a header timeout so
//! idle or dripping clients cannot exhaust it.
//!
//! Access follows the RPC port's rules: a server without a cluster secret listens on
//! loopback only ([`bind`] refuses anything else), and a server with one asks every request
//! for it, as `Authorization: Bearer SECRET` (Prometheus' `authorization` setting) or as the
//! password of HTTP basic authentication (any user name; what a browser prompts for).

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::future::BoxFuture;
use http::{header, Method, Request, StatusCode};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tomus_wire::{check_bind, ClusterSecret, Error, Result};

/// An answer's body: bytes in memory ([`full`]) or a stream of them ([`streamed`], for file
/// downloads that must not be held in memory whole).
pub type Body = UnsyncBoxBody<Bytes, std::io::Error>;
/// An answer: a status, headers and a body.
pub type Response = http::Response<Body>;

/// A body of bytes in memory.
pub fn full(bytes: impl Into<Bytes>) -> Body {
    Full::new(bytes.into())
        .map_err(|never: Infallible| match never {})
        .boxed_unsync()
}

/// A body whose pieces arrive on `pieces`; an `Err` piece cuts the answer off (the client sees
/// a connection closed short of its Content-Length, not a truncated file taken as whole).
pub fn streamed(pieces: tokio::sync::mpsc::Receiver<std::io::Result<Bytes>>) -> Body {
    let stream = futures::stream::unfold(pieces, |mut rx| async move {
        let piece = rx.recv().await?;
        Some((piece.map(hyper::body::Frame::data), rx))
    });
    StreamBody::new(stream).boxed_unsync()
}

/// Connections served at once; more are closed at once (scrapers and a few browsers).
const MAX_CONNECTIONS: usize = 64;
/// A request's head must arrive within this.
const HEADER_TIMEOUT: Duration = Duration::from_secs(10);

/// What a server serves besides `/metrics`.
pub trait Pages: Send + Sync + 'static {
    /// Brings gauges computed from the server's state up to date before `/metrics` is read.
    fn before_scrape(&self) {}
    /// The answer to `GET path?query`; `None` is a 404.
    fn get(&self, path: &str, query: &str) -> BoxFuture<'static, Option<Response>>;
}

/// Serves `/metrics` and nothing else (providers, the S3 gateway).
pub struct MetricsOnly;

impl Pages for MetricsOnly {
    fn get(&self, _path: &str, _query: &str) -> BoxFuture<'static, Option<Response>> {
        Box::pin(async { None })
    }
}

/// Binds `listen` for HTTP: a non-loopback address needs a cluster secret, as the RPC port.
pub async fn bind(listen: &str, secret: Option<&ClusterSecret>) -> Result<TcpListener> {
    let listener = TcpListener::bind(listen)
        .await
        .map_err(|e| Error::invalid(format!("cannot listen on {listen} for HTTP: {e}")))?;
    check_bind(&listener.local_addr()?, secret)?;
    Ok(listener)
}

/// Serves HTTP on `listener` until the task is dropped.
pub async fn serve(listener: TcpListener, secret: Option<ClusterSecret>, pages: Arc<dyn Pages>) {
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    let secret = Arc::new(secret);
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!("HTTP accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            tracing::warn!("refused an HTTP connection from {peer}: too many connections");
            continue;
        };
        let (secret, pages) = (secret.clone(), pages.clone());
        let service = service_fn(move |req: Request<Incoming>| {
            let (secret, pages) = (secret.clone(), pages.clone());
            async move { Ok::<_, Infallible>(answer(req, secret.as_ref().as_ref(), &*pages).await) }
        });
        tokio::spawn(async move {
            let conn = http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(HEADER_TIMEOUT)
                .serve_connection(TokioIo::new(stream), service);
            if let Err(e) = conn.await {
                tracing::debug!("HTTP connection from {peer}: {e}");
            }
            drop(slot);
        });
    }
}

async fn answer(
    req: Request<Incoming>,
    secret: Option<&ClusterSecret>,
    pages: &dyn Pages,
) -> Response {
    if let Some(secret) = secret {
        if !authorized(&req, secret) {
            let mut resp = text(StatusCode::UNAUTHORIZED, "the cluster secret is required\n");
            resp.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                header::HeaderValue::from_static("Basic realm=\"tomus\", charset=\"UTF-8\""),
            );
            return resp;
        }
    }
    let head = req.method() == Method::HEAD;
    if req.method() != Method::GET && !head {
        return text(StatusCode::METHOD_NOT_ALLOWED, "only GET and HEAD\n");
    }
    let path = req.uri().path().to_string();
    let query = req.uri().query().unwrap_or_default().to_string();
    let mut resp = if path == "/metrics" {
        pages.before_scrape();
        with_type(
            http::Response::new(full(crate::encode())),
            crate::CONTENT_TYPE,
        )
    } else {
        match pages.get(&path, &query).await {
            Some(r) => r,
            None => text(StatusCode::NOT_FOUND, "not found\n"),
        }
    };
    // Figures of a live cluster: never cached.
    resp.headers_mut().insert(
        header::CACHE_CONTROL,
        header::HeaderValue::from_static("no-store"),
    );
    if head {
        *resp.body_mut() = full(Bytes::new());
    }
    resp
}

/// Whether the request carries the cluster secret (bearer token or basic-auth password).
fn authorized(req: &Request<Incoming>, secret: &ClusterSecret) -> bool {
    let Some(value) = req.headers().get(header::AUTHORIZATION) else {
        return false;
    };
    let value = value.as_bytes();
    if let Some(token) = strip_scheme(value, "bearer ") {
        return secret.matches(token.trim_ascii());
    }
    if let Some(encoded) = strip_scheme(value, "basic ") {
        let Ok(decoded) = base64_simd::STANDARD.decode_to_vec(encoded.trim_ascii()) else {
            return false;
        };
        // "user:password": the user name is not checked.
        return match decoded.iter().position(|&b| b == b':') {
            Some(colon) => secret.matches(&decoded[colon + 1..]),
            None => false,
        };
    }
    false
}

fn strip_scheme<'a>(value: &'a [u8], scheme: &str) -> Option<&'a [u8]> {
    let n = scheme.len();
    (value.len() >= n && value[..n].eq_ignore_ascii_case(scheme.as_bytes())).then(|| &value[n..])
}

/// A response with `status` and a plain-text body.
pub fn text(status: StatusCode, body: impl Into<Bytes>) -> Response {
    let mut resp = with_type(http::Response::new(full(body)), "text/plain; charset=utf-8");
    *resp.status_mut() = status;
    resp
}

/// `resp` with its Content-Type set.
pub fn with_type(mut resp: Response, content_type: &'static str) -> Response {
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static(content_type),
    );
    resp
}
