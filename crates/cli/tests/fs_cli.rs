//! `tomus fs` as users run it, against a cluster of real processes: trees put and got with
//! `-r`, patterns, metadata-only copies, `du`, `versions`, `head`/`tail`, `get` into a
//! directory, `tomus://` paths, unclean paths refused, and errors as JSON under `--json`.
//! Every listing and content is checked against a model built from the local files.

#![allow(clippy::unwrap_used, reason = "a test stops at its first error")]

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;
use tomus_cli::pattern;

use common::{exe, json, ok, TestCluster};

fn tomus_in(addr: &str, cwd: Option<&Path>, args: &[&str]) -> Output {
    let mut cmd = Command::new(exe());
    cmd.env("TOMUS_ADDR", addr).args(args);
    if let Some(d) = cwd {
        cmd.current_dir(d);
    }
    cmd.output().unwrap()
}

fn tomus(addr: &str, args: &[&str]) -> Output {
    tomus_in(addr, None, args)
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// `ls -r --json` of `path` as path -> size (`None` for directories).
fn listing(addr: &str, path: &str) -> BTreeMap<String, Option<u64>> {
    json(tomus(addr, &["fs", "ls", "-r", path, "--json"]))
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            let size = (e["type"] == "file").then(|| e["size"].as_u64().unwrap());
            (e["path"].as_str().unwrap().to_string(), size)
        })
        .collect()
}

/// A local tree: relative path -> content (`None` for a directory).
type Tree = BTreeMap<String, Option<Vec<u8>>>;

fn make_tree(root: &Path) -> Tree {
    let mut tree = Tree::new();
    for d in ["a", "a/b", "empty"] {
        std::fs::create_dir_all(root.join(d)).unwrap();
        tree.insert(d.to_string(), None);
    }
    let files = [
        ("x.csv", 1000),
        ("y.csv", 200_000),
        ("z.txt", 0),
        ("a/p.csv", 70_000),
        ("a/q.txt", 10),
        ("a/b/deep.bin", 300_001),
    ];
    for (i, (name, len)) in files.into_iter().enumerate() {
        let data = pattern::generate(pattern::seed(7, i as u64), len);
        std::fs::write(root.join(name), &data).unwrap();
        tree.insert(name.to_string(), Some(data));
    }
    tree
}

/// The listing a tree put under `at` must have.
fn model_listing(tree: &Tree, at: &str) -> BTreeMap<String, Option<u64>> {
    tree.iter()
        .map(|(rel, c)| (format!("{at}/{rel}"), c.as_ref().map(|c| c.len() as u64)))
        .collect()
}

/// Checks that the local directory `root` holds exactly `tree`.
fn check_local(root: &Path, tree: &Tree) {
    let mut found = Tree::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            let rel = p.strip_prefix(root).unwrap().to_str().unwrap().to_string();
            if p.is_dir() {
                found.insert(rel, None);
                stack.push(p);
            } else {
                found.insert(rel, Some(std::fs::read(&p).unwrap()));
            }
        }
    }
    assert_eq!(
        found.keys().collect::<Vec<_>>(),
        tree.keys().collect::<Vec<_>>()
    );
    assert!(found == *tree, "contents differ under {}", root.display());
}

fn scratch(tc: &TestCluster, name: &str) -> PathBuf {
    let d = tc.dir.join("local").join(name);
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[test]
fn trees_patterns_copies_and_du() {
    let tc = TestCluster::start(2);
    let addr = tc.addr();
    let src = scratch(&tc, "src");
    let tree = make_tree(&src);

    // put -r of a new path makes it the copy of the tree; a file per line on stdout.
    let out = ok(tomus(
        &addr,
        &["fs", "put", "-r", s(&src), "/d", "--chunk-size", "64KiB"],
    ));
    let text = String::from_utf8(out).unwrap();
    assert_eq!(text.lines().count(), 6, "{text}");
    assert!(text.contains("put /d/a/b/deep.bin: version 1, "), "{text}");
    let mut model = model_listing(&tree, "/d");
    assert_eq!(listing(&addr, "/d"), model);
    // Into an existing directory: under the source's own name.
    ok(tomus(&addr, &["fs", "mkdir", "/into"]));
    let rows = json(tomus(
        &addr,
        &["fs", "put", "-r", s(&src), "/into", "--json"],
    ));
    assert_eq!(rows.as_array().unwrap().len(), 6);
    let mut into = model_listing(&tree, "/into/src");
    into.insert("/into/src".into(), None);
    assert_eq!(listing(&addr, "/into"), into);
    // A directory without -r is refused, and nothing is made.
    assert_eq!(
        tomus(&addr, &["fs", "put", s(&src), "/nodir"])
            .status
            .code(),
        Some(2)
    );
    assert_eq!(
        tomus(&addr, &["fs", "stat", "/nodir"]).status.code(),
        Some(3)
    );

    // get -r: to a new local path, then into an existing directory.
    let back = tc.dir.join("local/back");
    ok(tomus(&addr, &["fs", "get", "-r", "/d", s(&back)]));
    check_local(&back, &tree);
    let holder = scratch(&tc, "holder");
    ok(tomus(&addr, &["fs", "get", "-r", "tomus://d", s(&holder)]));
    check_local(&holder.join("d"), &tree);
    assert_eq!(
        tomus(&addr, &["fs", "get", "/d", s(&holder.join("x"))])
            .status
            .code(),
        Some(2),
        "a directory needs -r"
    );

    // Patterns, within one component, against the listings.
    let matched = |pat: &str| -> Vec<String> {
        json(tomus(&addr, &["fs", "ls", pat, "--json"]))
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["path"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(matched("/d/*.csv"), ["/d/x.csv", "/d/y.csv"]);
    assert_eq!(matched("/d/[xz].*"), ["/d/x.csv", "/d/z.txt"]);
    assert_eq!(matched("/d/?/?.csv"), ["/d/a/p.csv"]);
    assert_eq!(matched("/d/*/*.txt"), ["/d/a/q.txt"]);
    // A matched directory lists its children, as without a pattern.
    assert_eq!(matched("/d/[a]"), ["/d/a/b", "/d/a/p.csv", "/d/a/q.txt"]);
    assert_eq!(
        tomus(&addr, &["fs", "ls", "/d/*.parquet"]).status.code(),
        Some(3)
    );
    let file = |rel: &str| tree[rel].clone().unwrap();
    let cat = ok(tomus(&addr, &["fs", "cat", "/d/*.csv"]));
    assert_eq!(cat, [file("x.csv"), file("y.csv")].concat());
    let got = scratch(&tc, "got");
    ok(tomus(&addr, &["fs", "get", "/d/*/*.csv", s(&got)]));
    assert_eq!(std::fs::read(got.join("p.csv")).unwrap(), file("a/p.csv"));

    // du: totals of the model, per child and summarized.
    let total: u64 = tree.values().flatten().map(|c| c.len() as u64).sum();
    let du = json(tomus(&addr, &["fs", "du", "-s", "/d", "--json"]));
    assert_eq!(du[0]["bytes"], Value::from(total));
    assert_eq!(
        (du[0]["files"].as_u64(), du[0]["dirs"].as_u64()),
        (Some(6), Some(3))
    );
    let du = json(tomus(&addr, &["fs", "du", "/d", "--json"]));
    let rows: BTreeMap<&str, (u64, u64)> = du
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["path"].as_str().unwrap(),
                (r["bytes"].as_u64().unwrap(), r["files"].as_u64().unwrap()),
            )
        })
        .collect();
    let a_bytes =
        (file("a/p.csv").len() + file("a/q.txt").len() + file("a/b/deep.bin").len()) as u64;
    let want: BTreeMap<&str, (u64, u64)> = [
        ("/d/a", (a_bytes, 3)),
        ("/d/empty", (0, 0)),
        ("/d/x.csv", (1000, 1)),
        ("/d/y.csv", (200_000, 1)),
        ("/d/z.txt", (0, 1)),
    ]
    .into();
    assert_eq!(rows, want);
    let text = String::from_utf8(ok(tomus(&addr, &["fs", "du", "-s", "/d"]))).unwrap();
    assert!(text.contains("6 files  /d"), "{text}");
    let text = String::from_utf8(ok(tomus(&addr, &["fs", "du", "/d"]))).unwrap();
    assert!(text.contains("       1 file   /d/x.csv\n"), "{text}");
    assert!(text.contains("       0 files  /d/empty\n"), "{text}");

    // cp: metadata only, then independent of the source.
    let copied = json(tomus(
        &addr,
        &["fs", "cp", "/d/y.csv", "/c/y.csv", "--json"],
    ));
    assert_eq!(copied["size"], Value::from(200_000));
    ok(tomus(&addr, &["fs", "cp", "/d/z.txt", "/c/"]));
    ok(tomus(&addr, &["fs", "cp", "-r", "/d/a", "/c/a"]));
    let new = pattern::generate(99, 5000);
    let new_file = src.join("new");
    std::fs::write(&new_file, &new).unwrap();
    ok(tomus(&addr, &["fs", "put", s(&new_file), "/d/y.csv"]));
    ok(tomus(
        &addr,
        &["fs", "put", s(&new_file), "/d/a/b/deep.bin"],
    ));
    assert_eq!(ok(tomus(&addr, &["fs", "cat", "/d/y.csv"])), new);
    assert_eq!(ok(tomus(&addr, &["fs", "cat", "/c/y.csv"])), file("y.csv"));
    assert_eq!(
        ok(tomus(&addr, &["fs", "cat", "/c/a/b/deep.bin"])),
        file("a/b/deep.bin")
    );
    // ... and the copy's overwrite leaves the source alone.
    ok(tomus(&addr, &["fs", "put", s(&new_file), "/c/a/p.csv"]));
    assert_eq!(
        ok(tomus(&addr, &["fs", "cat", "/d/a/p.csv"])),
        file("a/p.csv")
    );
    let mut c_model = BTreeMap::from([
        ("/c/y.csv".to_string(), Some(200_000)),
        ("/c/z.txt".to_string(), Some(0)),
        ("/c/a".to_string(), None),
        ("/c/a/b".to_string(), None),
        ("/c/a/p.csv".to_string(), Some(5000)),
        ("/c/a/q.txt".to_string(), Some(10)),
        ("/c/a/b/deep.bin".to_string(), Some(300_001)),
    ]);
    assert_eq!(listing(&addr, "/c"), c_model);
    assert_eq!(
        tomus(&addr, &["fs", "cp", "/d/a", "/c/x"]).status.code(),
        Some(2)
    );

    // rm with patterns and several paths.
    ok(tomus(&addr, &["fs", "rm", "/d/*.txt", "/c/z.txt"]));
    model.remove("/d/z.txt");
    model.insert("/d/y.csv".into(), Some(5000));
    model.insert("/d/a/b/deep.bin".into(), Some(5000));
    c_model.remove("/c/z.txt");
    assert_eq!(listing(&addr, "/d"), model);
    assert_eq!(listing(&addr, "/c"), c_model);

    // Two matches of one name cannot both go into one local directory: nothing is written.
    let clash = tc.dir.join("local/clash");
    let out = tomus(&addr, &["fs", "get", "/[cd]/y.csv", s(&clash)]);
    assert_eq!(out.status.code(), Some(2));
    assert!(!clash.exists());
}

#[test]
fn versions_head_tail_and_get_into_a_directory() {
    let tc = TestCluster::start(2);
    let addr = tc.addr();
    let local = scratch(&tc, "v");
    let contents: Vec<Vec<u8>> = [3000, 70_000, 10, 5000]
        .iter()
        .enumerate()
        .map(|(i, &n)| pattern::generate(pattern::seed(3, i as u64), n))
        .collect();
    // Every version stays (new files keep the last 3 unless their directory says more).
    ok(tomus(&addr, &["fs", "mkdir", "-p", "/v"]));
    let said = ok(tomus(&addr, &["fs", "retention", "/v", "--keep-all"]));
    assert_eq!(
        String::from_utf8(said).unwrap(),
        "/v: each new file below it keeps every version (set on this directory)\n"
    );
    for (i, c) in contents.iter().enumerate() {
        let f = local.join(format!("c{i}"));
        std::fs::write(&f, c).unwrap();
        let out = String::from_utf8(ok(tomus(
            &addr,
            &["fs", "put", s(&f), "/v/f.bin", "--chunk-size", "64KiB"],
        )))
        .unwrap();
        assert!(
            out.starts_with(&format!("put /v/f.bin: version {}, ", i + 1)),
            "{out}"
        );
    }
    // A first write and three overwrites: four versions, each readable.
    let v = json(tomus(&addr, &["fs", "versions", "/v/f.bin", "--json"]));
    let rows = v["versions"].as_array().unwrap();
    assert_eq!(rows.len(), 4);
    let mut last_ms = 0;
    for (i, row) in rows.iter().enumerate() {
        assert_eq!(row["version"], Value::from(i + 1));
        assert_eq!(row["size"], Value::from(contents[i].len()));
        let ms = row["published_ms"].as_u64().unwrap();
        assert!(ms >= last_ms && ms > 0);
        last_ms = ms;
        let n = (i + 1).to_string();
        assert_eq!(
            ok(tomus(&addr, &["fs", "cat", "/v/f.bin", "--version", &n])),
            contents[i]
        );
    }
    assert_eq!(v["retention"], "keeps every version");
    let text = String::from_utf8(ok(tomus(&addr, &["fs", "versions", "tomus://v/f.bin"]))).unwrap();
    assert_eq!(text.lines().count(), 6, "{text}");

    // head and tail: 1 KiB by default, -c, --version, more than the file is the whole file.
    let latest = &contents[3];
    assert_eq!(
        ok(tomus(&addr, &["fs", "head", "/v/f.bin"])),
        latest[..1024]
    );
    assert_eq!(
        ok(tomus(&addr, &["fs", "tail", "/v/f.bin"])),
        latest[latest.len() - 1024..]
    );
    assert_eq!(
        ok(tomus(&addr, &["fs", "head", "-c", "100", "/v/f.bin"])),
        latest[..100]
    );
    let v2 = &contents[1];
    assert_eq!(
        ok(tomus(
            &addr,
            &["fs", "tail", "-c", "65540", "/v/f.bin", "--version", "2"]
        )),
        v2[v2.len() - 65540..]
    );
    assert_eq!(
        ok(tomus(
            &addr,
            &["fs", "tail", "-c", "1MiB", "/v/f.bin", "--version", "3"]
        )),
        contents[2]
    );
    assert_eq!(
        ok(tomus(
            &addr,
            &["fs", "head", "-c", "1MiB", "/v/f.bin", "--version", "3"]
        )),
        contents[2]
    );
    assert_eq!(tomus(&addr, &["fs", "head", "/v"]).status.code(), Some(2));

    // get F DIR/ (made when missing), get F . and get F into an existing directory.
    let d = local.join("new-dir");
    let with_slash = format!("{}/", s(&d));
    ok(tomus(&addr, &["fs", "get", "/v/f.bin", &with_slash]));
    assert_eq!(std::fs::read(d.join("f.bin")).unwrap(), *latest);
    let cwd = scratch(&tc, "cwd");
    ok(tomus_in(
        &addr,
        Some(&cwd),
        &["fs", "get", "/v/f.bin", ".", "--version", "1"],
    ));
    assert_eq!(std::fs::read(cwd.join("f.bin")).unwrap(), contents[0]);
    let row = json(tomus(
        &addr,
        &["fs", "get", "/v/f.bin", s(&local), "--json"],
    ));
    assert_eq!(
        (row["version"].as_u64(), row["size"].as_u64()),
        (Some(4), Some(5000))
    );
    assert_eq!(std::fs::read(local.join("f.bin")).unwrap(), *latest);
    // To a file name and to stdout as before.
    ok(tomus(
        &addr,
        &["fs", "get", "/v/f.bin", s(&local.join("named"))],
    ));
    assert_eq!(std::fs::read(local.join("named")).unwrap(), *latest);
    assert_eq!(ok(tomus(&addr, &["fs", "get", "/v/f.bin"])), *latest);
}

#[test]
fn urls_unclean_paths_and_json_errors() {
    let tc = TestCluster::start(1);
    let addr = tc.addr();
    let local = scratch(&tc, "u");
    let f = local.join("x.csv");
    std::fs::write(&f, b"a,b\n1,2\n").unwrap();

    // tomus://x/y.csv is /x/y.csv, wherever a path is taken.
    let out =
        String::from_utf8(ok(tomus(&addr, &["fs", "put", s(&f), "tomus://x/y.csv"]))).unwrap();
    assert_eq!(out.trim(), "put /x/y.csv: version 1, 8 B");
    assert_eq!(ok(tomus(&addr, &["fs", "cat", "/x/y.csv"])), b"a,b\n1,2\n");
    assert_eq!(
        ok(tomus(&addr, &["fs", "cat", "tomus://x/y.csv"])),
        b"a,b\n1,2\n"
    );
    ok(tomus(&addr, &["fs", "mkdir", "-p", "tomus://m/n"]));
    ok(tomus(
        &addr,
        &["fs", "cp", "tomus://x/y.csv", "tomus://m/n/"],
    ));
    ok(tomus(
        &addr,
        &["fs", "mv", "tomus://m/n/y.csv", "tomus://m/z.csv"],
    ));
    let stat = json(tomus(&addr, &["fs", "stat", "tomus://m/z.csv", "--json"]));
    assert_eq!(stat["path"], "/m/z.csv");
    let appended = json(tomus(
        &addr,
        &["fs", "put", "--append", s(&f), "tomus://m/z.csv", "--json"],
    ));
    assert_eq!(
        (
            appended["version"].as_u64(),
            appended["offset"].as_u64(),
            appended["size"].as_u64()
        ),
        (Some(2), Some(8), Some(8))
    );
    let out = String::from_utf8(ok(tomus(
        &addr,
        &["fs", "put", "--append", s(&f), "/m/z.csv"],
    )))
    .unwrap();
    assert_eq!(out.trim(), "append /m/z.csv: version 3 at offset 16, 8 B");
    let model = BTreeMap::from([
        ("/m".to_string(), None),
        ("/m/n".to_string(), None),
        ("/m/z.csv".to_string(), Some(24)),
        ("/x".to_string(), None),
        ("/x/y.csv".to_string(), Some(8)),
    ]);
    assert_eq!(listing(&addr, "tomus://"), model);

    // Unclean paths and other schemes: refused with rc 2, nothing created.
    for bad in [
        "a//b.csv",
        "/a/./b.csv",
        "/a/../b.csv",
        "//a",
        "s3://bucket/key.csv",
        "file:///tmp/x.csv",
        "tomus:/x/y.csv",
        "https://host/x.csv",
    ] {
        for args in [
            vec!["fs", "put", s(&f), bad],
            vec!["fs", "mkdir", "-p", bad],
            vec!["fs", "cp", "/x/y.csv", bad],
            vec!["fs", "mv", "/x/y.csv", bad],
            vec!["fs", "ls", bad],
            vec!["fs", "rm", "-r", bad],
        ] {
            let out = tomus(&addr, &args);
            assert_eq!(out.status.code(), Some(2), "{args:?}");
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(
                err.contains("tomus paths are") || err.contains("not clean"),
                "{err}"
            );
        }
    }
    assert_eq!(listing(&addr, "/"), model);

    // Errors under --json: one JSON object on stderr, the same exit codes, nothing on stdout.
    for (args, code, kind) in [
        (vec!["fs", "stat", "/nope", "--json"], 3, "NotFound"),
        (
            vec!["fs", "put", s(&f), "s3://b/k", "--json"],
            2,
            "InvalidArgument",
        ),
        (vec!["fs", "rm", "/m", "--json"], 2, "NotEmpty"),
        (vec!["fs", "cat", "/m", "--json"], 2, "IsADirectory"),
        (vec!["fs", "ls", "/m/*.parquet", "--json"], 3, "NotFound"),
        (
            vec!["fs", "put", "/no/such/local/file", "/q", "--json"],
            1,
            "Io",
        ),
    ] {
        let out = tomus(&addr, &args);
        assert_eq!(out.status.code(), Some(code), "{args:?}");
        assert!(out.stdout.is_empty(), "{args:?}");
        let err: Value = serde_json::from_slice(&out.stderr).unwrap();
        assert_eq!(err["error"]["kind"], kind, "{args:?}: {err}");
        assert!(!err["error"]["message"].as_str().unwrap().is_empty());
    }
    assert_eq!(
        tomus("127.0.0.1:1", &["fs", "ls", "--json"]).status.code(),
        Some(4)
    );
    // A usage error of a command that asked for JSON is JSON as well.
    let out = tomus(&addr, &["fs", "ls", "--json", "--no-such-flag"]);
    assert_eq!(out.status.code(), Some(2));
    let err: Value = serde_json::from_slice(&out.stderr).unwrap();
    assert_eq!(err["error"]["kind"], "InvalidArgument");
    assert!(err["error"]["message"]
        .as_str()
        .unwrap()
        .contains("--no-such-flag"));
    assert_eq!(listing(&addr, "/"), model);
}
