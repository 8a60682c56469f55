//! `tomus.Namespace`: the cluster's directories and files (each file a blob), for the fsspec
//! file system in `tomus/fs.py`. Entries come back as dicts in fsspec's `info` shape.

use std::sync::Arc;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use tomus_client::CreateOptions;
use tomus_wire::{EntryKind, FsEntry, FsRetention, Retention};

use crate::blob::Blob;
use crate::client::Conn;
use crate::errors::{non_negative, storage_arg, to_py, version_arg};
use crate::runtime::block_on;
use crate::types::VersionInfo;

#[pyclass(frozen, module = "tomus")]
pub struct Namespace {
    pub conn: Arc<Conn>,
}

/// An entry as fsspec describes files: name (no leading `/`), type, size, and tomus's own
/// fields (version, blob, chunk_size, replication, created and mtime in Unix seconds).
fn entry_dict<'py>(py: Python<'py>, e: &FsEntry) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("name", &e.path)?;
    d.set_item("created", e.created_ms as f64 / 1000.0)?;
    match (&e.kind, &e.blob) {
        (EntryKind::File, Some(b)) => {
            d.set_item("type", "file")?;
            d.set_item("size", b.size)?;
            d.set_item("version", b.latest)?;
            d.set_item("blob", b.id)?;
            d.set_item("chunk_size", b.chunk_size)?;
            d.set_item("replication", b.replication)?;
            d.set_item("mtime", b.modified_ms as f64 / 1000.0)?;
        }
        // A registered file (workflows): its size is in its record (`registered_file`).
        (EntryKind::Registered, _) => {
            d.set_item("type", "file")?;
            d.set_item("registered", true)?;
            d.set_item("mtime", e.created_ms as f64 / 1000.0)?;
        }
        _ => {
            d.set_item("type", "directory")?;
            d.set_item("size", 0)?;
            d.set_item("mtime", e.created_ms as f64 / 1000.0)?;
        }
    }
    Ok(d)
}

/// A retention policy as a dict: `keep_all`, `keep_last` (versions) and `keep_newer_than`
/// (seconds), one of them set, and `path`, `type` and `from` (where the policy comes from:
/// the file itself, the directory that set it, or `None` for the default).
fn retention_dict<'py>(py: Python<'py>, r: &FsRetention) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("path", &r.path)?;
    let kind = match r.kind {
        EntryKind::File | EntryKind::Registered => "file",
        EntryKind::Dir => "directory",
    };
    d.set_item("type", kind)?;
    d.set_item("keep_all", r.retention == Retention::KeepAll)?;
    let (last, newer) = match r.retention {
        Retention::KeepAll => (None, None),
        Retention::KeepLast(n) => (Some(n), None),
        Retention::KeepNewerThan(ms) => (None, Some(ms as f64 / 1000.0)),
    };
    d.set_item("keep_last", last)?;
    d.set_item("keep_newer_than", newer)?;
    d.set_item("from", &r.from)?;
    Ok(d)
}

/// The policy `set_retention`'s keywords name (exactly one of them; `inherit`: none).
fn policy_arg(
    keep_last: Option<i64>,
    keep_newer_than: Option<f64>,
    keep_all: bool,
    inherit: bool,
) -> PyResult<Option<Retention>> {
    let given = [
        keep_last.is_some(),
        keep_newer_than.is_some(),
        keep_all,
        inherit,
    ];
    if given.iter().filter(|g| **g).count() != 1 {
        return Err(PyValueError::new_err(
            "give exactly one of keep_last=N, keep_newer_than=SECONDS, keep_all=True, \
             inherit=True",
        ));
    }
    if let Some(n) = keep_last {
        return match u32::try_from(n) {
            Ok(n) if n >= 1 => Ok(Some(Retention::KeepLast(n))),
            _ => Err(PyValueError::new_err(format!(
                "keep_last must be at least 1 (the latest version always stays), got {n}"
            ))),
        };
    }
    if let Some(s) = keep_newer_than {
        if !(s.is_finite() && s > 0.0) {
            return Err(PyValueError::new_err(format!(
                "keep_newer_than must be a positive number of seconds, got {s}"
            )));
        }
        return Ok(Some(Retention::KeepNewerThan((s * 1000.0).ceil() as u64)));
    }
    Ok(keep_all.then_some(Retention::KeepAll))
}

impl Namespace {
    /// Runs a namespace call with the GIL released.
    fn run<T: Send, F, Fut>(&self, py: Python<'_>, op: F) -> PyResult<T>
    where
        F: FnOnce(tomus_client::Namespace) -> Fut + Send,
        Fut: std::future::Future<Output = tomus_wire::Result<T>> + Send,
    {
        let conn = self.conn.clone();
        block_on(
            py,
            async move { op(conn.client().await?.namespace()).await },
        )?
        .map_err(to_py)
    }
}

#[pymethods]
impl Namespace {
    /// The entry at `path` (`NotFound` if none).
    fn stat<'py>(&self, py: Python<'py>, path: String) -> PyResult<Bound<'py, PyDict>> {
        let e = self.run(py, |ns| async move { ns.stat(&path).await })?;
        entry_dict(py, &e)
    }

    /// The children of a directory, or with `recursive` every entry below it, in path order.
    #[pyo3(signature = (path, recursive=false))]
    fn list<'py>(
        &self,
        py: Python<'py>,
        path: String,
        recursive: bool,
    ) -> PyResult<Vec<Bound<'py, PyDict>>> {
        let entries = self.run(py, |ns| async move {
            if recursive {
                ns.walk(&path).await
            } else {
                ns.list(&path).await
            }
        })?;
        entries.iter().map(|e| entry_dict(py, e)).collect()
    }

    /// Makes a directory (with `parents`: and its missing parents; existing is fine).
    #[pyo3(signature = (path, parents=false))]
    fn mkdir<'py>(
        &self,
        py: Python<'py>,
        path: String,
        parents: bool,
    ) -> PyResult<Bound<'py, PyDict>> {
        let e = self.run(py, |ns| async move { ns.mkdir(&path, parents).await })?;
        entry_dict(py, &e)
    }

    /// Creates a file on a new blob; an existing file is opened unless `exclusive`. Returns
    /// `(entry, blob)`. A new file (its entry at version 0) appears, with its missing parents,
    /// only when its first version is published; give it up with `abandon` otherwise.
    /// `storage`: the new file's storage class, `"disk"` or `"memory"` (an existing file
    /// keeps its own).
    // Defaults as literals (4 MiB): Python's signature (help(), stubtest) shows only those.
    #[pyo3(signature = (path, chunk_size=4_194_304, replication=1, exclusive=false, storage="disk"))]
    fn create<'py>(
        &self,
        py: Python<'py>,
        path: String,
        chunk_size: i64,
        replication: u32,
        exclusive: bool,
        storage: &str,
    ) -> PyResult<(Bound<'py, PyDict>, Blob)> {
        let options = CreateOptions {
            chunk_size: non_negative("chunk_size", chunk_size)?,
            replication,
            exclusive,
        };
        let storage = storage_arg(storage)?;
        let (e, b) = self.run(py, |ns| async move {
            ns.create_in(&path, options, None, storage).await
        })?;
        Ok((entry_dict(py, &e)?, Blob::new(self.conn.clone(), b)))
    }

    /// Gives up the new file `path` created on blob `blob` when nothing was published (a
    /// new file appears only with its first version); does nothing otherwise.
    fn abandon(&self, py: Python<'_>, path: String, blob: u64) -> PyResult<()> {
        self.run(py, |ns| async move { ns.abandon_new(&path, blob).await })
    }

    /// Opens an existing file: `(entry, blob)`.
    fn open<'py>(&self, py: Python<'py>, path: String) -> PyResult<(Bound<'py, PyDict>, Blob)> {
        let (e, b) = self.run(py, |ns| async move { ns.open(&path).await })?;
        Ok((entry_dict(py, &e)?, Blob::new(self.conn.clone(), b)))
    }

    /// Opens an existing file at one of its versions (`None`: the latest published), in one
    /// round trip: `(entry, blob, version record)`. Reads of that version through the blob
    /// then ask only the metadata DHT and the providers, never the manager.
    #[pyo3(signature = (path, version=None))]
    fn open_version<'py>(
        &self,
        py: Python<'py>,
        path: String,
        version: Option<i64>,
    ) -> PyResult<(Bound<'py, PyDict>, Blob, VersionInfo)> {
        let version = version_arg(version)?;
        let (o, b) = self.run(py, |ns| async move { ns.object(&path, version).await })?;
        let entry = entry_dict(py, &o.entry)?;
        Ok((
            entry,
            Blob::new(self.conn.clone(), b),
            VersionInfo::from(&o.version),
        ))
    }

    /// Moves a file or a directory tree; an existing file at `dst` is replaced.
    fn rename(&self, py: Python<'_>, src: String, dst: String) -> PyResult<()> {
        self.run(py, |ns| async move { ns.rename(&src, &dst).await })
    }

    /// Removes a file, or a directory (everything below it with `recursive`).
    #[pyo3(signature = (path, recursive=false))]
    fn delete(&self, py: Python<'_>, path: String, recursive: bool) -> PyResult<()> {
        self.run(py, |ns| async move { ns.delete(&path, recursive).await })
    }

    /// The retention policy of the file `path`, or the one the directory `path` gives the
    /// files created below it, and where it comes from.
    fn retention<'py>(&self, py: Python<'py>, path: String) -> PyResult<Bound<'py, PyDict>> {
        let r = self.run(py, |ns| async move { ns.retention(&path).await })?;
        retention_dict(py, &r)
    }

    /// Sets the policy of the file `path` (applied at once), or the one the directory
    /// `path` gives the files created below it from now on; `inherit=True` makes a
    /// directory follow its parent again. Returns the policy now in effect.
    #[pyo3(signature = (path, *, keep_last=None, keep_newer_than=None, keep_all=false, inherit=false))]
    fn set_retention<'py>(
        &self,
        py: Python<'py>,
        path: String,
        keep_last: Option<i64>,
        keep_newer_than: Option<f64>,
        keep_all: bool,
        inherit: bool,
    ) -> PyResult<Bound<'py, PyDict>> {
        let policy = policy_arg(keep_last, keep_newer_than, keep_all, inherit)?;
        let r = self.run(
            py,
            |ns| async move { ns.set_retention(&path, policy).await },
        )?;
        retention_dict(py, &r)
    }

    fn __repr__(&self) -> String {
        format!("<tomus.Namespace of {}>", self.conn.addr)
    }
}
