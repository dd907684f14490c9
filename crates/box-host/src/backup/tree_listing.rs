//! A listing of a restored `/data` tree (names, kinds, modes, sizes, a SHA-256 of each
//! regular file and symlink target), taken two ways so `box drill` can compare them:
//!
//! * [`of_host_dir`]: a tree the backup engine unpacked on the host (what the chain
//!   restores to);
//! * [`guest_script`] + [`parse_guest`]: a box's `/data`, listed by `find` and `sha256sum`
//!   inside the guest. Its output is the guest's: parsed as hostile data, bounded
//!   ([`MAX_GUEST_BYTES`], [`MAX_ENTRIES`]), never trusted to be well formed.
//!
//! Names are compared as shown (bytes that are not UTF-8 replaced alike on both sides).
//! What a restore or a running box rewrites on its own (see [`compared`]) is left out of
//! both listings, so a difference is the data's.

use std::collections::BTreeMap;
use std::fmt;
use std::io::Read as _;
use std::os::unix::ffi::OsStrExt as _;
use std::os::unix::fs::{FileTypeExt as _, MetadataExt as _};
use std::path::Path;

use anyhow::{Context as _, Result, bail};
use box_proto::archive::excludes;
use box_proto::layout;
use sha2::{Digest, Sha256};

/// Bytes of guest output read at most (the script cuts there too); ~ 3 M entries.
pub const MAX_GUEST_BYTES: usize = 512 << 20;
/// Entries of one listing at most.
pub const MAX_ENTRIES: usize = 2_000_000;

/// What an entry is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    Dir,
    File,
    Symlink,
    /// A fifo, socket or device: no backup holds one, a restore makes none.
    Other,
}

impl Kind {
    fn from_find(c: &str) -> Option<Self> {
        match c {
            "d" => Some(Kind::Dir),
            "f" => Some(Kind::File),
            "l" => Some(Kind::Symlink),
            "p" | "s" | "c" | "b" | "D" => Some(Kind::Other),
            _ => None,
        }
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Kind::Dir => "directory",
            Kind::File => "file",
            Kind::Symlink => "symlink",
            Kind::Other => "special file",
        })
    }
}

/// One entry of a tree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub kind: Kind,
    /// Permission bits: `0o7777` for a directory; `0o777` for a file (box extract as root
    /// drops a file's set-id bits on the host, `hb import` keeps them).
    pub mode: u32,
    /// A regular file's size; 0 for everything else (a directory's size is its file
    /// system's business).
    pub size: u64,
    /// Hex SHA-256 of a regular file's bytes or of a symlink's target.
    pub sha256: Option<String>,
}

/// A tree, by path relative to its root (`home/agent/…`).
pub type Listing = BTreeMap<String, Entry>;

/// Whether `path` is compared at all: not what a backup leaves out (and nothing beneath
/// it), and not what box or the box's running software rewrites in every box it restores
/// or runs: the runtime manifest and the token files (`box load` writes the restored box's
/// own: hermes-box's config dir), the logs, Executor's record of its running server
/// (`server-control/`, whose token a load replaces, and `daemon-*.json`), and the
/// write-ahead log and shared memory of a live SQLite database (the database itself is
/// compared).
pub fn compared(path: &str) -> bool {
    let mut prefix = String::new();
    for part in path.split('/') {
        if !prefix.is_empty() {
            prefix.push('/');
        }
        prefix.push_str(part);
        if excludes::is_excluded(&prefix) {
            return false;
        }
    }
    let under = |dir: &str| path == dir || path.starts_with(&format!("{dir}/"));
    let server_control = format!("{}/server-control", layout::EXECUTOR_DATA_DIR);
    let executor_daemon = path
        .strip_prefix(&format!("{}/daemon-", layout::EXECUTOR_DATA_DIR))
        .is_some_and(|rest| !rest.contains('/') && rest.ends_with(".json"));
    let sqlite_sidecar = [".db-wal", ".db-shm"].iter().any(|s| path.ends_with(s));
    !(under(layout::LOGS_DIR)
        || under(layout::HB_CONFIG_DIR)
        || under(&server_control)
        || executor_daemon
        || sqlite_sidecar)
}

fn mode_of(kind: Kind, raw: u32) -> u32 {
    match kind {
        Kind::Dir => raw & 0o7777,
        _ => raw & 0o777,
    }
}

fn sha_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// The listing of the tree under `root` on the host. Nothing is followed: a symlink is
/// its target's bytes. `cancel` is asked between entries (a signal ends the walk).
pub fn of_host_dir(root: &Path, cancel: &dyn Fn() -> Result<()>) -> Result<Listing> {
    let mut out = Listing::new();
    let mut stack = vec![(root.to_path_buf(), String::new())];
    while let Some((dir, rel)) = stack.pop() {
        let entries =
            std::fs::read_dir(&dir).with_context(|| format!("cannot list {}", dir.display()))?;
        for entry in entries {
            cancel()?;
            let entry = entry.with_context(|| format!("cannot list {}", dir.display()))?;
            let name = String::from_utf8_lossy(entry.file_name().as_bytes()).into_owned();
            let path = if rel.is_empty() {
                name
            } else {
                format!("{rel}/{name}")
            };
            let full = entry.path();
            let meta = std::fs::symlink_metadata(&full)
                .with_context(|| format!("cannot read {}", full.display()))?;
            let ft = meta.file_type();
            let kind = if ft.is_dir() {
                Kind::Dir
            } else if ft.is_file() {
                Kind::File
            } else if ft.is_symlink() {
                Kind::Symlink
            } else if ft.is_fifo() || ft.is_socket() || ft.is_char_device() || ft.is_block_device()
            {
                Kind::Other
            } else {
                bail!("{} is of no known kind", full.display());
            };
            if kind == Kind::Dir {
                stack.push((full.clone(), path.clone()));
            }
            if !compared(&path) {
                continue;
            }
            let (size, sha256) = match kind {
                Kind::File => (meta.len(), Some(hash_file(&full, cancel)?)),
                Kind::Symlink => {
                    let target = std::fs::read_link(&full)
                        .with_context(|| format!("cannot read {}", full.display()))?;
                    (0, Some(sha_hex(target.as_os_str().as_bytes())))
                }
                _ => (0, None),
            };
            if out.len() >= MAX_ENTRIES {
                bail!("more than {MAX_ENTRIES} entries under {}", root.display());
            }
            out.insert(
                path,
                Entry {
                    kind,
                    mode: mode_of(kind, meta.mode()),
                    size,
                    sha256,
                },
            );
        }
    }
    Ok(out)
}

fn hash_file(path: &Path, cancel: &dyn Fn() -> Result<()>) -> Result<String> {
    let mut file =
        std::fs::File::open(path).with_context(|| format!("cannot read {}", path.display()))?;
    let mut sha = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        cancel()?;
        let n = file
            .read(&mut buf)
            .with_context(|| format!("cannot read {}", path.display()))?;
        if n == 0 {
            break;
        }
        sha.update(&buf[..n]);
    }
    Ok(hex::encode(sha.finalize()))
}

/// Separates the entries from the hashes in the guest's output, and ends it: output
/// without the end marker was cut (by the byte cap, or by a guest that lied). No entry
/// looks like one: an entry always has a space.
const SUMS_MARK: &str = "--box-drill-sums--";
const END_MARK: &str = "--box-drill-end--";

/// The guest side of a listing, run as root with `sh -c`: every entry of `/data` (one
/// file system; what a backup leaves out by name pruned, as a save prunes it), NUL
/// separated, then a SHA-256 of each regular file. The output is cut at
/// [`MAX_GUEST_BYTES`].
pub fn guest_script() -> String {
    let prune: Vec<String> = excludes::EXCLUDED_NAMES
        .iter()
        .map(|n| format!("-name '{n}'"))
        .chain(
            excludes::RESTORE_SCRATCH_PREFIXES
                .iter()
                .map(|p| format!("-path './{p}*'")),
        )
        .collect();
    let prune = prune.join(" -o ");
    format!(
        "set -e; cd /data; {{ \
         find . -xdev -mindepth 1 \\( {prune} \\) -prune -o \
           \\( -type l -printf 'l %m %s %P\\0%l\\0' \\) -o -printf '%y %m %s %P\\0'; \
         printf '%s\\0' {SUMS_MARK}; \
         find . -xdev -mindepth 1 \\( {prune} \\) -prune -o -type f -exec sha256sum -z -- {{}} +; \
         printf '%s\\0' {END_MARK}; \
         }} | head -c {MAX_GUEST_BYTES}"
    )
}

/// The listing the guest printed (see [`guest_script`]). Anything out of shape is an
/// error naming what, shown escaped: never a listing that merely looks short.
pub fn parse_guest(out: &str) -> Result<Listing> {
    if out.len() > MAX_GUEST_BYTES {
        bail!("the guest's listing is larger than {MAX_GUEST_BYTES} bytes");
    }
    let Some(body) = out.strip_suffix(&format!("{END_MARK}\0")) else {
        bail!("the guest's listing was cut short (no end mark)");
    };
    let Some((entries, sums)) = body.split_once(&format!("\0{SUMS_MARK}\0")) else {
        bail!("the guest's listing has no hashes");
    };
    let mut out = Listing::new();
    let mut fields = entries.split('\0');
    while let Some(record) = fields.next() {
        let mut it = record.splitn(4, ' ');
        let (Some(kind), Some(mode), Some(size), Some(path)) =
            (it.next(), it.next(), it.next(), it.next())
        else {
            bail!("the guest's listing has a bad entry: {}", shown(record));
        };
        let kind = Kind::from_find(kind)
            .with_context(|| format!("the guest's listing has a bad kind: {}", shown(record)))?;
        let mode = u32::from_str_radix(mode, 8)
            .with_context(|| format!("the guest's listing has a bad mode: {}", shown(record)))?;
        let size: u64 = size
            .parse()
            .with_context(|| format!("the guest's listing has a bad size: {}", shown(record)))?;
        let sha256 = match kind {
            Kind::Symlink => {
                let target = fields.next().with_context(|| {
                    format!("the guest's listing lacks the target of {}", shown(path))
                })?;
                Some(sha_hex(target.as_bytes()))
            }
            _ => None,
        };
        check_path(path)?;
        if !compared(path) {
            continue;
        }
        if out.len() >= MAX_ENTRIES {
            bail!("the guest's listing has more than {MAX_ENTRIES} entries");
        }
        let entry = Entry {
            kind,
            mode: mode_of(kind, mode),
            size: if kind == Kind::File { size } else { 0 },
            sha256,
        };
        if out.insert(path.to_string(), entry).is_some() {
            bail!("the guest's listing names {} twice", shown(path));
        }
    }
    for line in sums.split_terminator('\0') {
        let Some((sha, path)) = line.split_once("  ./") else {
            bail!("the guest's listing has a bad hash line: {}", shown(line));
        };
        if sha.len() != 64 || !sha.bytes().all(|b| b.is_ascii_hexdigit()) {
            bail!("the guest's listing has a bad hash: {}", shown(line));
        }
        if !compared(path) {
            continue;
        }
        match out.get_mut(path) {
            Some(e) if e.kind == Kind::File && e.sha256.is_none() => {
                e.sha256 = Some(sha.to_ascii_lowercase());
            }
            _ => bail!(
                "the guest's listing hashes {}, which it does not list as a file (or twice)",
                shown(path)
            ),
        }
    }
    if let Some((path, _)) = out
        .iter()
        .find(|(_, e)| e.kind == Kind::File && e.sha256.is_none())
    {
        bail!("the guest's listing has no hash of {}", shown(path));
    }
    Ok(out)
}

/// A relative path as `find -printf %P` prints one: no empty, `.` or `..` component.
fn check_path(path: &str) -> Result<()> {
    if path.is_empty()
        || path
            .split('/')
            .any(|c| c.is_empty() || c == "." || c == "..")
    {
        bail!("the guest's listing has a bad path: {}", shown(path));
    }
    Ok(())
}

fn shown(s: &str) -> String {
    let cut: String = s.chars().take(200).collect();
    box_proto::escape::shown(cut.as_bytes())
}

/// One way two listings differ.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Difference {
    /// Shown escaped, for a terminal.
    pub path: String,
    pub what: String,
}

/// How `found` differs from `expected`, path by path (sorted).
pub fn compare(expected: &Listing, found: &Listing) -> Vec<Difference> {
    let mut out = Vec::new();
    let mut say = |path: &str, what: String| {
        out.push(Difference {
            path: shown(path),
            what,
        })
    };
    for (path, want) in expected {
        let Some(got) = found.get(path) else {
            say(path, format!("missing ({} in the backup)", want.kind));
            continue;
        };
        if got.kind != want.kind {
            say(
                path,
                format!("a {} where the backup has a {}", got.kind, want.kind),
            );
            continue;
        }
        if got.mode != want.mode {
            say(
                path,
                format!(
                    "mode {:04o} where the backup has {:04o}",
                    got.mode, want.mode
                ),
            );
        }
        if got.size != want.size {
            say(
                path,
                format!("{} bytes where the backup has {}", got.size, want.size),
            );
        } else if got.sha256 != want.sha256 {
            let what = match want.kind {
                Kind::Symlink => "another symlink target than the backup's",
                _ => "other content than the backup's (SHA-256 differs)",
            };
            say(path, what.to_string());
        }
    }
    for (path, got) in found {
        if !expected.contains_key(path) {
            say(path, format!("a {} the backup does not have", got.kind));
        }
    }
    out.sort_by(|a, b| a.path.cmp(&b.path));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn guest(entries: &[&str], sums: &[&str]) -> String {
        let mut s = String::new();
        for e in entries {
            s.push_str(e);
            s.push('\0');
        }
        s.push_str(SUMS_MARK);
        s.push('\0');
        for l in sums {
            s.push_str(l);
            s.push('\0');
        }
        s.push_str(END_MARK);
        s.push('\0');
        s
    }

    const SHA: &str = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

    #[test]
    fn a_guest_listing_reads_files_dirs_and_symlinks_with_odd_names() {
        let out = guest(
            &[
                "d 711 4096 home",
                "f 644 0 home/a b\nc",
                "l 777 3 home/link",
                "../x",
            ],
            &[&format!("{SHA}  ./home/a b\nc")],
        );
        let listing = parse_guest(&out).unwrap();
        assert_eq!(listing.len(), 3);
        assert_eq!(listing["home"].mode, 0o711);
        assert_eq!(
            listing["home"].size, 0,
            "a directory's size is not compared"
        );
        assert_eq!(listing["home/a b\nc"].sha256.as_deref(), Some(SHA));
        assert_eq!(
            listing["home/link"].sha256,
            Some(sha_hex(b"../x")),
            "a symlink is its target"
        );
    }

    #[test]
    fn what_box_rewrites_and_what_a_backup_leaves_out_are_not_compared() {
        let out = guest(
            &[
                "d 755 0 logs",
                "f 644 1 logs/executor.log",
                "f 600 1 home/agent/.config/hermes-box/runtime-manifest",
                "d 755 0 home/agent/node_modules",
                "f 644 1 home/agent/node_modules/x.js",
                "f 644 1 home/agent/.executor/daemon-localhost-1.json",
                "f 644 1 home/agent/.executor/data.db-wal",
                "f 644 1 home/agent/.executor/data.db",
                "f 644 1 home/agent/keep",
            ],
            &[
                &format!("{SHA}  ./logs/executor.log"),
                &format!("{SHA}  ./home/agent/.config/hermes-box/runtime-manifest"),
                &format!("{SHA}  ./home/agent/node_modules/x.js"),
                &format!("{SHA}  ./home/agent/.executor/daemon-localhost-1.json"),
                &format!("{SHA}  ./home/agent/.executor/data.db-wal"),
                &format!("{SHA}  ./home/agent/.executor/data.db"),
                &format!("{SHA}  ./home/agent/keep"),
            ],
        );
        let listing = parse_guest(&out).unwrap();
        assert_eq!(
            listing.keys().collect::<Vec<_>>(),
            ["home/agent/.executor/data.db", "home/agent/keep"]
        );
    }

    #[test]
    fn hostile_or_cut_guest_output_is_refused_not_taken_for_a_short_tree() {
        let good = guest(&["f 644 0 a"], &[&format!("{SHA}  ./a")]);
        assert!(parse_guest(&good).is_ok());
        let cut = &good[..good.len() - 3];
        assert!(
            parse_guest(cut)
                .unwrap_err()
                .to_string()
                .contains("cut short")
        );
        let cases = [
            guest(&["f 644 0 a"], &[]),                               // no hash
            guest(&["f 644 0 a"], &[&format!("{SHA}  ./b")]),         // hash of nothing
            guest(&["f 644 0 a", "f 644 0 a"], &[]),                  // twice
            guest(&["f 999 0 a"], &[&format!("{SHA}  ./a")]),         // mode not octal
            guest(&["x 644 0 a"], &[]),                               // no such kind
            guest(&["f 644 -1 a"], &[]),                              // negative size
            guest(&["f 644 0 a/../../etc"], &[]),                     // a path out
            guest(&["l 777 0 a"], &[]),                               // a symlink without target
            guest(&["f 644 0 a"], &[&format!("{}  ./a", &SHA[1..])]), // short hash
            guest(&["f 644 0 a\u{1b}[2J"], &[]),
        ];
        for (i, bad) in cases.iter().enumerate() {
            let err = parse_guest(bad).expect_err(&format!("case {i} must be refused"));
            assert!(
                !err.to_string().contains('\u{1b}'),
                "case {i}: an escape reaches the terminal: {err}"
            );
        }
    }

    #[test]
    fn a_host_tree_lists_as_the_guest_would_and_differences_are_named() {
        use std::os::unix::fs::PermissionsExt as _;
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path();
        std::fs::create_dir_all(root.join("home/agent")).unwrap();
        std::fs::write(root.join("home/agent/notes"), b"hello").unwrap();
        std::fs::set_permissions(
            root.join("home/agent/notes"),
            std::fs::Permissions::from_mode(0o640),
        )
        .unwrap();
        std::os::unix::fs::symlink("notes", root.join("home/agent/link")).unwrap();
        std::fs::create_dir_all(root.join("logs")).unwrap();
        std::fs::write(root.join("logs/x.log"), b"log").unwrap();
        let host = of_host_dir(root, &|| Ok(())).unwrap();
        assert!(!host.contains_key("logs/x.log"));
        assert_eq!(host["home/agent/notes"].mode, 0o640);
        assert_eq!(host["home/agent/notes"].size, 5);
        assert_eq!(
            host["home/agent/notes"].sha256.as_deref(),
            Some(sha_hex(b"hello").as_str())
        );
        assert_eq!(compare(&host, &host), []);

        let mut found = host.clone();
        found.remove("home/agent/link");
        let notes = found.get_mut("home/agent/notes").unwrap();
        notes.mode = 0o600;
        notes.sha256 = Some(SHA.into());
        found.insert(
            "home/agent/extra".into(),
            Entry {
                kind: Kind::Dir,
                mode: 0o755,
                size: 0,
                sha256: None,
            },
        );
        let diffs = compare(&host, &found);
        let said: Vec<String> = diffs
            .iter()
            .map(|d| format!("{}: {}", d.path, d.what))
            .collect();
        assert_eq!(
            said,
            [
                "home/agent/extra: a directory the backup does not have",
                "home/agent/link: missing (symlink in the backup)",
                "home/agent/notes: mode 0600 where the backup has 0640",
                "home/agent/notes: other content than the backup's (SHA-256 differs)",
            ]
        );
    }
}
