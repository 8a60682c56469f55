//! The typed error every tomus component returns and sends over the wire.

use serde::{Deserialize, Serialize};

/// Defines `ErrorKind` and `ErrorKind::ALL` from one list, so code that mirrors every kind
/// (the Python package's tests check it has an exception class for each) cannot miss one.
macro_rules! error_kinds {
    ($(#[$doc:meta])* $vis:vis enum $name:ident { $($(#[$kind_doc:meta])* $kind:ident,)* }) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
        $vis enum $name {
            $($(#[$kind_doc])* $kind,)*
        }

        impl $name {
            /// Every kind, in declaration order.
            pub const ALL: &'static [$name] = &[$($name::$kind),*];
        }
    };
}

error_kinds! {
    /// What went wrong, stable across the wire and mapped to exit codes and Python exceptions.
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
        /// A write took longer from storing (or finding) its data to committing it than garbage
        /// collection's grace, or a provider it may have stored data on was drained and removed
        /// before it committed: the data may be gone, so nothing was published. The data must
        /// be written again.
        WriteExpired,
    }
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

/// Refuses a request that carries more than `max` of something (keys, chunks, entries):
/// every count that arrives over the wire is checked before anything is sized by it.
pub fn check_count(what: &str, count: usize, max: usize) -> Result<()> {
    if count > max {
        return Err(Error::invalid(format!(
            "a request may carry at most {max} {what}, this one has {count}"
        )));
    }
    Ok(())
}

/// The size of a page a listing request asks for: 1 to `max` entries. Refused rather than
/// cut to `max`, since a page shorter than asked for tells the client the listing ended.
pub fn check_page(what: &str, limit: u32, max: u32) -> Result<usize> {
    if limit == 0 || limit > max {
        return Err(Error::invalid(format!(
            "a page of {what} holds 1 to {max} entries; this request asked for {limit}"
        )));
    }
    Ok(limit as usize)
}

/// An I/O error with what was being done (`context`); keeps the kind [`Error::from`] derives
/// (ENOSPC is `NoSpace`).
pub fn io_error(context: impl std::fmt::Display, e: std::io::Error) -> Error {
    let base = Error::from(e);
    Error::new(base.kind, format!("{context}: {}", base.message))
}

impl From<std::io::Error> for Error {
    fn from(e: std::io::Error) -> Self {
        if e.kind() == std::io::ErrorKind::StorageFull {
            // The OS's text says it ("No space left on device (os error 28)").
            return Error::new(ErrorKind::NoSpace, e.to_string());
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
