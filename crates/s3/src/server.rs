//! The HTTP side: accept loop (TCP_NODELAY on every socket), HTTP/1.1 and HTTP/2 via
//! hyper-util, and a wrapper around the s3s service that gives every response a request id
//! and turns a panic into a 500 instead of a dropped connection.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::future::BoxFuture;
use futures::FutureExt;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto::Builder;
use rand::Rng;
use s3s::service::S3Service;
use s3s::{Body, HttpError};
use tokio::net::TcpListener;

use crate::connections::{Activity, ConnectionLimits, Connections};

/// Serves `service` on `listener` until the task is dropped, within `limits`: no number of
/// idle, silent or dripping clients exhausts the gateway (see [`crate::connections`]).
pub async fn serve(listener: TcpListener, service: S3Service, limits: ConnectionLimits) {
    let mut builder = Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.idle_timeout);
    let connections = Connections::new(limits);
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(c) => c,
            Err(e) => {
                // Out of file descriptors and the like: back off instead of spinning.
                tracing::warn!("accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let Some(admitted) = connections.admit().await else {
            tracing::warn!(
                "refused a connection from {peer}: every connection (at most {}) is busy",
                connections.limits().max_connections
            );
            continue;
        };
        // Small requests must not wait for Nagle's algorithm (~40 ms per 4 KiB GET).
        if let Err(e) = stream.set_nodelay(true) {
            tracing::debug!("TCP_NODELAY on {peer}: {e}");
        }
        let activity = Arc::new(Activity::default());
        let svc = Tracked {
            inner: service.clone(),
            activity: activity.clone(),
        };
        let conn = builder
            .serve_connection(TokioIo::new(stream), svc)
            .into_owned();
        let idle_timeout = connections.limits().idle_timeout;
        tokio::spawn(async move {
            let mut conn = std::pin::pin!(conn);
            // Once asked to close, the connection finishes its exchange in progress (a
            // download keeps streaming) and ends; it is not asked twice.
            let mut asked = false;
            let mut seen = 0;
            let start = tokio::time::Instant::now() + idle_timeout;
            let mut tick = tokio::time::interval_at(start, idle_timeout);
            loop {
                tokio::select! {
                    done = conn.as_mut() => {
                        if let Err(e) = done {
                            tracing::debug!("connection from {peer}: {e}");
                        }
                        break;
                    }
                    () = admitted.close.notified(), if !asked => {
                        conn.as_mut().graceful_shutdown();
                        asked = true;
                    }
                    _ = tick.tick(), if !asked => {
                        if activity.idle_since(&mut seen) {
                            conn.as_mut().graceful_shutdown();
                            asked = true;
                        }
                    }
                }
            }
            drop(admitted);
        });
    }
}

/// The s3s service with request ids and panic containment.
#[derive(Clone)]
struct Tracked {
    inner: S3Service,
    /// What the connection's watchdog sees of its requests.
    activity: Arc<Activity>,
}

/// A fresh request id: 16 hex digits, as S3's.
pub fn request_id() -> String {
    format!("{:016X}", rand::thread_rng().gen::<u64>())
}

type Response = http::Response<Body>;

impl hyper::service::Service<http::Request<Incoming>> for Tracked {
    type Response = Response;
    type Error = HttpError;
    type Future = BoxFuture<'static, Result<Response, HttpError>>;

    fn call(&self, req: http::Request<Incoming>) -> Self::Future {
        let started = std::time::Instant::now();
        let operation = crate::operations::operation(
            req.method(),
            req.uri().path(),
            req.uri().query().unwrap_or_default(),
            req.headers().contains_key("x-amz-copy-source"),
        );
        let received = content_length(req.headers());
        let in_progress = self.activity.begin();
        let fut = self.answer(req);
        Box::pin(async move {
            let resp = fut.await;
            drop(in_progress);
            if let Ok(r) = &resp {
                let m = tomus_metrics::s3();
                m.requests
                    .get_or_create(&vec![
                        ("operation", operation.to_string()),
                        ("status", r.status().as_u16().to_string()),
                    ])
                    .inc();
                m.duration
                    .get_or_create(&tomus_metrics::families::label("operation", operation))
                    .observe(started.elapsed().as_secs_f64());
                m.received_bytes.inc_by(received);
                m.sent_bytes.inc_by(content_length(r.headers()));
            }
            resp
        })
    }
}

/// A message's Content-Length (0 when absent or unreadable).
fn content_length(headers: &http::HeaderMap) -> u64 {
    headers
        .get(http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

impl Tracked {
    /// The answer, with a request id, panics contained.
    fn answer(
        &self,
        req: http::Request<Incoming>,
    ) -> BoxFuture<'static, Result<Response, HttpError>> {
        let id = request_id();
        let method = req.method().clone();
        let uri = req.uri().clone();
        let withheld_body = req.version() == http::Version::HTTP_11
            && req
                .headers()
                .get(http::header::EXPECT)
                .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"100-continue"));
        if let Some(why) = req.uri().query().and_then(presign_expiry_problem) {
            let mut resp = error_response(
                http::StatusCode::BAD_REQUEST,
                "AuthorizationQueryParametersError",
                why,
            );
            stamp(&mut resp, &id);
            return Box::pin(async move { Ok(resp) });
        }
        if let Some(why) = invalid_bucket(req.uri().path()) {
            let mut resp = error_response(http::StatusCode::BAD_REQUEST, "InvalidBucketName", &why);
            stamp(&mut resp, &id);
            return Box::pin(async move { Ok(resp) });
        }
        let fut = hyper::service::Service::call(&self.inner, req);
        Box::pin(async move {
            let mut resp = match AssertUnwindSafe(fut).catch_unwind().await {
                Ok(Ok(r)) => r,
                Ok(Err(e)) => {
                    tracing::error!("{method} {uri}: {e:?}");
                    internal_error()
                }
                Err(_) => {
                    tracing::error!("{method} {uri}: handler panicked");
                    internal_error()
                }
            };
            stamp(&mut resp, &id);
            if withheld_body && !resp.status().is_success() {
                // The client waited for "100 Continue" and got a final answer instead, so it
                // never sends the body; closing keeps the next request from being read as the
                // rest of this one's body.
                resp.headers_mut().insert(
                    http::header::CONNECTION,
                    http::HeaderValue::from_static("close"),
                );
            }
            Ok(resp)
        })
    }
}

/// Why the bucket a path-style request names is refused, if it is: s3s refuses it too, but
/// with no message at all, and a top-level directory of the namespace that is no valid
/// bucket name (`/py`) is not a bucket.
fn invalid_bucket(path: &str) -> Option<String> {
    let bucket = path.strip_prefix('/')?.split('/').next()?;
    if bucket.is_empty() || (s3s::path::check_bucket_name(bucket) && !reserved_by_aws(bucket)) {
        return None;
    }
    let shown: String = bucket.chars().take(80).collect();
    Some(format!(
        "The specified bucket is not valid: {} is not a valid S3 bucket name (3 to 63 \
         lowercase letters, digits, '.' and '-', starting and ending with a letter or digit). \
         Buckets are the top-level directories of the tomus namespace whose names are valid \
         bucket names; other directories are reachable with tomus fs and fsspec only.",
        xml_escape(&shown)
    ))
}

/// Names that pass the character rules but AWS refuses all the same: a period next to a
/// dash, and the prefixes and suffixes it reserves for its own naming schemes.
fn reserved_by_aws(bucket: &str) -> bool {
    const PREFIXES: [&str; 3] = ["xn--", "sthree-", "amzn-s3-demo-"];
    const SUFFIXES: [&str; 5] = ["-s3alias", "--ol-s3", ".mrap", "--x-s3", "--table-s3"];
    bucket.contains("-.")
        || bucket.contains(".-")
        || PREFIXES.iter().any(|p| bucket.starts_with(p))
        || SUFFIXES.iter().any(|s| bucket.ends_with(s))
}

/// `text` with the characters XML gives meaning to escaped.
fn xml_escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '&' => out.push_str("&amp;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            c => out.push(c),
        }
    }
    out
}

fn internal_error() -> Response {
    error_response(
        http::StatusCode::INTERNAL_SERVER_ERROR,
        "InternalError",
        "We encountered an internal error. Please try again.",
    )
}

/// An S3 error document.
fn error_response(status: http::StatusCode, code: &str, message: &str) -> Response {
    let body = format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>{code}</Code>\
         <Message>{message}</Message></Error>"
    );
    let mut resp = http::Response::new(Body::from(Bytes::from(body)));
    *resp.status_mut() = status;
    resp.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/xml"),
    );
    resp
}

/// The longest a presigned URL may be valid: a week, as AWS allows.
const MAX_PRESIGN_EXPIRY_SECS: u64 = 7 * 24 * 3600;

/// Why the `X-Amz-Expires` of a presigned URL's query is refused, if it is: AWS accepts 1
/// second to a week (s3s itself checks only that it has not run out).
fn presign_expiry_problem(query: &str) -> Option<&'static str> {
    let value = query.split('&').find_map(|kv| {
        let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
        (k == "X-Amz-Expires").then_some(v)
    })?;
    match value.parse::<u64>() {
        Ok(secs) if (1..=MAX_PRESIGN_EXPIRY_SECS).contains(&secs) => None,
        Ok(0) => Some("X-Amz-Expires must be non-negative and at least 1 second"),
        Ok(_) => Some("X-Amz-Expires must be less than a week (in seconds) that is 604800"),
        Err(_) => Some("X-Amz-Expires should be a number"),
    }
}

/// Adds the request id headers, and the id into an error document that lacks it (errors raised
/// inside s3s, such as signature mismatches, carry none).
fn stamp(resp: &mut Response, id: &str) {
    if let Ok(v) = http::HeaderValue::from_str(id) {
        resp.headers_mut().insert("x-amz-request-id", v.clone());
        resp.headers_mut().insert("x-amz-id-2", v);
    }
    if resp.status().as_u16() < 400 {
        return;
    }
    let Some(bytes) = resp.body().bytes() else {
        return;
    };
    if let Some(with_id) = with_request_id(&bytes, id) {
        let len = with_id.len();
        *resp.body_mut() = Body::from(Bytes::from(with_id));
        resp.headers_mut()
            .insert(http::header::CONTENT_LENGTH, http::HeaderValue::from(len));
    }
}

/// `doc` (an S3 error document) with a `RequestId` element, if it is one and has none.
fn with_request_id(doc: &[u8], id: &str) -> Option<Vec<u8>> {
    let text = std::str::from_utf8(doc).ok()?;
    if text.contains("<RequestId>") {
        return None;
    }
    let at = text.rfind("</Error>")?;
    Some(format!("{}<RequestId>{id}</RequestId>{}", &text[..at], &text[at..]).into_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn invalid_bucket_names_say_why() {
        let why = invalid_bucket("/py/data.csv").unwrap();
        assert!(why.contains("py is not a valid S3 bucket name"), "{why}");
        assert!(invalid_bucket("/.tomus-uploads").is_some());
        for reserved in [
            "/foo-.bar",
            "/foo.-bar",
            "/xn--abc",
            "/data-s3alias",
            "/d--x-s3",
        ] {
            assert!(invalid_bucket(reserved).is_some(), "{reserved}");
        }
        assert!(invalid_bucket("/A<b").unwrap().contains("A&lt;b"));
        for fine in ["/", "/my-bucket", "/my-bucket/any/Key.CSV", ""] {
            assert_eq!(invalid_bucket(fine), None, "{fine}");
        }
    }

    #[test]
    fn error_documents_get_a_request_id() {
        let doc = b"<?xml?><Error><Code>NoSuchKey</Code></Error>";
        let out = with_request_id(doc, "ABC").unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "<?xml?><Error><Code>NoSuchKey</Code><RequestId>ABC</RequestId></Error>"
        );
        assert!(with_request_id(b"<Error><RequestId>X</RequestId></Error>", "Y").is_none());
        assert!(with_request_id(b"not xml", "Y").is_none());
        assert_eq!(request_id().len(), 16);
    }

    #[test]
    fn presigned_urls_live_a_week_at_most() {
        let q = |e: &str| format!("X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Expires={e}&x=1");
        assert_eq!(presign_expiry_problem(&q("604800")), None);
        assert_eq!(presign_expiry_problem(&q("1")), None);
        assert!(presign_expiry_problem(&q("604801"))
            .unwrap()
            .contains("less than a week"));
        assert!(presign_expiry_problem(&q("0")).is_some());
        assert!(presign_expiry_problem(&q("-5")).is_some());
        assert!(presign_expiry_problem(&q("99999999999999999999")).is_some());
        assert_eq!(presign_expiry_problem("prefix=a&list-type=2"), None);
    }
}
