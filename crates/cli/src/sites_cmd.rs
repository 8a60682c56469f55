//! `tomus sites ...`: other tomus clusters ("sites") and the namespace subtrees replicated to
//! them. The manager's geo-replication service (crates/sites) does the work; these commands
//! only change its configuration and read its status.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand};
use tomus_client::Client;
use tomus_sites::service::ServiceStatus;
use tomus_sites::Site;
use tomus_wire::ClusterSecret;

use crate::app::connect_client;
use crate::size::{format_size, parse_rate};

#[derive(Subcommand)]
pub enum SitesCommand {
    /// Name another tomus cluster (its manager's HOST:PORT) as a replication target:
    /// `tomus sites add NAME HOST:PORT`. With --site-secret-file, this cluster's manager reads
    /// the site's cluster secret from that file (a path on the manager's machine) each time
    /// it connects; the secret itself is stored nowhere.
    Add(AddArgs),
    /// Forget a site (refused while a subtree is replicated to it).
    Remove { name: String },
    /// The sites and the subtrees replicated to each.
    List,
    /// Replicate PATH (a directory or a file; / for everything) to site NAME: every
    /// version published under PATH, past and future, is replayed there in order, with the
    /// same bytes, at the same path. Asynchronous: `tomus sites status` shows the lag.
    Replicate(ReplicateArgs),
    /// Stop replicating PATH to site NAME (what the site holds stays there).
    Stop {
        path: String,
        #[arg(long = "to", value_name = "NAME")]
        site: String,
    },
    /// How far behind each replicated subtree is (versions and seconds), what was sent, the
    /// last error. With --wait, waits until every rule (or the one of PATH --to NAME) has
    /// caught up with everything published before the command started, deletions included.
    Status(StatusArgs),
}

#[derive(Args)]
pub struct AddArgs {
    /// The site's name in this cluster (letters, digits, '-', '_', '.').
    name: String,
    /// The site's manager, HOST:PORT (`--addr` names this cluster's manager, as everywhere).
    #[arg(value_name = "HOST:PORT")]
    site_addr: String,
    /// A file holding the site's cluster secret, readable by this cluster's manager
    /// (`--secret-file` is this cluster's own secret, as everywhere).
    #[arg(long)]
    site_secret_file: Option<PathBuf>,
}

#[derive(Args)]
pub struct ReplicateArgs {
    /// Namespace path: a directory (with everything under it) or a file.
    path: String,
    /// The site (see `tomus sites add`).
    #[arg(long = "to", value_name = "NAME")]
    site: String,
    /// Most bytes per second sent to the site for this subtree (e.g. 10MiB/s; 0: unlimited).
    /// Replicating an already replicated path again changes its rate in place.
    #[arg(long, default_value = "0", value_parser = parse_rate)]
    rate: u64,
}

#[derive(Args)]
pub struct StatusArgs {
    /// Wait until caught up (nothing behind, no error).
    #[arg(long)]
    wait: bool,
    /// Only this rule's path (with --to).
    #[arg(long, requires = "site")]
    path: Option<String>,
    #[arg(long = "to", value_name = "NAME")]
    site: Option<String>,
    /// Longest wait, in seconds.
    #[arg(long, default_value_t = 600)]
    timeout: u64,
}

pub async fn run(
    addr: &str,
    secret: Option<ClusterSecret>,
    json_out: bool,
    cmd: SitesCommand,
) -> Result<()> {
    let client = connect_client(addr, secret).await?;
    match cmd {
        SitesCommand::Add(a) => {
            let secret_file = match a.site_secret_file {
                Some(f) => Some(
                    std::path::absolute(&f)
                        .with_context(|| format!("{}", f.display()))?
                        .to_string_lossy()
                        .into_owned(),
                ),
                None => None,
            };
            let site = Site {
                addr: a.site_addr,
                secret_file,
            };
            tomus_sites::add_site(&client, &a.name, site.clone()).await?;
            // Reachable now? Only a hint: replication waits for a site that is down.
            let reach = tomus_sites::config::connect(&site).await;
            outln!(
                "site {} at {}{}",
                a.name,
                site.addr,
                match reach {
                    Ok(_) => String::new(),
                    Err(e) => format!(" (not reachable now: {e}; replication will wait for it)"),
                }
            )?;
        }
        SitesCommand::Remove { name } => {
            tomus_sites::remove_site(&client, &name).await?;
            outln!("site {name} removed")?;
        }
        SitesCommand::List => {
            let cfg = tomus_sites::config::load(&client).await?;
            if json_out {
                outln!("{}", serde_json::to_string(&cfg)?)?;
                return Ok(());
            }
            if cfg.sites.is_empty() {
                outln!("no sites (add one with `tomus sites add NAME HOST:PORT`)")?;
            }
            for (name, s) in &cfg.sites {
                let paths: Vec<String> = cfg
                    .rules
                    .iter()
                    .filter(|r| &r.site == name)
                    .map(|r| format!("/{}", r.path))
                    .collect();
                outln!(
                    "{name}  {}  {}  replicated: {}",
                    s.addr,
                    s.secret_file.as_deref().unwrap_or("(no secret)"),
                    if paths.is_empty() {
                        "nothing".to_string()
                    } else {
                        paths.join(", ")
                    }
                )?;
            }
        }
        SitesCommand::Replicate(a) => {
            let rule = tomus_sites::replicate(&client, &a.path, &a.site, a.rate).await?;
            outln!(
                "replicating /{} to {}{}",
                rule.path,
                rule.site,
                if rule.rate > 0 {
                    format!(" at most {}/s", format_size(rule.rate))
                } else {
                    String::new()
                }
            )?;
        }
        SitesCommand::Stop { path, site } => {
            tomus_sites::stop_replicating(&client, &path, &site).await?;
            outln!("stopped replicating {path} to {site}")?;
        }
        SitesCommand::Status(a) => {
            let want = a.site.as_ref().map(|s| {
                (
                    s.clone(),
                    a.path.as_deref().map(tomus_sites::config::normalize),
                )
            });
            if a.wait {
                wait_caught_up(&client, want, Duration::from_secs(a.timeout)).await?;
            }
            let st = tomus_sites::status(&client).await?;
            if json_out {
                outln!("{}", serde_json::to_string(&st)?)?;
            } else {
                print_status(&st)?;
            }
        }
    }
    Ok(())
}

/// Whether `want` (all rules when `None`) selects the rule of `path` to `site`.
fn selected(site: &str, path: &str, want: &Option<(String, Option<String>)>) -> bool {
    match want {
        None => true,
        Some((s, p)) => s == site && p.as_ref().is_none_or(|p| path.trim_matches('/') == p),
    }
}

/// Whether the rules `want` selects (all when `None`) are caught up as of a status written
/// after `since_ms`.
fn caught_up(st: &ServiceStatus, want: &Option<(String, Option<String>)>, since_ms: u64) -> bool {
    if st.updated_ms < since_ms {
        return false;
    }
    let mut rules = st
        .rules
        .values()
        .filter(|r| selected(&r.site, &r.path, want));
    let mut any = false;
    let all = rules.all(|r| {
        any = true;
        r.versions_behind == 0 && r.error.is_none() && r.state == "caught up"
    });
    any && all
}

async fn wait_caught_up(
    client: &Client,
    want: Option<(String, Option<String>)>,
    timeout: Duration,
) -> Result<()> {
    let started = Instant::now();
    // A status the service wrote after this moment (it writes when anything changes).
    let since = tomus_wire::now_ms();
    let rules: Vec<tomus_sites::Rule> = tomus_sites::config::load(client)
        .await?
        .rules
        .into_iter()
        .filter(|r| selected(&r.site, &r.path, &want))
        .collect();
    if rules.is_empty() {
        bail!("no replication rule to wait for (see `tomus sites list`)");
    }
    loop {
        // The service's status says the rules are caught up as of its last scan; the scan
        // from each rule's saved cursor says that nothing written before now is missing.
        let st = tomus_sites::status(client).await?;
        if caught_up(&st, &want, since) && all_caught_up_now(client, &rules).await? {
            return Ok(());
        }
        if started.elapsed() > timeout {
            print_status(&st)?;
            bail!("not caught up after {}s", timeout.as_secs());
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn all_caught_up_now(client: &Client, rules: &[tomus_sites::Rule]) -> Result<bool> {
    for rule in rules {
        if !tomus_sites::caught_up_now(client, rule).await? {
            return Ok(false);
        }
    }
    Ok(true)
}

/// The rules' lines (also under `tomus status`).
pub fn print_status(st: &ServiceStatus) -> Result<()> {
    if st.rules.is_empty() {
        outln!("geo-replication: nothing replicated (see `tomus sites replicate --help`)")?;
        return Ok(());
    }
    for (id, r) in &st.rules {
        outln!(
            "replication {id}: {}, {} versions ({:.1} s) behind; sent {} versions ({}){}{}",
            r.state,
            r.versions_behind,
            r.seconds_behind,
            r.versions_replicated,
            format_size(r.bytes_replicated),
            if r.files_deleted > 0 {
                format!(", {} deletions", r.files_deleted)
            } else {
                String::new()
            },
            if r.rate > 0 {
                format!("; at most {}/s", format_size(r.rate))
            } else {
                String::new()
            }
        )?;
        if let Some(e) = &r.error {
            outln!("  last error: {e}")?;
        }
    }
    Ok(())
}
