//! `tomus._native`: the tomus client for Python, calling the Rust client in-process.
//!
//! Layout: `client`, `blob`, `writer` (one version written in parts) and `namespace` (files
//! and directories) are the API classes, `registered` the registered files of workflows, `types` the records they return, `buffer`
//! the zero-copy access to Python buffers, `runtime` the per-process tokio runtime (fork-safe),
//! `errors` the mapping to Python exceptions, `cli` the `tomus` command line.

mod blob;
mod buffer;
mod cli;
mod client;
mod errors;
mod namespace;
mod registered;
mod runtime;
mod types;
mod writer;

use pyo3::prelude::*;

#[pymodule]
mod _native {
    #[pymodule_export]
    use crate::blob::{restore_blob, Blob};
    #[pymodule_export]
    use crate::cli::{cli_main, die_with_parent};
    #[pymodule_export]
    use crate::client::{connect, restore_client, ClientHandle};
    #[pymodule_export]
    use crate::errors::error_kinds;
    #[pymodule_export]
    use crate::namespace::Namespace;
    #[pymodule_export]
    use crate::registered::{
        crc32c_combine, drop_registered, fetch_registered, read_registered, register_file,
        registered_file, share_partial,
    };
    #[pymodule_export]
    use crate::types::{BlobInfo, ProviderInfo, VersionInfo, VersionList};
    #[pymodule_export]
    use crate::writer::BlobWriter;

    /// The cargo profile the extension was built with: "debug" or "release".
    #[pymodule_export]
    const BUILD_PROFILE: &str = if cfg!(debug_assertions) {
        "debug"
    } else {
        "release"
    };
}
