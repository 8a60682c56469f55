//! Verifying every acknowledged version against the model of acknowledged operations.

use super::*;

/// The blob's content after the versions applied so far; bytes written by a published version
/// that was never acknowledged (its writer saw an error) are unknown.
#[derive(Default)]
pub(super) struct Model {
    pub(super) content: Vec<u8>,
    pub(super) known: Vec<bool>,
    pub(super) unknown_versions: Vec<u64>,
}

impl Model {
    pub(super) fn grow(&mut self, end: usize) {
        if end > self.content.len() {
            self.content.resize(end, 0);
            self.known.resize(end, true);
        }
    }

    pub(super) fn apply(&mut self, offset: u64, data: &[u8]) {
        let (o, end) = (offset as usize, offset as usize + data.len());
        self.grow(end);
        self.content[o..end].copy_from_slice(data);
        self.known[o..end].fill(true);
    }

    pub(super) fn forget(&mut self, span: Span) {
        let (o, end) = (span.offset as usize, (span.offset + span.size) as usize);
        self.grow(end);
        self.known[o..end].fill(false);
    }

    pub(super) fn expected(&self, offset: u64, len: u64) -> (Vec<u8>, Option<Vec<bool>>) {
        let r = offset as usize..(offset + len) as usize;
        let known = (!self.unknown_versions.is_empty()).then(|| self.known[r.clone()].to_vec());
        (self.content[r].to_vec(), known)
    }
}

pub(super) struct Check {
    pub(super) version: u64,
    pub(super) offset: u64,
    pub(super) want: Vec<u8>,
    pub(super) known: Option<Vec<bool>>,
    pub(super) what: &'static str,
}

pub(super) async fn run_check(blob: &Blob, c: Check) -> Result<u64, String> {
    let len = c.want.len() as u64;
    let got = blob
        .read(c.offset, len, Some(c.version))
        .await
        .map_err(|e| {
            format!(
                "{} of version {} [{}, +{len}): read failed: {e}",
                c.what, c.version, c.offset
            )
        })?;
    match compare(&got, &c.want, c.known.as_deref()) {
        None => Ok(len),
        Some(msg) => Err(format!(
            "{} of version {} [{}, +{len}): WRONG CONTENT: {msg}",
            c.what, c.version, c.offset
        )),
    }
}

pub(super) struct Verified {
    pub(super) versions: usize,
    pub(super) checks: usize,
    pub(super) bytes: u64,
    pub(super) published: Vec<VersionInfo>,
}

/// Reads back every acknowledged version: the range its operation wrote, a random window
/// against the model and, for the latest and three more versions, the whole content. Panics
/// with every failure found.
pub(super) async fn verify_all(blob: &Blob, ops: &[Op], label: &str, rng: &mut StdRng) -> Verified {
    let started = Instant::now();
    let list = blob.versions().await.expect("versions");
    let mut published: Vec<VersionInfo> = list
        .versions
        .into_iter()
        .filter(|v| v.version > 0 && v.state == VersionState::Published)
        .collect();
    published.sort_by_key(|v| v.version);
    let by_version: HashMap<u64, &Op> = ops.iter().map(|o| (o.version, o)).collect();
    let mut failures = Vec::new();
    assert_eq!(
        by_version.len(),
        ops.len(),
        "[{label}] two acknowledged operations got the same version"
    );
    let infos: HashMap<u64, &VersionInfo> = published.iter().map(|v| (v.version, v)).collect();
    for op in ops {
        match infos.get(&op.version) {
            None => failures.push(format!(
                "acknowledged version {} is not listed as published (aborted ranges {:?})",
                op.version, list.aborted
            )),
            Some(info) => {
                let span = Span::new(op.offset, op.data.len() as u64);
                if info.span != span || info.append != op.append {
                    failures.push(format!(
                        "version {}: manager records span {:?} append {}, acknowledged {:?} append {}",
                        op.version, info.span, info.append, span, op.append
                    ));
                }
            }
        }
    }
    let acked: Vec<u64> = published
        .iter()
        .map(|v| v.version)
        .filter(|v| by_version.contains_key(v))
        .collect();
    let full: Vec<u64> = match acked.len() {
        0 => Vec::new(),
        n => vec![acked[n / 4], acked[n / 2], acked[3 * n / 4], acked[n - 1]],
    };
    let mut model = Model::default();
    let mut pending = FuturesUnordered::new();
    let (mut checks, mut bytes) = (0usize, 0u64);
    let mut settle = |r: Result<u64, String>, failures: &mut Vec<String>| match r {
        Ok(n) => {
            checks += 1;
            bytes += n;
        }
        Err(e) => failures.push(e),
    };
    for info in &published {
        let v = info.version;
        let op = by_version.get(&v);
        match op {
            Some(op) => model.apply(op.offset, &op.data),
            None => {
                model.unknown_versions.push(v);
                model.forget(info.span);
            }
        }
        if info.size != model.content.len() as u64 {
            failures.push(format!(
                "version {v}: size {} but the model says {}",
                info.size,
                model.content.len()
            ));
            continue;
        }
        let Some(op) = op else { continue };
        let mut todo = vec![Check {
            version: v,
            offset: op.offset,
            want: op.data.to_vec(),
            known: None,
            what: "own range",
        }];
        let size = info.size;
        let wlen = size.min(64 << 10);
        let woff = rng.gen_range(0..=size - wlen);
        let (want, known) = model.expected(woff, wlen);
        todo.push(Check {
            version: v,
            offset: woff,
            want,
            known,
            what: "window",
        });
        if full.contains(&v) {
            let (want, known) = model.expected(0, size);
            todo.push(Check {
                version: v,
                offset: 0,
                want,
                known,
                what: "whole content",
            });
        }
        for c in todo {
            while pending.len() >= VERIFY_PARALLELISM {
                if let Some(r) = pending.next().await {
                    settle(r, &mut failures);
                }
            }
            pending.push(run_check(blob, c));
        }
    }
    while let Some(r) = pending.next().await {
        settle(r, &mut failures);
    }
    drop(pending);
    eprintln!(
        "[{label}] verified {} acknowledged of {} published versions: {checks} reads, {:.1} MiB, \
         in {:.1} s; published but never acknowledged (content unknown): {:?}",
        acked.len(),
        published.len(),
        bytes as f64 / (1 << 20) as f64,
        started.elapsed().as_secs_f64(),
        model.unknown_versions
    );
    assert!(
        failures.is_empty(),
        "[{label}] {} failures verifying the blob against the model; first ones:\n{}",
        failures.len(),
        failures
            .iter()
            .take(15)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    );
    Verified {
        versions: acked.len(),
        checks,
        bytes,
        published,
    }
}
