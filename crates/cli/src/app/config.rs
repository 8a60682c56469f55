//! The configuration file: `--config FILE` (or `TOMUS_CONFIG`), TOML with one table per
//! server (`[manager]`, `[provider]`, `[s3]`, `[up]`) whose keys are that command's long
//! flags (`http-addr` or `http_addr`), and a `[global]` table for the flags every command
//! takes (`addr`, `secret-file`, `log-format`, `log-level`, `json`). Every flag is available
//! there, because the file's settings are turned into flags: they go in right after the
//! command name, and a flag the command line gives itself replaces the file's. A key that is
//! no flag of the command fails like an unknown flag would. `tomus config show ROLE [FLAGS]`
//! prints the effective configuration.
//!
//! Values: a string or number is the flag's value, `true` gives a switch (`no-fsync = true`),
//! `false` leaves it out, and an array repeats the flag.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use anyhow::{anyhow, bail, Context, Result};

/// The commands a file configures (its tables), besides `[global]`.
pub(crate) const ROLES: [&str; 4] = ["manager", "provider", "s3", "up"];
/// Global flags that take a value (to find the command name among the arguments).
const GLOBAL_VALUES: [&str; 5] = [
    "--addr",
    "--secret-file",
    "--log-format",
    "--log-level",
    "--config",
];

/// The flags a setting gives, one value each.
fn flags(key: &str, value: &toml::Value) -> Result<Vec<String>> {
    let flag = format!("--{}", key.replace('_', "-"));
    Ok(match value {
        toml::Value::Boolean(true) => vec![flag],
        toml::Value::Boolean(false) => Vec::new(),
        toml::Value::String(s) => vec![flag, s.clone()],
        toml::Value::Integer(i) => vec![flag, i.to_string()],
        toml::Value::Float(f) => vec![flag, f.to_string()],
        toml::Value::Array(items) => {
            let mut out = Vec::new();
            for item in items {
                out.extend(flags(key, item)?);
            }
            out
        }
        other => bail!("{key}: a {} is no flag value", other.type_str()),
    })
}

/// The `--config` the arguments name, else `TOMUS_CONFIG`.
fn config_path(args: &[OsString]) -> Option<PathBuf> {
    let mut it = args.iter().skip(1);
    while let Some(a) = it.next() {
        let a = a.to_string_lossy();
        if a == "--config" {
            return it.next().map(PathBuf::from);
        }
        if let Some(path) = a.strip_prefix("--config=") {
            return Some(PathBuf::from(path));
        }
    }
    std::env::var_os("TOMUS_CONFIG")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
}

/// Where the command name is among `args` (after the global flags before it).
fn command_index(args: &[OsString]) -> Option<usize> {
    let mut i = 1;
    while i < args.len() {
        let a = args[i].to_string_lossy();
        if !a.starts_with('-') {
            return Some(i);
        }
        i += if GLOBAL_VALUES.contains(&a.as_ref()) {
            2
        } else {
            1
        };
    }
    None
}

/// Reads a configuration file.
pub(crate) fn load(path: &Path) -> Result<toml::Table> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read the configuration file {}", path.display()))?;
    let table: toml::Table = text
        .parse()
        .map_err(|e| anyhow!("configuration file {}: {e}", path.display()))?;
    for key in table.keys() {
        if key != "global" && !ROLES.contains(&key.as_str()) {
            bail!(
                "configuration file {}: unknown table [{key}] (expected global, {})",
                path.display(),
                ROLES.join(", ")
            );
        }
    }
    Ok(table)
}

/// The flags of `role` (and `[global]`) from `table` that `given` (the command line's own
/// arguments) does not set itself, each with the key it came from.
pub(crate) fn settings(
    table: &toml::Table,
    role: &str,
    given: &[OsString],
) -> Result<Vec<(String, Vec<String>)>> {
    let sets = |flag: &str| {
        given.iter().any(|a| {
            let a = a.to_string_lossy();
            a == flag || a.starts_with(&format!("{flag}="))
        })
    };
    let mut out = Vec::new();
    for section in ["global", role] {
        let Some(values) = table.get(section) else {
            continue;
        };
        let values = values
            .as_table()
            .ok_or_else(|| anyhow!("[{section}] must be a table"))?;
        for (key, value) in values {
            let flag = format!("--{}", key.replace('_', "-"));
            if !sets(&flag) {
                let f = flags(key, value).with_context(|| format!("[{section}]"))?;
                out.push((key.replace('_', "-"), f));
            }
        }
    }
    Ok(out)
}

/// `args` with the configuration file's settings for its command put in (unchanged without a
/// file, or for a command the file does not configure).
pub(crate) fn expand(args: Vec<OsString>) -> Result<Vec<OsString>> {
    let Some(path) = config_path(&args) else {
        return Ok(args);
    };
    let Some(at) = command_index(&args) else {
        return Ok(args);
    };
    let role = args[at].to_string_lossy().to_string();
    // A provider action (`tomus provider drain ADDR`) is a client command, not the server.
    let action = role == "provider"
        && args
            .get(at + 1)
            .is_some_and(|a| a == "drain" || a == "remove");
    if !ROLES.contains(&role.as_str()) || action {
        return Ok(args);
    }
    let table = load(&path)?;
    let settings = settings(&table, &role, &args)?;
    let mut out: Vec<OsString> = args[..=at].to_vec();
    out.extend(
        settings
            .into_iter()
            .flat_map(|(_, f)| f)
            .map(OsString::from),
    );
    out.extend(args[at + 1..].iter().cloned());
    Ok(out)
}

/// The effective configuration of `tomus ROLE FLAGS` (with the file at `path`, if any) as
/// TOML: every flag of the command with its value and where it came from (command line,
/// file, environment, default); flags without a value are listed as comments.
pub(crate) fn show(
    cli: clap::Command,
    path: Option<&Path>,
    role: &str,
    flags: &[String],
) -> Result<String> {
    if !ROLES.contains(&role) {
        bail!(
            "no configuration for {role:?}: expected one of {}",
            ROLES.join(", ")
        );
    }
    let mut args: Vec<OsString> = vec!["tomus".into(), role.into()];
    args.extend(flags.iter().map(OsString::from));
    let mut from_file = Vec::new();
    if let Some(path) = path {
        let table = load(path)?;
        let settings = settings(&table, role, &args)?;
        let mut expanded = args[..2].to_vec();
        for (key, f) in settings {
            from_file.push(key);
            expanded.extend(f.into_iter().map(OsString::from));
        }
        expanded.extend(args[2..].iter().cloned());
        args = expanded;
    }
    // Every flag of the command and the global ones, set or not.
    let mut ids: Vec<String> = cli
        .get_arguments()
        .chain(
            cli.find_subcommand(role)
                .into_iter()
                .flat_map(|c| c.get_arguments()),
        )
        .map(|a| a.get_id().to_string())
        .filter(|id| id != "help" && id != "version")
        .collect();
    ids.sort_unstable();
    ids.dedup();
    let matches = cli.try_get_matches_from(args)?;
    let Some((_, sub)) = matches.subcommand() else {
        bail!("{role}: no such command");
    };
    let mut set = String::new();
    let mut unset = String::new();
    let ids: Vec<&str> = ids.iter().map(String::as_str).collect();
    for id in ids {
        // Argument groups (one per flattened set of flags) have no values of their own.
        let Ok(raw) = sub.try_get_raw(id) else {
            continue;
        };
        let key = id.replace('_', "-");
        if key == "config" {
            continue;
        }
        let Some(raw) = raw else {
            unset.push_str(&format!("# {key} (not set)\n"));
            continue;
        };
        let values: Vec<String> = raw.map(|v| v.to_string_lossy().into_owned()).collect();
        let value = match values.as_slice() {
            [one] => toml_value(one),
            many => format!(
                "[{}]",
                many.iter()
                    .map(|v| toml_value(v))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        };
        let source = if from_file.contains(&key) {
            "file"
        } else {
            match sub.value_source(id) {
                Some(clap::parser::ValueSource::CommandLine) => "command line",
                Some(clap::parser::ValueSource::EnvVariable) => "environment",
                _ => "default",
            }
        };
        set.push_str(&format!("{key} = {value}  # {source}\n"));
    }
    Ok(format!("[{role}]\n{set}{unset}"))
}

/// A flag's value as a TOML value: switches and numbers as they are, anything else quoted.
fn toml_value(v: &str) -> String {
    if v == "true" || v == "false" || v.parse::<i64>().is_ok() {
        v.to_string()
    } else {
        toml::Value::String(v.to_string()).to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn os(args: &[&str]) -> Vec<OsString> {
        args.iter().map(OsString::from).collect()
    }

    #[test]
    fn file_settings_go_after_the_command_and_flags_win() {
        let table: toml::Table = r#"
            [global]
            log_format = "json"
            [manager]
            data = "/var/lib/tomus"
            http-addr = "127.0.0.1:8080"
            no_gc = true
            no-maintenance = false
            provider_timeout_ms = 5000
        "#
        .parse()
        .unwrap();
        let given = os(&["tomus", "manager", "--http-addr", "127.0.0.1:9"]);
        let got: Vec<String> = settings(&table, "manager", &given)
            .unwrap()
            .into_iter()
            .flat_map(|(_, f)| f)
            .collect();
        assert_eq!(
            got,
            [
                "--log-format",
                "json",
                "--data",
                "/var/lib/tomus",
                "--no-gc",
                "--provider-timeout-ms",
                "5000"
            ]
        );
        assert_eq!(command_index(&os(&["tomus", "--addr", "x", "up"])), Some(3));
        assert_eq!(command_index(&os(&["tomus", "--json", "s3"])), Some(2));
    }
}
