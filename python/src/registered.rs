//! Registered files (workflows) for Python: register a local file in O(1), read a registered
//! file's record, fetch it from its holders (direct or swarm), verified. The GIL is released
//! during every call. Records and reports are plain dicts, which the pure-Python
//! `tomus.workflow` package builds on.

use std::path::PathBuf;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};
use tomus_client::registered::{FetchMode, FetchReport, RegisterOptions};
use tomus_wire::RegisteredFile;

use crate::client::ClientHandle;
use crate::errors::to_py;
use crate::runtime::block_on;

fn record<'py>(py: Python<'py>, f: &RegisteredFile) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("path", format!("/{}", f.path))?;
    d.set_item("size", f.size)?;
    d.set_item("checksum", f.checksum)?;
    let holders: Vec<Bound<'py, PyDict>> = f
        .holders
        .iter()
        .map(|h| {
            let hd = PyDict::new(py);
            hd.set_item("provider", h.provider)?;
            hd.set_item("addr", &h.addr)?;
            hd.set_item("alive", h.alive)?;
            hd.set_item("name", &h.name)?;
            Ok(hd)
        })
        .collect::<PyResult<_>>()?;
    d.set_item("holders", holders)?;
    d.set_item("hints", f.hints.clone())?;
    d.set_item("created_ms", f.created_ms)?;
    Ok(d)
}

fn report<'py>(py: Python<'py>, r: &FetchReport) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("bytes", r.bytes)?;
    d.set_item("served", r.served.clone())?;
    d.set_item("failures", r.failures.clone())?;
    Ok(d)
}

/// Registers the local file `local` as `path` without copying it (a provider of this host
/// hard-links it; same file system required). Returns the file's record.
#[pyfunction]
#[pyo3(signature = (client, local, path, *, provider=None, hints=None))]
pub fn register_file<'py>(
    py: Python<'py>,
    client: &ClientHandle,
    local: PathBuf,
    path: String,
    provider: Option<String>,
    hints: Option<Vec<(String, String)>>,
) -> PyResult<Bound<'py, PyDict>> {
    let conn = client.conn.clone();
    let options = RegisterOptions {
        provider,
        hints: hints.unwrap_or_default(),
    };
    let f = block_on(py, async move {
        conn.client()
            .await?
            .register_file(&local, &path, options)
            .await
    })?
    .map_err(to_py)?;
    record(py, &f)
}

/// The record of the registered file `path` (size, checksum, holders, hints).
#[pyfunction]
#[pyo3(signature = (client, path, *, wait_checksum=false))]
pub fn registered_file<'py>(
    py: Python<'py>,
    client: &ClientHandle,
    path: String,
    wait_checksum: bool,
) -> PyResult<Bound<'py, PyDict>> {
    let conn = client.conn.clone();
    let f = block_on(py, async move {
        let c = conn.client().await?;
        if wait_checksum {
            c.registered_checked(&path).await
        } else {
            c.registered(&path).await
        }
    })?
    .map_err(to_py)?;
    record(py, &f)
}

/// Fetches the registered file `path` into the local file `dest`, checksum verified:
/// `mode` "direct" (one holder at a time, failing over), "memory" (the same, the whole
/// file in one request) or "swarm" (pieces from all
/// `holders` at once). `holders` (addresses) restricts and orders the sources. Returns
/// `{"bytes", "served": [(addr, bytes)], "failures": [(addr, why)]}`.
#[pyfunction]
#[pyo3(signature = (client, path, dest, *, mode="direct", holders=None))]
pub fn fetch_registered<'py>(
    py: Python<'py>,
    client: &ClientHandle,
    path: String,
    dest: PathBuf,
    mode: &str,
    holders: Option<Vec<String>>,
) -> PyResult<Bound<'py, PyDict>> {
    let mode = match mode {
        "direct" => FetchMode::Direct,
        "swarm" => FetchMode::Swarm,
        "memory" => FetchMode::Memory,
        other => {
            return Err(PyValueError::new_err(format!(
                "mode is 'direct', 'memory' or 'swarm', not {other:?}"
            )))
        }
    };
    let conn = client.conn.clone();
    let r = block_on(py, async move {
        conn.client()
            .await?
            .fetch_registered(&path, &dest, mode, holders)
            .await
    })?
    .map_err(to_py)?;
    report(py, &r)
}

/// Bytes `[offset, offset + length)` of copy `name` on the provider `addr`, and their
/// CRC32C (the swarm's piece reads).
#[pyfunction]
pub fn read_registered<'py>(
    py: Python<'py>,
    client: &ClientHandle,
    addr: String,
    name: String,
    offset: u64,
    length: usize,
) -> PyResult<(Bound<'py, PyBytes>, u32)> {
    let conn = client.conn.clone();
    let (data, crc) = block_on(py, async move {
        let mut buf = vec![0u8; length];
        let crc = conn
            .client()
            .await?
            .read_registered(&addr, &name, offset, &mut buf)
            .await?;
        Ok::<_, tomus_wire::Error>((buf, crc))
    })?
    .map_err(to_py)?;
    Ok((PyBytes::new(py, &data), crc))
}

/// Shares the local file `local`, still being written, through the provider `provider` of
/// this host; returns the copy's name (see `Client::share_partial`).
#[pyfunction]
pub fn share_partial(
    py: Python<'_>,
    client: &ClientHandle,
    local: PathBuf,
    provider: String,
) -> PyResult<String> {
    let conn = client.conn.clone();
    block_on(py, async move {
        conn.client().await?.share_partial(&local, &provider).await
    })?
    .map_err(to_py)
}

/// Removes the registered copies `names` from the provider `addr`; returns their bytes.
#[pyfunction]
pub fn drop_registered(
    py: Python<'_>,
    client: &ClientHandle,
    addr: String,
    names: Vec<String>,
) -> PyResult<u64> {
    let conn = client.conn.clone();
    block_on(py, async move {
        conn.client().await?.drop_registered(&addr, names).await
    })?
    .map_err(to_py)
}

/// The CRC32C of `a + b` from the CRC32C of `a`, that of `b` and the length of `b`.
#[pyfunction]
pub fn crc32c_combine(a: u32, b: u32, b_len: usize) -> u32 {
    tomus_client::registered::crc32c_combine(a, b, b_len)
}
