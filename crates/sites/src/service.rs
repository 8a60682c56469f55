//! The replication service: runs in the `tomus manager` process beside maintenance and
//! backup, as a client of the manager, and carries out the rules of `tomus sites`.
//!
//! It is the `geo-replication` worker of the manager process (listed by `tomus status`):
//! each round matches the rules' tasks to the configuration and gathers their status. One
//! task per rule, so a site that is down holds up only its own rules. A task scans the
//! source (this needs only the source, so the backlog and the lag stay current while the
//! site is unreachable), connects to the site if it has no connection, and replays what
//! the scan found in bounded steps, saving its cursor after each. A failure (site down,
//! link cut, site refusing) drops the connection and retries the same versions after a
//! back-off (1 s doubling to 30 s): nothing is skipped and nothing is reordered, since the
//! next attempt starts from what the site says it holds.
//!
//! Each task keeps its cursor in `/.tomus-sites/cursors/` of the source cluster; the status
//! of every rule goes to `/.tomus-sites/status.json` (read by `tomus sites status` and
//! `tomus status`) about once a second while it changes, and to the Prometheus gauges of
//! [`tomus_metrics::sites`].

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::sync::watch;
use tomus_backup::service::{pause, read_state, write_state};
use tomus_client::{Client, ClientOptions};
use tomus_maintenance::throttle::Throttle;
use tomus_metrics::Labels;
use tomus_wire::{ClusterSecret, Result};
use tomus_worker::{Round, Worker, Workers};

use crate::config::{self, state_path, Rule, Site};
use crate::replay::{apply, scan, Cursor, Progress};

/// How one rule stands (`tomus sites status`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RuleStatus {
    pub site: String,
    pub path: String,
    /// The rule's rate limit in effect, bytes per second (0: unlimited).
    #[serde(default)]
    pub rate: u64,
    /// `scanning`, `replicating`, `caught up`, `site unreachable`, `retrying`.
    pub state: String,
    /// Versions published at the source and not yet on the site (as of the last scan).
    pub versions_behind: u64,
    /// Age of the oldest of them (0: caught up).
    pub seconds_behind: f64,
    /// Totals since the manager started.
    pub versions_replicated: u64,
    pub bytes_replicated: u64,
    pub files_deleted: u64,
    /// When a version was last replayed (Unix ms; 0: not since the manager started).
    pub last_replicated_ms: u64,
    /// The last failure, until an attempt succeeds.
    pub error: Option<String>,
    /// Failed attempts since the last success.
    pub attempts: u64,
}

/// Everything the service says (`/.tomus-sites/status.json`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ServiceStatus {
    /// By rule id (`SITE:/PATH`).
    pub rules: BTreeMap<String, RuleStatus>,
    pub updated_ms: u64,
}

const STATUS: &str = "status.json";
/// How often the service reads its configuration, and how long an idle rule waits between
/// scans.
const POLL: Duration = Duration::from_millis(500);
/// Longest replay step between two cursor saves.
const STEP: Duration = Duration::from_secs(2);
const MAX_BACKOFF: Duration = Duration::from_secs(30);

/// What the service last wrote (an empty status when it never ran).
pub async fn status(client: &Client) -> Result<ServiceStatus> {
    Ok(read_state(client, &state_path(STATUS))
        .await?
        .unwrap_or_default())
}

/// Whether everything published under `rule`'s path so far is on its site, as the rule's
/// saved cursor says: a scan of the source from that cursor finds no version to replay and
/// no file to delete. The service's status comes from its last scan, which may predate the
/// caller's own writes; this does not. (`tomus sites status --wait`.)
pub async fn caught_up_now(client: &Client, rule: &Rule) -> Result<bool> {
    let cursor: Cursor = read_state(client, &cursor_path(rule))
        .await?
        .unwrap_or_default();
    Ok(scan(client, &rule.path, &cursor).await?.is_empty())
}

fn cursor_path(rule: &Rule) -> String {
    state_path(&format!("cursors/{}", rule.file_name()))
}

/// One running rule.
struct Running {
    rule: Rule,
    site: Site,
    progress: Arc<Progress>,
    shared: Arc<Mutex<RuleStatus>>,
    /// Shared with the task: a new rate for the rule applies without restarting it.
    throttle: Arc<Throttle>,
    task: tokio::task::JoinHandle<()>,
    /// The task's totals already added to the counters (the task counts from zero).
    counted: (u64, u64),
}

fn labels(rule: &Rule) -> Labels {
    vec![
        ("site", rule.site.clone()),
        ("path", format!("/{}", rule.path)),
    ]
}

/// Runs the service against the manager at `manager` until `stop` turns true, as the
/// `geo-replication` worker of `workers` (so `tomus status` lists it with the manager's own).
pub async fn run(
    manager: String,
    secret: Option<ClusterSecret>,
    stop: watch::Receiver<bool>,
    workers: &Workers,
) -> Result<()> {
    let worker = SitesWorker {
        manager,
        options: ClientOptions {
            secret,
            ..Default::default()
        },
        stop: stop.clone(),
        client: None,
        running: BTreeMap::new(),
        written: ServiceStatus::default(),
        last: ServiceStatus::default(),
    };
    // The rules' tasks end with the worker (dropped when it stops).
    workers.run(worker, stop, None).await;
    Ok(())
}

/// The service as a worker: each round reads the configuration, starts and stops the rules'
/// tasks to match it, and gathers their status and gauges. The rules replicate on tasks of
/// their own, so a site that is down holds up only its rules, each with its own back-off.
struct SitesWorker {
    manager: String,
    options: ClientOptions,
    /// Handed to the rules' tasks: they stop when it turns true.
    stop: watch::Receiver<bool>,
    /// Connected at the first round the manager answers.
    client: Option<Client>,
    running: BTreeMap<String, Running>,
    /// What was last written to the status file.
    written: ServiceStatus,
    /// What the last round gathered (the worker's summary).
    last: ServiceStatus,
}

impl Drop for SitesWorker {
    fn drop(&mut self) {
        for r in self.running.values() {
            r.task.abort();
        }
    }
}

impl Worker for SitesWorker {
    fn name(&self) -> &'static str {
        "geo-replication"
    }

    fn interval(&self) -> Duration {
        POLL
    }

    async fn work(&mut self) -> Result<Round> {
        let client = match &self.client {
            Some(c) => c.clone(),
            None => match Client::connect(&self.manager, self.options.clone()).await {
                Ok(c) => {
                    self.client = Some(c.clone());
                    c
                }
                Err(e) => {
                    tracing::debug!("sites service: manager not answering yet: {e}");
                    return Ok(Round::Idle);
                }
            },
        };
        self.round(&client).await;
        Ok(Round::Idle)
    }

    fn summary(&self) -> String {
        let rules = &self.last.rules;
        if rules.is_empty() {
            return "no rules".into();
        }
        let mut states: BTreeMap<&str, usize> = BTreeMap::new();
        for r in rules.values() {
            *states.entry(r.state.as_str()).or_default() += 1;
        }
        let states: Vec<String> = states.iter().map(|(s, n)| format!("{n} {s}")).collect();
        let behind: u64 = rules.values().map(|r| r.versions_behind).sum();
        let plural = if rules.len() == 1 { "" } else { "s" };
        format!(
            "{} rule{plural}: {}; {behind} versions behind",
            rules.len(),
            states.join(", ")
        )
    }
}

impl SitesWorker {
    /// Matches the running rules to the configuration, then gathers their status.
    async fn round(&mut self, client: &Client) {
        let metrics = tomus_metrics::sites();
        let cfg = match config::load(client).await {
            Ok(c) => c,
            Err(e) => {
                tracing::debug!("sites service: reading its configuration: {e}");
                return;
            }
        };
        // Rules removed or whose site changed stop; new ones start. A rule whose rate changed
        // keeps running (its counters too) at the new rate.
        let wanted: BTreeMap<String, (Rule, Site)> = cfg
            .rules
            .iter()
            .filter_map(|r| Some((r.id(), (r.clone(), cfg.sites.get(&r.site)?.clone()))))
            .collect();
        self.running.retain(|id, r| {
            let keep = wanted.get(id).is_some_and(|(rule, site)| {
                let same = rule.path == r.rule.path && rule.site == r.rule.site && *site == r.site;
                if same && rule.rate != r.rule.rate {
                    r.throttle.set_rate(rule.rate);
                    r.rule.rate = rule.rate;
                }
                same
            });
            if !keep {
                r.task.abort();
                let l = labels(&r.rule);
                metrics.lag_versions.remove(&l);
                metrics.lag_seconds.remove(&l);
            }
            keep
        });
        for (id, (rule, site)) in wanted {
            if self.running.contains_key(&id) {
                continue;
            }
            let progress = Arc::new(Progress::default());
            let throttle = Arc::new(Throttle::new(rule.rate));
            let shared = Arc::new(Mutex::new(RuleStatus {
                site: rule.site.clone(),
                path: format!("/{}", rule.path),
                state: "scanning".into(),
                ..Default::default()
            }));
            let task = tokio::spawn(run_rule(
                client.clone(),
                rule.clone(),
                site.clone(),
                progress.clone(),
                shared.clone(),
                throttle.clone(),
                self.stop.clone(),
            ));
            self.running.insert(
                id,
                Running {
                    rule,
                    site,
                    progress,
                    shared,
                    throttle,
                    task,
                    counted: (0, 0),
                },
            );
        }
        // The status and the gauges, from every rule's counters.
        let now = tomus_wire::now_ms();
        let mut st = ServiceStatus::default();
        for (id, r) in self.running.iter_mut() {
            let mut s = r.shared.lock().unwrap_or_else(|p| p.into_inner()).clone();
            let p = &r.progress;
            s.rate = r.throttle.rate();
            s.versions_behind = p.versions_behind.load(Ordering::Relaxed);
            let oldest = p.oldest_pending_ms.load(Ordering::Relaxed);
            s.seconds_behind = if s.versions_behind == 0 || oldest == 0 {
                0.0
            } else {
                now.saturating_sub(oldest) as f64 / 1000.0
            };
            s.versions_replicated = p.versions_done.load(Ordering::Relaxed);
            s.bytes_replicated = p.bytes_done.load(Ordering::Relaxed);
            s.files_deleted = p.files_deleted.load(Ordering::Relaxed);
            s.last_replicated_ms = p.last_done_ms.load(Ordering::Relaxed);
            let l = labels(&r.rule);
            metrics
                .lag_versions
                .get_or_create(&l)
                .set(s.versions_behind as i64);
            metrics.lag_seconds.get_or_create(&l).set(s.seconds_behind);
            let (versions, bytes) = r.counted;
            metrics
                .versions
                .get_or_create(&l)
                .inc_by(s.versions_replicated.saturating_sub(versions));
            metrics
                .bytes
                .get_or_create(&l)
                .inc_by(s.bytes_replicated.saturating_sub(bytes));
            r.counted = (s.versions_replicated, s.bytes_replicated);
            st.rules.insert(id.clone(), s);
        }
        self.last = st.clone();
        // Written when something but the clock moved, and every 5 s while there are rules
        // (the age grows; `tomus sites status --wait` needs a status newer than its start).
        let behind = !st.rules.is_empty();
        let changed = {
            let strip = |s: &ServiceStatus| {
                let mut s = s.clone();
                s.updated_ms = 0;
                for r in s.rules.values_mut() {
                    r.seconds_behind = 0.0;
                }
                s
            };
            strip(&st) != strip(&self.written)
        };
        if changed || (behind && now >= self.written.updated_ms + 5_000) {
            st.updated_ms = now;
            match write_state(client, &state_path(STATUS), &st).await {
                Ok(()) => self.written = st,
                Err(e) => tracing::debug!("sites service: writing its status: {e}"),
            }
        }
    }
}

fn set_state(shared: &Mutex<RuleStatus>, f: impl FnOnce(&mut RuleStatus)) {
    let mut s = shared.lock().unwrap_or_else(|p| p.into_inner());
    f(&mut s);
}

/// Carries out one rule until stopped (or aborted when the rule changes).
async fn run_rule(
    source: Client,
    rule: Rule,
    site: Site,
    progress: Arc<Progress>,
    shared: Arc<Mutex<RuleStatus>>,
    throttle: Arc<Throttle>,
    mut stop: watch::Receiver<bool>,
) {
    let metrics = tomus_metrics::sites();
    let l = labels(&rule);
    let path = cursor_path(&rule);
    let mut cursor: Cursor = loop {
        match read_state(&source, &path).await {
            Ok(c) => break c.unwrap_or_default(),
            Err(e) => tracing::debug!("sites: reading the cursor of {}: {e}", rule.id()),
        }
        if pause(&mut stop, Duration::from_secs(1)).await {
            return;
        }
    };
    let mut target: Option<Client> = None;
    let mut backoff = Duration::from_secs(1);
    loop {
        let outcome = step(
            &source,
            &rule,
            &site,
            &mut target,
            &mut cursor,
            &throttle,
            &progress,
            &shared,
        )
        .await;
        let saved = match outcome {
            Ok((_, true)) => true,
            Ok(_) => false,
            Err(_) => true,
        };
        if saved {
            if let Err(e) = write_state(&source, &path, &cursor).await {
                tracing::warn!("sites: saving the cursor of {}: {e}", rule.id());
            }
        }
        let wait = match outcome {
            // More to do: at once.
            Ok((true, _)) => {
                backoff = Duration::from_secs(1);
                Duration::ZERO
            }
            Ok((false, _)) => {
                backoff = Duration::from_secs(1);
                set_state(&shared, |s| s.state = "caught up".into());
                POLL
            }
            Err(e) => {
                target = None;
                metrics.errors.get_or_create(&l).inc();
                let unreachable = tomus_backup::target::transient(&e);
                metrics
                    .reachable
                    .get_or_create(&l)
                    .set(i64::from(!unreachable));
                let wait = backoff;
                set_state(&shared, |s| {
                    s.attempts += 1;
                    s.state = if unreachable {
                        "site unreachable"
                    } else {
                        "retrying"
                    }
                    .into();
                    s.error = Some(format!(
                        "attempt {}, retrying in {}s: {e}",
                        s.attempts,
                        wait.as_secs()
                    ));
                });
                tracing::warn!("sites: {}: {e} (retrying in {wait:?})", rule.id());
                backoff = (backoff * 2).min(MAX_BACKOFF);
                wait
            }
        };
        if pause(&mut stop, wait).await {
            return;
        }
    }
}

/// One scan and one bounded replay step. `Ok((more, changed))`: whether work remains, and
/// whether the cursor changed (to be saved).
#[allow(clippy::too_many_arguments)]
async fn step(
    source: &Client,
    rule: &Rule,
    site: &Site,
    target: &mut Option<Client>,
    cursor: &mut Cursor,
    throttle: &Arc<Throttle>,
    progress: &Progress,
    shared: &Mutex<RuleStatus>,
) -> Result<(bool, bool)> {
    let found = scan(source, &rule.path, cursor).await?;
    found.publish(progress);
    if found.is_empty() {
        return Ok((false, false));
    }
    let site_client = match target {
        Some(c) => c.clone(),
        None => {
            let c = config::connect(site).await?;
            *target = Some(c.clone());
            c
        }
    };
    tomus_metrics::sites()
        .reachable
        .get_or_create(&labels(rule))
        .set(1);
    set_state(shared, |s| s.state = "replicating".into());
    let before = cursor.clone();
    let done = apply(
        source,
        &site_client,
        found,
        cursor,
        throttle,
        progress,
        STEP,
    )
    .await;
    let changed = *cursor != before;
    // On an error the caller saves the cursor too: what was replayed before it is kept.
    let all = done?;
    set_state(shared, |s| {
        s.error = None;
        s.attempts = 0;
    });
    Ok((!all || changed, changed))
}
