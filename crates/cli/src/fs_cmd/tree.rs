//! `put` and `get`: one file or, with `-r`, a directory tree, between the local disk and the
//! namespace. A destination that is a directory (or ends with `/`) receives the source under
//! its own name, as `cp` does.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde_json::{json, Value};
use tomus_client::{Append, Blob, CommitOptions, CreateOptions, Namespace, Replace};
use tomus_wire::{EntryKind, Error, ErrorKind, FsEntry, StorageClass};

use super::paths::{base_name, clean, dir_syntax, display, join, relative, resolve};
use crate::size::format_size;
use crate::transfer::{copy_range_as, fill_writer_as, open_input, Tally};

/// What `put` was asked to do.
pub struct PutArgs {
    pub local: PathBuf,
    pub path: String,
    pub append: bool,
    pub recursive: bool,
    pub options: CreateOptions,
    /// Storage class of new files (existing files keep theirs).
    pub storage: StorageClass,
}

/// One file written: where, which version, where it landed, how many bytes.
pub(super) struct Put {
    path: String,
    version: u64,
    offset: u64,
    bytes: u64,
}

impl Put {
    fn json(&self) -> Value {
        json!({"path": display(&self.path), "version": self.version, "offset": self.offset,
               "size": self.bytes})
    }

    fn line(&self, append: bool) -> String {
        if append {
            format!(
                "append {}: version {} at offset {}, {}",
                display(&self.path),
                self.version,
                self.offset,
                format_size(self.bytes)
            )
        } else {
            format!(
                "put {}: version {}, {}",
                display(&self.path),
                self.version,
                format_size(self.bytes)
            )
        }
    }
}

/// Whether `path` is an existing directory of the namespace.
async fn is_dir(ns: &Namespace, path: &str) -> Result<bool> {
    match ns.stat(path).await {
        Ok(e) => Ok(e.kind == EntryKind::Dir),
        Err(e) if matches!(e.kind, ErrorKind::NotFound | ErrorKind::NotADirectory) => Ok(false),
        Err(e) => Err(e.into()),
    }
}

/// The name a local path is stored under (`.` and `..` are named after what they are).
fn local_name(local: &Path) -> Result<String> {
    let name = match local.file_name() {
        Some(n) => n.to_os_string(),
        None => std::fs::canonicalize(local)
            .with_context(|| format!("cannot read {}", local.display()))?
            .file_name()
            .map(|n| n.to_os_string())
            .unwrap_or_default(),
    };
    name.into_string().map_err(|n| {
        Error::invalid(format!(
            "the local name {n:?} is not UTF-8, which tomus paths are"
        ))
        .into()
    })
}

pub async fn put(ns: &Namespace, json_out: bool, a: PutArgs) -> Result<()> {
    let dst = clean(&a.path)?;
    let stdin = a.local.as_os_str() == "-";
    let local_dir = !stdin
        && std::fs::metadata(&a.local)
            .with_context(|| format!("cannot read {}", a.local.display()))?
            .is_dir();
    if local_dir && !a.recursive {
        return Err(Error::invalid(format!(
            "{} is a directory: use put -r to upload it with everything below it",
            a.local.display()
        ))
        .into());
    }
    if local_dir && a.append {
        return Err(Error::invalid("--append takes one file, not a directory").into());
    }
    let dst_is_dir = is_dir(ns, &dst).await?;
    let mut tally = Tally::default();
    if !local_dir {
        let target = if dst_is_dir || dir_syntax(&a.path) {
            if stdin {
                return Err(Error::invalid(format!(
                    "{} names a directory: name the file to write stdin to",
                    a.path
                ))
                .into());
            }
            join(&dst, &local_name(&a.local)?)
        } else {
            dst
        };
        let done = put_file_in(ns, &a.local, &target, a.append, a.options, a.storage).await?;
        tally.add(done.bytes);
        tally.finish("uploaded", &display(&target));
        if json_out {
            outln!("{}", done.json())?;
        } else {
            outln!("{}", done.line(a.append))?;
        }
        return Ok(());
    }
    let root = if dst_is_dir {
        join(&dst, &local_name(&a.local)?)
    } else {
        dst
    };
    let (dirs, files) = local_tree(&a.local)?;
    ns.mkdir(&root, true).await?;
    for rel in dirs {
        ns.mkdir(&join(&root, &rel), true).await?;
    }
    let mut done = Vec::with_capacity(files.len());
    for (rel, file) in files {
        let p = put_file_in(ns, &file, &join(&root, &rel), false, a.options, a.storage).await?;
        tally.add(p.bytes);
        if !json_out {
            outln!("{}", p.line(false))?;
        }
        done.push(p.json());
    }
    tally.finish("uploaded", &display(&root));
    if json_out {
        outln!("{}", Value::Array(done))?;
    }
    Ok(())
}

/// Writes the local file `local` (`-`: stdin) to `path` as one new version (appended with
/// `append`).
pub(super) async fn put_file(
    ns: &Namespace,
    local: &Path,
    path: &str,
    append: bool,
    options: CreateOptions,
) -> Result<Put> {
    put_file_in(ns, local, path, append, options, StorageClass::Disk).await
}

/// [`put_file`] whose new file is in the storage class `storage`.
pub(super) async fn put_file_in(
    ns: &Namespace,
    local: &Path,
    path: &str,
    append: bool,
    options: CreateOptions,
    storage: StorageClass,
) -> Result<Put> {
    // Checked before the cluster is touched: a bad input leaves nothing behind.
    let (input, size) = open_input(Some(local))?;
    let (entry, blob) = ns.create_in(path, options, None, storage).await?;
    let (version, offset, bytes) = match put_into(&blob, input, size, append, path).await {
        Ok(put) => put,
        Err(e) => {
            // A new file appears only with its first version: give it up now.
            ns.abandon(&entry).await;
            return Err(e);
        }
    };
    Ok(Put {
        path: path.to_string(),
        version,
        offset,
        bytes,
    })
}

/// Streams `input` into one new version of `blob` (a replacement, or an append) with a
/// progress bar named `path`: returns the version, where the data landed and how many bytes
/// it has.
async fn put_into(
    blob: &Blob,
    input: Box<dyn std::io::Read>,
    size: Option<u64>,
    append: bool,
    path: &str,
) -> Result<(u64, u64, u64)> {
    let mut writer = blob.writer();
    fill_writer_as(input, size, &mut writer, &display(path)).await?;
    let bytes = writer.len();
    if !append {
        let replace = Replace { reuse_empty: true };
        let info = writer.commit(replace, &CommitOptions::default()).await?;
        return Ok((info.version, 0, bytes));
    }
    if bytes == 0 {
        // Nothing to append: a new file still gets its (empty) first version, unless a
        // concurrent writer gave it content meanwhile.
        let empty = CommitOptions {
            expect_size: Some(0),
            ..CommitOptions::default()
        };
        if blob.latest().await? == 0 {
            match writer.commit(Replace::default(), &empty).await {
                Ok(info) => return Ok((info.version, 0, 0)),
                Err(e) if e.kind == ErrorKind::PreconditionFailed => {}
                Err(e) => return Err(e.into()),
            }
        }
        return Ok((blob.latest().await?, blob.size(None).await?, 0));
    }
    match writer.commit(Append, &CommitOptions::default()).await? {
        Some(info) => Ok((info.version, info.span.offset, bytes)),
        None => Ok((blob.latest().await?, blob.size(None).await?, bytes)),
    }
}

/// What is below a local directory: its directories, and its files with their local paths,
/// each as a `/`-joined relative path.
type LocalTree = (Vec<String>, Vec<(String, PathBuf)>);

/// The directories and files below the local directory `root`, as `/`-joined relative paths
/// in name order. Symbolic links to files are followed; links to directories are skipped (a
/// link may lead back up the tree).
fn local_tree(root: &Path) -> Result<LocalTree> {
    let mut dirs = Vec::new();
    let mut files = Vec::new();
    let mut stack = vec![(String::new(), root.to_path_buf())];
    while let Some((rel, dir)) = stack.pop() {
        let mut children: Vec<_> = std::fs::read_dir(&dir)
            .with_context(|| format!("cannot read {}", dir.display()))?
            .collect::<std::io::Result<_>>()
            .with_context(|| format!("cannot read {}", dir.display()))?;
        children.sort_by_key(|e| e.file_name());
        for child in children.into_iter().rev() {
            let path = child.path();
            let child_rel = match rel.as_str() {
                "" => local_name(&path)?,
                _ => format!("{rel}/{}", local_name(&path)?),
            };
            let kind = child
                .file_type()
                .with_context(|| format!("cannot read {}", path.display()))?;
            if kind.is_dir() {
                dirs.push(child_rel.clone());
                stack.push((child_rel, path));
            } else if kind.is_file() || std::fs::metadata(&path).is_ok_and(|m| m.is_file()) {
                files.push((child_rel, path));
            } else {
                eprintln!("tomus: skipping {} (not a file)", path.display());
            }
        }
    }
    dirs.sort();
    files.sort();
    Ok((dirs, files))
}

/// The local path of the namespace path `rel` (relative, `/`-joined) under `root`.
fn local_path(root: &Path, rel: &str) -> PathBuf {
    let mut p = root.to_path_buf();
    // The manager keeps paths clean; never step out of `root` should one not be.
    p.extend(rel.split('/').filter(|c| !matches!(*c, "" | "." | "..")));
    p
}

/// Downloads one file to `target`; a failed download leaves no partial file behind.
async fn get_file(
    ns: &Namespace,
    entry: &FsEntry,
    version: Option<u64>,
    target: &Path,
) -> Result<Value> {
    let (_, blob) = ns.open(&entry.path).await?;
    let mut f = std::fs::File::create(target)
        .with_context(|| format!("cannot create {}", target.display()))?;
    match copy_range_as(&blob, version, 0, None, &mut f, &display(&entry.path)).await {
        Ok(info) => Ok(
            json!({"path": display(&entry.path), "local": target.display().to_string(),
                              "version": info.version, "size": info.size}),
        ),
        Err(e) => {
            drop(f);
            let _ = std::fs::remove_file(target);
            Err(e)
        }
    }
}

/// Whether a local path argument names a directory to put things into: an existing
/// directory, or one written with a trailing `/`.
fn local_dir_syntax(local: &Path) -> bool {
    local.is_dir()
        || local
            .as_os_str()
            .to_string_lossy()
            .ends_with(std::path::MAIN_SEPARATOR)
}

fn create_dir(dir: &Path) -> Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))
}

/// `get [-r] PATH [LOCAL]`: one file to LOCAL or stdout, or every match of a pattern and
/// (with `-r`) directory trees into the local directory LOCAL.
pub async fn get(
    ns: &Namespace,
    json_out: bool,
    arg: &str,
    local: Option<&Path>,
    version: Option<u64>,
    recursive: bool,
) -> Result<()> {
    let sources = resolve(ns, arg).await?;
    let single_file = matches!(sources.as_slice(), [e] if e.kind == EntryKind::File);
    if !single_file && version.is_some() {
        return Err(Error::invalid("--version needs a single file").into());
    }
    if let Some(d) = sources.iter().find(|e| e.kind == EntryKind::Dir) {
        if !recursive {
            return Err(Error::new(
                ErrorKind::IsADirectory,
                format!("{} is a directory: use get -r PATH DIR", display(&d.path)),
            )
            .into());
        }
    }
    let Some(local) = local.filter(|l| l.as_os_str() != "-") else {
        return match sources.as_slice() {
            [e] if single_file => {
                let (_, blob) = ns.open(&e.path).await?;
                let mut out = std::io::stdout().lock();
                copy_range_as(&blob, version, 0, None, &mut out, &display(&e.path)).await?;
                Ok(())
            }
            _ => Err(Error::invalid(format!(
                "{arg} names {} paths or a directory: give a local directory to get them into",
                sources.len()
            ))
            .into()),
        };
    };
    let mut tally = Tally::default();
    let mut done = Vec::new();
    let into = local_dir_syntax(local) || sources.len() > 1;
    if into {
        let mut names = std::collections::BTreeSet::new();
        if let Some(e) = sources.iter().find(|e| !names.insert(base_name(&e.path))) {
            return Err(Error::invalid(format!(
                "{arg} matches more than one path named {:?}: they cannot all go into {}",
                base_name(&e.path),
                local.display()
            ))
            .into());
        }
    }
    for src in &sources {
        let target = if into {
            create_dir(local)?;
            local_path(local, base_name(&src.path))
        } else {
            local.to_path_buf()
        };
        if src.kind == EntryKind::File {
            let row = get_file(ns, src, version, &target).await?;
            tally.add(row["size"].as_u64().unwrap_or(0));
            done.push(row);
            continue;
        }
        create_dir(&target)?;
        for e in ns.walk(&src.path).await? {
            let to = local_path(&target, relative(&src.path, &e.path));
            match e.kind {
                EntryKind::Dir => create_dir(&to)?,
                // Holders serve it: fetched directly, verified.
                EntryKind::Registered => {
                    let row = super::registered::get_file(ns.client(), &e, &to).await?;
                    tally.add(row["size"].as_u64().unwrap_or(0));
                    done.push(row);
                }
                EntryKind::File => {
                    let row = get_file(ns, &e, None, &to).await?;
                    tally.add(row["size"].as_u64().unwrap_or(0));
                    done.push(row);
                }
            }
        }
    }
    let first = sources
        .first()
        .map(|e| display(&e.path))
        .unwrap_or_default();
    tally.finish("downloaded", &first);
    if json_out {
        match (single_file, done.pop()) {
            (true, Some(row)) => outln!("{row}")?,
            (_, last) => {
                done.extend(last);
                outln!("{}", Value::Array(done))?;
            }
        }
    }
    Ok(())
}
