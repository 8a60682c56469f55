//! What ties a provider's data directory to its cluster, kept in small files beside the
//! chunks: the id the manager gave the provider (`provider.id`, so a restart keeps it and its
//! replicas stay reachable under it) and the id of the cluster it joined (`cluster.id`, so it
//! never joins another: a manager that does not know its chunks would take them all for
//! garbage), and the key it registers with (`registration.key`, so a registration sent again
//! after its answer was lost, even by a restarted provider, gets the id the first one got).

use std::path::{Path, PathBuf};

use tomus_metadata::ProviderId;
use tomus_wire::{ClusterId, Error, Result};

use crate::io_error;

const PROVIDER_FILE: &str = "provider.id";
const CLUSTER_FILE: &str = "cluster.id";
const KEY_FILE: &str = "registration.key";

/// The identity files of one data directory.
pub(crate) struct Identity {
    dir: PathBuf,
    fsync: bool,
}

impl Identity {
    pub fn new(dir: &Path, fsync: bool) -> Self {
        Identity {
            dir: dir.to_path_buf(),
            fsync,
        }
    }

    /// The provider id saved by an earlier run, if any. A damaged file is an error rather
    /// than a reason to register as a new provider, which would orphan the chunks stored
    /// under the old id.
    pub fn provider(&self) -> Result<Option<ProviderId>> {
        read(&self.dir.join(PROVIDER_FILE), "a provider id", |t| {
            t.parse().ok()
        })
    }

    pub fn save_provider(&self, id: ProviderId) -> Result<()> {
        write(&self.dir.join(PROVIDER_FILE), &id.to_string(), self.fsync)
    }

    /// The cluster this directory's data belongs to, if it joined one (a provider whose
    /// directory predates cluster ids joins and keeps the first it is told).
    pub fn cluster(&self) -> Result<Option<ClusterId>> {
        read(&self.dir.join(CLUSTER_FILE), "a cluster id", |t| {
            ClusterId::from_str_radix(t, 16).ok()
        })
    }

    /// This directory's registration key: drawn at random and saved the first time.
    pub fn registration_key(&self) -> Result<u128> {
        let path = self.dir.join(KEY_FILE);
        if let Some(key) = read(&path, "a registration key", |t| {
            u128::from_str_radix(t, 16).ok()
        })? {
            return Ok(key);
        }
        let key = rand::random::<u128>();
        write(&path, &format!("{key:032x}"), self.fsync)?;
        Ok(key)
    }

    pub fn save_cluster(&self, id: ClusterId) -> Result<()> {
        write(
            &self.dir.join(CLUSTER_FILE),
            &format!("{id:016x}"),
            self.fsync,
        )
    }
}

/// The value in `path` (`None` when there is no file), parsed by `parse`.
fn read<T>(path: &Path, what: &str, parse: impl Fn(&str) -> Option<T>) -> Result<Option<T>> {
    match std::fs::read_to_string(path) {
        Ok(text) => parse(text.trim()).map(Some).ok_or_else(|| {
            Error::internal(format!(
                "{} does not hold {what}: {:?}",
                path.display(),
                text.trim()
            ))
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(io_error(format_args!("reading {}", path.display()), e)),
    }
}

/// Saves `value` atomically (temp file and rename), so a crash never leaves a damaged file.
fn write(path: &Path, value: &str, fsync: bool) -> Result<()> {
    let tmp = path.with_extension("id.tmp");
    let write = || -> std::io::Result<()> {
        let file = std::fs::File::create(&tmp)?;
        std::io::Write::write_all(&mut &file, format!("{value}\n").as_bytes())?;
        if fsync {
            file.sync_all()?;
        }
        std::fs::rename(&tmp, path)?;
        if fsync {
            if let Some(dir) = path.parent() {
                std::fs::File::open(dir)?.sync_all()?;
            }
        }
        Ok(())
    };
    write().map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        io_error(format_args!("saving {}", path.display()), e)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::TempDir;
    use tomus_wire::ErrorKind;

    #[test]
    fn ids_round_trip_and_damage_is_an_error() {
        let dir = TempDir::new("id");
        let ids = Identity::new(dir.path(), true);
        assert_eq!(ids.provider().unwrap(), None);
        assert_eq!(ids.cluster().unwrap(), None);
        ids.save_provider(42).unwrap();
        ids.save_cluster(0xdead_beef_0000_0001).unwrap();
        assert_eq!(ids.provider().unwrap(), Some(42));
        assert_eq!(ids.cluster().unwrap(), Some(0xdead_beef_0000_0001));
        let unsynced = Identity::new(dir.path(), false);
        unsynced.save_provider(43).unwrap();
        assert_eq!(ids.provider().unwrap(), Some(43));
        std::fs::write(dir.path().join(PROVIDER_FILE), "forty-two").unwrap();
        assert_eq!(ids.provider().unwrap_err().kind, ErrorKind::Internal);
        std::fs::write(dir.path().join(CLUSTER_FILE), "not hex").unwrap();
        let e = ids.cluster().unwrap_err();
        assert!(e.message.contains("does not hold a cluster id"), "{e}");
    }

    #[test]
    fn the_registration_key_is_drawn_once_per_directory() {
        let dir = TempDir::new("key");
        let key = Identity::new(dir.path(), true).registration_key().unwrap();
        assert_eq!(
            Identity::new(dir.path(), true).registration_key().unwrap(),
            key
        );
        let other = TempDir::new("key-other");
        assert_ne!(
            Identity::new(other.path(), true)
                .registration_key()
                .unwrap(),
            key
        );
        std::fs::write(dir.path().join(KEY_FILE), "zz").unwrap();
        let e = Identity::new(dir.path(), true)
            .registration_key()
            .unwrap_err();
        assert!(
            e.message.contains("does not hold a registration key"),
            "{e}"
        );
    }
}
