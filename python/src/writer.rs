//! `tomus.BlobWriter`: one version written in parts (a file object's write-behind). Whole
//! chunks are stored as they fill; nothing is visible until a commit publishes the version.

use std::sync::Mutex;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use crate::buffer::Buffer;
use crate::errors::{non_negative, to_py};
use crate::runtime::block_on;
use tomus_client::{Append, CommitOptions, Replace, WriteAt};

#[pyclass(frozen, module = "tomus")]
pub struct BlobWriter {
    /// `None` once committed.
    inner: Mutex<Option<tomus_client::BlobWriter>>,
}

impl BlobWriter {
    pub fn new(w: tomus_client::BlobWriter) -> Self {
        BlobWriter {
            inner: Mutex::new(Some(w)),
        }
    }

    fn take(&self) -> PyResult<tomus_client::BlobWriter> {
        self.inner
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
            .ok_or_else(committed)
    }
}

fn committed() -> PyErr {
    PyValueError::new_err("this writer was already committed")
}

#[pymethods]
impl BlobWriter {
    /// Adds `data` (any bytes-like object); whole chunks are stored right away.
    fn write(&self, py: Python<'_>, data: &Bound<'_, PyAny>) -> PyResult<()> {
        let data = Buffer::readable(data)?;
        let bytes = data.as_slice();
        let mut slot = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let w = slot.as_mut().ok_or_else(committed)?;
        block_on(py, w.write(bytes))?.map_err(to_py)
    }

    /// Bytes written so far.
    fn __len__(&self) -> PyResult<usize> {
        let slot = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        Ok(slot.as_ref().ok_or_else(committed)?.len() as usize)
    }

    /// Publishes the data as the blob's whole new content; returns the version. With
    /// `expect_size`, only if the blob's size (counting writes in flight) is that, else
    /// `PreconditionFailed` with nothing published.
    #[pyo3(signature = (expect_size=None))]
    fn commit_replace(&self, py: Python<'_>, expect_size: Option<i64>) -> PyResult<u64> {
        let expect_size = expect_size
            .map(|e| non_negative("expect_size", e))
            .transpose()?;
        let w = self.take()?;
        // Without a condition, rewriting an empty blob empty keeps its version (a file
        // closed unchanged); with one, the condition is always checked by a new version.
        let replace = Replace {
            reuse_empty: expect_size.is_none(),
        };
        let options = CommitOptions {
            expect_size,
            ..CommitOptions::default()
        };
        let info =
            block_on(py, async move { w.commit(replace, &options).await })?.map_err(to_py)?;
        Ok(info.version)
    }

    /// Publishes the data as one append: `(version, offset)`, or `None` if nothing was written.
    fn commit_append(&self, py: Python<'_>) -> PyResult<Option<(u64, u64)>> {
        let w = self.take()?;
        let info = block_on(py, w.commit(Append, &CommitOptions::default()))?.map_err(to_py)?;
        Ok(info.map(|v| (v.version, v.span.offset)))
    }

    /// Publishes the data as one write at `offset`: the version, or `None` if nothing was
    /// written.
    fn commit_write(&self, py: Python<'_>, offset: i64) -> PyResult<Option<u64>> {
        let offset = non_negative("offset", offset)?;
        let w = self.take()?;
        let at = WriteAt { offset };
        let info = block_on(py, w.commit(at, &CommitOptions::default()))?.map_err(to_py)?;
        Ok(info.map(|v| v.version))
    }
}
