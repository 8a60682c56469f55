//! The listing scan against an in-memory namespace: every page matches S3's reference
//! listing, tokens round-trip.

use std::collections::BTreeSet;

use super::*;

/// The namespace's recursive listing of a set of keys: every key and, as directories,
/// every proper `/`-prefix of a key, in byte order.
struct Mem {
    entries: BTreeSet<(String, bool)>,
}

impl Mem {
    fn new(keys: &[&str]) -> Mem {
        let mut entries = BTreeSet::new();
        for k in keys {
            for (i, _) in k.match_indices('/') {
                entries.insert((k[..i].to_string(), true));
            }
            entries.insert((k.to_string(), false));
        }
        Mem { entries }
    }
}

impl Pages for Mem {
    type Item = ();
    async fn page(&self, after: Option<&str>, limit: u32) -> S3Result<Vec<Entry<()>>> {
        Ok(self
            .entries
            .iter()
            .filter(|(k, _)| after.is_none_or(|a| k.as_str() > a))
            .take(limit as usize)
            .map(|(k, d)| Entry {
                key: k.clone(),
                dir: *d,
                data: (),
            })
            .collect())
    }
}

/// What S3 returns for the whole listing: keys with the prefix, folded by the delimiter.
fn reference(keys: &[&str], prefix: &str, delim: Option<&str>) -> Vec<Item> {
    let q = Query {
        prefix: prefix.into(),
        delimiter: delim.map(str::to_string),
        ..Query::default()
    };
    let mut sorted: Vec<&str> = keys.to_vec();
    sorted.sort();
    sorted.dedup();
    let mut out: Vec<Item> = Vec::new();
    for k in sorted.into_iter().filter(|k| k.starts_with(prefix)) {
        let item = match q.common_prefix(k) {
            Some(cp) => Item::Prefix(cp.to_string()),
            None => Item::Key(k.to_string()),
        };
        if out.last() != Some(&item) {
            out.push(item);
        }
    }
    out
}

/// Every page of the listing, resuming from each page's token.
fn paginate(keys: &[&str], prefix: &str, delim: Option<&str>, max: usize) -> Vec<Item> {
    let source = Mem::new(keys);
    let mut q = Query {
        prefix: prefix.into(),
        delimiter: delim.map(str::to_string),
        after: None,
        max,
    };
    let mut all = Vec::new();
    for _ in 0..10_000 {
        let l = futures::executor::block_on(list(&source, &q)).unwrap();
        assert!(l.objects.len() + l.prefixes.len() <= max);
        let mut page: Vec<Item> = l
            .objects
            .iter()
            .map(|(k, _)| Item::Key(k.clone()))
            .chain(l.prefixes.iter().map(|p| Item::Prefix(p.clone())))
            .collect();
        page.sort_by(|a, b| a.as_str().cmp(b.as_str()));
        all.extend(page);
        if !l.truncated {
            return all;
        }
        let token = Item::from_token(&l.last.unwrap().token()).unwrap();
        q.after = Some(q.resume_after(&token));
    }
    panic!("listing does not end");
}

const KEYS: &[&str] = &[
    "a",
    "a-b",
    "a.txt",
    "a/1",
    "a/2/x",
    "a/2/y",
    "a/3",
    "ab/c",
    "b",
    "logs/2023-12",
    "logs/2024-01",
    "logs/2024-02/x",
    "logs/2024-03",
    "z/z/z",
];

#[test]
fn pages_match_the_whole_listing() {
    for prefix in [
        "",
        "a",
        "a/",
        "a/2",
        "logs/2024-",
        "logs/2024-02/",
        "nothing",
        "z/",
    ] {
        for delim in [None, Some("/"), Some("-"), Some("2/")] {
            let want = reference(KEYS, prefix, delim);
            for max in [1, 2, 3, 5, 1000] {
                let got = paginate(KEYS, prefix, delim, max);
                assert_eq!(got, want, "prefix {prefix:?} delimiter {delim:?} max {max}");
            }
        }
    }
}

#[test]
fn delimiter_folds_keys_into_common_prefixes() {
    let got = paginate(KEYS, "", Some("/"), 1000);
    let names: Vec<&str> = got.iter().map(Item::as_str).collect();
    assert_eq!(
        names,
        ["a", "a-b", "a.txt", "a/", "ab/", "b", "logs/", "z/"]
    );
    assert!(matches!(got[3], Item::Prefix(_)));
}

#[test]
fn start_after_and_markers_that_are_prefixes() {
    let source = Mem::new(KEYS);
    let mut q = Query {
        delimiter: Some("/".into()),
        max: 1000,
        ..Query::default()
    };
    q.after = Some(q.resume_after(&Item::Key("a/".into())));
    let l = futures::executor::block_on(list(&source, &q)).unwrap();
    assert_eq!(l.prefixes, ["ab/", "logs/", "z/"]);
    q.after = Some(q.resume_after(&Item::Key("a/1".into())));
    let l = futures::executor::block_on(list(&source, &q)).unwrap();
    assert_eq!(l.prefixes[0], "a/", "keys after a/1 still fold into a/");
    let mut q = Query {
        max: 0,
        ..Query::default()
    };
    let l = futures::executor::block_on(list(&source, &q)).unwrap();
    assert!(!l.truncated && l.objects.is_empty());
    q.max = 2;
    let l = futures::executor::block_on(list(&source, &q)).unwrap();
    assert!(l.truncated);
}

#[test]
fn many_keys_paginate_exactly() {
    let keys: Vec<String> = (0..2500).map(|i| format!("d{}/k{i:05}", i % 7)).collect();
    let refs: Vec<&str> = keys.iter().map(String::as_str).collect();
    let got = paginate(&refs, "", None, 1000);
    assert_eq!(got.len(), 2500);
    assert_eq!(got, reference(&refs, "", None));
    assert_eq!(
        paginate(&refs, "d3", Some("/"), 1),
        [Item::Prefix("d3/".into())]
    );
}

#[test]
fn tokens_round_trip_and_reject_garbage() {
    for item in [Item::Key("a/é x".into()), Item::Prefix("p/".into())] {
        assert_eq!(Item::from_token(&item.token()).unwrap(), item);
    }
    for bad in ["", "x00", "k0", "kzz", "k\u{e9}"] {
        assert!(Item::from_token(bad).is_err(), "{bad:?}");
    }
    assert!(after_prefix("a/").as_str() > "a/zzz/zzz");
    assert!(after_prefix("a/").as_str() < "a0");
}
