//! Request ids: one id per client operation (a write, a read, a CLI command), carried on the
//! wire with every request made for it ([`crate::Envelope::Traced`]) and attached to the
//! servers' tracing spans, so the log lines of the client, the manager and the providers
//! about one slow operation can be found with one `grep`.
//!
//! The id lives in a task-local: `scope` sets it for a future, [`crate::Pool`] reads it when
//! it encodes a request, and the server sets it again around the handler of a traced request,
//! so requests a server makes on behalf of another (the manager asking providers) carry it on.
//! A task spawned during an operation is outside it: wrap its future in `scope` with the id.

use std::future::Future;

use tracing::Instrument;

tokio::task_local! {
    static REQUEST_ID: u64;
}

/// The request id of the operation the current task works for, if any.
pub fn current() -> Option<u64> {
    REQUEST_ID.try_with(|id| *id).ok()
}

/// A new random request id (never 0).
pub fn new_id() -> u64 {
    rand::random::<u64>().max(1)
}

/// How an id is written in logs: 16 hex digits.
pub fn format_id(id: u64) -> String {
    format!("{id:016x}")
}

/// Runs `fut` as the operation `id`: its requests carry the id, and its log lines are in a
/// `request` span with the `request_id` field.
pub async fn scope<F: Future>(id: u64, fut: F) -> F::Output {
    // Already in it (a writer of the operation being written): one span is enough.
    if current() == Some(id) {
        return fut.await;
    }
    let span = tracing::info_span!("request", request_id = %format_id(id));
    REQUEST_ID.scope(id, fut.instrument(span)).await
}

/// Runs `fut` under the current operation's id, or under a new one when there is none: the
/// entry points of client operations call it so that each operation has exactly one id.
pub async fn operation<F: Future>(fut: F) -> F::Output {
    match current() {
        Some(_) => fut.await,
        None => scope(new_id(), fut).await,
    }
}
