//! Compute jobs on the dashboard: the list of jobs that left task records, and one job's
//! timeline, drawn on the server as SVG (nothing to load, works offline): a row per worker,
//! a bar per map or reduce task from its start to its end. With IterativeReduce the reduce
//! bars start while maps still run on other rows: the barrier-free reduction tree.
//!
//! The records are the ones `tomus.compute` keeps for each job (its `TaskRecord`s), written as
//! JSON lines to `.compute/jobs/JOB.jsonl` by the driver (`tomus.compute.tasklog`): a `job`
//! line, a `task` line per task as it finished, a `done` line at the end.

use std::collections::BTreeMap;
use std::fmt::Write;

use serde_json::Value;
use tomus_wire::human::size;
use tomus_wire::FsEntry;

use super::pages::esc;

/// Width of the drawing, of its label column, and height of a worker's row (pixels).
const WIDTH: f64 = 900.0;
const LABELS: f64 = 190.0;
const ROW: f64 = 24.0;
const AXIS: f64 = 26.0;

/// The list of jobs, newest first, each linked to its timeline.
pub(super) fn list(entries: &[FsEntry]) -> String {
    if entries.is_empty() {
        return "<p id=\"jobs\">No compute job has left task records yet (they are kept in \
                <code>.compute/jobs/</code>).</p>"
            .to_string();
    }
    let mut b =
        String::from("<table id=\"jobs\"><tr><th>job</th><th>records</th><th>updated</th></tr>");
    for e in entries {
        let name = e.path.rsplit('/').next().unwrap_or(&e.path);
        let id = name.trim_end_matches(".jsonl");
        let (bytes, modified) = e.blob.as_ref().map_or((0, 0), |b| (b.size, b.modified_ms));
        let _ = write!(
            b,
            "<tr class=\"job\"><td><a href=\"/job?id={}\">{}</a></td><td class=\"num\">{}</td>\
             <td>{}</td></tr>",
            esc(id),
            esc(id),
            size(bytes),
            super::pages::time(modified)
        );
    }
    b.push_str("</table>");
    b
}

/// One task as drawn.
struct Bar {
    kind: String,
    task: String,
    start: f64,
    end: f64,
    inputs: Vec<String>,
    bytes_read: u64,
    bytes_written: u64,
}

fn text(v: &Value, key: &str) -> String {
    match v.get(key) {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Null) | None => String::new(),
        Some(other) => other.to_string(),
    }
}

fn num(v: &Value, key: &str) -> f64 {
    v.get(key).and_then(Value::as_f64).unwrap_or(0.0)
}

/// The page of job `id` from its records.
pub(super) fn timeline(id: u64, records: &[Value]) -> String {
    let mut workers: BTreeMap<String, Vec<Bar>> = BTreeMap::new();
    let mut header = None;
    let mut done = None;
    for r in records {
        match r.get("type").and_then(Value::as_str) {
            Some("job") => header = Some(r),
            Some("done") => done = Some(r),
            Some("task") => workers.entry(text(r, "worker")).or_default().push(Bar {
                kind: text(r, "kind"),
                task: text(r, "task"),
                start: num(r, "start"),
                end: num(r, "end"),
                inputs: r
                    .get("inputs")
                    .and_then(Value::as_array)
                    .map(|a| {
                        a.iter()
                            .filter_map(|x| x.as_str().map(String::from))
                            .collect()
                    })
                    .unwrap_or_default(),
                bytes_read: num(r, "bytes_read") as u64,
                bytes_written: num(r, "bytes_written") as u64,
            }),
            _ => {}
        }
    }
    let bars = || workers.values().flatten();
    let tasks = bars().count();
    let maps = bars().filter(|b| b.kind == "map").count();
    let reduces = bars().filter(|b| b.kind == "reduce").count();
    let others = tasks - maps - reduces;
    let mut b = String::new();
    let state = if done.is_some() {
        "finished"
    } else {
        "running or stopped"
    };
    let dask_workers = workers.keys().filter(|w| w.as_str() != DRIVER).count();
    let _ = write!(
        b,
        "<p id=\"job-summary\">job {id} · {state} · {tasks} tasks ({maps} map, {reduces} \
         reduce{}) on {dask_workers} worker{}{}",
        if others > 0 {
            format!(", {others} other")
        } else {
            String::new()
        },
        if dask_workers == 1 { "" } else { "s" },
        if workers.contains_key(DRIVER) {
            " and the driver"
        } else {
            ""
        },
    );
    if let Some(h) = header {
        let _ = write!(
            b,
            " · {} · {} inputs",
            esc(&text(h, "kind")),
            esc(&text(h, "maps"))
        );
        // A MapReduce job names its reducers; an IterativeReduce job its reduce ratio.
        if h.get("partitions").is_some() {
            let _ = write!(b, ", {} reducers", esc(&text(h, "partitions")));
        } else {
            let _ = write!(b, ", reduce ratio {}", esc(&text(h, "ratio")));
        }
    }
    if let Some(d) = done {
        let _ = write!(b, " · {:.2} s", num(d, "elapsed"));
    }
    b.push_str("</p>");
    if tasks == 0 {
        b.push_str("<p>No task has finished yet.</p>");
        return b;
    }
    let t0 = bars().map(|x| x.start).fold(f64::INFINITY, f64::min);
    let t1 = bars().map(|x| x.end).fold(f64::NEG_INFINITY, f64::max);
    let span = (t1 - t0).max(1e-3);
    // Room on the right for the last tick's label.
    let scale = (WIDTH - LABELS - 30.0) / span;
    let height = AXIS + ROW * workers.len() as f64;
    b.push_str(
        "<p class=\"legend\"><span style=\"color:#4a90d9\">■ map</span>\
         <span style=\"color:#e08a2c\">■ reduce</span><span style=\"color:#888\">■ other</span></p>",
    );
    let _ = write!(
        b,
        "<svg id=\"timeline\" class=\"chart\" width=\"{WIDTH}\" height=\"{height}\" \
         viewBox=\"0 0 {WIDTH} {height}\">"
    );
    // Time axis: five ticks in seconds from the first task's start.
    for i in 0..=4 {
        let t = span * f64::from(i) / 4.0;
        let x = LABELS + t * scale;
        let _ = write!(
            b,
            "<line x1=\"{x:.1}\" y1=\"{AXIS}\" x2=\"{x:.1}\" y2=\"{height}\" stroke=\"#ddd\"/>\
             <text x=\"{x:.1}\" y=\"16\" font-size=\"11\" text-anchor=\"middle\">{t:.2} s</text>"
        );
    }
    for (row, (worker, tasks)) in workers.iter().enumerate() {
        let y = AXIS + ROW * row as f64;
        let _ = write!(
            b,
            "<g class=\"worker\" data-worker=\"{w}\"><text x=\"4\" y=\"{ty:.1}\" font-size=\"11\">\
             {label}</text>",
            w = esc(worker),
            label = esc(row_label(worker)),
            ty = y + ROW * 0.65
        );
        for t in tasks {
            let x = LABELS + (t.start - t0) * scale;
            let w = ((t.end - t.start) * scale).max(2.0);
            let colour = match t.kind.as_str() {
                "map" => "#4a90d9",
                "reduce" => "#e08a2c",
                _ => "#888",
            };
            let inputs = if t.inputs.is_empty() {
                String::new()
            } else {
                format!(" of {}", t.inputs.join(", "))
            };
            let _ = write!(
                b,
                "<rect class=\"task {kind}\" data-task=\"{task}\" x=\"{x:.1}\" y=\"{y:.1}\" \
                 width=\"{w:.1}\" height=\"{h:.1}\" fill=\"{colour}\"><title>{kind} {task}{inputs}: \
                 {d:.3} s, read {r}, wrote {wr}</title></rect>",
                kind = esc(&t.kind),
                task = esc(&t.task),
                inputs = esc(&inputs),
                y = y + 3.0,
                h = ROW - 6.0,
                d = t.end - t.start,
                r = size(t.bytes_read),
                wr = size(t.bytes_written),
            );
        }
        b.push_str("</g>");
    }
    b.push_str("</svg>");
    b.push_str(
        "<table id=\"workers\"><tr><th>worker</th><th>map</th><th>reduce</th><th>busy</th></tr>",
    );
    for (worker, tasks) in &workers {
        let busy: f64 = tasks.iter().map(|t| t.end - t.start).sum();
        let _ = write!(
            b,
            "<tr><td>{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td>\
             <td class=\"num\">{busy:.2} s</td></tr>",
            esc(row_label(worker)),
            tasks.iter().filter(|t| t.kind == "map").count(),
            tasks.iter().filter(|t| t.kind == "reduce").count(),
        );
    }
    b.push_str("</table>");
    b
}

/// The worker name of tasks run outside Dask: by the job's driver (an IterativeReduce job's
/// last merge of small results, or of big ones when its workers are threads of the driver).
const DRIVER: &str = "local";

fn row_label(worker: &str) -> &str {
    if worker == DRIVER {
        "driver"
    } else {
        worker
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    #[test]
    fn draws_a_bar_per_task_in_a_row_per_worker() {
        let records = vec![
            json!({"type": "job", "kind": "iterative", "maps": 2, "ratio": 2}),
            json!({"type": "task", "kind": "map", "task": "m0", "start": 10.0, "end": 11.0,
                   "worker": "w<1>"}),
            json!({"type": "task", "kind": "map", "task": "m1", "start": 10.0, "end": 12.0,
                   "worker": "w2"}),
            json!({"type": "task", "kind": "reduce", "task": "r0", "start": 12.0, "end": 12.5,
                   "worker": "w<1>", "inputs": ["m0", "m1"]}),
        ];
        let html = super::timeline(7, &records);
        assert_eq!(html.matches("<rect class=\"task map\"").count(), 2);
        assert_eq!(html.matches("<rect class=\"task reduce\"").count(), 1);
        assert_eq!(html.matches("<g class=\"worker\"").count(), 2);
        assert!(html.contains("data-worker=\"w&lt;1&gt;\""));
        assert!(html.contains("3 tasks (2 map, 1 reduce) on 2 workers"));
        assert!(html.contains("running or stopped"));
        assert!(html.contains("iterative · 2 inputs, reduce ratio 2"));
    }

    #[test]
    fn a_merge_run_by_the_driver_is_drawn_in_a_driver_row() {
        let records = vec![
            json!({"type": "task", "kind": "map", "task": "m0", "start": 1.0, "end": 2.0,
                   "worker": "tcp://h:1"}),
            json!({"type": "task", "kind": "reduce", "task": "r0", "start": 2.0, "end": 2.1,
                   "worker": "local", "inputs": ["m0"]}),
        ];
        let html = super::timeline(3, &records);
        assert!(html.contains("on 1 worker and the driver"), "{html}");
        assert!(html.contains("data-worker=\"local\""));
        assert!(html.contains(">driver</text>"));
        assert!(html.contains("<tr><td>driver</td>"));
    }

    #[test]
    fn a_mapreduce_job_names_its_reducers() {
        let records = vec![
            json!({"type": "job", "kind": "mapreduce", "maps": 3, "partitions": 2}),
            json!({"type": "task", "kind": "reduce", "task": "reduce-1", "start": 1.0,
                   "end": 2.0, "worker": "w"}),
            json!({"type": "done", "elapsed": 1.5}),
        ];
        let html = super::timeline(9, &records);
        assert!(html.contains("finished"));
        assert!(
            html.contains("mapreduce · 3 inputs, 2 reducers · 1.50 s"),
            "{html}"
        );
    }
}
