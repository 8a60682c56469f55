//! Registered files (workflows): registering a local file in O(1) (the provider of this host
//! hard-links it, the manager records it), and fetching one straight from its holders.
//!
//! A fetch reads pieces with `ReadRegistered` (sendfile on the holder), writes them at their
//! offsets in the destination file and checks the CRC32C of the whole file, combined from the
//! pieces' CRCs as they arrive (no second pass). `direct` reads from one holder at a time,
//! failing over to the next (`memory`: the same, the whole file in one request); `swarm` spreads the pieces over every given holder at once. A
//! copy whose bytes do not match the recorded checksum is reported to the manager, which
//! stops naming that holder, and the next holder is used.

use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tomus_wire::frame::MAX_BODY;
use tomus_wire::manager::{FsDropHolder, FsRegister, FsRegistered};
use tomus_wire::pool::Placed;
use tomus_wire::provider::{AdoptFile, DropRegistered, ReadRegistered};
use tomus_wire::{trace, Error, ErrorKind, Holder, RegisteredFile, Result};

use crate::Client;

/// For callers combining the CRC32C of pieces (the Python swarm module).
pub use crc32c::crc32c_combine;

/// Bytes per piece of a fetch.
pub const PIECE: u64 = 8 << 20;
/// Longest wait for a checksum still being computed by the first holder (per GiB, at least
/// [`CHECKSUM_WAIT_MIN`]).
const CHECKSUM_WAIT_PER_GIB: Duration = Duration::from_secs(20);
const CHECKSUM_WAIT_MIN: Duration = Duration::from_secs(10);

/// How a registration is made.
#[derive(Clone, Debug, Default)]
pub struct RegisterOptions {
    /// The provider to hold the file (default: the first provider of this host that can
    /// link it).
    pub provider: Option<String>,
    pub hints: Vec<(String, String)>,
}

/// What a fetch did.
#[derive(Clone, Debug, Default)]
pub struct FetchReport {
    pub bytes: u64,
    /// Bytes served by each holder (address).
    pub served: Vec<(String, u64)>,
    /// Holders that failed or served a damaged copy, and why.
    pub failures: Vec<(String, String)>,
}

/// How a fetch spreads its pieces.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FetchMode {
    /// One holder at a time; the next on failure.
    Direct,
    /// Every holder at once, pieces shared out as they finish.
    Swarm,
    /// [`FetchMode::Direct`] in one request for the whole file (small files, which holders
    /// answer from memory).
    Memory,
}

/// `e` with what was being done in front of its message.
fn ctx(e: Error, what: String) -> Error {
    Error::new(e.kind, format!("{what}: {}", e.message))
}

fn is_local_host(host: &str, mine: Option<&str>) -> bool {
    host == "localhost"
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
        || Some(host) == mine
}

impl Client {
    /// Registers the local file `local` as `path`: a provider of this host hard-links it into
    /// its data directory, the manager records it. No byte is copied or read here.
    pub async fn register_file(
        &self,
        local: &Path,
        path: &str,
        options: RegisterOptions,
    ) -> Result<RegisteredFile> {
        let local = std::path::absolute(local)
            .map_err(|e| Error::invalid(format!("{}: {e}", local.display())))?;
        let meta = std::fs::metadata(&local).map_err(|e| {
            ctx(
                Error::from(e),
                format!("cannot register {}", local.display()),
            )
        })?;
        if !meta.is_file() {
            return Err(Error::invalid(format!(
                "{} is not a regular file",
                local.display()
            )));
        }
        let candidates = match &options.provider {
            Some(addr) => vec![addr.clone()],
            None => {
                let mine = self.host.as_deref();
                let mut list: Vec<_> = self
                    .cluster
                    .providers()
                    .await?
                    .into_iter()
                    .filter(|p| p.alive && is_local_host(&p.host, mine))
                    .map(|p| p.addr)
                    .collect();
                list.sort();
                list
            }
        };
        if candidates.is_empty() {
            return Err(Error::unavailable(
                "no live provider runs on this host: registering needs one (its data \
                 directory must be on the file system of the file)",
            ));
        }
        let mut last = None;
        for addr in candidates {
            let adopt = AdoptFile {
                local_path: local.to_string_lossy().into_owned(),
                dev: meta.dev(),
                ino: meta.ino(),
                tomus_path: path.to_string(),
            };
            let adopted = match self.cluster.pool.call(&addr, adopt).await {
                Ok(a) => a,
                Err(e)
                    if e.kind == ErrorKind::InvalidArgument || e.kind == ErrorKind::Unavailable =>
                {
                    last = Some(ctx(e, format!("provider {addr}")));
                    continue;
                }
                Err(e) => return Err(e),
            };
            let req = FsRegister {
                path: path.to_string(),
                size: adopted.size,
                checksum: None,
                holder_addr: addr,
                name: adopted.name,
                hints: options.hints.clone(),
            };
            return self.cluster.manager(req).await;
        }
        Err(last.unwrap_or_else(|| Error::unavailable("no provider could register the file")))
    }

    /// Offers the local file `local`, still being written, to other readers: the provider
    /// `provider` (of this host) hard-links it and serves its ranges, unchecked, under the
    /// returned copy name, until [`Client::drop_registered`] removes it. Pieces read from
    /// it are only trusted once the whole file's checksum matches.
    pub async fn share_partial(&self, local: &Path, provider: &str) -> Result<String> {
        let local = std::path::absolute(local)
            .map_err(|e| Error::invalid(format!("{}: {e}", local.display())))?;
        let meta = std::fs::metadata(&local)
            .map_err(|e| ctx(Error::from(e), format!("cannot share {}", local.display())))?;
        let adopt = AdoptFile {
            local_path: local.to_string_lossy().into_owned(),
            dev: meta.dev(),
            ino: meta.ino(),
            tomus_path: String::new(),
        };
        Ok(self.cluster.pool.call(provider, adopt).await?.name)
    }

    /// Removes the registered copies `names` from the provider `addr`; returns their bytes.
    pub async fn drop_registered(&self, addr: &str, names: Vec<String>) -> Result<u64> {
        self.cluster.pool.call(addr, DropRegistered { names }).await
    }

    /// The record of the registered file `path`.
    pub async fn registered(&self, path: &str) -> Result<RegisteredFile> {
        self.cluster
            .manager(FsRegistered {
                path: path.to_string(),
            })
            .await
    }

    /// The record of `path` once its checksum is known (its first holder computes it in the
    /// background after registration).
    pub async fn registered_checked(&self, path: &str) -> Result<RegisteredFile> {
        let start = Instant::now();
        loop {
            let file = self.registered(path).await?;
            if file.checksum.is_some() {
                return Ok(file);
            }
            let gib = (file.size >> 30) as u32 + 1;
            if start.elapsed() > CHECKSUM_WAIT_MIN.max(CHECKSUM_WAIT_PER_GIB * gib) {
                return Err(Error::unavailable(format!(
                    "/{}: its holder has not recorded its checksum yet",
                    file.path
                )));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Bytes `[offset, offset + out.len())` of copy `name` on the provider `addr`, into
    /// `out`; returns their CRC32C.
    pub async fn read_registered(
        &self,
        addr: &str,
        name: &str,
        offset: u64,
        out: &mut [u8],
    ) -> Result<u32> {
        let req = ReadRegistered {
            name: name.to_string(),
            offset,
            len: out.len() as u64,
        };
        match self.cluster.pool.call_into(addr, req, out).await? {
            (_, Placed::Filled { crc }) => Ok(crc),
            (_, Placed::Elsewhere(b)) => Err(Error::protocol(format!(
                "{addr} answered {} bytes for a range of {}",
                b.len(),
                out.len()
            ))),
        }
    }

    /// Fetches the registered file `path` into `dest`, verified against its checksum.
    /// `holders` (addresses) restricts and orders the sources (default: the live holders,
    /// in the record's order).
    pub async fn fetch_registered(
        &self,
        path: &str,
        dest: &Path,
        mode: FetchMode,
        holders: Option<Vec<String>>,
    ) -> Result<FetchReport> {
        // One request id for the whole fetch, its pieces' tasks included.
        trace::operation(self.fetch_registered_traced(path, dest, mode, holders)).await
    }

    async fn fetch_registered_traced(
        &self,
        path: &str,
        dest: &Path,
        mode: FetchMode,
        holders: Option<Vec<String>>,
    ) -> Result<FetchReport> {
        let file = self.registered_checked(path).await?;
        let expected = file.checksum.unwrap_or_default();
        let mut sources: Vec<Holder> = match &holders {
            Some(list) => list
                .iter()
                .filter_map(|a| file.holders.iter().find(|h| &h.addr == a).cloned())
                .collect(),
            None => file.holders.clone(),
        };
        sources.retain(|h| !h.addr.is_empty());
        // Live holders first; a holder the manager thinks down may still answer.
        sources.sort_by_key(|h| !h.alive);
        if sources.is_empty() {
            return Err(Error::unavailable(format!(
                "/{}: no holder of it is registered any more",
                file.path
            )));
        }
        let mut report = FetchReport::default();
        if mode == FetchMode::Swarm && sources.len() > 1 {
            match self
                .fetch_pieces(&file, dest, &sources, PIECE, &mut report)
                .await
            {
                Ok(crc) if crc == expected => return Ok(report),
                Ok(crc) => report.failures.push((
                    "swarm".into(),
                    format!(
                        "checksum {crc:08x}, expected {expected:08x}: trying holders one by one"
                    ),
                )),
                Err(e) => report.failures.push(("swarm".into(), e.to_string())),
            }
        }
        for holder in &sources {
            let one = std::slice::from_ref(holder);
            let mut attempt = FetchReport::default();
            let piece = match mode {
                FetchMode::Memory => file.size.clamp(1, MAX_BODY),
                _ => PIECE,
            };
            match self
                .fetch_pieces(&file, dest, one, piece, &mut attempt)
                .await
            {
                Ok(crc) if crc == expected => {
                    report.bytes = attempt.bytes;
                    report.served.extend(attempt.served);
                    return Ok(report);
                }
                Ok(crc) => {
                    let why = format!("damaged copy: checksum {crc:08x}, expected {expected:08x}");
                    tracing::warn!("/{} on {}: {why}", file.path, holder.addr);
                    report.failures.push((holder.addr.clone(), why));
                    let drop = FsDropHolder {
                        path: file.path.clone(),
                        provider: holder.provider,
                    };
                    if let Err(e) = self.cluster.manager(drop).await {
                        tracing::warn!("cannot drop holder {}: {e}", holder.addr);
                    }
                }
                Err(e) => {
                    // The holder answers but has lost its copy (a node that came back
                    // without its disk): it stops being named.
                    if e.kind == ErrorKind::NotFound {
                        let drop = FsDropHolder {
                            path: file.path.clone(),
                            provider: holder.provider,
                        };
                        if let Err(e) = self.cluster.manager(drop).await {
                            tracing::warn!("cannot drop holder {}: {e}", holder.addr);
                        }
                    }
                    report.failures.push((holder.addr.clone(), e.to_string()))
                }
            }
        }
        Err(Error::unavailable(format!(
            "/{}: no holder served it intact ({})",
            file.path,
            report
                .failures
                .iter()
                .map(|(a, w)| format!("{a}: {w}"))
                .collect::<Vec<_>>()
                .join("; ")
        )))
    }

    /// Fetches every piece of `file` from `sources` (shared out as they finish) into `dest`;
    /// returns the CRC32C of the whole file.
    async fn fetch_pieces(
        &self,
        file: &RegisteredFile,
        dest: &Path,
        sources: &[Holder],
        piece_len: u64,
        report: &mut FetchReport,
    ) -> Result<u32> {
        let out = open_dest(dest.to_path_buf(), file.size).await?;
        let pieces = file.size.div_ceil(piece_len);
        let next = Arc::new(Mutex::new(0u64));
        let crcs = Arc::new(Mutex::new(vec![0u32; pieces as usize]));
        let mut tasks = tokio::task::JoinSet::new();
        // Spawned tasks are outside the operation's task-local id: they are given it.
        let request = trace::current().unwrap_or_else(trace::new_id);
        for holder in sources {
            let (client, holder, next, crcs, out) = (
                self.clone(),
                holder.clone(),
                next.clone(),
                crcs.clone(),
                out.clone(),
            );
            let size = file.size;
            tasks.spawn(trace::scope(request, async move {
                let mut served = 0u64;
                loop {
                    let piece = {
                        let mut n = next.lock().unwrap_or_else(|p| p.into_inner());
                        if *n >= pieces {
                            break;
                        }
                        *n += 1;
                        *n - 1
                    };
                    let offset = piece * piece_len;
                    let len = piece_len.min(size - offset) as usize;
                    let mut buf = vec![0u8; len];
                    let crc = client
                        .read_registered(&holder.addr, &holder.name, offset, &mut buf)
                        .await
                        .map_err(|e| (holder.addr.clone(), e, served))?;
                    let out = out.clone();
                    let written =
                        tokio::task::spawn_blocking(move || out.write_all_at(&buf, offset))
                            .await
                            .map_err(|e| Error::internal(e.to_string()))
                            .and_then(|r| r.map_err(Error::from));
                    written.map_err(|e| (holder.addr.clone(), e, served))?;
                    crcs.lock().unwrap_or_else(|p| p.into_inner())[piece as usize] = crc;
                    served += len as u64;
                }
                Ok::<_, (String, Error, u64)>((holder.addr.clone(), served))
            }));
        }
        let mut failed = None;
        while let Some(done) = tasks.join_next().await {
            match done {
                Ok(Ok((addr, served))) => report.served.push((addr, served)),
                Ok(Err((addr, e, served))) => {
                    report.served.push((addr.clone(), served));
                    report.failures.push((addr, e.to_string()));
                    failed = Some(e);
                }
                Err(e) => failed = Some(Error::internal(e.to_string())),
            }
        }
        // A failed source's claimed piece is lost: the fetch failed as a whole (the caller
        // tries the holders one by one next).
        if let Some(e) = failed {
            return Err(e);
        }
        let crcs = crcs.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let mut whole = 0u32;
        for (i, crc) in crcs.into_iter().enumerate() {
            let len = piece_len.min(file.size - i as u64 * piece_len) as usize;
            whole = crc32c_combine(whole, crc, len);
        }
        report.bytes = file.size;
        Ok(whole)
    }
}

/// Creates (or truncates) `dest` at `size` bytes.
async fn open_dest(dest: PathBuf, size: u64) -> Result<Arc<std::fs::File>> {
    tokio::task::spawn_blocking(move || {
        let f = std::fs::File::create(&dest)
            .map_err(|e| ctx(Error::from(e), format!("cannot create {}", dest.display())))?;
        f.set_len(size).map_err(Error::from)?;
        Ok(Arc::new(f))
    })
    .await
    .map_err(|e| Error::internal(e.to_string()))?
}

/// The bytes of a registered file in order, a piece at a time, each from the first holder
/// that serves it, for callers that store them elsewhere as they come (backup points,
/// geo-replication). The caller checks [`RegisteredPieces::crc`] against the file's
/// checksum once the last piece is read; on a mismatch it may read again starting from
/// another holder ([`RegisteredPieces::new`]'s `first`).
pub struct RegisteredPieces {
    client: Client,
    holders: Vec<Holder>,
    size: u64,
    at: u64,
    crc: u32,
}

impl RegisteredPieces {
    /// Reads `file` trying its holders (those with an address, live ones first) from the
    /// `first`-th on, wrapping around. Fails if it has no holder.
    pub fn new(client: &Client, file: &RegisteredFile, first: usize) -> Result<Self> {
        let mut holders: Vec<Holder> = file
            .holders
            .iter()
            .filter(|h| !h.addr.is_empty())
            .cloned()
            .collect();
        holders.sort_by_key(|h| !h.alive);
        if holders.is_empty() {
            return Err(Error::unavailable(format!(
                "/{}: registered file with no holder left to read it from",
                file.path
            )));
        }
        let n = first % holders.len();
        holders.rotate_left(n);
        Ok(RegisteredPieces {
            client: client.clone(),
            holders,
            size: file.size,
            at: 0,
            crc: 0,
        })
    }

    /// How many holders it may read from.
    pub fn holders(&self) -> usize {
        self.holders.len()
    }

    /// The next piece (at most [`PIECE`] bytes) and its offset; `None` after the last.
    pub async fn next(&mut self) -> Result<Option<(u64, Vec<u8>)>> {
        if self.at >= self.size {
            return Ok(None);
        }
        let len = PIECE.min(self.size - self.at);
        let mut data = vec![0u8; len as usize];
        let mut last = None;
        for h in &self.holders {
            match self
                .client
                .read_registered(&h.addr, &h.name, self.at, &mut data)
                .await
            {
                Ok(crc) => {
                    self.crc = crc32c_combine(self.crc, crc, data.len());
                    let at = self.at;
                    self.at += len;
                    return Ok(Some((at, data)));
                }
                Err(e) => last = Some(format!("{}: {e}", h.addr)),
            }
        }
        Err(Error::unavailable(format!(
            "no holder served bytes {}..{} ({})",
            self.at,
            self.at + len,
            last.unwrap_or_default()
        )))
    }

    /// The CRC32C of the bytes read so far.
    pub fn crc(&self) -> u32 {
        self.crc
    }
}
