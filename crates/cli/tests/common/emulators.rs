//! Cloud storage emulators for the backup tests: Azurite (Azure Blob) and fake-gcs-server
//! (GCS), installed from the package registries by `scripts/emulators.sh` into a cache
//! directory and started here on a free loopback port, one per test. A test whose emulator
//! cannot be installed (no npm or go, no registry) says so and is skipped.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use hmac::{Hmac, Mac};
use sha2::Sha256;

use super::free_port;

/// Azurite's well-known development account and key (public, in Azure's documentation).
pub const AZURITE_ACCOUNT: &str = "devstoreaccount1";
pub const AZURITE_KEY: &str =
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==";

/// Where `scripts/emulators.sh` installs (the same rule as the script).
fn cache_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("TOMUS_EMULATORS") {
        return PathBuf::from(d);
    }
    let cache = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(std::env::var_os("HOME").unwrap()).join(".cache"));
    cache.join("tomus/emulators")
}

/// The installed program `rel` of emulator `name`, installing it first if needed; `None`
/// (with the reason printed) when it cannot be installed.
fn installed(name: &str, rel: &str) -> Option<PathBuf> {
    let path = cache_dir().join(rel);
    if !path.exists() {
        let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../scripts/emulators.sh");
        let out = Command::new("bash").arg(script).arg(name).output();
        let why = match out {
            Ok(o) if o.status.success() => String::new(),
            Ok(o) => String::from_utf8_lossy(&o.stderr).into_owned(),
            Err(e) => e.to_string(),
        };
        if !path.exists() {
            eprintln!("SKIPPED: the {name} emulator could not be installed: {why}");
            return None;
        }
    }
    Some(path)
}

/// A running emulator; stopped when dropped.
pub struct Emulator {
    child: Child,
    pub addr: String,
    dir: PathBuf,
}

impl Drop for Emulator {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Starts `cmd` and waits until `addr` accepts connections.
fn start(mut cmd: Command, addr: String, dir: PathBuf, name: &str) -> Emulator {
    let log = std::fs::File::create(dir.join(format!("{name}.log"))).unwrap();
    let child = cmd.stdout(Stdio::null()).stderr(log).spawn().unwrap();
    let mut emu = Emulator { child, addr, dir };
    let deadline = Instant::now() + Duration::from_secs(60);
    while TcpStream::connect(&emu.addr).is_err() {
        if let Ok(Some(status)) = emu.child.try_wait() {
            let log = std::fs::read_to_string(emu.dir.join(format!("{name}.log")));
            panic!(
                "{name} exited at start: {status}: {}",
                log.unwrap_or_default()
            );
        }
        assert!(Instant::now() < deadline, "{name} did not start listening");
        std::thread::sleep(Duration::from_millis(100));
    }
    emu
}

/// Azurite's blob service on a free port, in memory; `None` if it cannot be installed.
pub fn azurite() -> Option<Emulator> {
    let bin = installed("azurite", "azurite/node_modules/.bin/azurite-blob")?;
    let port = free_port();
    let dir = tomus_cli::scratch_dir("azurite");
    std::fs::create_dir_all(&dir).unwrap();
    let mut cmd = Command::new(bin);
    cmd.args(["--blobHost", "127.0.0.1", "--blobPort", &port.to_string()])
        .args(["--inMemoryPersistence", "--silent", "--disableTelemetry"])
        .current_dir(&dir);
    Some(start(cmd, format!("127.0.0.1:{port}"), dir, "azurite"))
}

/// fake-gcs-server on a free port over plain HTTP, in memory; `None` if it cannot be
/// installed.
pub fn fake_gcs() -> Option<Emulator> {
    let bin = installed("fake-gcs-server", "bin/fake-gcs-server")?;
    let port = free_port();
    let dir = tomus_cli::scratch_dir("fake-gcs");
    std::fs::create_dir_all(&dir).unwrap();
    let mut cmd = Command::new(bin);
    cmd.args([
        "-scheme",
        "http",
        "-host",
        "127.0.0.1",
        "-port",
        &port.to_string(),
    ])
    .args(["-backend", "memory", "-public-host", "127.0.0.1"])
    .args(["-log-level", "error"])
    .current_dir(&dir);
    Some(start(
        cmd,
        format!("127.0.0.1:{port}"),
        dir,
        "fake-gcs-server",
    ))
}

/// Sends one HTTP/1.1 request (`head` without the blank line) to `addr`; returns the
/// status code and the response.
fn http(addr: &str, head: &str, body: &[u8]) -> (u16, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    let req = format!(
        "{head}\r\nHost: {addr}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    s.write_all(req.as_bytes()).unwrap();
    s.write_all(body).unwrap();
    let mut resp = Vec::new();
    s.read_to_end(&mut resp).unwrap();
    let resp = String::from_utf8_lossy(&resp).into_owned();
    let code = resp
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    (code, resp)
}

/// Creates blob container `name` in Azurite's development account, with a Shared Key
/// signed request (object_store reads and writes blobs but does not create containers).
pub fn azure_create_container(emu: &Emulator, name: &str) {
    let date = httpdate(std::time::SystemTime::now());
    let version = "2021-08-06";
    // The Shared Key string to sign: verb, eleven empty standard headers (no body: an
    // empty Content-Length), the x-ms- headers, then the resource. Path-style requests name
    // the account twice.
    let to_sign = format!(
        "PUT\n\n\n\n\n\n\n\n\n\n\n\nx-ms-date:{date}\nx-ms-version:{version}\n\
         /{AZURITE_ACCOUNT}/{AZURITE_ACCOUNT}/{name}\nrestype:container"
    );
    let key = base64_simd::STANDARD.decode_to_vec(AZURITE_KEY).unwrap();
    let mut mac = Hmac::<Sha256>::new_from_slice(&key).unwrap();
    mac.update(to_sign.as_bytes());
    let sig = base64_simd::STANDARD.encode_to_string(mac.finalize().into_bytes());
    let head = format!(
        "PUT /{AZURITE_ACCOUNT}/{name}?restype=container HTTP/1.1\r\nx-ms-date: {date}\r\n\
         x-ms-version: {version}\r\nAuthorization: SharedKey {AZURITE_ACCOUNT}:{sig}"
    );
    let (code, resp) = http(&emu.addr, &head, b"");
    assert_eq!(code, 201, "creating container {name}: {resp}");
}

/// Creates bucket `name` in fake-gcs-server (the JSON API; the emulator takes no auth).
pub fn gcs_create_bucket(emu: &Emulator, name: &str) {
    let body = format!("{{\"name\":\"{name}\"}}");
    let head = "POST /storage/v1/b?project=test HTTP/1.1\r\nContent-Type: application/json";
    let (code, resp) = http(&emu.addr, head, body.as_bytes());
    assert_eq!(code, 200, "creating bucket {name}: {resp}");
}

/// `t` as an RFC 1123 date in GMT, as HTTP headers spell it.
fn httpdate(t: std::time::SystemTime) -> String {
    let secs = t.duration_since(std::time::UNIX_EPOCH).unwrap().as_secs();
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let (h, m, s) = (rem / 3600, rem % 3600 / 60, rem % 60);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let mon = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(mon <= 2);
    let wd = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"][(days % 7) as usize];
    let mn = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ][(mon - 1) as usize];
    format!("{wd}, {d:02} {mn} {y} {h:02}:{m:02}:{s:02} GMT")
}
