//! `tomus fs ...`: the hierarchical namespace from the command line.
//!
//! Every path argument is `/dir/file`, `dir/file` or `tomus://dir/file`, checked to be clean
//! before anything is asked or created (`paths.rs`, also patterns). `put` and `get` of files
//! and trees live in `tree.rs`, listings, `du` and `versions` in `info.rs`.

/// `ls`, `stat`, `du`, `versions`.
mod info;
/// Clean paths, `tomus://` URLs and patterns.
pub mod paths;
/// `register` and `persist`: files registered in place on their holders (workflows).
mod registered;
/// `retention`: a file's policy, or the one a directory gives new files below it.
mod retention;
/// `put` and `get`, of one file or of a directory tree.
mod tree;

use std::path::PathBuf;

use anyhow::Result;
use clap::Subcommand;
use serde_json::json;
use tomus_client::{Client, CreateOptions, Namespace};
use tomus_wire::{EntryKind, Error, ErrorKind};

use crate::size::{format_size, parse_size};
use crate::transfer::copy_range;
use paths::{base_name, clean, dir_syntax, display, join, relative, resolve, resolve_file};

const PATHS: &str = "Paths are /dir/file, dir/file or tomus://dir/file. Where several \
paths make sense (get, cat, ls, du, rm, stat), a path may hold the patterns *, ? and [...] \
within a component (quote them from the shell), matched against the listings; commands that \
take one file accept a pattern that matches one. Errors under --json are one JSON object on \
stderr ({\"error\": {\"kind\": ..., \"message\": ...}}) with the same exit codes.";

#[derive(Subcommand)]
#[command(after_help = PATHS)]
pub enum FsCommand {
    /// Upload LOCAL (or stdin with `-`) to PATH; an existing file gets it as a new version.
    /// PATH that is a directory (or ends with `/`) receives LOCAL under its own name. Prints
    /// the path, version and size (and, with --append, the offset it landed at).
    Put {
        /// Local file, `-` for stdin, or a directory with -r.
        local: PathBuf,
        /// Destination path in tomus (missing parent directories are created).
        path: String,
        /// Upload a local directory and everything below it (into PATH/NAME when PATH is an
        /// existing directory, else as PATH).
        #[arg(short, long)]
        recursive: bool,
        /// Append to the file instead of replacing its content (concurrent appends are safe).
        #[arg(long)]
        append: bool,
        /// Chunk size of a new file.
        #[arg(long, default_value = "4MiB", value_parser = parse_size)]
        chunk_size: u64,
        /// Replicas of a new file's chunks and metadata.
        #[arg(long, default_value_t = 1)]
        replication: u32,
        /// Storage class of a new file: `disk`, or `memory` (chunks kept in the RAM of
        /// `--replication` providers; fails with NoSpace when their memory class is full).
        #[arg(long, default_value = "disk", value_parser = crate::size::parse_storage)]
        storage: tomus_wire::StorageClass,
    },
    /// Download PATH to LOCAL (default: stdout). LOCAL that is a directory (or ends with `/`)
    /// receives the file under its own name (`get F .`); with -r, directories come with
    /// everything below them; a pattern gets every match into the directory LOCAL.
    Get {
        path: String,
        /// Local file or directory to write; `-` or nothing: stdout.
        local: Option<PathBuf>,
        /// Version to read (default: the latest; `tomus fs versions PATH` lists them).
        #[arg(long)]
        version: Option<u64>,
        /// Download directories with everything below them.
        #[arg(short, long)]
        recursive: bool,
    },
    /// Print a file's bytes (or a range of them); a pattern prints every matching file.
    Cat {
        path: String,
        /// Version to read (default: the latest; `tomus fs versions PATH` lists them).
        #[arg(long)]
        version: Option<u64>,
        #[arg(long, default_value = "0", value_parser = parse_size)]
        offset: u64,
        #[arg(long, value_parser = parse_size)]
        size: Option<u64>,
    },
    /// Print the first bytes of a file.
    Head {
        path: String,
        /// How many bytes.
        #[arg(short = 'c', long, default_value = "1KiB", value_parser = parse_size)]
        bytes: u64,
        /// Version to read (default: the latest).
        #[arg(long)]
        version: Option<u64>,
    },
    /// Print the last bytes of a file.
    Tail {
        path: String,
        /// How many bytes.
        #[arg(short = 'c', long, default_value = "1KiB", value_parser = parse_size)]
        bytes: u64,
        /// Version to read (default: the latest).
        #[arg(long)]
        version: Option<u64>,
    },
    /// List a directory (default: the root); a file lists itself.
    Ls {
        #[arg(default_value = "/")]
        path: String,
        /// Everything below the directory.
        #[arg(short, long)]
        recursive: bool,
    },
    /// Show a file or directory: kind, size, version, blob.
    Stat { path: String },
    /// Bytes and files below each entry of a directory (latest versions), or below PATH
    /// itself with -s.
    Du {
        #[arg(default_value = "/")]
        path: String,
        /// One total for PATH.
        #[arg(short, long)]
        summarize: bool,
    },
    /// List a file's versions (those its retention keeps) with size and publication time.
    Versions { path: String },
    /// Copy a file without copying data (like S3 CopyObject: the copy refers to the same
    /// stored chunks); the two are independent from then on. DST that is a directory (or ends
    /// with `/`) receives SRC under its own name.
    Cp {
        src: String,
        dst: String,
        /// Version of SRC to copy (default: the latest).
        #[arg(long)]
        version: Option<u64>,
        /// Copy a directory with everything below it.
        #[arg(short, long)]
        recursive: bool,
    },
    /// Make a directory.
    Mkdir {
        path: String,
        /// Also make missing parents; an existing directory is fine.
        #[arg(short, long)]
        parents: bool,
    },
    /// Remove files, or directories with -r.
    Rm {
        #[arg(required = true)]
        paths: Vec<String>,
        #[arg(short, long)]
        recursive: bool,
    },
    /// Move (rename) a file or a directory tree; an existing file at DST is replaced. DST
    /// that is a directory (or ends with `/`) receives SRC under its own name.
    Mv { src: String, dst: String },
    /// Show or set which versions are kept. On a directory: the policy the files created
    /// below it from now on get (files already there keep theirs; directories below without
    /// a policy of their own follow it); new files get the nearest one set above them, or
    /// keep the last 3 versions when none is. On a file: its own policy, applied at once.
    /// With no policy: prints the one in effect and where it comes from.
    Retention(retention::RetentionArgs),
    /// Share the local file LOCAL as PATH without copying it (workflows): a provider of
    /// this host hard-links it into its data directory (LOCAL must be on the same file
    /// system) and the manager records it, in O(1) whatever its size. The file is immutable
    /// from then on; readers fetch it from its holders. Prints the path.
    Register {
        local: PathBuf,
        path: String,
        /// The provider to hold it (default: the first one of this host that can link it).
        #[arg(long)]
        provider: Option<String>,
        /// A transfer hint KEY=VALUE recorded with the file (repeatable).
        #[arg(long = "hint", value_parser = parse_hint)]
        hints: Vec<(String, String)>,
    },
    /// Turn a registered file into an ordinary striped, replicated file at the same path
    /// (durable beyond its holders).
    Persist {
        path: String,
        #[arg(long, default_value = "4MiB", value_parser = parse_size)]
        chunk_size: u64,
        #[arg(long, default_value_t = 1)]
        replication: u32,
    },
}

fn parse_hint(s: &str) -> std::result::Result<(String, String), String> {
    s.split_once('=')
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .ok_or_else(|| format!("a hint is KEY=VALUE, not {s:?}"))
}

/// The registered file a path argument names, if it names exactly one.
async fn registered_one(ns: &Namespace, arg: &str) -> Result<Option<tomus_wire::FsEntry>> {
    let found = resolve(ns, arg).await?;
    Ok(match found.as_slice() {
        [e] if e.kind == EntryKind::Registered => Some(e.clone()),
        _ => None,
    })
}

pub async fn run(client: &Client, json_out: bool, cmd: FsCommand) -> Result<()> {
    let ns = client.namespace();
    match cmd {
        FsCommand::Put {
            local,
            path,
            recursive,
            append,
            chunk_size,
            replication,
            storage,
        } => {
            let options = CreateOptions {
                chunk_size,
                replication,
                exclusive: false,
            };
            let a = tree::PutArgs {
                local,
                path,
                append,
                recursive,
                options,
                storage,
            };
            tree::put(&ns, json_out, a).await?
        }
        FsCommand::Get {
            path,
            local,
            version,
            recursive,
        } => match registered_one(&ns, &path).await? {
            Some(e) if version.is_none() => match local.filter(|l| l.as_os_str() != "-") {
                Some(l) => {
                    let target = if l.is_dir() {
                        l.join(base_name(&e.path))
                    } else {
                        l
                    };
                    let row = registered::get_file(client, &e, &target).await?;
                    if json_out {
                        outln!("{row}")?;
                    }
                }
                None => registered::cat(client, &e).await?,
            },
            _ => tree::get(&ns, json_out, &path, local.as_deref(), version, recursive).await?,
        },
        FsCommand::Cat {
            path,
            version,
            offset,
            size,
        } => match registered_one(&ns, &path).await? {
            Some(e) if version.is_none() && offset == 0 && size.is_none() => {
                registered::cat(client, &e).await?
            }
            _ => cat(&ns, &path, version, offset, size).await?,
        },
        FsCommand::Head {
            path,
            bytes,
            version,
        } => {
            let (_, blob) = ns.open(&resolve_file(&ns, &path).await?.path).await?;
            let info = blob.stat(version).await?;
            let size = bytes.min(info.size);
            let out = &mut std::io::stdout().lock();
            copy_range(&blob, Some(info.version), 0, Some(size), out).await?;
        }
        FsCommand::Tail {
            path,
            bytes,
            version,
        } => {
            let (_, blob) = ns.open(&resolve_file(&ns, &path).await?.path).await?;
            let info = blob.stat(version).await?;
            let from = info.size.saturating_sub(bytes);
            let out = &mut std::io::stdout().lock();
            copy_range(&blob, Some(info.version), from, None, out).await?;
        }
        FsCommand::Ls { path, recursive } => info::ls(&ns, json_out, &path, recursive).await?,
        FsCommand::Stat { path } => info::stat(&ns, json_out, &path).await?,
        FsCommand::Du { path, summarize } => info::du(&ns, json_out, &path, summarize).await?,
        FsCommand::Versions { path } => info::versions(&ns, json_out, &path).await?,
        FsCommand::Cp {
            src,
            dst,
            version,
            recursive,
        } => cp(&ns, json_out, &src, &dst, version, recursive).await?,
        FsCommand::Mkdir { path, parents } => {
            let e = ns.mkdir(&clean(&path)?, parents).await?;
            if json_out {
                outln!("{}", info::entry_json(&e))?;
            }
        }
        FsCommand::Rm { paths, recursive } => {
            for p in &paths {
                clean(p)?;
            }
            for p in &paths {
                for e in resolve(&ns, p).await? {
                    ns.delete(&e.path, recursive).await?;
                }
            }
        }
        FsCommand::Retention(a) => retention::run(&ns, json_out, a).await?,
        FsCommand::Register {
            local,
            path,
            provider,
            hints,
        } => {
            registered::register(client, json_out, &local, &clean(&path)?, provider, hints).await?
        }
        FsCommand::Persist {
            path,
            chunk_size,
            replication,
        } => {
            let options = CreateOptions {
                chunk_size,
                replication,
                exclusive: false,
            };
            registered::persist(&ns, json_out, &clean(&path)?, options).await?
        }
        FsCommand::Mv { src, dst } => {
            let from = clean(&src)?;
            let to = into_dir(&ns, &dst, &from).await?;
            ns.rename(&from, &to).await?;
        }
    }
    Ok(())
}

/// The clean form of the destination `arg` for the source `src`: `arg/NAME` when `arg` is an
/// existing directory or ends with `/`, else `arg` itself.
async fn into_dir(ns: &Namespace, arg: &str, src: &str) -> Result<String> {
    let dst = clean(arg)?;
    let is_dir = match ns.stat(&dst).await {
        Ok(e) => e.kind == EntryKind::Dir,
        Err(e) if matches!(e.kind, ErrorKind::NotFound | ErrorKind::NotADirectory) => false,
        Err(e) => return Err(e.into()),
    };
    if (is_dir || dir_syntax(arg)) && !src.is_empty() {
        Ok(join(&dst, base_name(src)))
    } else {
        Ok(dst)
    }
}

async fn cat(
    ns: &Namespace,
    arg: &str,
    version: Option<u64>,
    offset: u64,
    size: Option<u64>,
) -> Result<()> {
    let files = resolve(ns, arg).await?;
    if files.len() > 1 && (version.is_some() || offset > 0 || size.is_some()) {
        return Err(Error::invalid(format!(
            "{arg} matches {} files: --version, --offset and --size need a single file",
            files.len()
        ))
        .into());
    }
    // Refuse a directory among the matches before printing anything.
    if let Some(d) = files.iter().find(|e| e.kind == EntryKind::Dir) {
        return Err(Error::new(
            ErrorKind::IsADirectory,
            format!("{} is a directory", display(&d.path)),
        )
        .into());
    }
    let out = &mut std::io::stdout().lock();
    for f in files {
        let (_, blob) = ns.open(&f.path).await?;
        copy_range(&blob, version, offset, size, out).await?;
    }
    Ok(())
}

/// `cp [-r] SRC DST`: metadata-only copies of a file, or of every file below a directory.
async fn cp(
    ns: &Namespace,
    json_out: bool,
    src: &str,
    dst: &str,
    version: Option<u64>,
    recursive: bool,
) -> Result<()> {
    clean(dst)?;
    let from = paths::resolve_one(ns, src).await?;
    let to = into_dir(ns, dst, &from.path).await?;
    let mut pairs = Vec::new();
    match from.kind {
        EntryKind::File => pairs.push((from.path.clone(), to)),
        EntryKind::Registered => return Err(registered::no_copy(&from.path).into()),
        EntryKind::Dir if !recursive => {
            return Err(Error::new(
                ErrorKind::IsADirectory,
                format!("{} is a directory: use cp -r", display(&from.path)),
            )
            .into())
        }
        EntryKind::Dir if version.is_some() => {
            return Err(Error::invalid("--version needs a single file").into())
        }
        EntryKind::Dir => {
            if to == from.path || to.starts_with(&format!("{}/", from.path)) || from.path.is_empty()
            {
                return Err(Error::invalid(format!(
                    "cannot copy {} into itself",
                    display(&from.path)
                ))
                .into());
            }
            ns.mkdir(&to, true).await?;
            for e in ns.walk(&from.path).await? {
                let target = join(&to, relative(&from.path, &e.path));
                match e.kind {
                    EntryKind::Dir => {
                        ns.mkdir(&target, true).await?;
                    }
                    EntryKind::File => pairs.push((e.path, target)),
                    EntryKind::Registered => return Err(registered::no_copy(&e.path).into()),
                }
            }
        }
    }
    let mut rows = Vec::new();
    for (from, to) in pairs {
        let info = ns.copy(&from, &to, version).await?;
        if json_out {
            rows.push(json!({"from": display(&from), "path": display(&to),
                             "version": info.version, "size": info.size}));
        } else {
            outln!(
                "copied {} to {}: version {}, {}",
                display(&from),
                display(&to),
                info.version,
                format_size(info.size)
            )?;
        }
    }
    if json_out {
        match rows.pop() {
            Some(row) if rows.is_empty() && !recursive => outln!("{row}")?,
            last => {
                rows.extend(last);
                outln!("{}", serde_json::Value::Array(rows))?;
            }
        }
    }
    Ok(())
}
