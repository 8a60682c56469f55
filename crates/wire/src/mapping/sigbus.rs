//! Touching a mapped chunk file without dying of it.
//!
//! A read of a mapped page the file no longer has (truncated under the mapping) or the disk
//! cannot give (an I/O error while the page is read in) raises SIGBUS, whose default action
//! ends the process. The only code that reads mapped chunk pages in user mode is a checksum
//! pass (the client's mapped pieces, the provider's check before `sendfile`); copies into a
//! socket are the kernel's, which answers such a page with `EFAULT` from the system call
//! instead of a signal. So those passes run under [`guarded`]: on this thread, a SIGBUS
//! inside the range it names puts a page of zeros over the faulting page (the read goes on,
//! its checksum fails) and marks the pass damaged. Any other SIGBUS goes to the handler that
//! was there before (Rust's own, for stack guard pages), or ends the process as it would
//! have.

use std::cell::Cell;
use std::sync::OnceLock;

thread_local! {
    /// The address range the current pass on this thread reads (`(0, 0)`: none).
    static RANGE: Cell<(usize, usize)> = const { Cell::new((0, 0)) };
    /// A SIGBUS hit that range.
    static HIT: Cell<bool> = const { Cell::new(false) };
}

/// The SIGBUS disposition found before ours was installed.
static PREVIOUS: OnceLock<libc::sigaction> = OnceLock::new();

/// The memory `data` covers could not all be read.
#[derive(Debug)]
pub struct Damaged;

/// Runs `f`, which reads `data` (pages of a file mapping), so that a SIGBUS on those pages
/// makes it `Err(Damaged)` instead of ending the process. `f` sees zeros where the pages
/// failed.
pub fn guarded<T>(data: &[u8], f: impl FnOnce() -> T) -> Result<T, Damaged> {
    if !installed() {
        return Err(Damaged);
    }
    /// Ends the pass however `f` ends (a panic too), so a stale range never absorbs a
    /// later fault.
    struct Pass;
    impl Drop for Pass {
        fn drop(&mut self) {
            RANGE.with(|r| r.set((0, 0)));
        }
    }
    let start = data.as_ptr() as usize;
    HIT.with(|h| h.set(false));
    RANGE.with(|r| r.set((start, start + data.len())));
    let pass = Pass;
    let out = f();
    drop(pass);
    if HIT.with(Cell::get) {
        return Err(Damaged);
    }
    Ok(out)
}

/// Whether the handler is in place (installed on first use; `false` if the system refused).
fn installed() -> bool {
    static INSTALLED: OnceLock<bool> = OnceLock::new();
    *INSTALLED.get_or_init(|| {
        // The handler needs it and must not be the one to look it up.
        page_size();
        // SAFETY: sigaction with a zeroed, then filled, struct; the handler only does
        // async-signal-safe work (thread-local cells, mmap, sigaction).
        unsafe {
            let mut new: libc::sigaction = std::mem::zeroed();
            new.sa_sigaction = on_sigbus as *const () as usize;
            new.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK;
            libc::sigemptyset(&mut new.sa_mask);
            let mut old: libc::sigaction = std::mem::zeroed();
            if libc::sigaction(libc::SIGBUS, &new, &mut old) != 0 {
                return false;
            }
            let _ = PREVIOUS.set(old);
        }
        true
    })
}

extern "C" fn on_sigbus(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    // SAFETY: the kernel passes a valid siginfo for a SA_SIGINFO handler.
    let addr = unsafe { (*info).si_addr() } as usize;
    let (start, end) = RANGE.try_with(Cell::get).unwrap_or((0, 0));
    if start <= addr && addr < end {
        let page = page_size();
        let at = addr & !(page - 1);
        // SAFETY: replaces one page of the mapping being read by this thread with anonymous
        // zeros; the mapping is ours (unmapped as a whole later) and nothing else uses it.
        let mapped = unsafe {
            libc::mmap(
                at as *mut libc::c_void,
                page,
                libc::PROT_READ,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED,
                -1,
                0,
            )
        };
        if mapped != libc::MAP_FAILED {
            let _ = HIT.try_with(|h| h.set(true));
            return;
        }
    }
    pass_on(sig, info, ctx);
}

/// Hands a SIGBUS that is not ours to the previous handler, or restores the default action so
/// that the faulting access, done again on return, ends the process as before.
fn pass_on(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    if let Some(prev) = PREVIOUS.get() {
        let handler = prev.sa_sigaction;
        if handler != libc::SIG_DFL && handler != libc::SIG_IGN {
            if prev.sa_flags & libc::SA_SIGINFO != 0 {
                // SAFETY: the previous handler was installed as a SA_SIGINFO handler.
                let f: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) =
                    unsafe { std::mem::transmute(handler) };
                f(sig, info, ctx);
            } else {
                // SAFETY: the previous handler was installed as a plain one.
                let f: extern "C" fn(libc::c_int) = unsafe { std::mem::transmute(handler) };
                f(sig);
            }
            return;
        }
    }
    // SAFETY: resets SIGBUS to its default action.
    unsafe {
        let mut dfl: libc::sigaction = std::mem::zeroed();
        dfl.sa_sigaction = libc::SIG_DFL;
        libc::sigaction(libc::SIGBUS, &dfl, std::ptr::null_mut());
    }
}

/// The system's page size.
pub fn page_size() -> usize {
    static PAGE: OnceLock<usize> = OnceLock::new();
    // SAFETY: sysconf has no preconditions.
    *PAGE.get_or_init(|| match unsafe { libc::sysconf(libc::_SC_PAGESIZE) } {
        n if n > 0 => n as usize,
        _ => 4096,
    })
}
