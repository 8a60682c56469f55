//! Read-only records returned by the API: versions, blobs, providers.

use pyo3::prelude::*;
use pyo3::types::PyTuple;
use tomus_wire::VersionState;

/// One version of a blob: the range it wrote and the blob's size after it.
#[pyclass(frozen, get_all, eq, module = "tomus")]
#[derive(Clone, PartialEq)]
pub struct VersionInfo {
    pub blob: u64,
    pub version: u64,
    /// "published", "pending" or "aborted".
    pub state: &'static str,
    /// Whether the write was an append.
    pub append: bool,
    /// Where the write landed.
    pub offset: u64,
    /// How many bytes it wrote.
    pub length: u64,
    /// Blob size at this version.
    pub size: u64,
}

impl From<&tomus_wire::VersionInfo> for VersionInfo {
    fn from(v: &tomus_wire::VersionInfo) -> Self {
        VersionInfo {
            blob: v.blob,
            version: v.version,
            state: match v.state {
                VersionState::Pending => "pending",
                VersionState::Published => "published",
                VersionState::Aborted => "aborted",
            },
            append: v.append,
            offset: v.span.offset,
            length: v.span.size,
            size: v.size,
        }
    }
}

#[pymethods]
impl VersionInfo {
    fn __repr__(&self) -> String {
        format!(
            "VersionInfo(blob={}, version={}, state='{}', append={}, offset={}, length={}, size={})",
            self.blob,
            self.version,
            self.state,
            if self.append { "True" } else { "False" },
            self.offset,
            self.length,
            self.size
        )
    }
}

/// The versions of a blob: the published ones (a sequence of `VersionInfo`, oldest first) and
/// the ranges `[start, end)` of version numbers that were aborted.
#[pyclass(frozen, module = "tomus", sequence)]
pub struct VersionList {
    #[pyo3(get)]
    pub versions: Vec<VersionInfo>,
    #[pyo3(get)]
    pub aborted: Vec<(u64, u64)>,
}

impl From<&tomus_wire::VersionList> for VersionList {
    fn from(l: &tomus_wire::VersionList) -> Self {
        VersionList {
            versions: l.versions.iter().map(VersionInfo::from).collect(),
            aborted: l.aborted.clone(),
        }
    }
}

#[pymethods]
impl VersionList {
    fn __len__(&self) -> usize {
        self.versions.len()
    }

    fn __getitem__(&self, index: isize) -> PyResult<VersionInfo> {
        let n = self.versions.len() as isize;
        let i = if index < 0 { index + n } else { index };
        if (0..n).contains(&i) {
            Ok(self.versions[i as usize].clone())
        } else {
            Err(pyo3::exceptions::PyIndexError::new_err(
                "version list index out of range",
            ))
        }
    }

    fn __iter__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        PyTuple::new(py, self.versions.iter().cloned())?
            .as_any()
            .try_iter()
            .map(Bound::into_any)
    }

    fn __repr__(&self) -> String {
        let latest = self.versions.last().map_or(0, |v| v.version);
        format!(
            "VersionList({} published, latest {latest}, aborted {:?})",
            self.versions.len(),
            self.aborted
        )
    }
}

/// A blob as listed by the manager.
#[pyclass(frozen, get_all, eq, module = "tomus")]
#[derive(Clone, PartialEq)]
pub struct BlobInfo {
    pub id: u64,
    pub chunk_size: u64,
    pub replication: u32,
    /// Latest published version (0: nothing written yet).
    pub latest: u64,
    /// Size at the latest published version.
    pub size: u64,
}

impl From<&tomus_wire::BlobInfo> for BlobInfo {
    fn from(b: &tomus_wire::BlobInfo) -> Self {
        BlobInfo {
            id: b.id,
            chunk_size: b.chunk_size,
            replication: b.replication,
            latest: b.latest,
            size: b.size,
        }
    }
}

#[pymethods]
impl BlobInfo {
    fn __repr__(&self) -> String {
        format!(
            "BlobInfo(id={}, chunk_size={}, replication={}, latest={}, size={})",
            self.id, self.chunk_size, self.replication, self.latest, self.size
        )
    }
}

/// A storage provider as the manager last saw it.
#[pyclass(frozen, get_all, eq, module = "tomus")]
#[derive(Clone, PartialEq)]
pub struct ProviderInfo {
    pub id: u32,
    pub addr: String,
    pub host: String,
    pub capacity: u64,
    pub free: u64,
    pub chunks: u64,
    /// Requests in progress at its last report.
    pub load: u32,
    pub alive: bool,
    /// Being drained (`tomus provider drain`): no new data; repair moves its data away.
    pub draining: bool,
    /// Why it reported it cannot keep data (its data directory vanished); `None` when sound.
    pub fault: Option<String>,
    /// `"up"`, `"draining"`, `"down"` or `"failed"`, as `tomus status` names it.
    pub state: &'static str,
}

impl From<&tomus_wire::ProviderInfo> for ProviderInfo {
    fn from(p: &tomus_wire::ProviderInfo) -> Self {
        ProviderInfo {
            id: p.id,
            addr: p.addr.clone(),
            host: p.host.clone(),
            capacity: p.capacity,
            free: p.free,
            chunks: p.chunks,
            load: p.load,
            alive: p.alive,
            draining: p.draining,
            fault: p.fault.clone(),
            state: p.state().name(),
        }
    }
}

#[pymethods]
impl ProviderInfo {
    fn __repr__(&self) -> String {
        format!(
            "ProviderInfo(id={}, addr='{}', state='{}', alive={}, draining={}, capacity={}, free={}, chunks={}{})",
            self.id,
            self.addr,
            self.state,
            if self.alive { "True" } else { "False" },
            if self.draining { "True" } else { "False" },
            self.capacity,
            self.free,
            self.chunks,
            match &self.fault {
                Some(f) => format!(", fault={f:?}"),
                None => String::new(),
            }
        )
    }
}
