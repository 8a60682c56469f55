//! The `tomus` command line, run in-process by `python -m tomus` and the `tomus` script.

use std::ffi::OsString;
use std::path::PathBuf;

use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use tomus_cli::embedded::Launcher;

/// Runs the `tomus` command line `argv` (program name first) with the GIL released and returns
/// its exit code. Server processes it starts run as `python -m tomus ...`.
#[pyfunction]
pub fn cli_main(py: Python<'_>, argv: Vec<OsString>) -> PyResult<i32> {
    let exe: Option<PathBuf> = py.import("sys")?.getattr("executable")?.extract()?;
    let program = exe.filter(|p| !p.as_os_str().is_empty()).ok_or_else(|| {
        PyRuntimeError::new_err("sys.executable is unknown: cannot start servers")
    })?;
    Launcher::set_for_process(Launcher {
        program,
        prefix: vec!["-m".into(), "tomus".into()],
    });
    Ok(py.detach(move || tomus_cli::app::main_with(argv)))
}

/// Makes this process die (SIGKILL) when its parent does; false if the parent is already not
/// `parent` (it died before the request took effect). Linux only; elsewhere a no-op.
#[pyfunction]
pub fn die_with_parent(parent: u32) -> bool {
    #[cfg(target_os = "linux")]
    // SAFETY: plain syscalls without pointers.
    unsafe {
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
        libc::getppid() as u32 == parent
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = parent;
        true
    }
}
