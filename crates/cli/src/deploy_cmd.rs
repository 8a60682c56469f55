//! `tomus deploy --plan FILE`: the dedicated deployment of a placement plan (DataSteward).
//!
//! The plan (`tomus topology select --json`, or a file of the same shape:
//! `{"storage_nodes": [names], "clusters": {storage node: [compute nodes]}}`) is given to the
//! manager, which resolves the node names to hosts (from the measured matrix, the agents'
//! announcements, or `host:port` names) and from then on sends each writer's first replica to
//! the storage node of its own cluster. The command then prints, per host, what to run there:
//! on each storage node a provider and a Dask worker with the `storage` resource (the one the
//! data services of `tomus.services` run on, beside the data), and on each compute node the
//! application's Dask worker (and nothing of tomus but the client library, so the application
//! has the node's memory and CPU). With `--ssh` it starts the storage nodes' two processes
//! itself over ssh.
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
    /// Start the storage nodes' providers and service workers over ssh (`ssh HOST ...` in
    /// the background, logs in DATA/provider.log and DATA/services-worker.log) instead of
    /// only printing the commands.
    #[arg(long)]
    ssh: bool,
    /// Do not run a data-services Dask worker (`--resources storage=1`) on the storage nodes.
    #[arg(long)]
    no_services: bool,
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
    /// Where `--ssh` sends its output (in the data directory); `None`: not started by us.
    ssh_log: Option<&'static str>,
}

/// A Dask worker line: `TOMUS_ADDR=MANAGER dask worker SCHED --name NAME --resources R=1`
/// (the environment tells the tomus client library where the manager is).
fn dask_worker(manager: &str, scheduler: &str, name: &str, resource: &str) -> Vec<String> {
    vec![
        format!("TOMUS_ADDR={manager}"),
        "dask".into(),
        "worker".into(),
        scheduler.to_string(),
        "--name".into(),
        name.to_string(),
        "--resources".into(),
        format!("{resource}=1"),
    ]
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
            ssh_log: Some("provider.log"),
        });
        if !a.no_services {
            // Data services (tomus.services) run only on workers with the `storage`
            // resource: one on every storage node, next to the data.
            let line = dask_worker(
                manager,
                &a.scheduler,
                &format!("{}-services", c.storage),
                "storage",
            );
            roles.push(Role {
                host: c.storage_host.clone(),
                name: c.storage.clone(),
                role: "services",
                args: Vec::new(),
                command: shell_line(&line),
                ssh_log: Some("services-worker.log"),
            });
        }
        for (name, host) in c.members.iter().zip(&c.member_hosts) {
            let line = dask_worker(manager, &a.scheduler, name, "compute");
            roles.push(Role {
                host: host.clone(),
                name: name.clone(),
                role: "compute",
                args: Vec::new(),
                command: shell_line(&line),
                ssh_log: None,
            });
        }
    }
    if a.ssh {
        for r in &roles {
            if let Some(log) = r.ssh_log {
                start_over_ssh(&r.host, &a.data.replace("{name}", &r.name), &r.command, log)?;
            }
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
    let compute_nodes = roles.iter().filter(|r| r.role == "compute").count();
    outln!(
        "plan {}: {} storage nodes (providers, {} of memory class each{}), {} compute nodes",
        if a.dry_run {
            "not given to the manager (--dry-run)"
        } else {
            "given to the manager"
        },
        plan.clusters.len(),
        format_size(a.memory_class),
        if a.no_services {
            ""
        } else {
            ", and a data-services Dask worker"
        },
        compute_nodes
    )?;
    for r in &roles {
        outln!("[{} {} {}] {}", r.role, r.name, r.host, r.command)?;
    }
    Ok(())
}

/// Starts `command` (leading `NAME=value` words are its environment) on `host` in the
/// background over ssh, its output appended to `data/log`.
fn start_over_ssh(host: &str, data: &str, command: &str, log: &str) -> Result<()> {
    let remote = ssh_remote_line(data, command, log);
    let status = std::process::Command::new("ssh")
        .args(["-o", "BatchMode=yes", host, &remote])
        .status()
        .with_context(|| format!("cannot run ssh to {host}"))?;
    if !status.success() {
        bail!("starting `{command}` on {host} over ssh failed ({status})");
    }
    Ok(())
}

/// The remote shell line starting `command` in the background, detached from the ssh session.
fn ssh_remote_line(data: &str, command: &str, log: &str) -> String {
    // `nohup` execs its first word, so the environment assignments go before it.
    let words: Vec<&str> = command.split(' ').collect();
    let env_words = words
        .iter()
        .take_while(|w| w.contains('=') && !w.starts_with('-') && !w.starts_with('\''))
        .count();
    let (env, rest) = words.split_at(env_words);
    let env = if env.is_empty() {
        String::new()
    } else {
        format!("{} ", env.join(" "))
    };
    format!(
        "mkdir -p {d} && {env}nohup {rest} >> {d}/{log} 2>&1 < /dev/null &",
        d = shell_word(data),
        rest = rest.join(" ")
    )
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ssh_line_puts_the_environment_before_nohup() {
        let worker = shell_line(&dask_worker(
            "m:7000",
            "tcp://s:8786",
            "h1-services",
            "storage",
        ));
        assert_eq!(
            worker,
            "TOMUS_ADDR=m:7000 dask worker tcp://s:8786 --name h1-services --resources storage=1"
        );
        assert_eq!(
            ssh_remote_line("/var/lib/tomus", &worker, "services-worker.log"),
            "mkdir -p /var/lib/tomus && TOMUS_ADDR=m:7000 nohup dask worker tcp://s:8786 \
             --name h1-services --resources storage=1 >> /var/lib/tomus/services-worker.log \
             2>&1 < /dev/null &"
        );
        let provider = shell_line(&["tomus".into(), "provider".into(), "--x=a b".into()]);
        assert_eq!(
            ssh_remote_line("/d", &provider, "provider.log"),
            "mkdir -p /d && nohup tomus provider '--x=a b' >> /d/provider.log 2>&1 < /dev/null &"
        );
    }
}
