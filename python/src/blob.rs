//! `tomus.Blob`: one versioned blob. Every call releases the GIL while it talks to the cluster.

use std::sync::Arc;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyTuple};
use tomus_wire::{trace, Error};

use crate::buffer::Buffer;
use crate::client::{ClientHandle, Conn};
use crate::errors::{non_negative, to_py, version_arg};
use crate::runtime::{block_on, ForkLocal};
use crate::types::{VersionInfo, VersionList};
use crate::writer::BlobWriter;

/// A handle on one blob. Thread-safe; usable after `fork()` and picklable (reopened on first use).
#[pyclass(frozen, module = "tomus")]
pub struct Blob {
    conn: Arc<Conn>,
    id: u64,
    chunk_size: u64,
    replication: u32,
    handle: ForkLocal<tomus_client::Blob>,
}

impl Blob {
    pub fn new(conn: Arc<Conn>, blob: tomus_client::Blob) -> Self {
        Blob {
            conn,
            id: blob.id(),
            chunk_size: blob.chunk_size(),
            replication: blob.replication(),
            handle: ForkLocal::new(Some(blob)),
        }
    }

    /// This process's handle (reopened after a fork or unpickling).
    async fn blob(&self) -> tomus_wire::Result<tomus_client::Blob> {
        if let Some(b) = self.handle.get() {
            return Ok(b);
        }
        let b = self.conn.client().await?.open_blob(self.id).await?;
        self.handle.set(b.clone());
        Ok(b)
    }

    /// Runs `op` on this process's handle with the GIL released; tomus errors become Python
    /// exceptions.
    fn run<'a, T, F, Fut>(&'a self, py: Python<'_>, op: F) -> PyResult<T>
    where
        F: FnOnce(tomus_client::Blob) -> Fut + Send + 'a,
        Fut: std::future::Future<Output = tomus_wire::Result<T>> + Send + 'a,
        T: Send,
    {
        block_on(py, async move { op(self.blob().await?).await })?.map_err(to_py)
    }
}

/// A new `bytes` of `len` bytes filled by `fill`, which runs with the GIL released. Like
/// `PyBytes::new_with`, but the zeroing before the fill also runs without the GIL (for a
/// 64 MiB read it would otherwise hold the GIL ~20 ms).
fn new_bytes<'py, T>(
    py: Python<'py>,
    len: usize,
    fill: impl FnOnce(&mut [u8]) -> PyResult<T>,
) -> PyResult<Bound<'py, PyBytes>> {
    struct Memory(*mut u8, usize);
    // SAFETY: the memory belongs to a bytes object no other code can see until we return it.
    unsafe impl Send for Memory {}
    let size = isize::try_from(len)
        .map_err(|_| PyValueError::new_err(format!("size {len} is too large")))?;
    // SAFETY: PyBytes_FromStringAndSize(NULL, n) returns a new reference to a bytes object
    // with n uninitialized bytes (or NULL with an exception set); until it is returned nothing
    // else refers to it, so filling it in place is allowed.
    unsafe {
        let obj = Bound::from_owned_ptr_or_err(
            py,
            pyo3::ffi::PyBytes_FromStringAndSize(std::ptr::null(), size),
        )?;
        let memory = Memory(pyo3::ffi::PyBytes_AsString(obj.as_ptr()).cast::<u8>(), len);
        let zeroed = py.detach(move || {
            std::ptr::write_bytes(memory.0, 0, memory.1);
            memory
        });
        fill(std::slice::from_raw_parts_mut(zeroed.0, zeroed.1))?;
        Ok(obj.cast_into_unchecked())
    }
}

/// The length of the range of `size` bytes (`None`: to the end) at `offset` of the version `info`
/// describes; for a range past its end, the `OutOfRange` error the Rust client gives.
fn read_len(info: &tomus_wire::VersionInfo, offset: u64, size: Option<u64>) -> Result<u64, Error> {
    let past_end = |range: String| {
        Error::out_of_range(format!(
            "{range} is past the end of blob {} at version {} (size {})",
            info.blob, info.version, info.size
        ))
    };
    let Some(size) = size else {
        return info
            .size
            .checked_sub(offset)
            .ok_or_else(|| past_end(format!("offset {offset}")));
    };
    // In u128, where offset + size cannot overflow: the message names the real end.
    let end = u128::from(offset) + u128::from(size);
    if end > u128::from(info.size) {
        return Err(past_end(format!("range {offset}..{end}")));
    }
    Ok(size)
}

/// Reopens a blob from its pickled state, without contacting the cluster yet.
#[pyfunction]
pub fn restore_blob(client: &ClientHandle, id: u64, chunk_size: u64, replication: u32) -> Blob {
    Blob {
        conn: client.conn.clone(),
        id,
        chunk_size,
        replication,
        handle: ForkLocal::new(None),
    }
}

#[pymethods]
impl Blob {
    #[getter]
    fn id(&self) -> u64 {
        self.id
    }

    #[getter]
    fn chunk_size(&self) -> u64 {
        self.chunk_size
    }

    #[getter]
    fn replication(&self) -> u32 {
        self.replication
    }

    /// Writes `data` (any bytes-like object) at `offset`; returns the new version.
    fn write(&self, py: Python<'_>, offset: i64, data: &Bound<'_, PyAny>) -> PyResult<u64> {
        let offset = non_negative("offset", offset)?;
        let data = Buffer::readable(data)?;
        let bytes = data.as_slice();
        self.run(py, |b| async move { b.write(offset, bytes).await })
    }

    /// Appends `data`; returns `(version, offset it landed at)`.
    fn append(&self, py: Python<'_>, data: &Bound<'_, PyAny>) -> PyResult<(u64, u64)> {
        let data = Buffer::readable(data)?;
        let bytes = data.as_slice();
        self.run(py, |b| async move { b.append(bytes).await })
    }

    /// Makes `data` the whole content (the new version's size is `len(data)`, whatever the
    /// previous size); returns the new version.
    fn replace(&self, py: Python<'_>, data: &Bound<'_, PyAny>) -> PyResult<u64> {
        let data = Buffer::readable(data)?;
        let bytes = data.as_slice();
        self.run(py, |b| async move { b.replace(bytes).await })
    }

    /// A writer that stores data chunk by chunk and publishes it as one version on commit.
    fn writer(&self, py: Python<'_>) -> PyResult<BlobWriter> {
        let w = self.run(py, |b| async move { Ok(b.writer()) })?;
        Ok(BlobWriter::new(w))
    }

    /// Reads `size` bytes at `offset` of `version` (`size=None`: to the end; `version=None`: the
    /// latest published).
    #[pyo3(signature = (offset=0, size=None, version=None))]
    fn read<'py>(
        &self,
        py: Python<'py>,
        offset: i64,
        size: Option<i64>,
        version: Option<i64>,
    ) -> PyResult<Bound<'py, PyBytes>> {
        let offset = non_negative("offset", offset)?;
        let size = size.map(|s| non_negative("size", s)).transpose()?;
        let version = version_arg(version)?;
        // The version's record comes first: `size` is the caller's number, so it is checked
        // against the version's size before a buffer of that size exists, and the bytes are
        // then read from that same version (its size and content are one snapshot).
        // Both steps are one read: one request id for their requests (see tomus_wire::trace).
        let request = trace::new_id();
        let info = self.run(py, |b| {
            trace::scope(request, async move { b.stat(version).await })
        })?;
        let len = read_len(&info, offset, size).map_err(to_py)?;
        let len = usize::try_from(len)
            .map_err(|_| PyValueError::new_err(format!("size {len} is too large")))?;
        new_bytes(py, len, |out| {
            self.run(py, |b| {
                trace::scope(request, async move {
                    b.read_version_into(&info, offset, out).await
                })
            })
        })
    }

    /// Fills `buf` (a writable, C-contiguous buffer: bytearray, numpy array, memoryview) with
    /// the bytes at `offset` of `version`, in place; returns the version read.
    #[pyo3(signature = (buf, offset=0, version=None))]
    fn read_into(
        &self,
        py: Python<'_>,
        buf: &Bound<'_, PyAny>,
        offset: i64,
        version: Option<i64>,
    ) -> PyResult<u64> {
        let offset = non_negative("offset", offset)?;
        let version = version_arg(version)?;
        let mut buf = Buffer::writable(buf)?;
        let out = buf.as_mut_slice();
        self.run(
            py,
            |b| async move { b.read_into(offset, out, version).await },
        )
    }

    /// The latest published version (0: nothing written yet).
    fn latest(&self, py: Python<'_>) -> PyResult<u64> {
        self.run(py, |b| async move { b.latest().await })
    }

    /// The blob's size at `version` (`None`: the latest published).
    #[pyo3(signature = (version=None))]
    fn size(&self, py: Python<'_>, version: Option<i64>) -> PyResult<u64> {
        let version = version_arg(version)?;
        self.run(py, |b| async move { b.size(version).await })
    }

    /// The record of `version` (`None`: the latest published).
    #[pyo3(signature = (version=None))]
    fn stat(&self, py: Python<'_>, version: Option<i64>) -> PyResult<VersionInfo> {
        let version = version_arg(version)?;
        let info = self.run(py, |b| async move { b.stat(version).await })?;
        Ok(VersionInfo::from(&info))
    }

    /// Every published version, and the aborted ranges.
    fn versions(&self, py: Python<'_>) -> PyResult<VersionList> {
        let list = self.run(py, |b| async move { b.versions().await })?;
        Ok(VersionList::from(&list))
    }

    /// Where `[offset, offset + size)` of `version` is stored: `[(offset, size, [provider
    /// address, ...]), ...]` (no addresses: a hole that reads as zeros).
    #[pyo3(signature = (offset=0, size=None, version=None))]
    fn locations(
        &self,
        py: Python<'_>,
        offset: i64,
        size: Option<i64>,
        version: Option<i64>,
    ) -> PyResult<Vec<(u64, u64, Vec<String>)>> {
        let offset = non_negative("offset", offset)?;
        let version = version_arg(version)?;
        let size = size.map(|s| non_negative("size", s)).transpose()?;
        let locs = self.run(py, |b| async move {
            let info = b.stat(version).await?;
            let size = read_len(&info, offset, size)?;
            b.locations(offset, size, Some(info.version)).await
        })?;
        Ok(locs
            .into_iter()
            .map(|l| (l.offset, l.size, l.providers))
            .collect())
    }

    fn __repr__(&self) -> String {
        format!(
            "Blob(id={}, chunk_size={}, replication={}, addr='{}')",
            self.id, self.chunk_size, self.replication, self.conn.addr
        )
    }

    fn __reduce__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        let restore = py.import("tomus._native")?.getattr("restore_blob")?;
        let client = Bound::new(
            py,
            ClientHandle {
                conn: self.conn.clone(),
            },
        )?;
        let args = (client, self.id, self.chunk_size, self.replication);
        PyTuple::new(py, [restore, args.into_pyobject(py)?.into_any()])
    }
}
