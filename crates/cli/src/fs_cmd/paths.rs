//! Paths as users type them: `tomus://a/b`, `/a/b` and `a/b` name the same file; anything
//! that is not a clean path (empty components, `.`/`..`, NUL, another URL scheme) is refused
//! before anything is asked or created. Patterns (`*`, `?`, `[...]` within one component) are
//! matched against directory listings.

use tomus_client::Namespace;
use tomus_wire::{EntryKind, Error, ErrorKind, FsEntry, Result};

const SCHEME: &str = "tomus://";

/// The normalized form of a path argument (components joined by `/`, `""` for the root), or
/// an `InvalidArgument` error saying what is wrong with it. Glob characters are kept as they
/// are: this is the form for paths that name something to create.
pub fn clean(arg: &str) -> Result<String> {
    Ok(components(arg)?.join("/"))
}

/// The clean components of a path argument.
fn components(arg: &str) -> Result<Vec<&str>> {
    let unclean = |why: &str| Error::invalid(format!("path {arg:?} is not clean: {why}"));
    if arg.contains('\0') {
        return Err(unclean("it contains a NUL byte"));
    }
    let rest = strip_scheme(arg)?;
    let rest = rest.strip_prefix('/').unwrap_or(rest);
    let rest = rest.strip_suffix('/').unwrap_or(rest);
    if rest.is_empty() {
        return Ok(Vec::new());
    }
    rest.split('/')
        .map(|c| match c {
            "" => Err(unclean("it has an empty component (\"//\")")),
            "." | ".." => Err(unclean("'.' and '..' are not allowed")),
            c => Ok(c),
        })
        .collect()
}

/// `arg` without its `tomus://` scheme; other schemes (`s3://`, `file:/`) are refused.
fn strip_scheme(arg: &str) -> Result<&str> {
    if arg.len() >= SCHEME.len() && arg[..SCHEME.len()].eq_ignore_ascii_case(SCHEME) {
        return Ok(&arg[SCHEME.len()..]);
    }
    let scheme_len = arg
        .find(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.')))
        .unwrap_or(0);
    let starts_alpha = arg.starts_with(|c: char| c.is_ascii_alphabetic());
    if starts_alpha && scheme_len > 0 && arg[scheme_len..].starts_with(":/") {
        let scheme = &arg[..scheme_len];
        return Err(Error::invalid(format!(
            "path {arg:?} is a {scheme}: URL; tomus paths are /dir/file or tomus://dir/file \
             (local files are named without a scheme)"
        )));
    }
    Ok(arg)
}

/// `/path` for a normalized path (`/` for the root).
pub fn display(path: &str) -> String {
    format!("/{path}")
}

/// The last component of a normalized path (`""` for the root).
pub fn base_name(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

/// `dir/name` for a normalized directory path.
pub fn join(dir: &str, name: &str) -> String {
    if dir.is_empty() {
        name.to_string()
    } else {
        format!("{dir}/{name}")
    }
}

/// `path` relative to the directory `dir` (both normalized; `path` below `dir`).
pub fn relative<'a>(dir: &str, path: &'a str) -> &'a str {
    if dir.is_empty() {
        return path;
    }
    path.strip_prefix(dir)
        .and_then(|r| r.strip_prefix('/'))
        .unwrap_or(path)
}

/// Whether a path argument ends with `/` (names a directory to put things into).
pub fn dir_syntax(arg: &str) -> bool {
    arg.ends_with('/') || strip_scheme(arg).is_ok_and(str::is_empty)
}

fn has_glob(component: &str) -> bool {
    let mut escaped = false;
    for c in component.chars() {
        match c {
            _ if escaped => escaped = false,
            '\\' => escaped = true,
            '*' | '?' | '[' => return true,
            _ => {}
        }
    }
    false
}

/// A literal component with its backslash escapes removed.
fn unescape(component: &str) -> String {
    let mut out = String::with_capacity(component.len());
    let mut chars = component.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => out.extend(chars.next()),
            c => out.push(c),
        }
    }
    out
}

/// Whether `name` matches the shell pattern `pattern` (`*`, `?`, `[abc]`, `[a-z]`, `[!a]`,
/// `\x` for a literal x). Like the shell, a leading `.` is matched only by a literal `.`.
pub fn glob_match(pattern: &str, name: &str) -> bool {
    let p: Vec<char> = pattern.chars().collect();
    let n: Vec<char> = name.chars().collect();
    if n.first() == Some(&'.') && p.first() != Some(&'.') {
        return false;
    }
    match_from(&p, &n)
}

fn match_from(p: &[char], n: &[char]) -> bool {
    // Iterative with one backtrack point for the last `*`: linear in practice.
    let (mut pi, mut ni) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while ni < n.len() {
        let step = match p.get(pi) {
            Some('*') => {
                star = Some((pi, ni));
                pi += 1;
                continue;
            }
            Some('?') => Some(pi + 1),
            Some('[') => match class(&p[pi..], n[ni]) {
                Some((true, len)) => Some(pi + len),
                Some((false, _)) => None,
                // An unclosed `[` is a literal.
                None => (n[ni] == '[').then_some(pi + 1),
            },
            Some('\\') if pi + 1 < p.len() => (p[pi + 1] == n[ni]).then_some(pi + 2),
            Some(&c) => (c == n[ni]).then_some(pi + 1),
            None => None,
        };
        match (step, star) {
            (Some(next), _) => {
                pi = next;
                ni += 1;
            }
            (None, Some((sp, sn))) => {
                pi = sp + 1;
                ni = sn + 1;
                star = Some((sp, sn + 1));
            }
            (None, None) => return false,
        }
    }
    p[pi..].iter().all(|&c| c == '*')
}

/// Matches `c` against the class at the start of `p` (`[...]`): whether it matched, and the
/// class's length; `None` when the class is not closed.
fn class(p: &[char], c: char) -> Option<(bool, usize)> {
    let mut i = 1;
    let negate = matches!(p.get(i), Some('!' | '^'));
    if negate {
        i += 1;
    }
    let mut matched = false;
    let mut first = true;
    loop {
        let lo = *p.get(i)?;
        if lo == ']' && !first {
            return Some((matched != negate, i + 1));
        }
        first = false;
        if p.get(i + 1) == Some(&'-') && p.get(i + 2).is_some_and(|&hi| hi != ']') {
            let hi = p[i + 2];
            matched |= lo <= c && c <= hi;
            i += 3;
        } else {
            matched |= lo == c;
            i += 1;
        }
    }
}

/// What a path argument names: the entry itself, or every entry its pattern matches, in path
/// order. A pattern that matches nothing is a `NotFound` error.
pub async fn resolve(ns: &Namespace, arg: &str) -> Result<Vec<FsEntry>> {
    let parts = components(arg)?;
    if !parts.iter().any(|c| has_glob(c)) {
        let path: Vec<String> = parts.iter().map(|c| unescape(c)).collect();
        return Ok(vec![ns.stat(&path.join("/")).await?]);
    }
    // Candidates so far: a path and, when a listing produced it, its entry.
    let mut found: Vec<(String, Option<FsEntry>)> = vec![(String::new(), None)];
    for part in parts {
        let mut next = Vec::new();
        for (dir, entry) in found {
            if entry.is_some_and(|e| e.kind == EntryKind::File) {
                continue;
            }
            if !has_glob(part) {
                next.push((join(&dir, &unescape(part)), None));
                continue;
            }
            let children = match ns.list(&dir).await {
                Ok(c) => c,
                Err(e) if matches!(e.kind, ErrorKind::NotFound | ErrorKind::NotADirectory) => {
                    continue
                }
                Err(e) => return Err(e),
            };
            next.extend(
                children
                    .into_iter()
                    .filter(|e| glob_match(part, base_name(&e.path)))
                    .map(|e| (e.path.clone(), Some(e))),
            );
        }
        found = next;
    }
    let mut out = Vec::with_capacity(found.len());
    for (path, entry) in found {
        match entry {
            Some(e) => out.push(e),
            None => match ns.stat(&path).await {
                Ok(e) => out.push(e),
                Err(e) if matches!(e.kind, ErrorKind::NotFound | ErrorKind::NotADirectory) => {}
                Err(e) => return Err(e),
            },
        }
    }
    if out.is_empty() {
        return Err(Error::not_found(format!("no path matches {arg}")));
    }
    out.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(out)
}

/// The one entry a path argument names; a pattern must match exactly one.
pub async fn resolve_one(ns: &Namespace, arg: &str) -> Result<FsEntry> {
    let mut found = resolve(ns, arg).await?;
    match found.pop() {
        Some(e) if found.is_empty() => Ok(e),
        _ => Err(Error::invalid(format!(
            "{arg} matches {} paths; this command takes one",
            found.len() + 1
        ))),
    }
}

/// The one file a path argument names.
pub async fn resolve_file(ns: &Namespace, arg: &str) -> Result<FsEntry> {
    let e = resolve_one(ns, arg).await?;
    match e.kind {
        EntryKind::File => Ok(e),
        EntryKind::Registered => Err(Error::invalid(format!(
            "{} is a registered file: read it whole with `tomus fs get` or `cat`",
            display(&e.path)
        ))),
        EntryKind::Dir => Err(Error::new(
            ErrorKind::IsADirectory,
            format!("{} is a directory", display(&e.path)),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_and_clean_paths() {
        for (arg, want) in [
            ("tomus://x/y.csv", "x/y.csv"),
            ("/x/y.csv", "x/y.csv"),
            ("x/y.csv", "x/y.csv"),
            ("TOMUS://x/", "x"),
            ("tomus:///x", "x"),
            ("tomus://", ""),
            ("/", ""),
            ("/d/*.csv", "d/*.csv"),
            ("/a:b/c", "a:b/c"),
        ] {
            assert_eq!(clean(arg).ok().as_deref(), Some(want), "{arg}");
        }
        for arg in [
            "a//b",
            "//a",
            "/a/./b",
            "/a/../b",
            "..",
            "a\0b",
            "s3://bucket/key",
            "file:///tmp/x",
            "file:/tmp/x",
            "tomus:/x",
            "https://example.com/x",
        ] {
            let e = clean(arg).err().map(|e| e.kind);
            assert_eq!(e, Some(ErrorKind::InvalidArgument), "{arg:?}");
        }
    }

    #[test]
    fn globs() {
        let yes = [
            ("*.csv", "a.csv"),
            ("*", "x"),
            ("a?c", "abc"),
            ("[ab]x", "bx"),
            ("[a-c]*", "cat"),
            ("[!a]x", "bx"),
            ("*a*b*", "xaxxbx"),
            ("\\*", "*"),
            (".*", ".hidden"),
            ("[]]", "]"),
            ("a[", "a["),
        ];
        for (p, n) in yes {
            assert!(glob_match(p, n), "{p} {n}");
        }
        let no = [
            ("*.csv", "a.csv.gz"),
            ("a?c", "ac"),
            ("[ab]x", "cx"),
            ("[!a]x", "ax"),
            ("*", ".hidden"),
            ("\\*", "a"),
            ("x", "xy"),
        ];
        for (p, n) in no {
            assert!(!glob_match(p, n), "{p} {n}");
        }
        assert!(has_glob("a*"));
        assert!(!has_glob("a\\*"));
        assert_eq!(unescape("a\\*b"), "a*b");
    }
}
