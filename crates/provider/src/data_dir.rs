//! Whether the directories the provider opened are still there. A data directory removed
//! under a running provider (a scratch cleanup's `rm -rf`, an unmounted volume) takes every
//! chunk with it; without this check the provider would go on heartbeating as up, with 0
//! bytes free, and writes would fail with "not enough free space" while the disk is empty.

use std::path::Path;
use std::sync::OnceLock;

use tomus_wire::disk_space::disk_space;
use tomus_wire::held_dir::HeldDir;
use tomus_wire::Result;

/// The directories to watch, each held open.
pub(crate) struct DataDirWatch {
    dirs: Vec<HeldDir>,
    fault: OnceLock<String>,
}

impl DataDirWatch {
    /// Opens each directory of `dirs`, which must exist; the first is the data directory
    /// ([`DataDirWatch::space`]).
    pub fn open(dirs: &[&Path]) -> Result<Self> {
        let dirs = dirs
            .iter()
            .map(|dir| HeldDir::open(dir))
            .collect::<Result<_>>()?;
        Ok(DataDirWatch {
            dirs,
            fault: OnceLock::new(),
        })
    }

    /// The capacity and free space of the data directory's file system, and the fault
    /// [`DataDirWatch::check`] finds, if any (blocking). A faulted provider takes no data:
    /// its space is reported as none, without a `statvfs` of a directory found gone (which
    /// would only log a warning at every look).
    pub fn space(&self) -> ((u64, u64), Option<String>) {
        let fault = self.check();
        let space = match (&fault, self.dirs.first()) {
            (None, Some(dir)) => disk_space(dir.path()),
            _ => (0, 0),
        };
        (space, fault)
    }

    /// The fault [`DataDirWatch::check`] found, if any (no look at the disk).
    pub fn fault(&self) -> Option<String> {
        self.fault.get().cloned()
    }

    /// What is wrong, if anything (blocking: it stats each directory twice). A fault stays
    /// once found: chunks that vanished with a directory do not come back when one of the
    /// same name does, and the provider's index of them is only rebuilt by a restart.
    pub fn check(&self) -> Option<String> {
        if let Some(fault) = self.fault.get() {
            return Some(fault.clone());
        }
        let problem = self.dirs.iter().find_map(|dir| dir.problem("provider"))?;
        let fault = self.fault.get_or_init(|| {
            tracing::error!(
                "{problem}: the chunks stored there are lost to this provider; it reports the \
                 fault to the manager, which places nothing here and has repair copy what it \
                 held from other replicas. Restart the provider to serve again."
            );
            problem
        });
        Some(fault.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::TempDir;

    #[test]
    fn removed_and_replaced_directories_are_faults_that_stay() {
        let root = TempDir::new("watch");
        let data = root.path().join("data");
        std::fs::create_dir(&data).unwrap();
        let watch = DataDirWatch::open(&[&data]).unwrap();
        assert_eq!(watch.check(), None);

        std::fs::remove_dir(&data).unwrap();
        let fault = watch.check().unwrap();
        assert!(fault.contains("was removed"), "{fault}");
        // Made again under the same name: still the first fault.
        std::fs::create_dir(&data).unwrap();
        assert_eq!(watch.check(), Some(fault));

        // Moved aside and another made in its place (a plain removal and re-creation reads as
        // removed: the old directory has no links left).
        let replaced = DataDirWatch::open(&[&data]).unwrap();
        std::fs::rename(&data, root.path().join("aside")).unwrap();
        std::fs::create_dir(&data).unwrap();
        let fault = replaced.check().unwrap();
        assert!(fault.contains("was replaced"), "{fault}");
    }

    #[test]
    fn a_missing_directory_cannot_be_watched() {
        let root = TempDir::new("watch-missing");
        let err = DataDirWatch::open(&[&root.path().join("absent")])
            .err()
            .unwrap();
        assert!(err.message.contains("absent"), "{}", err.message);
    }
}
