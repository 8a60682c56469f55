//! One tokio runtime per process, and values that must not cross a `fork()`.
//!
//! After a fork the child has none of the parent's threads: the parent's runtime cannot run
//! there, and dropping it (or a connection registered with its reactor, whose epoll instance
//! the child shares with the parent) would hang or unregister the parent's sockets. So the
//! runtime and every client are tagged with the pid that made them; a child sees the mismatch,
//! leaks the inherited values and builds its own.

use std::future::Future;
use std::mem::ManuallyDrop;
use std::sync::{Arc, Mutex, MutexGuard};

use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use tokio::runtime::Runtime;

/// A value owned by the process that created it; other processes (forked children) never
/// use or drop it.
pub struct ForkLocal<T>(Mutex<Option<(u32, ManuallyDrop<T>)>>);

impl<T: Clone> ForkLocal<T> {
    pub fn new(value: Option<T>) -> Self {
        ForkLocal(Mutex::new(
            value.map(|v| (std::process::id(), ManuallyDrop::new(v))),
        ))
    }

    fn slot(&self) -> MutexGuard<'_, Option<(u32, ManuallyDrop<T>)>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The value, if this process made it.
    pub fn get(&self) -> Option<T> {
        match &*self.slot() {
            Some((pid, v)) if *pid == std::process::id() => Some(T::clone(v)),
            _ => None,
        }
    }

    /// Stores `value` for this process (a value from another process is leaked, not dropped).
    pub fn set(&self, value: T) {
        let old = self
            .slot()
            .replace((std::process::id(), ManuallyDrop::new(value)));
        if let Some((pid, v)) = old {
            release(pid, v);
        }
    }
}

impl<T> Drop for ForkLocal<T> {
    fn drop(&mut self) {
        let slot = self.0.get_mut().unwrap_or_else(|p| p.into_inner());
        if let Some((pid, v)) = slot.take() {
            release(pid, v);
        }
    }
}

fn release<T>(pid: u32, mut v: ManuallyDrop<T>) {
    if pid == std::process::id() {
        // SAFETY: `v` is not used again.
        unsafe { ManuallyDrop::drop(&mut v) }
    }
}

static RUNTIME: Mutex<Option<(u32, Arc<Runtime>)>> = Mutex::new(None);

/// This process's runtime, created on first use (and again in a forked child).
pub fn runtime() -> PyResult<Arc<Runtime>> {
    let pid = std::process::id();
    let mut slot = RUNTIME.lock().unwrap_or_else(|p| p.into_inner());
    if let Some((owner, rt)) = &*slot {
        if *owner == pid {
            return Ok(rt.clone());
        }
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("tomus-io")
        .build()
        .map(Arc::new)
        .map_err(|e| PyRuntimeError::new_err(format!("cannot start the tomus runtime: {e}")))?;
    if let Some(inherited) = slot.replace((pid, rt.clone())) {
        // The parent's runtime, inherited through fork: its threads are not here.
        std::mem::forget(inherited);
    }
    Ok(rt)
}

/// Runs `fut` to completion on the runtime with the GIL released.
pub fn block_on<F>(py: Python<'_>, fut: F) -> PyResult<F::Output>
where
    F: Future + Send,
    F::Output: Send,
{
    let rt = runtime()?;
    Ok(py.detach(move || rt.block_on(fut)))
}
