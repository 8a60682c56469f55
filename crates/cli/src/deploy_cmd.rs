//! `tomus deploy --plan FILE`: the dedicated deployment of a placement plan (DataSteward).
//!
//! The plan (`tomus topology select --json`, or a file of the same shape:
//! `{"storage_nodes": [names], "clusters": {storage node: [compute nodes]}}`) is given to the
//! manager, which resolves the node names to hosts (from the measured matrix, the agents'
//! announcements, or `host:port` names) and from then on sends each writer's first replica to
//! the storage node of its own cluster. The command then prints, per host, what to run there:
//! a provider on each storage node, and on each compute node the Dask worker (and nothing of
//! tomus but the client library, so the application has the node's memory and CPU). With
//! `--ssh` it starts the providers itself over ssh.
//!
//! Storage nodes come and go at run time the usual way: a provider started on a new host
//! joins (deploy a new plan to make it a cluster's storage node), and `tomus provider drain
//! ADDR` releases one (repair moves its data).

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use clap::Args;
use serde_json::{json, Value};
use tomus_wire::manager::SetPlacementPlan;
use tomus_wire::{ClusterSecret, PlacementPlan, PlanCluster};

use crate::size::{format_size, parse_size};

#[derive(Args)]
pub struct DeployArgs {
    /// The placement plan: `tomus topology select --json` output.
    #[arg(long, value_name = "FILE")]
    plan: PathBuf,
    /// Port the providers listen on.
    #[arg(long, default_value_t = 7100)]
    provider_port: u16,
    /// Data directory of the providers on their hosts (`{name}` is replaced by the storage
    /// node's name, for data directories on a shared file system).
    #[arg(long, default_value = "/var/lib/tomus")]
    data: String,
    /// One more argument for every provider (repeat it: `--provider-arg=--no-fsync`).
    #[arg(long = "provider-arg", value_name = "ARG", allow_hyphen_values = true)]
    provider_args: Vec<String>,
    /// RAM each provider keeps for memory-class data (`--storage memory`).
    #[arg(long, default_value = "1GiB", value_parser = parse_size)]
    memory_class: u64,
    /// Dask scheduler the compute nodes' workers join (printed in their commands).
    #[arg(long, default_value = "tcp://SCHEDULER:8786")]
    scheduler: String,
    /// The cluster secret file as found on every host (default: the one given to this
    /// command with --secret-file, at the same path).
    #[arg(long, value_name = "PATH")]
    remote_secret_file: Option<String>,
    /// Start the providers over ssh (`ssh HOST tomus ...` in the background, logs in
    /// DATA/provider.log) instead of only printing the commands.
    #[arg(long)]
    ssh: bool,
    /// Only print: do not give the plan to the manager.
    #[arg(long)]
    dry_run: bool,
}

/// Storage node -> its compute nodes, in the plan file's order of storage nodes.
pub fn read_plan(path: &Path) -> Result<PlacementPlan> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    let v: Value = serde_json::from_str(&text)
        .with_context(|| format!("{} is not a JSON placement plan", path.display()))?;
    let Some(clusters) = v.get("clusters").and_then(Value::as_object) else {
        bail!(
            "{}: a plan has \"clusters\": {{storage node: [compute nodes]}} (tomus topology \
             select --json)",
            path.display()
        );
    };
    let order: Vec<String> = match v.get("storage_nodes").and_then(Value::as_array) {
        Some(names) => names
            .iter()
            .filter_map(|n| n.as_str().map(str::to_string))
            .collect(),
        None => clusters.keys().cloned().collect(),
    };
    let mut plan = PlacementPlan::default();
    for storage in order {
        let Some(members) = clusters.get(&storage).and_then(Value::as_array) else {
            bail!(
                "{}: storage node {storage:?} has no cluster",
                path.display()
            );
        };
        let members: Option<Vec<String>> = members
            .iter()
            .map(|m| m.as_str().map(str::to_string))
            .collect();
        let Some(members) = members else {
            bail!("{}: cluster members are node names", path.display());
        };
        plan.clusters.push(PlanCluster {
            storage,
            storage_host: String::new(),
            member_hosts: vec![String::new(); members.len()],
            members,
        });
    }
    if plan.clusters.is_empty() {
        bail!("{}: the plan has no storage node", path.display());
    }
    Ok(plan)
}

/// One host's part of the deployment.
struct Role {
    host: String,
    name: String,
    role: &'static str,
    /// `tomus` arguments (after the executable and the secret), or a whole command line.
    args: Vec<String>,
    command: String,
}

pub async fn run(
    manager: &str,
    secret: Option<ClusterSecret>,
    secret_file: Option<&Path>,
    json_out: bool,
    a: DeployArgs,
) -> Result<()> {
    let mut plan = read_plan(&a.plan)?;
    if a.dry_run {
        for c in &mut plan.clusters {
            c.storage_host = tomus_manager::steward::host_part(&c.storage);
            c.member_hosts = c
                .members
                .iter()
                .map(|m| tomus_manager::steward::host_part(m))
                .collect();
        }
    } else {
        let client = crate::app::connect_client(manager, secret).await?;
        plan = client
            .manager_call(SetPlacementPlan { plan: Some(plan) })
            .await?
            .context("the manager stored no plan")?;
    }
    let secret_arg = a
        .remote_secret_file
        .clone()
        .or_else(|| secret_file.map(|p| p.display().to_string()));
    let mut roles = Vec::new();
    for c in &plan.clusters {
        let mut args = vec![
            "--addr".to_string(),
            format!("{}:{}", c.storage_host, a.provider_port),
            "provider".into(),
            "--manager".into(),
            manager.to_string(),
            "--data".into(),
            a.data.replace("{name}", &c.storage),
            "--memory-class".into(),
            a.memory_class.to_string(),
        ];
        args.extend(a.provider_args.iter().cloned());
        let mut line = vec!["tomus".to_string()];
        if let Some(s) = &secret_arg {
            line.extend(["--secret-file".to_string(), s.clone()]);
        }
        line.append(&mut args.clone());
        roles.push(Role {
            host: c.storage_host.clone(),
            name: c.storage.clone(),
            role: "storage",
            args: std::mem::take(&mut args),
            command: shell_line(&line),
        });
        for (name, host) in c.members.iter().zip(&c.member_hosts) {
            let line = [
                format!("TOMUS_ADDR={manager}"),
                "dask".into(),
                "worker".into(),
                a.scheduler.clone(),
                "--name".into(),
                name.clone(),
                "--resources".into(),
                "compute=1".into(),
            ];
            roles.push(Role {
                host: host.clone(),
                name: name.clone(),
                role: "compute",
                args: Vec::new(),
                command: shell_line(&line),
            });
        }
    }
    if a.ssh {
        for r in roles.iter().filter(|r| r.role == "storage") {
            start_over_ssh(&r.host, &a.data.replace("{name}", &r.name), &r.command)?;
        }
    }
    if json_out {
        let hosts: Vec<Value> = roles
            .iter()
            .map(|r| {
                json!({"host": r.host, "name": r.name, "role": r.role, "args": r.args,
                       "command": r.command})
            })
            .collect();
        outln!("{}", json!({"manager": manager, "hosts": hosts}))?;
        return Ok(());
    }
    outln!(
        "plan {}: {} storage nodes (providers, {} of memory class each), {} compute nodes",
        if a.dry_run {
            "not given to the manager (--dry-run)"
        } else {
            "given to the manager"
        },
        plan.clusters.len(),
        format_size(a.memory_class),
        roles.len() - plan.clusters.len()
    )?;
    for r in &roles {
        outln!("[{} {} {}] {}", r.role, r.name, r.host, r.command)?;
    }
    Ok(())
}

/// Starts `command` on `host` in the background over ssh.
fn start_over_ssh(host: &str, data: &str, command: &str) -> Result<()> {
    let remote = format!(
        "mkdir -p {d} && nohup {command} >> {d}/provider.log 2>&1 < /dev/null &",
        d = shell_word(data)
    );
    let status = std::process::Command::new("ssh")
        .args(["-o", "BatchMode=yes", host, &remote])
        .status()
        .with_context(|| format!("cannot run ssh to {host}"))?;
    if !status.success() {
        bail!("starting the provider on {host} over ssh failed ({status})");
    }
    Ok(())
}

fn shell_line(words: &[String]) -> String {
    words
        .iter()
        .map(|w| shell_word(w))
        .collect::<Vec<_>>()
        .join(" ")
}

/// `w` quoted for a POSIX shell when it needs to be.
fn shell_word(w: &str) -> String {
    let plain = !w.is_empty()
        && w.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./:=@%+,".contains(c));
    if plain {
        w.to_string()
    } else {
        format!("'{}'", w.replace('\'', "'\\''"))
    }
}
