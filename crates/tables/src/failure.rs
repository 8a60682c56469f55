//! redb's errors as tomus errors. Two need more than a message. A full disk is `NoSpace`, which
//! callers report as such (exit status 7, S3's 507-class answers) rather than as an internal
//! error. And once an I/O error failed a write (a full disk, a failing device), redb answers
//! `PreviousIo` to every later transaction until the file is reopened: a manager that stayed
//! up would refuse every write, even after space came back, until someone restarted it. The
//! process ends instead, as an HDFS NameNode does when it cannot write its edit log: the
//! supervisor's restart (`tomus up`, systemd) reopens the file, and redb recovers it from its
//! last commit. What was acknowledged is durable by then, which is what a crash relies on too.

use tomus_wire::{Error, ErrorKind};

/// Exit status of a process whose store must be reopened (EX_TEMPFAIL: try again later).
pub const EXIT_REOPEN_STORE: i32 = 75;

/// `e`, an error of the redb store `store` (named in messages, e.g. "manager state store"),
/// as a tomus error; ends the process when the store must be reopened (see the module docs).
pub fn store_error(store: &str, e: impl Into<redb::Error>) -> Error {
    match e.into() {
        redb::Error::PreviousIo => end_process(store),
        redb::Error::Io(io) if io.kind() == std::io::ErrorKind::StorageFull => {
            Error::new(ErrorKind::NoSpace, format!("{store}: {io}"))
        }
        other => Error::internal(format!("{store}: {other}")),
    }
}

#[expect(
    clippy::exit,
    reason = "no caller can recover the store: it must be reopened, and the process's \
              restart is what reopens it (see the module docs)"
)]
fn end_process(store: &str) -> ! {
    tracing::error!(
        "{store}: an earlier write failed on I/O (a full disk?) and redb takes no more \
         transactions until the file is reopened; ending the process so that a restart \
         reopens and recovers it (what was acknowledged is durable). If the disk is full, \
         free space where the store keeps its files."
    );
    std::process::exit(EXIT_REOPEN_STORE)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_disk_is_no_space_and_other_errors_are_internal() {
        let full = std::io::Error::from(std::io::ErrorKind::StorageFull);
        let e = store_error("test store", redb::StorageError::Io(full));
        assert_eq!(e.kind, ErrorKind::NoSpace);
        assert!(e.message.starts_with("test store: "), "{}", e.message);

        let e = store_error("test store", redb::StorageError::ValueTooLarge(1 << 40));
        assert_eq!(e.kind, ErrorKind::Internal);
    }
}
