//! What commands print on standard output, and what happens when nobody reads it any more.
//!
//! `tomus fs ls -r / | head -1`: once `head` exits, every write to the pipe fails with EPIPE.
//! `println!` panics on that; coreutils exit quietly. Commands print through `outln!`,
//! which returns the error instead, and [`main_with`](crate::app::main_with) ends a command
//! whose output was closed quietly with exit code 0 ([`is_closed_output`]).
//!
//! Why not restore the default SIGPIPE disposition (die on the signal) as C programs have it?
//! The command line also runs in-process inside the Python extension (`tomus` of the Python
//! package calls `main_with`), where the process is the Python interpreter: it ignores SIGPIPE
//! on purpose, and a disposition changed by a library would kill the interpreter on any closed
//! pipe or socket, in code that is not ours. Rust's runtime ignores SIGPIPE as Python does, so
//! with EPIPE as an ordinary error one path serves the binary and the extension alike.

use std::fmt;
use std::io::{self, Write};

/// Prints a line on stdout as `println!` does, but returns `io::Result<()>` instead of
/// panicking when stdout is closed (EPIPE) or fails otherwise: `outln!("{x}")?`.
#[macro_export]
macro_rules! outln {
    () => {
        $crate::out::line(format_args!(""))
    };
    ($($arg:tt)*) => {
        $crate::out::line(format_args!($($arg)*))
    };
}

/// Writes `args` and a newline to stdout.
pub fn line(args: fmt::Arguments<'_>) -> io::Result<()> {
    let mut out = io::stdout().lock();
    out.write_fmt(args)?;
    out.write_all(b"\n")
}

/// Whether `e` is (or was caused by) a write to a pipe whose reader is gone.
pub fn is_closed_output(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<io::Error>()
            .is_some_and(|io| io.kind() == io::ErrorKind::BrokenPipe)
    })
}
