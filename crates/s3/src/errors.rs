//! S3 errors from tomus errors: the code and status an S3 client expects for each failure.

use s3s::{S3Error, S3ErrorCode};
use tomus_wire::{Error, ErrorKind};

/// Shorthand for an S3 error with a message.
pub fn s3_err(code: S3ErrorCode, message: impl Into<String>) -> S3Error {
    S3Error::with_message(code, message.into())
}

/// A code S3 does not define (or s3s does not know), with its HTTP status.
pub fn custom(code: &'static str, status: http::StatusCode, message: impl Into<String>) -> S3Error {
    let mut e = S3Error::with_message(S3ErrorCode::Custom(code.into()), message.into());
    e.set_status_code(status);
    e
}

/// A key whose path clashes with the hierarchical namespace ("a" and "a/b" both as objects,
/// which S3 allows and a file system does not).
pub fn path_conflict(message: impl Into<String>) -> S3Error {
    custom("PathConflict", http::StatusCode::CONFLICT, message)
}

/// What an S3 operation was looking for, so "not found" gets the right code.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Missing {
    Bucket,
    Key,
    Upload,
}

/// Maps a store error; `missing` says which S3 "no such ..." a `NotFound` means.
pub fn from_store(e: Error, missing: Missing) -> S3Error {
    let code = match e.kind {
        ErrorKind::NotFound => match missing {
            Missing::Bucket => S3ErrorCode::NoSuchBucket,
            Missing::Key => S3ErrorCode::NoSuchKey,
            Missing::Upload => S3ErrorCode::NoSuchUpload,
        },
        ErrorKind::VersionNotPublished | ErrorKind::VersionAborted => S3ErrorCode::NoSuchVersion,
        ErrorKind::InvalidArgument | ErrorKind::OutOfRange => S3ErrorCode::InvalidArgument,
        ErrorKind::AlreadyExists | ErrorKind::IsADirectory | ErrorKind::NotADirectory => {
            return path_conflict(e.message)
        }
        ErrorKind::NotEmpty => S3ErrorCode::BucketNotEmpty,
        ErrorKind::PreconditionFailed => S3ErrorCode::PreconditionFailed,
        // The upload took longer than garbage collection's grace: it must be sent again.
        ErrorKind::WriteExpired => S3ErrorCode::RequestTimeout,
        // Retry: the client library already committed again a few times; the S3 client's own
        // retry on 503 is the right next step.
        ErrorKind::Unavailable | ErrorKind::AuthFailed | ErrorKind::Retry => {
            S3ErrorCode::ServiceUnavailable
        }
        // Not a 503, which S3 clients retry for minutes: no space comes back by retrying at
        // once. S3 defines no code for it; MinIO answers 507 XMinioStorageFull.
        ErrorKind::NoSpace => {
            return custom(
                "XTomusStorageFull",
                http::StatusCode::INSUFFICIENT_STORAGE,
                e.message,
            )
        }
        ErrorKind::Corrupt | ErrorKind::Protocol | ErrorKind::Internal => {
            tracing::error!("store error: {e}");
            S3ErrorCode::InternalError
        }
    };
    s3_err(code, e.message)
}

/// `from_store` for lookups of objects.
pub fn object_err(e: Error) -> S3Error {
    from_store(e, Missing::Key)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn not_found_depends_on_what_was_looked_for() {
        let e = from_store(Error::not_found("x"), Missing::Bucket);
        assert_eq!(e.code(), &S3ErrorCode::NoSuchBucket);
        let e = from_store(Error::not_found("x"), Missing::Upload);
        assert_eq!(e.code(), &S3ErrorCode::NoSuchUpload);
        let e = object_err(Error::new(ErrorKind::NotADirectory, "a is a file"));
        assert_eq!(e.status_code(), Some(http::StatusCode::CONFLICT));
        let e = object_err(Error::invalid("bad"));
        assert_eq!(e.status_code(), Some(http::StatusCode::BAD_REQUEST));
        let e = object_err(Error::new(ErrorKind::NoSpace, "full"));
        assert_eq!(
            e.status_code(),
            Some(http::StatusCode::INSUFFICIENT_STORAGE)
        );
    }
}
