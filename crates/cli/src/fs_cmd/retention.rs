//! `tomus fs retention PATH [POLICY]`: a file's retention policy, or the one a directory gives
//! the files created below it, shown or set.

use std::time::Duration;

use anyhow::Result;
use clap::Args;
use serde_json::json;
use tomus_client::Namespace;
use tomus_wire::{EntryKind, FsRetention, Retention, DEFAULT_FILE_RETENTION};

use super::paths::{clean, display};
use crate::ops_cmd::{describe, parse_age};

#[derive(Args)]
pub struct RetentionArgs {
    /// A file, or a directory.
    path: String,
    /// Keep only the newest K published versions.
    #[arg(long, value_name = "K", group = "policy")]
    keep_last: Option<u32>,
    /// Keep versions published less than this long ago (e.g. 90s, 30m, 12h, 7d).
    #[arg(long, value_name = "AGE", group = "policy", value_parser = parse_age)]
    keep_newer_than: Option<Duration>,
    /// Keep every version.
    #[arg(long, group = "policy")]
    keep_all: bool,
    /// A directory drops its own policy and follows its parent's again.
    #[arg(long, group = "policy")]
    inherit: bool,
}

impl RetentionArgs {
    /// The change asked for: `None`, none (show); `Some(None)`, --inherit.
    fn change(&self) -> Option<Option<Retention>> {
        if let Some(k) = self.keep_last {
            Some(Some(Retention::KeepLast(k)))
        } else if let Some(age) = self.keep_newer_than {
            let ms = u64::try_from(age.as_millis()).unwrap_or(u64::MAX);
            Some(Some(Retention::KeepNewerThan(ms)))
        } else if self.keep_all {
            Some(Some(Retention::KeepAll))
        } else if self.inherit {
            Some(None)
        } else {
            None
        }
    }
}

/// Where a policy comes from, in words.
fn source(r: &FsRetention) -> String {
    match (&r.kind, &r.from) {
        (EntryKind::File | EntryKind::Registered, _) => "this file's own policy".into(),
        (EntryKind::Dir, Some(from)) if *from == r.path => "set on this directory".into(),
        (EntryKind::Dir, Some(from)) => format!("inherited from {}", display(from)),
        (EntryKind::Dir, None) => format!(
            "the default ({}): no directory above sets one",
            describe(DEFAULT_FILE_RETENTION)
        ),
    }
}

pub async fn run(ns: &Namespace, json_out: bool, a: RetentionArgs) -> Result<()> {
    let path = clean(&a.path)?;
    let r = match a.change() {
        Some(policy) => ns.set_retention(&path, policy).await?,
        None => ns.retention(&path).await?,
    };
    if json_out {
        let kind = match r.kind {
            EntryKind::File => "file",
            EntryKind::Registered => "registered",
            EntryKind::Dir => "directory",
        };
        outln!(
            "{}",
            json!({"path": display(&r.path), "type": kind,
                   "retention": format!("{:?}", r.retention),
                   "from": r.from.as_deref().map(display)})
        )?;
    } else {
        let what = match r.kind {
            EntryKind::File | EntryKind::Registered => "",
            EntryKind::Dir => "each new file below it ",
        };
        outln!(
            "{}: {what}{} ({})",
            display(&r.path),
            describe(r.retention),
            source(&r)
        )?;
    }
    Ok(())
}
