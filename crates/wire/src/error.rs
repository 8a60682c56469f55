//! The typed error every tomus component returns and sends over the wire.

use serde::{Deserialize, Serialize};

/// What went wrong, stable across the wire and mapped to exit codes and Python exceptions.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ErrorKind {
    /// Unknown blob, version, chunk or node.
    NotFound,
    /// The version exists but is not published yet.
    VersionNotPublished,
    /// The version was given up (its writer aborted it, its lease expired, or the manager
    /// restarted before publication).
    VersionAborted,
    /// A read or write outside what the version holds.
    OutOfRange,
    /// Bad argument: chunk size, zero-length append, malformed request.
    InvalidArgument,
    /// Stored data failed its checksum.
    Corrupt,
    /// A server could not be reached or did not answer in time.
    Unavailable,
    /// No space left on the provider, or no providers to place data on.
    NoSpace,
    /// The peer failed the cluster-secret handshake.
    AuthFailed,
    /// The peer spoke something other than the tomus protocol.
    Protocol,
    /// A bug or an unexpected local failure (I/O error on the server's own state).
    Internal,
    /// Given up through no fault of the caller (a lower version's writer died while this
    /// one was in flight); doing the same operation again succeeds.
    Retry,
    /// A namespace path that must be new already exists.
    AlreadyExists,
    /// A directory that must be empty is not.
    NotEmpty,
    /// A file operation named a directory.
    IsADirectory,
    /// A path goes through, or names, a file where a directory is needed.
    NotADirectory,
    /// A condition the request set on the current state did not hold (e.g. the size an
    /// append at a known offset expected).
    PreconditionFailed,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[error("{message}")]
pub struct Error {
    pub kind: ErrorKind,
    pub message: String,
}

impl Error {
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Error {
            kind,
            message: message.into(),
        }
    }
    /// Of the failures of one operation tried at several places (replicas, sources), the one
    /// that says most: corruption over unavailability over the rest. `None` when empty.
    pub fn most_telling(errors: impl IntoIterator<Item = Error>) -> Option<Error> {
        errors.into_iter().min_by_key(|e| match e.kind {
            ErrorKind::Corrupt => 0,
            ErrorKind::Unavailable => 1,
            _ => 2,
        })
    }
    pub fn not_found(m: impl Into<String>) -> Self {
        Self::new(ErrorKind::NotFound, m)
    }
    pub fn invalid(m: impl Into<String>) -> Self {
        Self::new(ErrorKind::InvalidArgument, m)
    }
    pub fn unavailable(m: impl Into<String>) -> Self {
        Self::new(ErrorKind::Unavailable, m)
    }
    pub fn internal(m: impl Into<String>) -> Self {
        Self::new(ErrorKind::Internal, m)
    }
    pub fn corrupt(m: impl Into<String>) -> Self {
        Self::new(ErrorKind::Corrupt, m)
    }
    pub fn protocol(m: impl Into<String>) -> Self {
        Self::new(ErrorKind::Protocol, m)
    }
    pub fn out_of_range(m: impl Into<String>) -> Self {
        Self::new(ErrorKind::OutOfRange, m)
    }
    pub fn already_exists(m: impl Into<String>) -> Self {
        Self::new(ErrorKind::AlreadyExists, m)
    }
}

impl From<std::io::Error> for Error {
    fn from(e: std::io::Error) -> Self {
        if e.raw_os_error() == Some(28) {
            return Error::new(ErrorKind::NoSpace, format!("no space left on device: {e}"));
        }
        Error::internal(format!("I/O error: {e}"))
    }
}

impl From<tomus_metadata::MetaError> for Error {
    fn from(e: tomus_metadata::MetaError) -> Self {
        match e {
            tomus_metadata::MetaError::Missing(_) => Error::not_found(e.to_string()),
            tomus_metadata::MetaError::Inconsistent(_) => Error::internal(e.to_string()),
        }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
