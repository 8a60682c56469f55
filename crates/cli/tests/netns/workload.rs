//! The concurrent workload and its record of acknowledged operations.

use super::*;

/// An acknowledged write or append: `version` holds `data` at `offset`.
#[derive(Clone)]
pub(super) struct Op {
    pub(super) version: u64,
    pub(super) offset: u64,
    pub(super) data: Arc<Vec<u8>>,
    pub(super) append: bool,
    pub(super) acked: Instant,
}

#[derive(Default)]
pub(super) struct Record {
    pub(super) ops: Vec<Op>,
    /// Highest end of any acknowledged operation.
    pub(super) max_end: u64,
    pub(super) bytes_attempted: u64,
    pub(super) writes_ok: u64,
    pub(super) writes_failed: u64,
    pub(super) appends_ok: u64,
    pub(super) appends_failed: u64,
    pub(super) reads_ok: u64,
    pub(super) read_bytes: u64,
    pub(super) write_errors: Vec<String>,
    pub(super) read_errors: Vec<String>,
    pub(super) mismatches: Vec<String>,
}

pub(super) type Shared = Arc<Mutex<Record>>;

pub(super) fn lock(r: &Shared) -> std::sync::MutexGuard<'_, Record> {
    r.lock().unwrap_or_else(|p| p.into_inner())
}

/// Two appenders, one writer and two readers until `deadline`. Readers check the range an
/// acknowledged operation wrote at its own version, during the fault.
pub(super) fn spawn_workload(
    blob: &Blob,
    record: &Shared,
    duration: Duration,
    budget: u64,
    seed: u64,
) -> Vec<tokio::task::JoinHandle<()>> {
    let start = Instant::now();
    let deadline = start + duration;
    let mut tasks = Vec::new();
    for t in 0..5u64 {
        let blob = blob.clone();
        let record = record.clone();
        let mut rng = StdRng::seed_from_u64(seed ^ (t << 48));
        let role = match t {
            0 | 1 => "append",
            2 => "write",
            _ => "read",
        };
        tasks.push(tokio::spawn(async move {
            let mut seq = 0u64;
            while Instant::now() < deadline {
                seq += 1;
                if role == "read" {
                    read_one(&blob, &record, &mut rng).await;
                    continue;
                }
                let len = if rng.gen_bool(0.4) {
                    rng.gen_range(1..16 << 10)
                } else {
                    rng.gen_range(16 << 10..256 << 10)
                };
                // Paced: the budget is spread over the whole run, so there is writing before,
                // during and after the fault however fast the machine is.
                let paced = budget as f64 * start.elapsed().as_secs_f64() / duration.as_secs_f64();
                let ahead = {
                    let mut r = lock(&record);
                    if r.bytes_attempted + len as u64 > budget {
                        break;
                    }
                    let ahead = r.bytes_attempted as f64 > paced + (1 << 20) as f64;
                    if !ahead {
                        r.bytes_attempted += len as u64;
                    }
                    ahead
                };
                if ahead {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                }
                let data = Arc::new(pattern::generate(
                    seed ^ pattern::seed(t, seq).wrapping_mul(0x9e37_79b9),
                    len,
                ));
                if role == "append" {
                    match blob.append(&data).await {
                        Ok((version, offset)) => record_op(&record, version, offset, data, true),
                        Err(e) => {
                            let mut r = lock(&record);
                            r.appends_failed += 1;
                            r.write_errors.push(format!("append of {len} bytes: {e}"));
                        }
                    }
                } else {
                    let max_end = lock(&record).max_end;
                    let offset = rng.gen_range(0..=max_end);
                    match blob.write(offset, &data).await {
                        Ok(version) => record_op(&record, version, offset, data, false),
                        Err(e) => {
                            let mut r = lock(&record);
                            r.writes_failed += 1;
                            r.write_errors
                                .push(format!("write of {len} bytes at {offset}: {e}"));
                        }
                    }
                }
            }
        }));
    }
    tasks
}

pub(super) fn record_op(
    record: &Shared,
    version: u64,
    offset: u64,
    data: Arc<Vec<u8>>,
    append: bool,
) {
    let mut r = lock(record);
    r.max_end = r.max_end.max(offset + data.len() as u64);
    if append {
        r.appends_ok += 1;
    } else {
        r.writes_ok += 1;
    }
    r.ops.push(Op {
        version,
        offset,
        data,
        append,
        acked: Instant::now(),
    });
}

pub(super) async fn read_one(blob: &Blob, record: &Shared, rng: &mut StdRng) {
    let op = {
        let r = lock(record);
        if r.ops.is_empty() {
            None
        } else {
            Some(r.ops[rng.gen_range(0..r.ops.len())].clone())
        }
    };
    let Some(op) = op else {
        tokio::time::sleep(Duration::from_millis(20)).await;
        return;
    };
    let len = op.data.len() as u64;
    let res = blob.read(op.offset, len, Some(op.version)).await;
    let mut r = lock(record);
    match res {
        Ok(got) => {
            r.reads_ok += 1;
            r.read_bytes += len;
            if let Some(msg) = compare(&got, &op.data, None) {
                r.mismatches.push(format!(
                    "concurrent read of version {} [{}, +{len}): {msg}",
                    op.version, op.offset
                ));
            }
        }
        Err(e) => r.read_errors.push(format!(
            "concurrent read of version {} [{}, +{len}): {e}",
            op.version, op.offset
        )),
    }
}

/// `None` when `got` equals `want` (where `known`, if given, says the byte is known).
pub(super) fn compare(got: &[u8], want: &[u8], known: Option<&[bool]>) -> Option<String> {
    if got.len() != want.len() {
        return Some(format!("got {} bytes, want {}", got.len(), want.len()));
    }
    let bad = (0..got.len()).find(|&i| got[i] != want[i] && known.is_none_or(|k| k[i]))?;
    let wrong = (bad..got.len())
        .filter(|&i| got[i] != want[i] && known.is_none_or(|k| k[i]))
        .count();
    let end = (bad + 8).min(got.len());
    Some(format!(
        "{wrong} wrong bytes from +{bad}: got {:02x?}, want {:02x?}",
        &got[bad..end],
        &want[bad..end]
    ))
}
