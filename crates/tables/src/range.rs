//! [`remove_range`]: redb's `retain_in` removes each row on a copy of its path, since it
//! iterates the tree it changes; a range of 100,000 rows took about 4 s, and its commit
//! another second, where removing the same keys one by one in batches took 0.4 s and a
//! commit of 1 ms (redb 2.6 on this machine). Every write of the manager waits for the
//! transaction that removes rows: its row purge, the change log's trims.

use std::ops::{Bound, RangeInclusive};

use redb::{Key, ReadableTable, StorageError, Table, Value};

/// Keys read per batch: the batch is held in memory while its rows are removed.
const BATCH: usize = 4096;

/// Removes every row of `t` whose key lies in `range`; returns how many. The keys are read
/// in batches, then removed one by one, which changes pages this transaction already copied
/// in place.
pub fn remove_range<K, V>(
    t: &mut Table<'_, K, V>,
    range: RangeInclusive<K>,
) -> Result<u64, StorageError>
where
    K: Key + Copy + 'static + for<'a> Value<SelfType<'a> = K>,
    V: Value + 'static,
{
    remove_range_at_most(t, range, u64::MAX)
}

/// [`remove_range`] for the first `at_most` rows of `range` (in key order); returns how many
/// it removed: fewer than `at_most` when it removed all.
pub fn remove_range_at_most<K, V>(
    t: &mut Table<'_, K, V>,
    range: RangeInclusive<K>,
    at_most: u64,
) -> Result<u64, StorageError>
where
    K: Key + Copy + 'static + for<'a> Value<SelfType<'a> = K>,
    V: Value + 'static,
{
    let (first, last) = range.into_inner();
    let mut from = Bound::Included(first);
    let mut removed = 0;
    while removed < at_most {
        let batch = usize::try_from(at_most - removed).map_or(BATCH, |left| left.min(BATCH));
        let mut keys = Vec::with_capacity(batch);
        for row in t.range::<K>((from, Bound::Included(last)))?.take(batch) {
            keys.push(row?.0.value());
        }
        for key in &keys {
            t.remove(*key)?;
        }
        removed += keys.len() as u64;
        match keys.last() {
            Some(&key) if keys.len() == batch => from = Bound::Excluded(key),
            _ => break,
        }
    }
    Ok(removed)
}

#[cfg(test)]
mod tests {
    use redb::{Database, TableDefinition};

    use super::*;

    const ROWS: TableDefinition<(u64, u64), u64> = TableDefinition::new("rows");
    const LOG: TableDefinition<u64, u64> = TableDefinition::new("log");

    /// A scratch database, its file removed when dropped (when a test fails too).
    struct Scratch {
        db: Database,
        path: std::path::PathBuf,
    }

    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.path);
        }
    }

    fn scratch(name: &str) -> Scratch {
        let path =
            std::env::temp_dir().join(format!("tomus-tables-{name}-{}.redb", std::process::id()));
        let _ = std::fs::remove_file(&path);
        let db = Database::create(&path).expect("create a database");
        Scratch { db, path }
    }

    /// Ranges across batch boundaries, at the ends of the key space and empty ones remove
    /// exactly their rows, in the transaction that asked and after its commit.
    #[test]
    fn removes_exactly_the_range() {
        let scratch = scratch("range");
        let db = &scratch.db;
        let per_blob = 2 * BATCH as u64 + 5;
        let txn = db.begin_write().expect("write");
        {
            let mut t = txn.open_table(ROWS).expect("table");
            for blob in [0, 1, 2, u64::MAX] {
                for v in (0..per_blob).chain([u64::MAX]) {
                    t.insert((blob, v), v).expect("insert");
                }
            }
            let all = (0, 0)..=(u64::MAX, u64::MAX);
            assert_eq!(
                remove_range(&mut t, (1, 0)..=(1, u64::MAX)).expect("remove"),
                per_blob + 1
            );
            assert_eq!(
                remove_range(&mut t, (1, 0)..=(1, u64::MAX)).expect("remove"),
                0
            );
            assert_eq!(remove_range(&mut t, (2, 10)..=(2, 19)).expect("remove"), 10);
            assert_eq!(
                remove_range(&mut t, (u64::MAX, 1)..=(u64::MAX, u64::MAX)).expect("remove"),
                per_blob
            );
            let left: Vec<(u64, u64)> = t
                .range(all)
                .expect("range")
                .map(|r| r.expect("row").0.value())
                .collect();
            let mut want: Vec<(u64, u64)> = Vec::new();
            for v in (0..per_blob).chain([u64::MAX]) {
                want.push((0, v));
            }
            for v in (0..per_blob)
                .chain([u64::MAX])
                .filter(|v| !(10..20).contains(v))
            {
                want.push((2, v));
            }
            want.push((u64::MAX, 0));
            // Not assert_eq: a failure would print thousands of keys.
            assert!(
                left == want,
                "{} rows left, {} expected",
                left.len(),
                want.len()
            );
        }
        txn.commit().expect("commit");
        let read = db.begin_read().expect("read");
        let t = read.open_table(ROWS).expect("table");
        assert!(t.get((1, 3)).expect("get").is_none());
        assert_eq!(t.get((2, 20)).expect("get").map(|v| v.value()), Some(20));
    }

    #[test]
    fn removes_a_prefix_of_single_keys() {
        let scratch = scratch("prefix");
        let db = &scratch.db;
        let txn = db.begin_write().expect("write");
        {
            let mut t = txn.open_table(LOG).expect("table");
            for seq in 1..=10_000 {
                t.insert(seq, seq).expect("insert");
            }
            assert_eq!(
                remove_range_at_most(&mut t, 0..=9_000, 5_000).expect("remove"),
                5_000
            );
            let first = t.first().expect("first").map(|(k, _)| k.value());
            assert_eq!(first, Some(5_001));
            assert_eq!(
                remove_range_at_most(&mut t, 0..=9_000, 0).expect("remove"),
                0
            );
            assert_eq!(
                remove_range_at_most(&mut t, 0..=9_000, 5_000).expect("remove"),
                4_000
            );
            let first = t.first().expect("first").map(|(k, _)| k.value());
            assert_eq!(first, Some(9_001));
            assert_eq!(remove_range(&mut t, 0..=0).expect("remove"), 0);
        }
        txn.commit().expect("commit");
    }
}
