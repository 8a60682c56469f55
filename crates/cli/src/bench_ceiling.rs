//! The serving ceiling: S2's access pattern (N readers, each reading its own 64 MiB range of
//! one file in 16 MiB requests) served by the least a server can do: `sendfile` from the page
//! cache to a loopback socket, no checksums, no metadata, no protocol beyond a one-byte
//! request. The socket-pair limit sends one cache-hot buffer over and over; this baseline moves
//! distinct data through memory, as any storage server must, so it shows how far the machine's
//! memory and TCP stack, not tomus, bound S2.

use std::fs::File;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::path::Path;
use std::time::Instant;

use anyhow::{anyhow, bail, Context, Result};
use serde_json::{json, Value};

use crate::bench::{point, MIB};
use crate::pattern;

const REQUEST: usize = 16 << 20;

/// Medians of `runs` runs for each reader count, over a file of `max(clients) * per_client`
/// bytes written in `dir` (read once first, so it is in the page cache like S2's chunks).
pub fn ceiling(dir: &Path, clients: &[usize], per_client: u64, runs: usize) -> Result<Value> {
    let per = per_client.max(REQUEST as u64) / REQUEST as u64 * REQUEST as u64;
    let max_n = clients.iter().copied().max().unwrap_or(1) as u64;
    std::fs::create_dir_all(dir)?;
    let path = dir.join("ceiling.data");
    let block = pattern::generate(4, REQUEST);
    {
        let mut f = File::create(&path).context("ceiling data file")?;
        for _ in 0..max_n * per / REQUEST as u64 {
            f.write_all(&block)?;
        }
    }
    std::io::copy(&mut File::open(&path)?, &mut std::io::sink())?;
    let mut points = Vec::new();
    for &n in clients {
        let mut samples = Vec::new();
        for _ in 0..runs {
            samples.push(serve_once(&path, n, per)?);
        }
        points.push(point(n, samples, "MiB/s"));
    }
    let _ = std::fs::remove_file(&path);
    Ok(json!({"points": points}))
}

/// One run: `n` server threads and `n` reader threads; aggregate MiB/s.
fn serve_once(path: &Path, n: usize, per: u64) -> Result<f64> {
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let addr = listener.local_addr()?;
    let path = path.to_path_buf();
    let server = std::thread::spawn(move || -> Result<()> {
        let mut handles = Vec::new();
        for i in 0..n as u64 {
            let (socket, _) = listener.accept()?;
            let file = File::open(&path)?;
            handles.push(std::thread::spawn(move || {
                serve_range(socket, file, i * per, per)
            }));
        }
        for h in handles {
            h.join()
                .map_err(|_| anyhow!("ceiling server thread panicked"))??;
        }
        Ok(())
    });
    let start = Instant::now();
    let readers: Vec<_> = (0..n)
        .map(|_| std::thread::spawn(move || read_range(addr, per)))
        .collect();
    for r in readers {
        r.join()
            .map_err(|_| anyhow!("ceiling reader thread panicked"))??;
    }
    let secs = start.elapsed().as_secs_f64();
    server
        .join()
        .map_err(|_| anyhow!("ceiling server panicked"))??;
    Ok((n as u64 * per) as f64 / MIB / secs)
}

/// Answers each one-byte request with the next 16 MiB of `[base, base + len)` of `file`.
fn serve_range(mut socket: TcpStream, file: File, base: u64, len: u64) -> Result<()> {
    socket.set_nodelay(true)?;
    let mut request = [0u8; 1];
    let mut at = 0;
    while at < len {
        socket.read_exact(&mut request)?;
        let mut offset = libc::off_t::try_from(base + at)?;
        let mut left = REQUEST;
        while left > 0 {
            // SAFETY: both descriptors stay open for the call and `offset` is a valid off_t.
            let sent =
                unsafe { libc::sendfile(socket.as_raw_fd(), file.as_raw_fd(), &mut offset, left) };
            if sent <= 0 {
                bail!("sendfile: {}", std::io::Error::last_os_error());
            }
            left -= sent as usize;
        }
        at += REQUEST as u64;
    }
    Ok(())
}

/// Reads `len` bytes in 16 MiB requests into one buffer, as S2's readers do.
fn read_range(addr: std::net::SocketAddr, len: u64) -> Result<()> {
    let mut socket = TcpStream::connect(addr)?;
    socket.set_nodelay(true)?;
    let mut buf = vec![0u8; REQUEST];
    let mut at = 0;
    while at < len {
        socket.write_all(&[1])?;
        socket.read_exact(&mut buf)?;
        at += REQUEST as u64;
    }
    Ok(())
}
