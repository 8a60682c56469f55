//! Geo-replication on the overview, next to backup progress: one row per rule of
//! `tomus sites replicate` (a subtree replicated to a site) with its state, how far the site
//! is behind (versions published here and not there yet, and the age of the oldest), what
//! was sent and the last error. It comes from the status the replication service writes to
//! `/.tomus-sites/status.json` about once a second (what `tomus sites status` prints); the
//! manager does not depend on the service's crate, so the JSON is read field by field.

use std::fmt::Write;

use serde_json::Value;
use tomus_wire::human::size;

use super::pages::{esc, time};

/// The replication section of the overview, from the service's status (`None`: it never
/// wrote one).
pub(super) fn section(status: &Result<Option<Value>, String>) -> String {
    let mut b = String::from("<h2>Replication</h2>");
    let rules = match status {
        Err(e) => {
            let _ = write!(
                b,
                "<p id=\"replication\">Status unavailable: {}</p>",
                esc(e)
            );
            return b;
        }
        Ok(s) => s
            .as_ref()
            .and_then(|s| s.get("rules"))
            .and_then(Value::as_object),
    };
    let Some(rules) = rules.filter(|r| !r.is_empty()) else {
        b.push_str(
            "<p id=\"replication\">No subtree is replicated to another site \
             (<code>tomus sites replicate PATH --to SITE</code>).</p>",
        );
        return b;
    };
    b.push_str(
        "<table id=\"replication\"><tr><th>site</th><th>path</th><th>state</th>\
         <th>versions behind</th><th>lag</th><th>replicated</th><th>last replicated</th>\
         <th>error</th></tr>",
    );
    for rule in rules.values() {
        let text = |k: &str| match rule.get(k) {
            Some(Value::String(v)) => v.clone(),
            Some(Value::Null) | None => String::new(),
            Some(v) => v.to_string(),
        };
        let count = |k: &str| rule.get(k).and_then(Value::as_u64).unwrap_or(0);
        let lag = rule
            .get("seconds_behind")
            .and_then(Value::as_f64)
            .unwrap_or(0.0);
        let last = count("last_replicated_ms");
        let error = match (text("error"), count("attempts")) {
            (e, _) if e.is_empty() => String::new(),
            (e, n) => format!("{e} ({n} failed attempts)"),
        };
        let _ = write!(
            b,
            "<tr class=\"rule\"><td>{site}</td><td>/{path}</td><td>{state}</td>\
             <td class=\"num\">{behind}</td><td class=\"num\">{lag:.1} s</td>\
             <td class=\"num\">{versions} versions, {bytes}</td><td>{last}</td>\
             <td>{error}</td></tr>",
            site = esc(&text("site")),
            path = esc(text("path").trim_start_matches('/')),
            state = esc(&text("state")),
            behind = count("versions_behind"),
            versions = count("versions_replicated"),
            bytes = size(count("bytes_replicated")),
            last = if last == 0 {
                "-".to_string()
            } else {
                time(last)
            },
            error = esc(&error),
        );
    }
    b.push_str("</table>");
    b
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    #[test]
    fn a_row_per_rule_with_its_lag() {
        let status = json!({"rules": {
            "eu:/data": {"site": "eu", "path": "data", "state": "site unreachable",
                "versions_behind": 3, "seconds_behind": 12.5, "versions_replicated": 7,
                "bytes_replicated": 2048, "files_deleted": 0, "last_replicated_ms": 0,
                "error": "connection refused", "attempts": 2},
            "us:/": {"site": "us", "path": "", "state": "caught up", "versions_behind": 0,
                "seconds_behind": 0.0, "versions_replicated": 1, "bytes_replicated": 10,
                "files_deleted": 0, "last_replicated_ms": 1_700_000_000_000u64,
                "error": null, "attempts": 0}
        }, "updated_ms": 1});
        let html = super::section(&Ok(Some(status)));
        assert_eq!(html.matches("<tr class=\"rule\">").count(), 2);
        assert!(html.contains("<td>eu</td><td>/data</td><td>site unreachable</td>"));
        assert!(html.contains("<td class=\"num\">3</td><td class=\"num\">12.5 s</td>"));
        assert!(html.contains("connection refused (2 failed attempts)"));
        assert!(html.contains("<td>us</td><td>/</td><td>caught up</td>"));
    }

    #[test]
    fn says_when_nothing_is_replicated_or_the_status_is_unreadable() {
        let none = super::section(&Ok(None));
        assert!(none.contains("No subtree is replicated"));
        let empty = super::section(&Ok(Some(json!({"rules": {}, "updated_ms": 0}))));
        assert!(empty.contains("No subtree is replicated"));
        let failed = super::section(&Err("<down>".into()));
        assert!(failed.contains("Status unavailable: &lt;down&gt;"));
    }
}
