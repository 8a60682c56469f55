//! Operating a cluster: `tomus status`, `tomus scrub`, `tomus provider drain|remove` and
//! `tomus blob retention`.

use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand};
use indicatif::{ProgressBar, ProgressStyle};
use serde_json::json;
use tomus_client::Client;
use tomus_metadata::ChunkId;
use tomus_wire::manager::{
    DrainProvider, GetPlacementPlan, GetStatus, MemoryStatus, RemoveProvider, SetRetention,
};
use tomus_wire::provider::Scrub;
use tomus_wire::{ClusterStatus, ManagerDisk, ProviderInfo, ProviderState, Retention, ScrubReport};

use crate::size::format_size;

/// Chunks verified per scrub request.
const SCRUB_PAGE: u32 = 1000;
/// How often `--wait` polls the cluster.
const POLL: Duration = Duration::from_millis(500);

#[derive(Subcommand)]
pub enum ProviderAction {
    /// Move all data off the provider at ADDR (it gets no new data; repair copies what it
    /// holds to other providers). Then it can be stopped with nothing lost; `tomus provider
    /// remove ADDR` forgets it.
    Drain {
        /// The provider's address as listed by `tomus providers`.
        provider: String,
        /// Wait until the drain is complete, showing progress.
        #[arg(long)]
        wait: bool,
    },
    /// Forget a provider that is drained or down for good (it leaves the metadata ring).
    Remove {
        /// The provider's address as listed by `tomus providers`.
        provider: String,
    },
}

#[derive(Args)]
pub struct ScrubArgs {
    /// Scrub only the provider at this address (repeatable; default: every live provider).
    #[arg(long = "provider", value_name = "ADDR")]
    providers: Vec<String>,
    /// After scrubbing, wait until repair has re-created every quarantined copy.
    #[arg(long)]
    wait: bool,
}

#[derive(Args)]
pub struct RetentionArgs {
    /// Blob id.
    pub id: u64,
    /// Keep only the newest K published versions.
    #[arg(long, value_name = "K", group = "policy")]
    keep_last: Option<u32>,
    /// Keep versions published less than this long ago (e.g. 90s, 30m, 12h, 7d).
    #[arg(long, value_name = "AGE", group = "policy", value_parser = parse_age)]
    keep_newer_than: Option<Duration>,
    /// Keep every version (the default policy).
    #[arg(long, group = "policy")]
    keep_all: bool,
}

/// Parses `90s`, `30m`, `12h`, `7d` or plain seconds.
pub fn parse_age(s: &str) -> std::result::Result<Duration, String> {
    let s = s.trim();
    let (num, unit) = s
        .find(|c: char| !c.is_ascii_digit())
        .map_or((s, "s"), |i| s.split_at(i));
    let n: u64 = num
        .parse()
        .map_err(|_| format!("{s:?} is not an age like 90s, 30m, 12h or 7d"))?;
    let secs = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86_400,
        _ => return Err(format!("unknown unit {unit:?} in {s:?}: use s, m, h or d")),
    };
    Ok(Duration::from_secs(n.saturating_mul(secs)))
}

pub async fn status(client: &Client) -> Result<ClusterStatus> {
    Ok(client.manager_call(GetStatus {}).await?)
}

fn state_of(p: &ProviderInfo) -> &'static str {
    match p.state() {
        ProviderState::Down if p.draining => "down (draining)",
        state => state.name(),
    }
}

/// The manager's disk: its free space and the reserve, and whether new writes are refused.
fn manager_disk_line(d: &ManagerDisk) -> String {
    if let Some(fault) = &d.fault {
        return format!("manager disk: FAILED: {fault}; the manager takes no changes");
    }
    let free = format!(
        "manager disk: {} free of {}",
        format_size(d.free),
        format_size(d.capacity)
    );
    match d.min_free {
        0 => format!("{free} (no reserve)"),
        min if d.free < min => format!(
            "{free}: UNDER its reserve of {} (--min-free-space), new writes are refused until \
             space is freed there",
            format_size(min)
        ),
        min => format!("{free} (new writes refused under {})", format_size(min)),
    }
}

pub async fn print_status(client: &Client, json_out: bool) -> Result<()> {
    let s = status(client).await?;
    let memory = client.manager_call(MemoryStatus {}).await?;
    let plan = client.manager_call(GetPlacementPlan {}).await?;
    let m = &s.maintenance;
    // The background services' own status files (absent: never enabled).
    let backup = tomus_backup::service::status(client).await.ok();
    let sites = tomus_sites::status(client).await.ok();
    if json_out {
        outln!(
            "{}",
            serde_json::to_string(&json!({
                "providers": s.providers.iter().map(|p| json!({"id": p.id, "addr": p.addr, "state": state_of(p),
                    "alive": p.alive, "draining": p.draining, "fault": p.fault, "capacity": p.capacity, "free": p.free, "chunks": p.chunks})).collect::<Vec<_>>(),
                "blobs": s.blobs,
                "provider_timeout_ms": s.provider_timeout_ms,
                "maintenance": m,
                "maintenance_reported_ms": s.maintenance_reported_ms,
                "manager_disk": s.manager_disk,
                "cluster": format!("{:016x}", s.cluster),
                // The manager's own workers; maintenance's are in `maintenance.workers`.
                "workers": s.workers,
                "backup": backup,
                "replication": sites.map(|st| st.rules),
                "memory_class": memory.iter().map(|u| json!({"provider": u.provider, "addr": u.addr,
                    "capacity": u.capacity, "used": u.used, "chunks": u.chunks})).collect::<Vec<_>>(),
                "placement_plan": plan.as_ref().map(|p| p.clusters.iter().map(|c| json!({
                    "storage": c.storage, "storage_host": c.storage_host,
                    "members": c.members, "member_hosts": c.member_hosts})).collect::<Vec<_>>()),
            }))?
        )?;
        return Ok(());
    }
    let up = s.providers.iter().filter(|p| p.alive).count();
    outln!(
        "cluster {:016x}: providers: {} ({up} up), blobs: {}, a provider is down after {} ms \
         without a heartbeat",
        s.cluster,
        s.providers.len(),
        s.blobs,
        s.provider_timeout_ms
    )?;
    outln!(
        "{:>4}  {:<22}  {:<16}  {:>10}  {:>10}  {:>8}",
        "ID",
        "ADDRESS",
        "STATE",
        "CAPACITY",
        "FREE",
        "CHUNKS"
    )?;
    for p in &s.providers {
        outln!(
            "{:>4}  {:<22}  {:<16}  {:>10}  {:>10}  {:>8}",
            p.id,
            p.addr,
            state_of(p),
            format_size(p.capacity),
            format_size(p.free),
            p.chunks
        )?;
    }
    for p in &s.providers {
        if let Some(fault) = &p.fault {
            outln!("provider {} ({}) failed: {fault}", p.id, p.addr)?;
        }
    }
    outln!("{}", manager_disk_line(&s.manager_disk))?;
    if !memory.is_empty() {
        let used: u64 = memory.iter().map(|u| u.used).sum();
        let capacity: u64 = memory.iter().map(|u| u.capacity).sum();
        let per: Vec<String> = memory
            .iter()
            .map(|u| {
                format!(
                    "{} {}/{}",
                    u.provider,
                    format_size(u.used),
                    format_size(u.capacity)
                )
            })
            .collect();
        outln!(
            "memory class: {} of {} used ({})",
            format_size(used),
            format_size(capacity),
            per.join(", ")
        )?;
    }
    if let Some(plan) = &plan {
        let clusters: Vec<String> = plan
            .clusters
            .iter()
            .map(|c| format!("{} <- {}", c.storage_host, c.member_hosts.join(" ")))
            .collect();
        outln!("placement plan: {}", clusters.join("; "))?;
    }
    let now = tomus_wire::now_ms();
    // One column for "PROCESS worker NAME" over both processes, so the states line up.
    let width = s
        .workers
        .iter()
        .map(|w| "manager worker ".len() + w.name.len())
        .chain(
            m.workers
                .iter()
                .map(|w| "maintenance worker ".len() + w.name.len()),
        )
        .max()
        .unwrap_or(0);
    print_workers("manager", &s.workers, now, width)?;
    if let Some(b) = backup.filter(|b| b.state != "disabled") {
        print_backup(&b)?;
    }
    if let Some(st) = sites.filter(|st| !st.rules.is_empty()) {
        crate::sites_cmd::print_status(&st)?;
    }
    if s.maintenance_reported_ms == 0 {
        outln!("maintenance: no report yet (repair and garbage collection not running?)")?;
        return Ok(());
    }
    print_workers("maintenance", &m.workers, now, width)?;
    outln!(
        "under-replicated: {} chunks ({}), {} metadata nodes; lost (no live copy): {} chunks",
        m.under_replicated_chunks,
        format_size(m.under_replicated_bytes),
        m.under_replicated_nodes,
        m.lost_chunks
    )?;
    outln!(
        "repair: {} of {} copied, {} of {} nodes{}; {} rounds done, totals: {} chunks ({}) repaired",
        format_size(m.repair_done_bytes),
        format_size(m.repair_total_bytes),
        m.repair_done_nodes,
        m.repair_total_nodes,
        if m.running { " (round running)" } else { "" },
        m.passes,
        m.repaired_chunks,
        format_size(m.repaired_bytes)
    )?;
    outln!(
        "garbage collected: {} chunks ({}), {} metadata nodes; waiting: {} unreferenced chunks \
         ({}), {} deletions",
        m.gc_chunks,
        format_size(m.gc_bytes),
        m.gc_nodes,
        m.unreferenced_chunks,
        format_size(m.unreferenced_bytes),
        m.pending_deletions
    )?;
    if m.audits > 0 {
        outln!(
            "old versions: {} held only by versions older than their blob's latest (as of \
             the last audit; retention policies decide how long)",
            format_size(m.old_version_bytes)
        )?;
    }
    outln!(
        "ledger: {} leaves, {} chunks; {} changes applied, {} versions counted, {} rebuilds; \
         last repair round {} ms; {} audits{}",
        m.ledger_leaves,
        m.ledger_chunks,
        m.changes_applied,
        m.versions_counted,
        m.rebuilds,
        m.last_pass_duration_ms,
        m.audits,
        if m.audits > 0 {
            format!(", the last took {} ms", m.last_audit_duration_ms)
        } else {
            String::new()
        }
    )?;
    for (id, left) in &m.draining {
        outln!(
            "draining provider {id}: {} left to move",
            format_size(*left)
        )?;
    }
    if let Some(e) = &m.last_error {
        outln!("last maintenance error: {e}")?;
    }
    Ok(())
}

/// The backup service in one or two lines.
fn print_backup(b: &tomus_backup::service::Status) -> Result<()> {
    outln!(
        "backup to {}: {}; last point {}{}",
        b.target.as_deref().unwrap_or("?"),
        b.state,
        b.last_point.as_deref().unwrap_or("none"),
        match b.last_point_ms {
            Some(ms) => format!(" ({})", tomus_wire::human::utc(ms)),
            None => String::new(),
        }
    )?;
    if let Some(e) = &b.error {
        outln!("  last backup error: {e}")?;
    }
    Ok(())
}

/// One line per background worker: what it does now, what it did last, its errors; the
/// worker's name padded to `width` columns.
fn print_workers(
    process: &str,
    workers: &[tomus_wire::WorkerStatus],
    now_ms: u64,
    width: usize,
) -> std::io::Result<()> {
    for w in workers {
        let ago = match w.last_round_ms {
            0 => "no round yet".to_string(),
            t => format!(
                "last round {} s ago, {} ms",
                now_ms.saturating_sub(t) / 1000,
                w.last_duration_ms
            ),
        };
        let errors = match (&w.last_error, w.errors) {
            (Some(e), n) => format!("; {n} errors, last: {e}"),
            (None, 0) => String::new(),
            (None, n) => format!("; {n} errors"),
        };
        outln!(
            "{:<width$}  {:<17} {} rounds, {ago}{}{errors}",
            format!("{process} worker {}", w.name),
            w.state,
            w.rounds,
            if w.summary.is_empty() {
                String::new()
            } else {
                format!(": {}", w.summary)
            }
        )?;
    }
    Ok(())
}

pub async fn provider_action(
    client: &Client,
    json_out: bool,
    action: ProviderAction,
) -> Result<()> {
    match action {
        ProviderAction::Drain { provider, wait } => {
            let info = client
                .manager_call(DrainProvider {
                    addr: provider.clone(),
                })
                .await?;
            if !json_out {
                eprintln!("provider {} ({}) is draining", info.id, info.addr);
            }
            let left = if wait {
                wait_drained(client, info.id).await?
            } else {
                None
            };
            if json_out {
                outln!(
                    "{}",
                    json!({"id": info.id, "addr": info.addr, "draining": true, "left": left})
                )?;
            } else if wait {
                outln!(
                    "provider {} ({}) is drained; stop it, then `tomus provider remove {}`",
                    info.id,
                    info.addr,
                    info.addr
                )?;
            }
            Ok(())
        }
        ProviderAction::Remove { provider } => {
            client
                .manager_call(RemoveProvider {
                    addr: provider.clone(),
                })
                .await?;
            if json_out {
                outln!("{}", json!({"removed": provider}))?;
            } else {
                outln!("provider {provider} removed")?;
            }
            Ok(())
        }
    }
}

/// Polls until a maintenance pass that started after now reports nothing left on `id`.
async fn wait_drained(client: &Client, id: u32) -> Result<Option<u64>> {
    let since = status(client).await?.now_ms;
    let bar = ProgressBar::new_spinner();
    bar.set_style(ProgressStyle::with_template("{spinner} {msg}").context("progress style")?);
    loop {
        let s = status(client).await?;
        let left = s
            .maintenance
            .draining
            .iter()
            .find(|(p, _)| *p == id)
            .map(|(_, l)| *l);
        bar.set_message(match left {
            Some(l) => format!("{} left to move", format_size(l)),
            None => "waiting for the next maintenance pass".to_string(),
        });
        // A complete pass that started after now: it saw the drain, and a later one found
        // nothing left (or it found nothing to move).
        if s.maintenance.last_pass_started_ms > since && left == Some(0) {
            bar.finish_and_clear();
            return Ok(Some(0));
        }
        if s.maintenance_reported_ms == 0 {
            bar.finish_and_clear();
            bail!("the manager runs no maintenance service, so nothing moves the data");
        }
        bar.tick();
        tokio::time::sleep(POLL).await;
    }
}

pub async fn scrub(client: &Client, json_out: bool, args: ScrubArgs) -> Result<()> {
    let providers = client.providers().await?;
    let targets: Vec<ProviderInfo> = if args.providers.is_empty() {
        providers.into_iter().filter(|p| p.alive).collect()
    } else {
        let mut out = Vec::new();
        for addr in &args.providers {
            match providers.iter().find(|p| &p.addr == addr) {
                Some(p) => out.push(p.clone()),
                None => bail!("no provider at {addr} (see `tomus providers`)"),
            }
        }
        out
    };
    let mut rows = Vec::new();
    let mut all_corrupt = 0usize;
    for p in &targets {
        let (checked, bytes, corrupt) = scrub_one(client, p, json_out).await?;
        all_corrupt += corrupt.len();
        if !json_out {
            outln!(
                "provider {} ({}): {checked} chunks ({}) verified, {} corrupt{}",
                p.id,
                p.addr,
                format_size(bytes),
                corrupt.len(),
                if corrupt.is_empty() {
                    String::new()
                } else {
                    format!(
                        " (quarantined: {})",
                        corrupt
                            .iter()
                            .map(|c| c.to_string())
                            .collect::<Vec<_>>()
                            .join(", ")
                    )
                }
            )?;
        }
        rows.push(
            json!({"id": p.id, "addr": p.addr, "checked": checked, "bytes": bytes,
            "corrupt": corrupt.iter().map(|c| c.to_string()).collect::<Vec<_>>()}),
        );
    }
    if args.wait && all_corrupt > 0 {
        wait_repaired(client).await?;
        if !json_out {
            outln!("repair re-created the quarantined copies")?;
        }
    }
    if json_out {
        outln!("{}", serde_json::Value::Array(rows))?;
    }
    Ok(())
}

async fn scrub_one(
    client: &Client,
    p: &ProviderInfo,
    quiet: bool,
) -> Result<(u64, u64, Vec<ChunkId>)> {
    let bar = if quiet {
        ProgressBar::hidden()
    } else {
        ProgressBar::new(p.chunks)
    };
    bar.set_style(
        ProgressStyle::with_template("scrub {msg} [{bar:30}] {pos}/{len} chunks")
            .context("progress style")?,
    );
    bar.set_message(p.addr.clone());
    let (mut checked, mut bytes, mut corrupt) = (0, 0, Vec::new());
    let mut after = None;
    loop {
        let req = Scrub {
            start_after: after,
            limit: SCRUB_PAGE,
        };
        let report: ScrubReport = client
            .provider_call(&p.addr, req)
            .await
            .with_context(|| format!("scrubbing provider {} ({})", p.id, p.addr))?;
        checked += report.checked;
        bytes += report.bytes;
        corrupt.extend(report.corrupt);
        bar.set_position(checked);
        match report.next {
            Some(next) => after = Some(next),
            None => break,
        }
    }
    bar.finish_and_clear();
    Ok((checked, bytes, corrupt))
}

/// Waits for a maintenance pass that starts after now and finds nothing under-replicated.
async fn wait_repaired(client: &Client) -> Result<()> {
    let since = status(client).await?.now_ms;
    let started = Instant::now();
    loop {
        let s = status(client).await?;
        if s.maintenance.repaired_since(since) {
            return Ok(());
        }
        if s.maintenance_reported_ms == 0 && started.elapsed() > Duration::from_secs(5) {
            bail!("the manager runs no maintenance service, so nothing repairs");
        }
        tokio::time::sleep(POLL).await;
    }
}

pub async fn set_retention(client: &Client, json_out: bool, a: RetentionArgs) -> Result<()> {
    let retention = match (a.keep_last, a.keep_newer_than, a.keep_all) {
        (Some(k), None, false) => Retention::KeepLast(k),
        (None, Some(age), false) => Retention::KeepNewerThan(age.as_millis() as u64),
        (None, None, true) => Retention::KeepAll,
        _ => bail!("give one of --keep-last K, --keep-newer-than AGE or --keep-all"),
    };
    let info = client
        .manager_call(SetRetention {
            blob: a.id,
            retention,
        })
        .await?;
    if json_out {
        outln!(
            "{}",
            json!({"blob": a.id, "retention": format!("{:?}", info.retention), "latest": info.latest})
        )?;
    } else {
        outln!("blob {}: {}", a.id, describe(info.retention))?;
    }
    Ok(())
}

pub fn describe(r: Retention) -> String {
    match r {
        Retention::KeepAll => "keeps every version".into(),
        Retention::KeepLast(k) => format!("keeps the newest {k} versions"),
        Retention::KeepNewerThan(ms) => {
            format!("keeps versions newer than {} s (and the latest)", ms / 1000)
        }
    }
}
