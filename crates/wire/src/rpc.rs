//! Typed requests: every request is a struct that names the type of its answer ([`Rpc`]),
//! grouped into one enum per service (manager, maintenance, provider). A request travels
//! inside an [`Envelope`] that names its service, so a server refuses requests meant for
//! another one instead of misreading them; its answer travels as `Result<Response, Error>`
//! encoded by the handler through [`Reply::of`], which only accepts the request's own
//! response type.
//!
//! Encoding: bincode with variable-length integers, and a limit on every decode so a
//! hostile length prefix inside a header cannot make the reader allocate more than the
//! header's own size.

use bincode::Options;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::maintenance::MaintenanceRequest;
use crate::manager::ManagerRequest;
use crate::provider::ProviderRequest;
use crate::server::Payload;
use crate::topology::AgentRequest;

/// A request of some service, and what it answers.
pub trait Rpc: Serialize + Send + Sync + 'static {
    /// The answer's type; `()` when the answer is "done" (or lies in the frame's body).
    type Response: Serialize + DeserializeOwned + Send + 'static;
    /// Whether sending it twice has the effect of sending it once: only such requests are
    /// sent again after a pooled connection turns out to be dead.
    const IDEMPOTENT: bool = true;
    /// The request in the envelope that routes it to its service.
    fn into_envelope(self) -> Envelope;
}

/// A request as it travels: which service it is for, and the request.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Envelope {
    /// Answered by every server without reaching its service.
    Ping,
    Manager(ManagerRequest),
    Maintenance(MaintenanceRequest),
    Provider(ProviderRequest),
    /// Added later (last, so the variants before keep their numbers).
    Agent(AgentRequest),
    /// A request made for the client operation with this id ([`crate::trace`]): the server
    /// answers the inner request as usual and logs it under the id. Requests made outside
    /// any operation are sent bare, as before.
    Traced(u64, Box<Envelope>),
}

impl Envelope {
    /// The service the request is for, for messages.
    pub fn service(&self) -> &'static str {
        match self {
            Envelope::Ping => "any",
            Envelope::Manager(_) => "manager",
            Envelope::Maintenance(_) => "maintenance",
            Envelope::Provider(_) => "provider",
            Envelope::Agent(_) => "topology agent",
            Envelope::Traced(_, inner) => inner.service(),
        }
    }

    /// The request's name ("PutChunk"), for logs and metrics.
    pub fn name(&self) -> &'static str {
        match self {
            Envelope::Ping => "Ping",
            Envelope::Manager(r) => r.name(),
            Envelope::Maintenance(r) => r.name(),
            Envelope::Provider(r) => r.name(),
            Envelope::Agent(r) => r.name(),
            Envelope::Traced(_, inner) => inner.name(),
        }
    }

    /// The request without its request id, and the id (a nested id, which no client sends,
    /// is dropped: only the outer one counts).
    pub fn untraced(self) -> (Envelope, Option<u64>) {
        match self {
            Envelope::Traced(id, inner) => (inner.untraced().0, Some(id)),
            other => (other, None),
        }
    }
}

/// Is any server there and speaking the protocol?
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ping;

impl Rpc for Ping {
    type Response = ();
    fn into_envelope(self) -> Envelope {
        Envelope::Ping
    }
}

/// The codec of headers on the wire: variable-length integers, decodes limited to `limit`
/// bytes of allocation.
fn codec(limit: u64) -> impl Options {
    bincode::DefaultOptions::new()
        .with_varint_encoding()
        .with_limit(limit)
        .reject_trailing_bytes()
}

/// Encodes a header (a request envelope or an answer).
pub fn encode<T: Serialize>(value: &T) -> Result<Vec<u8>> {
    codec(u64::MAX)
        .serialize(value)
        .map_err(|e| Error::internal(format!("encoding a message: {e}")))
}

/// Decodes a header received from a peer; a malformed one is a protocol error.
pub fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T> {
    codec(bytes.len() as u64)
        .deserialize(bytes)
        .map_err(|e| Error::protocol(format!("malformed message: {e}")))
}

/// An encoded answer and the body that goes with it.
pub struct Reply {
    pub(crate) header: Vec<u8>,
    pub(crate) payload: Payload,
    /// The error answered, if any, for the server's logs and metrics.
    failure: Option<Error>,
}

impl Reply {
    /// The answer to a request of type `R`: only `R`'s own response type is accepted.
    pub fn of<R: Rpc>(result: Result<R::Response>) -> Reply {
        let failure = result.as_ref().err().cloned();
        match encode(&result) {
            // Refused here, where the peer can be told, rather than when the frame is
            // written and the connection can only be dropped.
            Ok(header) if header.len() > crate::frame::MAX_HEADER as usize => {
                Reply::error(Error::invalid(format!(
                    "the answer of {} bytes exceeds the {} byte limit of a message; ask for \
                     less at a time",
                    header.len(),
                    crate::frame::MAX_HEADER
                )))
            }
            Ok(header) => Reply {
                header,
                payload: Payload::empty(),
                failure,
            },
            Err(e) => Reply::error(e),
        }
    }

    /// A refusal, whatever the request was (errors decode as any response type's error).
    pub fn error(e: Error) -> Reply {
        let result: Result<()> = Err(e);
        Reply {
            // A `Result::Err` of an `Error` always encodes.
            header: encode(&result).unwrap_or_default(),
            payload: Payload::empty(),
            failure: result.err(),
        }
    }

    /// The error this reply answers with, if it is one.
    pub fn failed(&self) -> Option<&Error> {
        self.failure.as_ref()
    }

    /// The same answer with a body (chunk data) after it.
    pub fn with_payload(mut self, payload: Payload) -> Reply {
        self.payload = payload;
        self
    }
}

/// Declares the requests of one service: a struct per request (its fields), the service's
/// enum of them, and each one's [`Rpc`] implementation with its response type. A request
/// marked `once` is not idempotent (sending it twice does it twice).
macro_rules! service {
    (
        $(#[$enum_meta:meta])*
        pub enum $service:ident in Envelope::$variant:ident {
            $(
                $(#[$meta:meta])*
                $name:ident { $( $(#[$fmeta:meta])* $field:ident : $fty:ty ),* $(,)? }
                    -> $resp:ty $(, $once:ident)?;
            )*
        }
    ) => {
        $(
            $(#[$meta])*
            #[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
            pub struct $name { $( $(#[$fmeta])* pub $field: $fty ),* }

            impl $crate::rpc::Rpc for $name {
                type Response = $resp;
                const IDEMPOTENT: bool = service!(@idempotent $($once)?);
                fn into_envelope(self) -> $crate::rpc::Envelope {
                    $crate::rpc::Envelope::$variant($service::$name(self))
                }
            }
        )*

        $(#[$enum_meta])*
        #[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
        pub enum $service { $( $name($name) ),* }

        impl $service {
            /// The request's name, for logs and metrics.
            pub fn name(&self) -> &'static str {
                match self { $( $service::$name(_) => stringify!($name) ),* }
            }
        }
    };
    (@idempotent) => { true };
    (@idempotent once) => { false };
}

pub(crate) use service;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topology::AgentHello;

    #[test]
    fn an_answer_too_large_for_a_message_is_refused_with_an_error_the_peer_can_read() {
        let fits = Reply::of::<AgentHello>(Ok("x".repeat(1 << 20)));
        assert!(fits.failed().is_none());

        let huge = crate::frame::MAX_HEADER as usize + 1;
        let reply = Reply::of::<AgentHello>(Ok("x".repeat(huge)));
        let err = reply.failed().cloned().expect("refused");
        assert_eq!(err.kind, crate::ErrorKind::InvalidArgument);
        assert!(
            err.message.contains("exceeds the 67108864 byte limit"),
            "{}",
            err.message
        );
        // What is sent is that error, small, and it decodes as the answer to the request.
        assert!(reply.header.len() < 1024);
        let answer: Result<String> = decode(&reply.header).expect("decodes");
        assert_eq!(answer.unwrap_err(), err);
    }
}
