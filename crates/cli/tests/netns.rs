//! Multi-host fault tests: a manager on host 0 and four providers on hosts 1-4, each host a
//! Linux network namespace on one bridge (loopback when namespaces are not permitted; see
//! `common/hosts.rs`). The test process is the client, in the root namespace.
//!
//! Each scenario runs concurrent writes, appends and reads on a blob with replication 2 while
//! one provider fails (SIGKILL, or its link cut), then checks that every acknowledged version
//! reads back exactly as a model of the acknowledged operations says, that repair brings every
//! referenced chunk back to two copies on live providers (from the providers' own chunk
//! listings) and that `tomus status` reports nothing under-replicated in a pass that started
//! after the failure was detected.
//!
//! `cargo test -p tomus-cli --test netns -- --nocapture` prints the measured times.
//! `TOMUS_TEST_NO_NETNS=1` forces the loopback fallback; `TOMUS_TEST_KEEP=1` keeps the logs.

#![allow(clippy::unwrap_used, reason = "a test stops at its first error")]

mod common;

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::stream::{FuturesUnordered, StreamExt};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tomus_cli::pattern;
use tomus_client::cluster::Cluster;
use tomus_client::dht::DhtSource;
use tomus_client::{Blob, Client, ClientOptions};
use tomus_metadata::{resolve_range, ChunkId, NodeRef, Segment, Span};
use tomus_wire::manager::GetStatus;
use tomus_wire::provider::ListChunks;
use tomus_wire::{ClusterStatus, Pool, ProviderInfo, RpcConfig, VersionInfo, VersionState};

use common::hosts::{Hosts, LinkSide};

const PROVIDERS: usize = 4;
const CHUNK_SIZE: u64 = 64 << 10;
const REPLICATION: u32 = 2;
const PROVIDER_TIMEOUT_MS: u64 = 1500;
/// The concurrent workload, and when in it the fault strikes.
const WORKLOAD: Duration = Duration::from_secs(5);
const FAULT_AFTER: Duration = Duration::from_millis(1500);
/// Bytes the workload writes at most.
const WRITE_BUDGET: u64 = 40 << 20;
/// Bounds on detection, repair and a returning provider rejoining, from the fault. Repair
/// needs the provider timeout, a pass interval and a pass (a few seconds here; ~2.5 s after a
/// SIGKILL on a 2-core machine): 40 s is a generous bound that still fails a repair stalled
/// behind a long request timeout.
const DETECT_LIMIT: Duration = Duration::from_secs(20);
const REPAIR_LIMIT: Duration = Duration::from_secs(40);
const REJOIN_LIMIT: Duration = Duration::from_secs(20);
/// Reads in flight while verifying.
const VERIFY_PARALLELISM: usize = 8;

// ---------------------------------------------------------------------------------------------
// The cluster on hosts

struct Net {
    hosts: Hosts,
    manager: String,
    /// Process index of provider `i` (on host `i + 1`).
    providers: Vec<usize>,
}

impl Net {
    fn start(label: &str) -> Net {
        let mut hosts = Hosts::new(label, 1 + PROVIDERS);
        let dir = hosts.dir.clone();
        let args = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let m = hosts.spawn_server(
            0,
            "manager",
            &args(&[
                "--addr",
                &format!("{}:0", hosts.ip(0)),
                "manager",
                "--data",
                &dir.join("manager").to_string_lossy(),
                "--provider-timeout-ms",
                &PROVIDER_TIMEOUT_MS.to_string(),
                "--maintenance-interval-ms",
                "500",
                "--repair-rate",
                "0",
            ]),
        );
        let manager = hosts.proc(m).addr.clone();
        let mut providers = Vec::new();
        for i in 0..PROVIDERS {
            let host = i + 1;
            let p = hosts.spawn_server(
                host,
                &format!("provider-{i}"),
                &args(&[
                    "--addr",
                    &format!("{}:0", hosts.ip(host)),
                    "provider",
                    "--manager",
                    &manager,
                    "--data",
                    &dir.join(format!("provider-{i}")).to_string_lossy(),
                    "--heartbeat-ms",
                    "200",
                    "--no-fsync",
                ]),
            );
            providers.push(p);
        }
        Net {
            hosts,
            manager,
            providers,
        }
    }

    fn provider_addr(&self, i: usize) -> String {
        self.hosts.proc(self.providers[i]).addr.clone()
    }

    fn client_options(&self) -> ClientOptions {
        ClientOptions {
            // A request to a host that was cut off gets no answer at all: give up on it after
            // seconds, not the default 30 s, so the workload goes on on the other replicas.
            request_timeout: Duration::from_secs(2),
            connect_timeout: Duration::from_secs(1),
            ..self.hosts.client_options()
        }
    }

    async fn client(&self) -> Client {
        Client::connect(&self.manager, self.client_options())
            .await
            .unwrap_or_else(|e| panic!("connect to {}: {e}", self.manager))
    }

    fn pool(&self) -> Arc<Pool> {
        let o = self.client_options();
        Pool::new(RpcConfig {
            connect_timeout: o.connect_timeout,
            request_timeout: o.request_timeout,
            secret: o.secret,
        })
    }
}

async fn status(client: &Client) -> ClusterStatus {
    client.manager_call(GetStatus {}).await.expect("status")
}

/// Waits until the manager lists `n` providers, all alive.
async fn wait_all_alive(client: &Client, n: usize) {
    let start = Instant::now();
    loop {
        let list = client.providers().await.expect("providers");
        if list.len() == n && list.iter().all(|p| p.alive) {
            return;
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "providers not all up: {list:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Polls the manager until it lists the provider at `addr` with `alive == want`; returns how
/// long after `since` that was, and the manager's clock then.
async fn watch_alive(
    client: Client,
    addr: String,
    want: bool,
    since: Instant,
    limit: Duration,
) -> Option<(Duration, u64)> {
    loop {
        if let Ok(list) = client.providers().await {
            if list.iter().any(|p| p.addr == addr && p.alive == want) {
                let took = since.elapsed();
                let at_ms = status(&client).await.now_ms;
                return Some((took, at_ms));
            }
        }
        if since.elapsed() > limit {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

// ---------------------------------------------------------------------------------------------
// The workload and its record of acknowledged operations

/// An acknowledged write or append: `version` holds `data` at `offset`.
#[derive(Clone)]
struct Op {
    version: u64,
    offset: u64,
    data: Arc<Vec<u8>>,
    append: bool,
    acked: Instant,
}

#[derive(Default)]
struct Record {
    ops: Vec<Op>,
    /// Highest end of any acknowledged operation.
    max_end: u64,
    bytes_attempted: u64,
    writes_ok: u64,
    writes_failed: u64,
    appends_ok: u64,
    appends_failed: u64,
    reads_ok: u64,
    read_bytes: u64,
    write_errors: Vec<String>,
    read_errors: Vec<String>,
    mismatches: Vec<String>,
}

type Shared = Arc<Mutex<Record>>;

fn lock(r: &Shared) -> std::sync::MutexGuard<'_, Record> {
    r.lock().unwrap_or_else(|p| p.into_inner())
}

/// Two appenders, one writer and two readers until `deadline`. Readers check the range an
/// acknowledged operation wrote at its own version, during the fault.
fn spawn_workload(
    blob: &Blob,
    record: &Shared,
    duration: Duration,
    budget: u64,
    seed: u64,
) -> Vec<tokio::task::JoinHandle<()>> {
    let start = Instant::now();
    let deadline = start + duration;
    let mut tasks = Vec::new();
    for t in 0..5u64 {
        let blob = blob.clone();
        let record = record.clone();
        let mut rng = StdRng::seed_from_u64(seed ^ (t << 48));
        let role = match t {
            0 | 1 => "append",
            2 => "write",
            _ => "read",
        };
        tasks.push(tokio::spawn(async move {
            let mut seq = 0u64;
            while Instant::now() < deadline {
                seq += 1;
                if role == "read" {
                    read_one(&blob, &record, &mut rng).await;
                    continue;
                }
                let len = if rng.gen_bool(0.4) {
                    rng.gen_range(1..16 << 10)
                } else {
                    rng.gen_range(16 << 10..256 << 10)
                };
                // Paced: the budget is spread over the whole run, so there is writing before,
                // during and after the fault however fast the machine is.
                let paced = budget as f64 * start.elapsed().as_secs_f64() / duration.as_secs_f64();
                let ahead = {
                    let mut r = lock(&record);
                    if r.bytes_attempted + len as u64 > budget {
                        break;
                    }
                    let ahead = r.bytes_attempted as f64 > paced + (1 << 20) as f64;
                    if !ahead {
                        r.bytes_attempted += len as u64;
                    }
                    ahead
                };
                if ahead {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                }
                let data = Arc::new(pattern::generate(
                    seed ^ pattern::seed(t, seq).wrapping_mul(0x9e37_79b9),
                    len,
                ));
                if role == "append" {
                    match blob.append(&data).await {
                        Ok((version, offset)) => record_op(&record, version, offset, data, true),
                        Err(e) => {
                            let mut r = lock(&record);
                            r.appends_failed += 1;
                            r.write_errors.push(format!("append of {len} bytes: {e}"));
                        }
                    }
                } else {
                    let max_end = lock(&record).max_end;
                    let offset = rng.gen_range(0..=max_end);
                    match blob.write(offset, &data).await {
                        Ok(version) => record_op(&record, version, offset, data, false),
                        Err(e) => {
                            let mut r = lock(&record);
                            r.writes_failed += 1;
                            r.write_errors
                                .push(format!("write of {len} bytes at {offset}: {e}"));
                        }
                    }
                }
            }
        }));
    }
    tasks
}

fn record_op(record: &Shared, version: u64, offset: u64, data: Arc<Vec<u8>>, append: bool) {
    let mut r = lock(record);
    r.max_end = r.max_end.max(offset + data.len() as u64);
    if append {
        r.appends_ok += 1;
    } else {
        r.writes_ok += 1;
    }
    r.ops.push(Op {
        version,
        offset,
        data,
        append,
        acked: Instant::now(),
    });
}

async fn read_one(blob: &Blob, record: &Shared, rng: &mut StdRng) {
    let op = {
        let r = lock(record);
        if r.ops.is_empty() {
            None
        } else {
            Some(r.ops[rng.gen_range(0..r.ops.len())].clone())
        }
    };
    let Some(op) = op else {
        tokio::time::sleep(Duration::from_millis(20)).await;
        return;
    };
    let len = op.data.len() as u64;
    let res = blob.read(op.offset, len, Some(op.version)).await;
    let mut r = lock(record);
    match res {
        Ok(got) => {
            r.reads_ok += 1;
            r.read_bytes += len;
            if let Some(msg) = compare(&got, &op.data, None) {
                r.mismatches.push(format!(
                    "concurrent read of version {} [{}, +{len}): {msg}",
                    op.version, op.offset
                ));
            }
        }
        Err(e) => r.read_errors.push(format!(
            "concurrent read of version {} [{}, +{len}): {e}",
            op.version, op.offset
        )),
    }
}

/// `None` when `got` equals `want` (where `known`, if given, says the byte is known).
fn compare(got: &[u8], want: &[u8], known: Option<&[bool]>) -> Option<String> {
    if got.len() != want.len() {
        return Some(format!("got {} bytes, want {}", got.len(), want.len()));
    }
    let bad = (0..got.len()).find(|&i| got[i] != want[i] && known.is_none_or(|k| k[i]))?;
    let wrong = (bad..got.len())
        .filter(|&i| got[i] != want[i] && known.is_none_or(|k| k[i]))
        .count();
    let end = (bad + 8).min(got.len());
    Some(format!(
        "{wrong} wrong bytes from +{bad}: got {:02x?}, want {:02x?}",
        &got[bad..end],
        &want[bad..end]
    ))
}

// ---------------------------------------------------------------------------------------------
// Verifying every acknowledged version against the model

/// The blob's content after the versions applied so far; bytes written by a published version
/// that was never acknowledged (its writer saw an error) are unknown.
#[derive(Default)]
struct Model {
    content: Vec<u8>,
    known: Vec<bool>,
    unknown_versions: Vec<u64>,
}

impl Model {
    fn grow(&mut self, end: usize) {
        if end > self.content.len() {
            self.content.resize(end, 0);
            self.known.resize(end, true);
        }
    }

    fn apply(&mut self, offset: u64, data: &[u8]) {
        let (o, end) = (offset as usize, offset as usize + data.len());
        self.grow(end);
        self.content[o..end].copy_from_slice(data);
        self.known[o..end].fill(true);
    }

    fn forget(&mut self, span: Span) {
        let (o, end) = (span.offset as usize, (span.offset + span.size) as usize);
        self.grow(end);
        self.known[o..end].fill(false);
    }

    fn expected(&self, offset: u64, len: u64) -> (Vec<u8>, Option<Vec<bool>>) {
        let r = offset as usize..(offset + len) as usize;
        let known = (!self.unknown_versions.is_empty()).then(|| self.known[r.clone()].to_vec());
        (self.content[r].to_vec(), known)
    }
}

struct Check {
    version: u64,
    offset: u64,
    want: Vec<u8>,
    known: Option<Vec<bool>>,
    what: &'static str,
}

async fn run_check(blob: &Blob, c: Check) -> Result<u64, String> {
    let len = c.want.len() as u64;
    let got = blob
        .read(c.offset, len, Some(c.version))
        .await
        .map_err(|e| {
            format!(
                "{} of version {} [{}, +{len}): read failed: {e}",
                c.what, c.version, c.offset
            )
        })?;
    match compare(&got, &c.want, c.known.as_deref()) {
        None => Ok(len),
        Some(msg) => Err(format!(
            "{} of version {} [{}, +{len}): WRONG CONTENT: {msg}",
            c.what, c.version, c.offset
        )),
    }
}

struct Verified {
    versions: usize,
    checks: usize,
    bytes: u64,
    published: Vec<VersionInfo>,
}

/// Reads back every acknowledged version: the range its operation wrote, a random window
/// against the model and, for the latest and three more versions, the whole content. Panics
/// with every failure found.
async fn verify_all(blob: &Blob, ops: &[Op], label: &str, rng: &mut StdRng) -> Verified {
    let started = Instant::now();
    let list = blob.versions().await.expect("versions");
    let mut published: Vec<VersionInfo> = list
        .versions
        .into_iter()
        .filter(|v| v.version > 0 && v.state == VersionState::Published)
        .collect();
    published.sort_by_key(|v| v.version);
    let by_version: HashMap<u64, &Op> = ops.iter().map(|o| (o.version, o)).collect();
    let mut failures = Vec::new();
    assert_eq!(
        by_version.len(),
        ops.len(),
        "[{label}] two acknowledged operations got the same version"
    );
    let infos: HashMap<u64, &VersionInfo> = published.iter().map(|v| (v.version, v)).collect();
    for op in ops {
        match infos.get(&op.version) {
            None => failures.push(format!(
                "acknowledged version {} is not listed as published (aborted ranges {:?})",
                op.version, list.aborted
            )),
            Some(info) => {
                let span = Span::new(op.offset, op.data.len() as u64);
                if info.span != span || info.append != op.append {
                    failures.push(format!(
                        "version {}: manager records span {:?} append {}, acknowledged {:?} append {}",
                        op.version, info.span, info.append, span, op.append
                    ));
                }
            }
        }
    }
    let acked: Vec<u64> = published
        .iter()
        .map(|v| v.version)
        .filter(|v| by_version.contains_key(v))
        .collect();
    let full: Vec<u64> = match acked.len() {
        0 => Vec::new(),
        n => vec![acked[n / 4], acked[n / 2], acked[3 * n / 4], acked[n - 1]],
    };
    let mut model = Model::default();
    let mut pending = FuturesUnordered::new();
    let (mut checks, mut bytes) = (0usize, 0u64);
    let mut settle = |r: Result<u64, String>, failures: &mut Vec<String>| match r {
        Ok(n) => {
            checks += 1;
            bytes += n;
        }
        Err(e) => failures.push(e),
    };
    for info in &published {
        let v = info.version;
        let op = by_version.get(&v);
        match op {
            Some(op) => model.apply(op.offset, &op.data),
            None => {
                model.unknown_versions.push(v);
                model.forget(info.span);
            }
        }
        if info.size != model.content.len() as u64 {
            failures.push(format!(
                "version {v}: size {} but the model says {}",
                info.size,
                model.content.len()
            ));
            continue;
        }
        let Some(op) = op else { continue };
        let mut todo = vec![Check {
            version: v,
            offset: op.offset,
            want: op.data.to_vec(),
            known: None,
            what: "own range",
        }];
        let size = info.size;
        let wlen = size.min(64 << 10);
        let woff = rng.gen_range(0..=size - wlen);
        let (want, known) = model.expected(woff, wlen);
        todo.push(Check {
            version: v,
            offset: woff,
            want,
            known,
            what: "window",
        });
        if full.contains(&v) {
            let (want, known) = model.expected(0, size);
            todo.push(Check {
                version: v,
                offset: 0,
                want,
                known,
                what: "whole content",
            });
        }
        for c in todo {
            while pending.len() >= VERIFY_PARALLELISM {
                if let Some(r) = pending.next().await {
                    settle(r, &mut failures);
                }
            }
            pending.push(run_check(blob, c));
        }
    }
    while let Some(r) = pending.next().await {
        settle(r, &mut failures);
    }
    drop(pending);
    eprintln!(
        "[{label}] verified {} acknowledged of {} published versions: {checks} reads, {:.1} MiB, \
         in {:.1} s; published but never acknowledged (content unknown): {:?}",
        acked.len(),
        published.len(),
        bytes as f64 / (1 << 20) as f64,
        started.elapsed().as_secs_f64(),
        model.unknown_versions
    );
    assert!(
        failures.is_empty(),
        "[{label}] {} failures verifying the blob against the model; first ones:\n{}",
        failures.len(),
        failures
            .iter()
            .take(15)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    );
    Verified {
        versions: acked.len(),
        checks,
        bytes,
        published,
    }
}

// ---------------------------------------------------------------------------------------------
// Detection and repair

/// What the manager said after the fault, polled every 50 ms from the moment of the fault.
#[derive(Default)]
struct Timeline {
    /// When `ListProviders` first listed the failed provider as not alive.
    detected: Option<Duration>,
    /// The manager's clock then: a repair pass that started later saw the failure.
    /// started after the detection.
    detected_ms: u64,
    first_under_replicated: Option<Duration>,
    max_under_chunks: u64,
    max_under_bytes: u64,
    max_under_nodes: u64,
    max_lost: u64,
    max_repair_total_bytes: u64,
    /// When the status first reported nothing under-replicated or lost from a pass that
    /// started after the detection, and that status.
    clean: Option<(Duration, ClusterStatus)>,
    last: Option<ClusterStatus>,
}

type SharedTimeline = Arc<Mutex<Timeline>>;

async fn monitor(client: Client, addr: String, fault_at: Instant, t: SharedTimeline) {
    while fault_at.elapsed() < REPAIR_LIMIT {
        let detected = t.lock().unwrap().detected.is_some();
        if !detected {
            if let Ok(list) = client.providers().await {
                if list.iter().any(|p| p.addr == addr && !p.alive) {
                    let at = fault_at.elapsed();
                    let detected_ms = status(&client).await.now_ms;
                    let mut t = t.lock().unwrap();
                    t.detected = Some(at);
                    t.detected_ms = detected_ms;
                }
            }
        }
        if let Ok(st) = client.manager_call(GetStatus {}).await {
            let at = fault_at.elapsed();
            let mut t = t.lock().unwrap();
            let m = &st.maintenance;
            if m.under_replicated_chunks > 0 || m.under_replicated_nodes > 0 || m.lost_chunks > 0 {
                t.first_under_replicated.get_or_insert(at);
            }
            t.max_under_chunks = t.max_under_chunks.max(m.under_replicated_chunks);
            t.max_under_bytes = t.max_under_bytes.max(m.under_replicated_bytes);
            t.max_under_nodes = t.max_under_nodes.max(m.under_replicated_nodes);
            t.max_lost = t.max_lost.max(m.lost_chunks);
            t.max_repair_total_bytes = t.max_repair_total_bytes.max(m.repair_total_bytes);
            if t.detected.is_some() && t.clean.is_none() && m.repaired_since(t.detected_ms) {
                t.clean = Some((at, st.clone()));
            }
            let done = t.clean.is_some();
            t.last = Some(st);
            if done {
                return;
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Every chunk referenced by the given versions of the blob, from their metadata trees.
async fn referenced_chunks(net: &Net, blob: &Blob, versions: &[VersionInfo]) -> Vec<ChunkId> {
    let cluster = Cluster::new(net.manager.clone(), net.pool());
    let source = DhtSource {
        cluster: &cluster,
        blob: blob.id(),
    };
    let mut out = BTreeSet::new();
    for info in versions {
        let root = NodeRef {
            version: info.version,
            offset: 0,
            size: info.capacity,
        };
        let segments = resolve_range(root, Span::new(0, info.size), &source)
            .await
            .unwrap_or_else(|e| panic!("resolving version {}: {e}", info.version));
        for s in segments {
            if let Segment::Data(p) = s {
                out.insert(p.chunk);
            }
        }
    }
    out.into_iter().collect()
}

/// The chunks a provider holds (id, length), from its own listing.
async fn list_chunks(pool: &Pool, addr: &str) -> Result<Vec<(ChunkId, u64)>, String> {
    let mut out = Vec::new();
    let mut after = None;
    loop {
        let req = ListChunks {
            start_after: after,
            limit: 5000,
        };
        let page = pool
            .call(addr, req)
            .await
            .map_err(|e| format!("ListChunks on {addr}: {e}"))?
            .entries;
        let done = page.len() < 5000;
        after = page.last().map(|c| c.id);
        out.extend(page.into_iter().map(|c| (c.id, c.len)));
        if done {
            return Ok(out);
        }
    }
}

/// Waits until every chunk in `refs` is held by at least `REPLICATION` live providers other
/// than `gone` (their own listings), and the monitor saw `tomus status` report nothing
/// under-replicated from a pass that started after the detection. Returns when the listings
/// were first found complete (an upper bound: they are first checked after the read-back)
/// and the referenced bytes.
async fn wait_repaired(o: &Outcome, refs: &[ChunkId], gone: &str, label: &str) -> (Duration, u64) {
    let pool = o.net.pool();
    let mut listed_at = None;
    let mut bytes = 0;
    loop {
        let providers: Vec<ProviderInfo> = o.client.providers().await.expect("providers");
        let live: Vec<&ProviderInfo> = providers
            .iter()
            .filter(|p| p.alive && p.addr != gone)
            .collect();
        let mut holders: HashMap<ChunkId, (usize, u64)> = HashMap::new();
        let mut listing_errors = Vec::new();
        for p in &live {
            match list_chunks(&pool, &p.addr).await {
                Ok(ids) => {
                    for (id, len) in ids {
                        let h = holders.entry(id).or_default();
                        h.0 += 1;
                        h.1 = len;
                    }
                }
                Err(e) => listing_errors.push(e),
            }
        }
        let short: Vec<(&ChunkId, usize)> = refs
            .iter()
            .map(|id| (id, holders.get(id).map_or(0, |h| h.0)))
            .filter(|&(_, n)| n < REPLICATION as usize)
            .collect();
        if listed_at.is_none() && short.is_empty() && listing_errors.is_empty() {
            listed_at = Some(o.fault_at.elapsed());
            bytes = refs.iter().map(|id| holders[id].1).sum();
        }
        let clean = o.timeline.lock().unwrap().clean.is_some();
        if let (Some(at), true) = (listed_at, clean) {
            return (at, bytes);
        }
        if o.fault_at.elapsed() > REPAIR_LIMIT {
            let t = o.timeline.lock().unwrap();
            let m = t
                .last
                .as_ref()
                .map(|s| s.maintenance.clone())
                .unwrap_or_default();
            let stuck = if m.last_pass_started_ms <= t.detected_ms {
                format!(
                    "the maintenance service completed no pass that started after the failure was \
                     detected at {} Unix ms (running now: {}, last pass ended at {} Unix ms); ",
                    t.detected_ms, m.running, m.last_pass_ms
                )
            } else {
                String::new()
            };
            panic!(
                "[{label}] not repaired {REPAIR_LIMIT:?} after the fault: {stuck}{} of {} \
                 referenced chunks on fewer than {REPLICATION} live providers (e.g. {:?}); \
                 listing errors {listing_errors:?}; live providers {:?}; status clean: {clean}; \
                 last maintenance status {m:#?}\n{}",
                short.len(),
                refs.len(),
                short.iter().take(3).collect::<Vec<_>>(),
                live.iter().map(|p| &p.addr).collect::<Vec<_>>(),
                o.net.hosts.log_tails(15)
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

// ---------------------------------------------------------------------------------------------
// The scenarios

enum Fault {
    Kill,
    Cut(LinkSide),
}

struct Outcome {
    net: Net,
    client: Client,
    blob: Blob,
    ops: Vec<Op>,
    rng: StdRng,
    victim: usize,
    fault_at: Instant,
    timeline: SharedTimeline,
    published: Vec<VersionInfo>,
}

/// Starts the cluster, runs the workload with `fault` striking provider `victim`, checks the
/// workload's own record and reads everything back; returns the state for the repair checks.
async fn fault_under_load(label: &str, fault: Fault, victim: usize) -> Outcome {
    let mut net = Net::start(label);
    let client = net.client().await;
    wait_all_alive(&client, PROVIDERS).await;
    let blob = client
        .create_blob(CHUNK_SIZE, REPLICATION)
        .await
        .expect("create blob");
    let seed: u64 = rand::random();
    eprintln!(
        "[{label}] manager {}, providers {:?}, blob {} (chunk {CHUNK_SIZE}, replication \
         {REPLICATION}), seed {seed:#x}",
        net.manager,
        (0..PROVIDERS)
            .map(|i| net.provider_addr(i))
            .collect::<Vec<_>>(),
        blob.id()
    );
    let mut rng = StdRng::seed_from_u64(seed);
    let record: Shared = Arc::default();
    let started = Instant::now();
    let tasks = spawn_workload(&blob, &record, WORKLOAD, WRITE_BUDGET, seed);

    tokio::time::sleep(FAULT_AFTER).await;
    let victim_addr = net.provider_addr(victim);
    let fault_at = Instant::now();
    match fault {
        Fault::Kill => {
            net.hosts.kill(net.providers[victim]);
            eprintln!(
                "[{label}] SIGKILLed provider-{victim} ({victim_addr}) {:.2} s into the workload",
                FAULT_AFTER.as_secs_f64()
            );
        }
        Fault::Cut(side) => {
            net.hosts.cut(victim + 1, side);
            let how = if net.hosts.is_netns() {
                format!("its veth down on the {side:?} side")
            } else {
                "loopback fallback: SIGSTOPped".to_string()
            };
            eprintln!(
                "[{label}] cut provider-{victim} ({victim_addr}) off the network ({how}) {:.2} s \
                 into the workload",
                FAULT_AFTER.as_secs_f64()
            );
        }
    }
    let timeline: SharedTimeline = Arc::default();
    tokio::spawn(monitor(
        client.clone(),
        victim_addr.clone(),
        fault_at,
        timeline.clone(),
    ));
    for t in tasks {
        t.await.expect("workload task panicked");
    }
    let workload_took = started.elapsed();
    let r = std::mem::take(&mut *lock(&record));
    let after_fault = r.ops.iter().filter(|o| o.acked > fault_at).count();
    eprintln!(
        "[{label}] workload {:.1} s: {} appends ok / {} failed, {} writes ok / {} failed \
         ({} acknowledged after the fault), {} concurrent reads ok ({} MiB), {} read errors",
        workload_took.as_secs_f64(),
        r.appends_ok,
        r.appends_failed,
        r.writes_ok,
        r.writes_failed,
        after_fault,
        r.reads_ok,
        r.read_bytes >> 20,
        r.read_errors.len()
    );
    for e in r.write_errors.iter().take(5) {
        eprintln!("[{label}]   failed (not acknowledged): {e}");
    }
    let dead = net.hosts.exited();
    assert!(dead.is_empty(), "[{label}] processes died: {dead:?}");
    assert!(
        r.mismatches.is_empty(),
        "[{label}] concurrent reads returned wrong data:\n{}",
        r.mismatches.join("\n")
    );
    assert!(
        r.read_errors.is_empty(),
        "[{label}] reads failed although every chunk has a live replica:\n{}",
        r.read_errors.join("\n")
    );
    assert!(
        r.appends_ok + r.writes_ok >= 20 && r.reads_ok >= 20,
        "[{label}] the workload did too little to mean anything"
    );
    assert!(
        after_fault > 0,
        "[{label}] no write or append was acknowledged after the fault: {:?}",
        r.write_errors
    );

    let verified = verify_all(&blob, &r.ops, label, &mut rng).await;
    assert!(verified.checks > 0 && verified.bytes > 0 && verified.versions == r.ops.len());

    // Detection must have happened by now (the workload and the read-back take longer).
    let detect_deadline = fault_at + DETECT_LIMIT;
    let detected = loop {
        if let Some(d) = timeline.lock().unwrap().detected {
            break d;
        }
        assert!(
            Instant::now() < detect_deadline,
            "[{label}] the manager still lists provider-{victim} as alive {DETECT_LIMIT:?} after \
             the fault\n{}",
            net.hosts.log_tails(10)
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    eprintln!(
        "[{label}] DETECTION: the manager lists provider-{victim} as not alive {} ms after the \
         fault (provider timeout {PROVIDER_TIMEOUT_MS} ms, heartbeat 200 ms)",
        detected.as_millis()
    );
    Outcome {
        net,
        client,
        blob,
        ops: r.ops,
        rng,
        victim,
        fault_at,
        timeline,
        published: verified.published,
    }
}

/// Waits for full repair after the fault and checks what the status says about it.
async fn repair_after(o: &Outcome, label: &str) {
    let refs = referenced_chunks(&o.net, &o.blob, &o.published).await;
    let victim_addr = o.net.provider_addr(o.victim);
    let (listed_at, bytes) = wait_repaired(o, &refs, &victim_addr, label).await;
    let t = o.timeline.lock().unwrap();
    let (clean_at, st) = t.clean.as_ref().expect("clean status");
    let m = &st.maintenance;
    eprintln!(
        "[{label}] REPAIR: status reports 0 under-replicated/lost chunks and nodes from a pass \
         started after detection {} ms after the fault (detected at {} Unix ms, the pass \
         started at {}); \
         under-replicated first reported at {:?} ms, at most {} chunks ({} KiB) and {} nodes, \
         lost {}; repaired {} chunks ({} KiB) in total; all {} chunks ({} KiB) referenced by \
         the {} published versions on >= {REPLICATION} live providers by their listings \
         (checked {} ms after the fault)",
        clean_at.as_millis(),
        t.detected_ms,
        m.last_pass_started_ms,
        t.first_under_replicated.map(|d| d.as_millis()),
        t.max_under_chunks,
        t.max_under_bytes >> 10,
        t.max_under_nodes,
        t.max_lost,
        m.repaired_chunks,
        m.repaired_bytes >> 10,
        refs.len(),
        bytes >> 10,
        o.published.len(),
        listed_at.as_millis()
    );
    assert!(
        m.repaired_chunks > 0 && t.max_under_chunks > 0,
        "[{label}] the failed provider held chunks of the blob, yet repair found or copied \
         none: {m:?}"
    );
    assert_eq!(m.lost_chunks, 0, "[{label}] {m:?}");
    let down: Vec<&str> = st
        .providers
        .iter()
        .filter(|p| !p.alive)
        .map(|p| p.addr.as_str())
        .collect();
    assert_eq!(
        down,
        vec![victim_addr.as_str()],
        "[{label}] exactly the failed provider is down in the status"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn provider_sigkill_under_load_is_repaired_to_full_replication() {
    let label = "netns-kill";
    let test_start = Instant::now();
    let mut o = fault_under_load(label, Fault::Kill, 1).await;
    repair_after(&o, label).await;

    // The repaired copies are real: with a second provider gone, every chunk whose two
    // original replicas were both on the failed ones is read from a copy repair made.
    let second = 3;
    o.net.hosts.kill(o.net.providers[second]);
    eprintln!(
        "[{label}] after repair, SIGKILLed a second provider (provider-{second}); reading \
         everything again"
    );
    let client = o.net.client().await;
    let blob = client.open_blob(o.blob.id()).await.expect("open blob");
    verify_all(&blob, &o.ops, label, &mut o.rng).await;
    eprintln!(
        "[{label}] done in {:.1} s",
        test_start.elapsed().as_secs_f64()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn provider_cut_off_under_load_is_repaired_and_returns_harmlessly() {
    let label = "netns-cut";
    let test_start = Instant::now();
    let mut o = fault_under_load(label, Fault::Cut(LinkSide::Bridge), 1).await;
    repair_after(&o, label).await;

    // Back on the network: it still holds its old copies and metadata, and missed everything
    // written while it was away.
    let host = o.victim + 1;
    let addr = o.net.provider_addr(o.victim);
    o.net.hosts.restore(host);
    let back_at = Instant::now();
    let rejoined = watch_alive(o.client.clone(), addr.clone(), true, back_at, REJOIN_LIMIT)
        .await
        .unwrap_or_else(|| {
            panic!(
                "[{label}] provider-{} not alive again {REJOIN_LIMIT:?} after its link came back\n{}",
                o.victim,
                o.net.hosts.log_tails(15)
            )
        });
    eprintln!(
        "[{label}] link restored; the manager lists provider-{} alive again after {} ms",
        o.victim,
        rejoined.0.as_millis()
    );
    assert!(
        o.net.hosts.running(o.net.providers[o.victim]),
        "[{label}] the cut-off provider exited"
    );

    // A fresh client (no cached metadata, no suspicion of the returning provider) reads
    // everything again, after a little more writing that may now land on it.
    let client = o.net.client().await;
    wait_all_alive(&client, PROVIDERS).await;
    let blob = client.open_blob(o.blob.id()).await.expect("open blob");
    let record: Shared = Arc::default();
    let seed: u64 = o.rng.gen();
    let tasks = spawn_workload(
        &blob,
        &record,
        Duration::from_millis(1500),
        WRITE_BUDGET / 4,
        seed,
    );
    for t in tasks {
        t.await.expect("workload task panicked");
    }
    let r = std::mem::take(&mut *lock(&record));
    eprintln!(
        "[{label}] after the return: {} appends and {} writes acknowledged ({} failed), {} reads \
         ok, {} read errors",
        r.appends_ok,
        r.writes_ok,
        r.appends_failed + r.writes_failed,
        r.reads_ok,
        r.read_errors.len()
    );
    assert!(
        r.mismatches.is_empty() && r.read_errors.is_empty(),
        "[{label}] reads after the return: {:?} {:?}",
        r.mismatches,
        r.read_errors
    );
    assert!(
        r.write_errors.is_empty(),
        "[{label}] writes failed with every provider back: {:?}",
        r.write_errors
    );
    let mut ops = std::mem::take(&mut o.ops);
    ops.extend(r.ops);
    verify_all(&blob, &ops, label, &mut o.rng).await;
    let dead = o.net.hosts.exited();
    assert!(dead.is_empty(), "[{label}] processes died: {dead:?}");
    eprintln!(
        "[{label}] done in {:.1} s",
        test_start.elapsed().as_secs_f64()
    );
}
