//! `tomus.Client`: a connection to a cluster.

use std::sync::Arc;
use std::time::Duration;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyTuple;
use tomus_client::{Client, ClientOptions};
use tomus_wire::{ClusterSecret, Placement};

use crate::blob::Blob;
use crate::errors::{non_negative, storage_arg, to_py};
use crate::namespace::Namespace;
use crate::runtime::{block_on, ForkLocal};
use crate::types::{BlobInfo, ProviderInfo};

/// What it takes to (re)connect: the address and options, and this process's client.
pub struct Conn {
    pub addr: String,
    settings: Settings,
    options: ClientOptions,
    client: ForkLocal<Client>,
}

/// The connect arguments, kept to rebuild the client in another process.
#[derive(Clone)]
struct Settings {
    secret: Option<Vec<u8>>,
    parallelism: usize,
    timeout: f64,
    connect_timeout: f64,
    local: bool,
}

impl Conn {
    fn new(addr: String, settings: Settings) -> PyResult<Self> {
        let secret = match &settings.secret {
            Some(s) => Some(ClusterSecret::new(s.clone()).map_err(to_py)?),
            None => ClusterSecret::load(None).map_err(to_py)?,
        };
        let seconds = |name: &str, v: f64| {
            if v.is_finite() && v > 0.0 && v < 1e9 {
                Ok(Duration::from_secs_f64(v))
            } else {
                Err(PyValueError::new_err(format!(
                    "{name} must be a positive number of seconds, got {v}"
                )))
            }
        };
        if settings.parallelism == 0 {
            return Err(PyValueError::new_err("parallelism must be at least 1"));
        }
        let options = ClientOptions {
            secret,
            placement: if settings.local {
                Placement::Local
            } else {
                Placement::Balanced
            },
            parallelism: settings.parallelism,
            request_timeout: seconds("timeout", settings.timeout)?,
            connect_timeout: seconds("connect_timeout", settings.connect_timeout)?,
            ..ClientOptions::default()
        };
        Ok(Conn {
            addr,
            settings,
            options,
            client: ForkLocal::new(None),
        })
    }

    /// This process's client, connecting on first use.
    pub async fn client(&self) -> tomus_wire::Result<Client> {
        if let Some(c) = self.client.get() {
            return Ok(c);
        }
        let c = Client::connect(&self.addr, self.options.clone()).await?;
        self.client.set(c.clone());
        Ok(c)
    }
}

/// A connection to a tomus cluster (its manager). Thread-safe: share one per process. Usable
/// after `fork()` (the child reconnects) and picklable (the copy connects on first use).
#[pyclass(frozen, module = "tomus", name = "Client")]
pub struct ClientHandle {
    pub conn: Arc<Conn>,
}

#[pyfunction]
#[pyo3(signature = (addr, *, secret=None, parallelism=16, timeout=30.0, connect_timeout=3.0, local=false))]
pub fn connect(
    py: Python<'_>,
    addr: String,
    secret: Option<Vec<u8>>,
    parallelism: usize,
    timeout: f64,
    connect_timeout: f64,
    local: bool,
) -> PyResult<ClientHandle> {
    let handle = restore_client(addr, secret, parallelism, timeout, connect_timeout, local)?;
    let conn = handle.conn.clone();
    block_on(py, async move { conn.client().await })?.map_err(to_py)?;
    Ok(handle)
}

/// Rebuilds a client from its pickled settings, without connecting yet.
#[pyfunction]
pub fn restore_client(
    addr: String,
    secret: Option<Vec<u8>>,
    parallelism: usize,
    timeout: f64,
    connect_timeout: f64,
    local: bool,
) -> PyResult<ClientHandle> {
    let settings = Settings {
        secret,
        parallelism,
        timeout,
        connect_timeout,
        local,
    };
    Ok(ClientHandle {
        conn: Arc::new(Conn::new(addr, settings)?),
    })
}

#[pymethods]
impl ClientHandle {
    /// The manager's address.
    #[getter]
    fn addr(&self) -> &str {
        &self.conn.addr
    }

    /// Creates a blob; `chunk_size` is a power of two from 4 KiB to 256 MiB. `storage`:
    /// `"disk"`, or `"memory"` (chunks kept in the RAM of `replication` providers).
    // Defaults as literals (4 MiB): Python's signature (help(), stubtest) shows only those.
    #[pyo3(signature = (chunk_size=4_194_304, replication=1, storage="disk"))]
    fn create_blob(
        &self,
        py: Python<'_>,
        chunk_size: i64,
        replication: u32,
        storage: &str,
    ) -> PyResult<Blob> {
        let chunk_size = non_negative("chunk_size", chunk_size)?;
        let storage = storage_arg(storage)?;
        let conn = self.conn.clone();
        let blob = block_on(py, async move {
            conn.client()
                .await?
                .create_blob_in(chunk_size, replication, storage)
                .await
        })?
        .map_err(to_py)?;
        Ok(Blob::new(self.conn.clone(), blob))
    }

    /// Opens an existing blob (`NotFound` if there is none with this id).
    fn open_blob(&self, py: Python<'_>, id: i64) -> PyResult<Blob> {
        let id = non_negative("id", id)?;
        let conn = self.conn.clone();
        let blob = block_on(py, async move { conn.client().await?.open_blob(id).await })?
            .map_err(to_py)?;
        Ok(Blob::new(self.conn.clone(), blob))
    }

    /// Deletes a blob made with `create_blob`: reading it fails with `NotFound` from now on
    /// and its space comes back with garbage collection after the grace. A blob that backs a
    /// file is refused with `PreconditionFailed` naming the file (remove the file instead);
    /// an unknown or already deleted blob is `NotFound`.
    fn delete_blob(&self, py: Python<'_>, id: i64) -> PyResult<()> {
        let id = non_negative("id", id)?;
        let conn = self.conn.clone();
        block_on(
            py,
            async move { conn.client().await?.delete_blob(id).await },
        )?
        .map_err(to_py)
    }

    /// Every blob of the cluster.
    fn list_blobs(&self, py: Python<'_>) -> PyResult<Vec<BlobInfo>> {
        let conn = self.conn.clone();
        let list =
            block_on(py, async move { conn.client().await?.list_blobs().await })?.map_err(to_py)?;
        Ok(list.iter().map(BlobInfo::from).collect())
    }

    /// The providers the manager knows.
    fn providers(&self, py: Python<'_>) -> PyResult<Vec<ProviderInfo>> {
        let conn = self.conn.clone();
        let list =
            block_on(py, async move { conn.client().await?.providers().await })?.map_err(to_py)?;
        Ok(list.iter().map(ProviderInfo::from).collect())
    }

    /// The fsspec file system (`tomus://`) over this client's cluster.
    fn fs<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyAny>> {
        let fs = slf.py().import("tomus.fs")?.getattr("TomusFileSystem")?;
        let kwargs = pyo3::types::PyDict::new(slf.py());
        kwargs.set_item("client", slf)?;
        fs.call((), Some(&kwargs))
    }

    /// The cluster's namespace of directories and files (used by the fsspec file system).
    fn namespace(&self) -> Namespace {
        Namespace {
            conn: self.conn.clone(),
        }
    }

    fn __repr__(&self) -> String {
        format!("Client(addr='{}')", self.conn.addr)
    }

    fn __reduce__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        let restore = py.import("tomus._native")?.getattr("restore_client")?;
        let s = &self.conn.settings;
        let args = (
            self.conn.addr.clone(),
            s.secret.clone(),
            s.parallelism,
            s.timeout,
            s.connect_timeout,
            s.local,
        );
        PyTuple::new(py, [restore, args.into_pyobject(py)?.into_any()])
    }
}
