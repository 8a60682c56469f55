//! Sites and replication rules: what `tomus sites add` and `tomus sites replicate` store.
//!
//! The configuration is one JSON file in the source cluster's own namespace,
//! `/.tomus-sites/config.json` (the manager keeps it durably, like the backup service's), so
//! it survives manager restarts and the service picks changes up within a second. A site's
//! cluster secret is never copied there: the site names a secret *file* that the manager
//! process reads when it connects.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tomus_backup::service::{read_state, write_state};
use tomus_client::{Client, ClientOptions};
use tomus_wire::{ClusterSecret, Error, Result};

use crate::STATE_DIR;

/// Another tomus cluster.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Site {
    /// Its manager's `host:port`.
    pub addr: String,
    /// A file holding its cluster secret (read by the manager process at each connection).
    pub secret_file: Option<String>,
}

/// One subtree replicated to one site.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rule {
    /// Namespace path (a directory or a file; `""` is the whole namespace but tomus's own
    /// reserved directories). Replicated to the same path on the site.
    pub path: String,
    pub site: String,
    /// Bytes per second read from the source and sent (0: unlimited).
    pub rate: u64,
}

impl Rule {
    /// The rule's name in file names, metrics and the status: `SITE:/PATH`.
    pub fn id(&self) -> String {
        format!("{}:/{}", self.site, self.path)
    }

    /// The name of its cursor file (no `/`).
    pub(crate) fn file_name(&self) -> String {
        let escaped: String = self
            .id()
            .chars()
            .map(|c| if c == '/' { '~' } else { c })
            .collect();
        format!("{escaped}.json")
    }
}

/// Everything `tomus sites` configures.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SitesConfig {
    pub sites: BTreeMap<String, Site>,
    pub rules: Vec<Rule>,
}

pub(crate) fn state_path(name: &str) -> String {
    format!("{STATE_DIR}/{name}")
}

const CONFIG: &str = "config.json";

/// Normalized namespace path: no leading or trailing `/`.
pub fn normalize(path: &str) -> String {
    path.trim_start_matches("tomus://")
        .trim_matches('/')
        .to_string()
}

pub async fn load(client: &Client) -> Result<SitesConfig> {
    Ok(read_state(client, &state_path(CONFIG))
        .await?
        .unwrap_or_default())
}

async fn save(client: &Client, config: &SitesConfig) -> Result<()> {
    write_state(client, &state_path(CONFIG), config).await
}

fn check_name(name: &str) -> Result<()> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.');
    if ok {
        Ok(())
    } else {
        Err(Error::invalid(format!(
            "site name {name:?}: use 1-64 letters, digits, '-', '_' or '.'"
        )))
    }
}

/// Adds (or changes) site `name`. The secret file, if any, must be readable now.
pub async fn add_site(client: &Client, name: &str, site: Site) -> Result<()> {
    check_name(name)?;
    if !site.addr.contains(':') {
        return Err(Error::invalid(format!(
            "site {name}: give its manager as HOST:PORT, not {:?}",
            site.addr
        )));
    }
    if let Some(f) = &site.secret_file {
        if !Path::new(f).is_absolute() {
            return Err(Error::invalid(format!(
                "site {name}: the secret file must be an absolute path (the manager reads it), \
                 not {f:?}"
            )));
        }
        ClusterSecret::load(Some(Path::new(f)))?;
    }
    let mut config = load(client).await?;
    config.sites.insert(name.to_string(), site);
    save(client, &config).await
}

/// Removes site `name`; refused while a rule replicates to it.
pub async fn remove_site(client: &Client, name: &str) -> Result<()> {
    let mut config = load(client).await?;
    if let Some(r) = config.rules.iter().find(|r| r.site == name) {
        return Err(Error::invalid(format!(
            "site {name} still receives /{} (run `tomus sites stop {} --to {name}` first)",
            r.path, r.path
        )));
    }
    if config.sites.remove(name).is_none() {
        return Err(Error::not_found(format!("no site named {name}")));
    }
    save(client, &config).await
}

/// Starts replicating `path` to site `site` (or changes the rule's rate); the manager's
/// service carries it out. Returns the rule.
pub async fn replicate(client: &Client, path: &str, site: &str, rate: u64) -> Result<Rule> {
    let path = normalize(path);
    if tomus_client::namespace::is_reserved(&path) {
        return Err(Error::invalid(format!(
            "/{path} is tomus's own and is not replicated"
        )));
    }
    let mut config = load(client).await?;
    if !config.sites.contains_key(site) {
        return Err(Error::not_found(format!(
            "no site named {site} (add it with `tomus sites add {site} HOST:PORT`)"
        )));
    }
    let rule = Rule {
        path,
        site: site.to_string(),
        rate,
    };
    match config
        .rules
        .iter_mut()
        .find(|r| r.path == rule.path && r.site == rule.site)
    {
        Some(r) => *r = rule.clone(),
        None => config.rules.push(rule.clone()),
    }
    save(client, &config).await?;
    Ok(rule)
}

/// Stops replicating `path` to `site` (what the site holds stays there).
pub async fn stop_replicating(client: &Client, path: &str, site: &str) -> Result<()> {
    let path = normalize(path);
    let mut config = load(client).await?;
    let before = config.rules.len();
    config.rules.retain(|r| !(r.path == path && r.site == site));
    if config.rules.len() == before {
        return Err(Error::not_found(format!(
            "/{path} is not replicated to {site}"
        )));
    }
    save(client, &config).await
}

/// A site's requests may cross a slow wide-area link: longer than the in-cluster default.
const SITE_REQUEST_TIMEOUT: Duration = Duration::from_secs(60);

/// Connects to `site` (its secret read from its file now).
pub async fn connect(site: &Site) -> Result<Client> {
    let secret = ClusterSecret::load(site.secret_file.as_deref().map(Path::new))?;
    let options = ClientOptions {
        secret,
        request_timeout: SITE_REQUEST_TIMEOUT,
        ..ClientOptions::default()
    };
    Client::connect(&site.addr, options).await
}
