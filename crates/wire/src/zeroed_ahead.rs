//! Zeros kept written ahead of an append-only log's records: the providers' metadata and
//! small-chunk logs and the manager's publication journal.
//!
//! A record appended inside written zeros changes neither the file's size nor its block
//! map, so its fdatasync writes the data alone. Appended past the end of the file, every
//! fdatasync also writes the inode (the new size), a second synchronous I/O: on a 2-core
//! VM's virtio disk (ext4) a 4 KiB write and fdatasync took a median 256 µs at the end of a
//! file and 116–131 µs inside written zeros. Whoever opens such a log stops reading its
//! records at the zeros and cuts them off.

use std::fmt::Display;
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;

/// Bytes of zeros kept written ahead of a log's end; refilled once less than half is left,
/// so a refill (one write and one sync) comes once per half of this appended.
pub const ZEROED_AHEAD: u64 = 1 << 20;

/// How far a log file holds zeros written ahead of its records. Only a hint: where it is
/// wrong (the file was cut or replaced), appends just extend the file as they would without
/// it.
#[derive(Debug, Default)]
pub struct ZeroedAhead {
    /// The end of the written zeros (0: none known).
    end: u64,
}

impl ZeroedAhead {
    /// Writes zeros from the end of the valid records (`len`) to `len + ZEROED_AHEAD`, and
    /// makes them durable with `sync`, once less than half of that is left. Best effort: a
    /// failure (a full disk) is logged at debug level naming `log`, and appends go on past
    /// the end of the file (a full disk must not stop appends that fit).
    pub fn refill(
        &mut self,
        file: &File,
        len: u64,
        log: &dyn Display,
        sync: impl FnOnce(&File) -> io::Result<()>,
    ) {
        if self.end >= len + ZEROED_AHEAD / 2 {
            return;
        }
        let from = self.end.max(len);
        let to = len + ZEROED_AHEAD;
        let zeros = vec![0u8; (to - from) as usize];
        match file.write_all_at(&zeros, from).and_then(|()| sync(file)) {
            Ok(()) => self.end = to,
            Err(e) => {
                tracing::debug!("cannot write zeros ahead of {log}: {e}");
                // Zeros half written past `len` are harmless: opening cuts them off.
                self.end = 0;
            }
        }
    }

    /// Forgets the zeros: the file was cut back or replaced.
    pub fn forget(&mut self) {
        self.end = 0;
    }
}

/// Cuts a log after its last intact record (`valid` bytes) when replay found `damage` after
/// it: a write torn by a crash must not sit in front of the records appended later. Zeros
/// alone after the records are the space written ahead ([`ZeroedAhead`]): cut quietly.
pub fn drop_torn_tail(
    file: &File,
    path: &std::path::Path,
    what: &str,
    valid: u64,
    damage: &dyn Display,
    fsync: bool,
) -> io::Result<()> {
    let file_len = file.metadata()?.len();
    if zero_tail(file, valid)? {
        tracing::debug!(
            "{what} {}: cutting {} bytes of zeros written ahead at offset {valid}",
            path.display(),
            file_len - valid
        );
    } else {
        tracing::warn!(
            "{what} {}: {damage} at offset {valid}; dropping the last {} bytes \
             (torn write after a crash?)",
            path.display(),
            file_len - valid
        );
    }
    file.set_len(valid)?;
    if fsync {
        file.sync_all()?;
    }
    Ok(())
}

/// Whether every byte of `file` from `from` to its end is zero.
pub fn zero_tail(file: &File, from: u64) -> io::Result<bool> {
    let end = file.metadata()?.len();
    let mut buf = vec![0u8; (end.saturating_sub(from)).min(1 << 20) as usize];
    let mut at = from;
    while at < end {
        let n = ((end - at) as usize).min(buf.len());
        file.read_exact_at(&mut buf[..n], at)?;
        if buf[..n].iter().any(|&b| b != 0) {
            return Ok(false);
        }
        at += n as u64;
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A scratch file holding `len` bytes of 7s, removed when dropped.
    struct Scratch(std::path::PathBuf, File);

    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
        }
    }

    fn file_of(name: &str, len: u64) -> Scratch {
        let path =
            std::env::temp_dir().join(format!("tomus-zeroed-ahead-{}-{name}", std::process::id()));
        let file = File::options()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .unwrap();
        file.write_all_at(&vec![7u8; len as usize], 0).unwrap();
        Scratch(path, file)
    }

    #[test]
    fn refills_once_less_than_half_the_zeros_are_left() {
        let scratch = file_of("refills", 100);
        let file = &scratch.1;
        let mut zeroed = ZeroedAhead::default();
        let mut syncs = 0;
        zeroed.refill(file, 100, &"test log", |f| {
            syncs += 1;
            f.sync_data()
        });
        assert_eq!(file.metadata().unwrap().len(), 100 + ZEROED_AHEAD);
        let mut tail = vec![1u8; ZEROED_AHEAD as usize];
        file.read_exact_at(&mut tail, 100).unwrap();
        assert!(tail.iter().all(|&b| b == 0));
        let mut head = [0u8; 100];
        file.read_exact_at(&mut head, 0).unwrap();
        assert!(head.iter().all(|&b| b == 7), "the records are untouched");

        // Half left: nothing written.
        zeroed.refill(file, 100 + ZEROED_AHEAD / 2, &"test log", |_| {
            syncs += 1;
            Ok(())
        });
        assert_eq!(syncs, 1);
        // Less than half left: topped up to a whole ZEROED_AHEAD past the records.
        let len = 100 + ZEROED_AHEAD / 2 + 1;
        zeroed.refill(file, len, &"test log", |f| {
            syncs += 1;
            f.sync_data()
        });
        assert_eq!(syncs, 2);
        assert_eq!(file.metadata().unwrap().len(), len + ZEROED_AHEAD);
    }

    #[test]
    fn a_failed_sync_forgets_the_zeros_and_the_next_refill_writes_them_again() {
        let scratch = file_of("fails", 10);
        let file = &scratch.1;
        let mut zeroed = ZeroedAhead::default();
        zeroed.refill(file, 10, &"test log", |_| {
            Err(io::Error::other("disk full"))
        });
        let mut again = false;
        zeroed.refill(file, 10, &"test log", |_| {
            again = true;
            Ok(())
        });
        assert!(again);
        zeroed.forget();
        let mut after_forget = false;
        zeroed.refill(file, 10, &"test log", |_| {
            after_forget = true;
            Ok(())
        });
        assert!(after_forget);
    }
}
