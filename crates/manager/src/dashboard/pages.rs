//! The dashboard's pages, rendered on the server as plain HTML (no build step, nothing loaded
//! from elsewhere): the cluster overview with its live chart, the namespace browser, and a
//! file's versions. Every value shown is escaped.

use std::fmt::Write;
use tomus_wire::human::size;

use tomus_metadata::Segment;
use tomus_wire::{
    EntryKind, FsEntry, MaintenanceStatus, ProviderInfo, VersionInfo, VersionList, VersionState,
};

/// A whole page around `body`, with the navigation and `title`.
pub(super) fn page(title: &str, body: &str) -> String {
    format!(
        "<!doctype html><html><head><meta charset=\"utf-8\"><title>{t} · tomus</title>\
         <link rel=\"stylesheet\" href=\"/style.css\"></head><body><header><h1>tomus</h1>\
         <a href=\"/\">Overview</a><a href=\"/fs\">Namespace</a><a href=\"/jobs\">Jobs</a>\
         <a href=\"/metrics\">Metrics</a></header><main><h2 id=\"title\">{t}</h2>{body}\
         </main></body></html>",
        t = esc(title)
    )
}

/// The overview: providers, cluster totals, the live chart, maintenance progress.
pub(super) fn overview(
    providers: &[(ProviderInfo, u64)],
    maintenance: &MaintenanceStatus,
    reported_ms: u64,
) -> String {
    let mut b = String::new();
    let up = providers.iter().filter(|(p, _)| p.alive).count();
    let stored: u64 = providers
        .iter()
        .filter(|(p, _)| p.alive)
        .map(|(_, s)| s)
        .sum();
    let capacity: u64 = providers
        .iter()
        .filter(|(p, _)| p.alive)
        .map(|(p, _)| p.capacity)
        .sum();
    let free: u64 = providers
        .iter()
        .filter(|(p, _)| p.alive)
        .map(|(p, _)| p.free)
        .sum();
    let _ = write!(
        b,
        "<p class=\"totals\"><span id=\"provider-count\">{} providers ({up} up)</span>\
         <span>stored {}</span><span>capacity {}</span><span>free {}</span></p>",
        providers.len(),
        size(stored),
        size(capacity),
        size(free)
    );
    b.push_str(
        "<table id=\"providers\"><tr><th>id</th><th>address</th><th>state</th>\
         <th>capacity</th><th>free</th><th>used</th><th>chunks</th><th>stored</th>\
         <th>load</th></tr>",
    );
    for (p, stored) in providers {
        let state = p.state().name();
        let used = p.capacity.saturating_sub(p.free);
        let pct = (used as f64 * 100.0 / p.capacity.max(1) as f64).clamp(0.0, 100.0);
        let _ = write!(
            b,
            "<tr class=\"provider\"><td class=\"num\">{}</td><td>{}</td>\
             <td class=\"{state}\" title=\"{}\">{state}</td><td class=\"num\">{}</td>\
             <td class=\"num\">{}</td>\
             <td><span class=\"barbox\"><span class=\"bar\" style=\"width:{pct:.0}%\"></span>\
             </span> {pct:.0}%</td><td class=\"num\">{}</td><td class=\"num\">{}</td>\
             <td class=\"num\">{}</td></tr>",
            p.id,
            esc(&p.addr),
            esc(p.fault.as_deref().unwrap_or("")),
            size(p.capacity),
            size(p.free),
            p.chunks,
            size(*stored),
            p.load
        );
    }
    b.push_str("</table>");
    b.push_str(
        "<h2>Throughput</h2><p class=\"legend\"><span style=\"color:#4a90d9\">■ manager \
         requests/s</span><span style=\"color:#2e7d32\">■ cluster stored MiB/s</span></p>\
         <svg id=\"throughput\" class=\"chart\" width=\"640\" height=\"160\"></svg>\
         <p id=\"rates\">measuring…</p><script src=\"/chart.js\"></script>",
    );
    b.push_str(&maintenance_table(maintenance, reported_ms));
    b
}

fn maintenance_table(m: &MaintenanceStatus, reported_ms: u64) -> String {
    let mut b = String::from("<h2>Repair and garbage collection</h2>");
    if reported_ms == 0 {
        b.push_str("<p id=\"maintenance\">No report from the maintenance service yet.</p>");
        return b;
    }
    let progress = |done: u64, total: u64| {
        if total == 0 {
            "nothing to copy".to_string()
        } else {
            format!(
                "{} of {} ({:.0}%)",
                size(done),
                size(total),
                done as f64 * 100.0 / total as f64
            )
        }
    };
    let rows = [
        (
            "state",
            if m.running {
                "pass running".to_string()
            } else {
                "idle".to_string()
            },
        ),
        ("repair passes", m.passes.to_string()),
        (
            "last pass",
            format!("{} ({} ms)", time(m.last_pass_ms), m.last_pass_duration_ms),
        ),
        (
            "current repair",
            progress(m.repair_done_bytes, m.repair_total_bytes),
        ),
        (
            "under-replicated chunks",
            format!(
                "{} ({})",
                m.under_replicated_chunks,
                size(m.under_replicated_bytes)
            ),
        ),
        ("lost chunks", m.lost_chunks.to_string()),
        (
            "repaired (total)",
            format!("{} chunks, {}", m.repaired_chunks, size(m.repaired_bytes)),
        ),
        (
            "garbage collected (total)",
            format!(
                "{} chunks, {}, {} nodes",
                m.gc_chunks,
                size(m.gc_bytes),
                m.gc_nodes
            ),
        ),
        (
            "unreferenced, awaiting grace",
            format!(
                "{} chunks, {}",
                m.unreferenced_chunks,
                size(m.unreferenced_bytes)
            ),
        ),
        ("pending deletions", m.pending_deletions.to_string()),
        (
            "draining",
            m.draining
                .iter()
                .map(|(id, left)| format!("provider {id}: {} left", size(*left)))
                .collect::<Vec<_>>()
                .join(", "),
        ),
        (
            "audits",
            format!("{} (last {})", m.audits, time(m.last_audit_ms)),
        ),
        ("last error", m.last_error.clone().unwrap_or_default()),
    ];
    b.push_str("<table id=\"maintenance\">");
    for (k, v) in rows {
        let _ = write!(b, "<tr><th>{k}</th><td>{}</td></tr>", esc(&v));
    }
    b.push_str("</table>");
    b
}

/// A directory's entries, with links to subdirectories and files; `registered`: the size
/// and holder count of each registered file among them.
pub(super) fn directory(
    path: &str,
    entries: &[FsEntry],
    registered: &std::collections::HashMap<String, (u64, usize)>,
) -> String {
    let mut b = crumbs(path);
    b.push_str(
        "<table id=\"entries\"><tr><th>name</th><th>kind</th><th>size</th>\
         <th>versions</th><th>modified</th></tr>",
    );
    for e in entries {
        let name = e.path.rsplit('/').next().unwrap_or(&e.path);
        match (&e.kind, &e.blob) {
            (EntryKind::File, Some(blob)) => {
                let _ = write!(
                    b,
                    "<tr class=\"file\"><td><a href=\"/file?path={}\">{}</a></td><td>file</td>\
                     <td class=\"num\">{}</td><td class=\"num\">{}</td><td>{}</td></tr>",
                    url(&e.path),
                    esc(name),
                    size(blob.size),
                    blob.latest,
                    time(blob.modified_ms)
                );
            }
            // A workflow output kept in place on its holders: no blob, no versions.
            (EntryKind::Registered, _) => {
                let (bytes, holders) = match registered.get(&e.path) {
                    Some((bytes, holders)) => (size(*bytes), format!(" on {holders} holder(s)")),
                    None => (String::new(), String::new()),
                };
                let _ = write!(
                    b,
                    "<tr class=\"registered\"><td>{}</td><td>registered{holders}</td>\
                     <td class=\"num\">{bytes}</td><td></td><td>{}</td></tr>",
                    esc(name),
                    time(e.created_ms)
                );
            }
            _ => {
                let _ = write!(
                    b,
                    "<tr class=\"dir\"><td><a href=\"/fs?path={}\">{}/</a></td><td>directory</td>\
                     <td></td><td></td><td>{}</td></tr>",
                    url(&e.path),
                    esc(name),
                    time(e.created_ms)
                );
            }
        }
    }
    b.push_str("</table>");
    if entries.is_empty() {
        b.push_str("<p>Empty.</p>");
    }
    b
}

/// Most versions a file's page lists (a blob may have millions).
pub(super) const VERSIONS_SHOWN: usize = 1000;

/// A file's blob and its newest versions (`versions` newest first; `older`: the blob
/// retains older ones than those).
pub(super) fn file(entry: &FsEntry, versions: &VersionList, older: bool) -> String {
    let mut b = crumbs(&entry.path);
    if let Some(blob) = &entry.blob {
        let _ = write!(
            b,
            "<p>blob {} · chunk size {} · replication {} · latest version {} · {}</p>",
            blob.id,
            size(blob.chunk_size),
            blob.replication,
            blob.latest,
            size(blob.size)
        );
    }
    b.push_str(
        "<table id=\"versions\"><tr><th>version</th><th>size</th><th>wrote</th>\
         <th>kind</th><th>state</th><th>published</th><th>data</th></tr>",
    );
    for v in &versions.versions {
        // Only a published version can be read.
        let links = if v.state == VersionState::Published {
            let q = format!("path={}&amp;version={}", url(&entry.path), v.version);
            format!(
                "<a class=\"download\" href=\"/download?{q}\">download</a> \
                 <a class=\"chunks\" href=\"/chunks?{q}\">chunks</a>"
            )
        } else {
            String::new()
        };
        let _ = write!(
            b,
            "<tr class=\"version\"><td class=\"num\">{}</td><td class=\"num\">{}</td>\
             <td>{} at {}</td><td>{}</td><td>{:?}</td><td>{}</td><td>{links}</td></tr>",
            v.version,
            size(v.size),
            size(v.span.size),
            v.span.offset,
            if v.append { "append" } else { "write" },
            v.state,
            time(v.published_ms)
        );
    }
    b.push_str("</table>");
    if older {
        let _ = write!(
            b,
            "<p id=\"older\">The newest {VERSIONS_SHOWN} versions are shown; <code>tomus blob \
             versions {}</code> lists the older ones.</p>",
            entry.blob.as_ref().map_or(0, |blob| blob.id)
        );
    }
    if !versions.aborted.is_empty() {
        let ranges: Vec<String> = versions
            .aborted
            .iter()
            .map(|(a, z)| {
                if a == z {
                    a.to_string()
                } else {
                    format!("{a}–{z}")
                }
            })
            .collect();
        let _ = write!(b, "<p>Aborted versions: {}</p>", esc(&ranges.join(", ")));
    }
    b
}

/// Where each piece of a version lives: its chunk, the chunk's range, and the providers
/// holding the chunk (holes, never written, are stored nowhere).
pub(super) fn chunks(
    entry: &FsEntry,
    info: &VersionInfo,
    segments: &[Segment],
    providers: &[(ProviderInfo, u64)],
) -> String {
    let mut b = crumbs(&entry.path);
    let _ = write!(
        b,
        "<p id=\"chunk-summary\">version {} · {} · {} pieces · \
         <a class=\"download\" href=\"/download?path={}&amp;version={}\">download</a></p>",
        info.version,
        size(info.size),
        segments.len(),
        url(&entry.path),
        info.version
    );
    b.push_str(
        "<table id=\"chunks\"><tr><th>offset</th><th>length</th><th>chunk</th>\
         <th>in chunk at</th><th>providers</th></tr>",
    );
    for seg in segments {
        let span = seg.span();
        match seg {
            Segment::Data(p) => {
                let _ = write!(
                    b,
                    "<tr class=\"chunk\"><td class=\"num\">{}</td><td class=\"num\">{}</td>\
                     <td><code>{}</code></td><td class=\"num\">{}</td>\
                     <td class=\"holders\">{}</td></tr>",
                    span.offset,
                    size(span.size),
                    p.chunk,
                    p.chunk_offset,
                    esc(&super::data::holders(&p.replicas, providers).join(", "))
                );
            }
            Segment::Zeros(_) => {
                let _ = write!(
                    b,
                    "<tr class=\"hole\"><td class=\"num\">{}</td><td class=\"num\">{}</td>\
                     <td>hole (zeros)</td><td></td><td></td></tr>",
                    span.offset,
                    size(span.size)
                );
            }
        }
    }
    b.push_str("</table>");
    b
}

/// The backup service's progress, from the status it writes (`tomus backup status`).
pub(super) fn backup(status: &Result<Option<serde_json::Value>, String>) -> String {
    let mut b = String::from("<h2>Backup</h2>");
    let s = match status {
        Err(e) => {
            let _ = write!(b, "<p id=\"backup\">Status unavailable: {}</p>", esc(e));
            return b;
        }
        Ok(None) => {
            b.push_str(
                "<p id=\"backup\">Backup is not enabled (<code>tomus backup enable</code>).</p>",
            );
            return b;
        }
        Ok(Some(s)) => s,
    };
    let field = |k: &str| match s.get(k) {
        Some(serde_json::Value::String(v)) => v.clone(),
        Some(serde_json::Value::Null) | None => String::new(),
        Some(v) => v.to_string(),
    };
    let count = |k: &str| s.get(k).and_then(serde_json::Value::as_u64).unwrap_or(0);
    let (done, total) = (count("chunks_done"), count("chunks_total"));
    let pct = if total == 0 {
        0.0
    } else {
        done as f64 * 100.0 / total as f64
    };
    let rows = [
        ("state", field("state")),
        ("target", field("target")),
        (
            "current point",
            format!(
                "{done} of {total} chunks ({pct:.0}%), {} uploaded",
                size(count("bytes_uploaded"))
            ),
        ),
        (
            "last point",
            format!(
                "{} ({}, {} uploaded)",
                field("last_point"),
                time(count("last_point_ms")),
                size(count("last_uploaded_bytes"))
            ),
        ),
        ("failed attempts", count("attempts").to_string()),
        ("last error", field("error")),
        ("updated", time(count("updated_ms"))),
    ];
    b.push_str("<table id=\"backup\">");
    for (k, v) in rows {
        let _ = write!(b, "<tr><th>{k}</th><td>{}</td></tr>", esc(&v));
    }
    let _ = write!(
        b,
        "<tr><th>progress</th><td><span class=\"barbox\"><span class=\"bar\" \
         style=\"width:{pct:.0}%\"></span></span></td></tr></table>"
    );
    b
}

/// Links to each directory above `path`.
fn crumbs(path: &str) -> String {
    let mut b = String::from("<p class=\"crumbs\"><a href=\"/fs\">/</a>");
    let mut so_far = String::new();
    for part in path.split('/').filter(|p| !p.is_empty()) {
        if !so_far.is_empty() {
            so_far.push('/');
        }
        so_far.push_str(part);
        let _ = write!(
            b,
            " <a href=\"/fs?path={}\">{}</a> /",
            url(&so_far),
            esc(part)
        );
    }
    b.push_str("</p>");
    b
}

/// HTML-escapes `s`.
pub(super) fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// Percent-encodes `s` for a query value.
fn url(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~/".contains(&b) {
            out.push(b as char);
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

/// Unix milliseconds as a UTC date and time ("—" for 0: never).
pub(super) fn time(ms: u64) -> String {
    if ms == 0 {
        return "—".to_string();
    }
    format!("{} UTC", tomus_wire::human::utc(ms))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_times_sizes_and_escapes() {
        assert_eq!(time(0), "—");
        assert_eq!(time(951_782_400_000), "2000-02-29 00:00:00 UTC");
        assert_eq!(time(1_700_000_000_123), "2023-11-14 22:13:20 UTC");
        assert_eq!(size(1023), "1023 B");
        assert_eq!(size(10 << 20), "10.0 MiB");
        assert_eq!(
            esc("<a href=\"x\">&'"),
            "&lt;a href=&quot;x&quot;&gt;&amp;&#39;"
        );
        assert_eq!(url("a b/ü?"), "a%20b/%C3%BC%3F");
    }
}
