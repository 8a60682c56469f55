//! Python buffers (bytes, bytearray, memoryview, numpy arrays, ...) as Rust slices that can be
//! used with the GIL released, without copying.
//!
//! The buffer export keeps the object alive and stops resizable objects (bytearray) from
//! resizing while we hold it. As with any extension that releases the GIL around a buffer,
//! another Python thread mutating the same memory during the call is the caller's race.

use pyo3::buffer::PyUntypedBuffer;
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;

/// A C-contiguous buffer held for the duration of one call.
pub struct Buffer {
    buf: PyUntypedBuffer,
}

impl Buffer {
    /// Any bytes-like object, read-only access.
    pub fn readable(obj: &Bound<'_, PyAny>) -> PyResult<Self> {
        Self::get(obj, "data")
    }

    /// A writable bytes-like object.
    pub fn writable(obj: &Bound<'_, PyAny>) -> PyResult<Self> {
        let b = Self::get(obj, "buf")?;
        if b.buf.readonly() {
            return Err(PyTypeError::new_err(format!(
                "buf must be a writable buffer (bytearray, numpy array, writable memoryview), \
                 not a read-only {}",
                type_name(obj)
            )));
        }
        Ok(b)
    }

    fn get(obj: &Bound<'_, PyAny>, what: &str) -> PyResult<Self> {
        let buf = PyUntypedBuffer::get(obj).map_err(|_| {
            PyTypeError::new_err(format!(
                "{what} must support the buffer protocol (bytes, bytearray, memoryview, \
                 numpy array), not {}",
                type_name(obj)
            ))
        })?;
        if !buf.is_c_contiguous() {
            return Err(PyValueError::new_err(format!(
                "{what} must be C-contiguous (got a strided {}; copy it first, e.g. \
                 numpy.ascontiguousarray)",
                type_name(obj)
            )));
        }
        Ok(Buffer { buf })
    }

    pub fn byte_len(&self) -> usize {
        self.buf.len_bytes()
    }

    /// The bytes (a plain slice, so it can move into a GIL-released closure).
    pub fn as_slice(&self) -> &[u8] {
        if self.byte_len() == 0 {
            return &[];
        }
        // SAFETY: the exporter guarantees `len` contiguous readable bytes at `buf_ptr`, kept
        // alive and in place while `self` holds the export.
        unsafe { std::slice::from_raw_parts(self.buf.buf_ptr() as *const u8, self.byte_len()) }
    }

    /// The bytes for writing (checked writable by [`Buffer::writable`]).
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        if self.byte_len() == 0 {
            return &mut [];
        }
        // SAFETY: as for `as_slice`, and the export was checked writable; `&mut self` makes
        // this the only Rust view of the memory.
        unsafe { std::slice::from_raw_parts_mut(self.buf.buf_ptr() as *mut u8, self.byte_len()) }
    }
}

fn type_name(obj: &Bound<'_, PyAny>) -> String {
    obj.get_type()
        .name()
        .map(|n| n.to_string())
        .unwrap_or_else(|_| "object".into())
}
