//! tomus errors as Python exceptions.
//!
//! The exception classes live in `tomus/errors.py` (they need multiple inheritance, e.g.
//! `NotFound` is also a `FileNotFoundError`); this module hands each error to that module's
//! `_from_native(kind, message)`, keyed by the kind's name. `error_kinds` lists every kind's
//! name, so the Python tests can check that each has a class of its own.

use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use tomus_wire::ErrorKind;

static FROM_NATIVE: PyOnceLock<Py<PyAny>> = PyOnceLock::new();

/// The Python exception for a tomus error.
pub fn to_py(e: tomus_wire::Error) -> PyErr {
    Python::attach(|py| {
        let kind = kind_name(e.kind);
        let make = FROM_NATIVE.get_or_try_init(py, || {
            py.import("tomus.errors")?
                .getattr("_from_native")
                .map(Bound::unbind)
        });
        let exc = make.and_then(|f| f.call1(py, (kind.as_str(), e.message.as_str())));
        match exc {
            Ok(exc) => PyErr::from_value(exc.into_bound(py)),
            Err(_) => PyRuntimeError::new_err(format!("{kind}: {}", e.message)),
        }
    })
}

/// The name a kind is known by in Python (`TomusError.kind`): its Rust name.
fn kind_name(kind: ErrorKind) -> String {
    format!("{kind:?}")
}

/// The name of every error kind of the wire protocol (`TomusError.kind` values).
#[pyfunction]
pub fn error_kinds() -> Vec<String> {
    ErrorKind::ALL.iter().copied().map(kind_name).collect()
}

/// A non-negative integer argument as `u64` (`ValueError` otherwise).
pub fn non_negative(name: &str, v: i64) -> PyResult<u64> {
    u64::try_from(v).map_err(|_| PyValueError::new_err(format!("{name} must be >= 0, got {v}")))
}

/// A storage class argument: `"disk"` or `"memory"` (`ValueError` otherwise).
pub fn storage_arg(s: &str) -> PyResult<tomus_wire::StorageClass> {
    tomus_wire::StorageClass::parse(s).ok_or_else(|| {
        PyValueError::new_err(format!("storage must be \"disk\" or \"memory\", got {s:?}"))
    })
}

/// An optional version argument (`None`: the latest published).
pub fn version_arg(v: Option<i64>) -> PyResult<Option<u64>> {
    v.map(|v| non_negative("version", v)).transpose()
}
