//! The backup service: runs in the `tomus manager` process next to maintenance, as a client
//! of the manager, and takes points on schedule or on request.
//!
//! Its configuration, the requests of `tomus backup now` and its status are small JSON files
//! in the cluster's own namespace, under the reserved directory `/.tomus-backup` (the
//! manager keeps them durably, like any file; points never include them). So `enable`
//! survives manager restarts, and a point requested while the manager was down is taken
//! once it is back.
//!
//! A scheduled point waits (up to its interval, at most a minute) for a quiet moment: no
//! version published by anyone else in the last seconds (the paper's "privileging the
//! periods with little network traffic"). A requested point starts at once. A failed point
//! is retried with back-off; the error stays in the status until a point completes. Because
//! a point's manifest is written last and its uploads are kept, a retried (or, after a
//! manager crash, restarted) point resumes where the last attempt stopped.

use std::sync::atomic::Ordering;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::sync::watch;
use tomus_client::{Client, ClientOptions, CreateOptions};
use tomus_wire::{ClusterSecret, ErrorKind, Result, Retention};
use tomus_worker::{Round, Worker, Workers};

use crate::point::{list_points, now_ms, prune, take_point, Known, Progress, STATE_DIR};
use crate::target::{transient, Target};

/// What `tomus backup enable` sets.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Config {
    pub enabled: bool,
    pub target: String,
    /// Pause between scheduled points.
    pub interval_ms: u64,
    /// Subtrees backed up (empty: the whole namespace and every blob).
    pub paths: Vec<String>,
    /// Upload bytes per second (0: unlimited).
    pub rate: u64,
    /// Complete points kept at the target (0: all).
    pub keep: u32,
    /// When backup was enabled (Unix ms): the first scheduled point is one interval later
    /// (`tomus backup now` takes one at once).
    pub enabled_ms: u64,
}

/// What the service says of itself (`tomus backup status`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Status {
    /// `disabled`, `idle`, `waiting for a quiet moment`, `running`, `retrying`.
    pub state: String,
    pub target: Option<String>,
    pub last_point: Option<String>,
    pub last_point_ms: Option<u64>,
    pub last_uploaded_bytes: u64,
    /// The highest `backup now` request a completed point answered.
    pub requests_done: u64,
    /// The last failure, until a point completes.
    pub error: Option<String>,
    /// What the last completed point left out (registered files no holder could give).
    #[serde(default)]
    pub warning: Option<String>,
    /// Failed attempts since the last completed point.
    pub attempts: u64,
    pub chunks_done: u64,
    pub chunks_total: u64,
    pub bytes_uploaded: u64,
    pub updated_ms: u64,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
struct Request {
    seq: u64,
}

const CONFIG: &str = "config.json";
const STATUS: &str = "status.json";
const REQUEST: &str = "request.json";
/// No publication by others for this long counts as a quiet moment.
const QUIET: Duration = Duration::from_secs(2);
/// How often the service looks at its configuration and requests.
const POLL: Duration = Duration::from_millis(500);

fn state_path(name: &str) -> String {
    format!("{STATE_DIR}/{name}")
}

async fn read_json<T: for<'a> Deserialize<'a>>(client: &Client, name: &str) -> Result<Option<T>> {
    read_state(client, &state_path(name)).await
}

async fn write_json<T: Serialize>(client: &Client, name: &str, value: &T) -> Result<()> {
    write_state(client, &state_path(name), value).await
}

/// A service's JSON state file at `path` in the cluster's namespace (reserved names
/// included), `None` when there is none. Geo-replication (crates/sites) keeps its
/// configuration, cursors and status the same way.
pub async fn read_state<T: for<'a> Deserialize<'a>>(
    client: &Client,
    path: &str,
) -> Result<Option<T>> {
    let ns = client.internal_namespace();
    let (_, blob) = match ns.open(path).await {
        Ok(x) => x,
        Err(e) if e.kind == ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    let info = blob.stat(None).await?;
    let data = blob.read(0, info.size, Some(info.version)).await?;
    serde_json::from_slice(&data)
        .map(Some)
        .map_err(|e| tomus_wire::Error::corrupt(format!("/{path}: {e}")))
}

/// Writes `value` as the new content of the state file at `path` (the last two versions
/// kept).
pub async fn write_state<T: Serialize>(client: &Client, path: &str, value: &T) -> Result<()> {
    let body =
        serde_json::to_vec_pretty(value).map_err(|e| tomus_wire::Error::internal(e.to_string()))?;
    let ns = client.internal_namespace();
    let (_, blob) = ns
        .create_retained(path, CreateOptions::default(), Retention::KeepLast(2))
        .await?;
    blob.replace(&body).await?;
    Ok(())
}

pub async fn config(client: &Client) -> Result<Option<Config>> {
    read_json(client, CONFIG).await
}

pub async fn set_config(client: &Client, config: &Config) -> Result<()> {
    Target::open(&config.target, config.rate)?;
    write_json(client, CONFIG, config).await
}

pub async fn status(client: &Client) -> Result<Status> {
    Ok(read_json(client, STATUS).await?.unwrap_or_else(|| Status {
        state: "disabled".into(),
        ..Default::default()
    }))
}

/// Asks the service for a point now; returns the request's number (a status whose
/// `requests_done` reaches it has answered it).
pub async fn request_now(client: &Client) -> Result<u64> {
    let seq = read_json::<Request>(client, REQUEST)
        .await?
        .map(|r| r.seq)
        .unwrap_or(0)
        + 1;
    write_json(client, REQUEST, &Request { seq }).await?;
    Ok(seq)
}

/// Runs the service against the manager at `manager` until `stop` turns true, as the
/// `backup` worker of `workers` (so `tomus status` lists it with the manager's own).
pub async fn run(
    manager: String,
    secret: Option<ClusterSecret>,
    stop: watch::Receiver<bool>,
    workers: &Workers,
) -> Result<()> {
    let worker = BackupWorker {
        manager,
        options: ClientOptions {
            secret,
            ..Default::default()
        },
        stop: stop.clone(),
        client: None,
        st: Status::default(),
        backoff: None,
        quiet_since_wait: None,
        known: Known::default(),
    };
    workers.run(worker, stop, None).await;
    Ok(())
}

/// The service as a worker: each round looks at the configuration and the requests once and
/// takes a point when one is due.
struct BackupWorker {
    manager: String,
    options: ClientOptions,
    /// A point in progress stops when this turns true (the next start resumes it).
    stop: watch::Receiver<bool>,
    /// Connected at the first round the manager answers.
    client: Option<Client>,
    st: Status,
    /// After a failed point: the pause before the next attempt (doubling up to 30 s).
    backoff: Option<Duration>,
    quiet_since_wait: Option<u64>,
    known: Known,
}

impl Worker for BackupWorker {
    fn name(&self) -> &'static str {
        "backup"
    }

    fn interval(&self) -> Duration {
        POLL
    }

    fn pause(&mut self) -> impl std::future::Future<Output = ()> + Send {
        tokio::time::sleep(self.backoff.map_or(POLL, |b| b + POLL))
    }

    async fn work(&mut self) -> Result<Round> {
        let client = match &self.client {
            Some(c) => c.clone(),
            None => match Client::connect(&self.manager, self.options.clone()).await {
                Ok(c) => {
                    self.st = status(&c).await.unwrap_or_default();
                    self.client = Some(c.clone());
                    c
                }
                Err(e) => {
                    tracing::debug!("backup service: manager not answering yet: {e}");
                    return Ok(Round::Idle);
                }
            },
        };
        self.round(&client).await
    }

    fn summary(&self) -> String {
        match (&self.st.last_point, &self.st.error) {
            (_, Some(e)) => format!("{}: {e}", self.st.state),
            (Some(p), None) => format!("{}; last point {p}", self.st.state),
            (None, None) => self.st.state.clone(),
        }
    }
}

impl BackupWorker {
    async fn round(&mut self, client: &Client) -> Result<Round> {
        let st = &mut self.st;
        let cfg = match config(client).await {
            Ok(Some(c)) if c.enabled => c,
            // Never configured: nothing is written (a cluster being restored must not get
            // files, and so blob ids, of the service's own).
            Ok(None) => {
                st.state = "not configured".into();
                return Ok(Round::Idle);
            }
            Ok(Some(_)) => {
                if st.state != "disabled" {
                    st.state = "disabled".into();
                    save(client, st).await;
                }
                return Ok(Round::Idle);
            }
            Err(e) => {
                tracing::debug!("backup service: reading its configuration: {e}");
                return Ok(Round::Idle);
            }
        };
        let requested = read_json::<Request>(client, REQUEST)
            .await
            .ok()
            .flatten()
            .map(|r| r.seq)
            .unwrap_or(0);
        if st.target.as_deref() != Some(cfg.target.as_str()) {
            // A new target: its newest point, if any, is the last one.
            st.target = Some(cfg.target.clone());
            self.known = Known::default();
            st.last_point = None;
            st.last_point_ms = None;
            if let Ok(t) = Target::open(&cfg.target, 0) {
                if let Ok(points) = list_points(&t).await {
                    st.last_point_ms = points.last().and_then(|p| p.parse().ok());
                    st.last_point = points.last().cloned();
                }
            }
        }
        let now = now_ms();
        let since = st.last_point_ms.unwrap_or(0).max(cfg.enabled_ms);
        let due = now >= since.saturating_add(cfg.interval_ms);
        let asked = requested > st.requests_done;
        if !due && !asked {
            if st.state != "idle" && st.error.is_none() {
                st.state = "idle".into();
                save(client, st).await;
            }
            return Ok(Round::Idle);
        }
        if !asked && st.error.is_none() {
            // Scheduled: wait for a quiet moment, but not past min(interval, 1 min).
            let waited_from = *self.quiet_since_wait.get_or_insert(now);
            let limit = cfg.interval_ms.min(60_000);
            if now < waited_from + limit && busy(client).await {
                if st.state != "waiting for a quiet moment" {
                    st.state = "waiting for a quiet moment".into();
                    save(client, st).await;
                }
                return Ok(Round::Idle);
            }
        }
        self.quiet_since_wait = None;
        st.state = "running".into();
        save(client, st).await;
        match run_point(client, &cfg, st, &mut self.stop, &mut self.known).await {
            Ok(Some(())) => {
                st.requests_done = st.requests_done.max(requested);
                st.error = None;
                st.attempts = 0;
                st.state = "idle".into();
                self.backoff = None;
                if cfg.keep > 0 {
                    if let Ok(t) = Target::open(&cfg.target, 0) {
                        if let Err(e) = prune(&t, cfg.keep as usize).await {
                            tracing::warn!("backup: removing old points: {e}");
                        }
                    }
                }
                save(client, st).await;
                Ok(Round::Idle)
            }
            Ok(None) => Ok(Round::Done),
            Err(e) => {
                let backoff = self.backoff.map_or(Duration::from_secs(1), |b| {
                    (b * 2).min(Duration::from_secs(30))
                });
                self.backoff = Some(backoff);
                st.attempts += 1;
                st.state = "retrying".into();
                let kind = if transient(&e) {
                    "unreachable"
                } else {
                    "failed"
                };
                st.error = Some(format!(
                    "{kind} (attempt {}, retrying in {}s): {e}",
                    st.attempts,
                    backoff.as_secs()
                ));
                save(client, st).await;
                // The worker's status shows the failure; the pause is the back-off.
                Err(e)
            }
        }
    }
}

/// One point with its status refreshed as it goes; `None` when asked to stop meanwhile.
async fn run_point(
    client: &Client,
    cfg: &Config,
    st: &mut Status,
    stop: &mut watch::Receiver<bool>,
    known: &mut Known,
) -> Result<Option<()>> {
    let target = Target::open(&cfg.target, cfg.rate)?;
    let progress = Progress::default();
    let point = take_point(client, &target, &cfg.paths, &progress, known);
    tokio::pin!(point);
    let mut tick = tokio::time::interval(Duration::from_secs(2));
    loop {
        tokio::select! {
            r = &mut point => {
                let m = r?;
                st.last_point = Some(m.id.clone());
                st.last_point_ms = Some(m.taken_ms);
                st.last_uploaded_bytes = m.uploaded_bytes;
                st.warning = (!m.unreadable.is_empty()).then(|| {
                    format!(
                        "point {} left out {} registered file(s) no holder could give: {}",
                        m.id,
                        m.unreadable.len(),
                        m.unreadable.join("; ")
                    )
                });
                st.chunks_done = progress.chunks_done.load(Ordering::Relaxed);
                st.chunks_total = progress.chunks_total.load(Ordering::Relaxed);
                st.bytes_uploaded = progress.bytes_uploaded.load(Ordering::Relaxed);
                tracing::info!("backup point {} complete: {} bytes uploaded", m.id, m.uploaded_bytes);
                return Ok(Some(()));
            }
            _ = tick.tick() => {
                st.chunks_done = progress.chunks_done.load(Ordering::Relaxed);
                st.chunks_total = progress.chunks_total.load(Ordering::Relaxed);
                st.bytes_uploaded = progress.bytes_uploaded.load(Ordering::Relaxed);
                save(client, st).await;
            }
            // The guard `wait_for` answers must not live across the other branches' awaits.
            _ = async { let _ = stop.wait_for(|s| *s).await; } => return Ok(None),
        }
    }
}

/// Whether anyone but the service published a version in the last [`QUIET`].
async fn busy(client: &Client) -> bool {
    // The state files of this service and of geo-replication's (which writes its status
    // every few seconds) are not the users' traffic.
    let mut own: Vec<u64> = Vec::new();
    for dir in [STATE_DIR, ".tomus-sites"] {
        if let Ok(entries) = client.internal_namespace().walk(dir).await {
            own.extend(entries.iter().filter_map(|e| e.blob.as_ref().map(|b| b.id)));
        }
    }
    let Ok(blobs) = client.list_blobs().await else {
        return false;
    };
    let since = now_ms().saturating_sub(QUIET.as_millis() as u64);
    blobs
        .iter()
        .any(|b| !own.contains(&b.id) && b.modified_ms >= since)
}

async fn save(client: &Client, st: &mut Status) {
    st.updated_ms = now_ms();
    if let Err(e) = write_json(client, STATUS, st).await {
        tracing::debug!("backup service: writing its status: {e}");
    }
}

/// Sleeps `d`; whether `stop` turned true meanwhile.
pub async fn pause(stop: &mut watch::Receiver<bool>, d: Duration) -> bool {
    if *stop.borrow() {
        return true;
    }
    let stopped = tokio::select! {
        _ = tokio::time::sleep(d) => false,
        _ = async { let _ = stop.wait_for(|s| *s).await; } => true,
    };
    stopped || *stop.borrow()
}
