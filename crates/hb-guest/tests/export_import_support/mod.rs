//! Generated trees for the export/import property tests (also used by box-host's).
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use proptest::prelude::*;

/// One generated member under `home/agent` (or `logs`).
#[derive(Debug, Clone)]
pub enum Node {
    File {
        path: Vec<String>,
        data: Vec<u8>,
        mode: u32,
    },
    Dir {
        path: Vec<String>,
        mode: u32,
    },
    Link {
        path: Vec<String>,
        target: String,
    },
}

fn name() -> impl Strategy<Value = String> + Clone {
    prop_oneof![
        "[a-z]{1,8}",
        "[A-Za-z0-9 ._-]{1,12}".prop_filter("not . or ..", |s| s != "." && s != ".."),
        Just("node_modules".to_string()),
        Just(".cache".to_string()),
        Just("x.pyc".to_string()),
        "[a-z]{90,130}",
        Just("é-ünïcödé".to_string()),
    ]
}

pub fn nodes() -> impl Strategy<Value = Vec<Node>> {
    let path = || prop::collection::vec(name(), 1..4);
    let node = prop_oneof![
        4 => (path(), prop::collection::vec(any::<u8>(), 0..3000), 0o400u32..0o777)
            .prop_map(|(path, data, mode)| Node::File { path, data, mode: mode | 0o600 }),
        2 => (path(), 0o500u32..0o777).prop_map(|(path, mode)| Node::Dir { path, mode: mode | 0o700 }),
        1 => (path(), "[a-z./]{1,20}").prop_map(|(path, target)| Node::Link { path, target }),
    ];
    prop::collection::vec(node, 0..25)
}

/// Materialises the nodes under `root` (home/agent and logs always exist). Conflicting paths
/// are skipped. Directory modes are applied last.
pub fn build(root: &Path, nodes: &[Node]) {
    fs::create_dir_all(root.join("home/agent")).unwrap();
    fs::create_dir_all(root.join("logs")).unwrap();
    let mut dir_modes = Vec::new();
    for (i, n) in nodes.iter().enumerate() {
        let (path, base) = match n {
            Node::File { path, .. } | Node::Dir { path, .. } | Node::Link { path, .. } => {
                (path, if i % 5 == 4 { "logs" } else { "home/agent" })
            }
        };
        let mut p = root.join(base);
        let mut ok = true;
        for part in &path[..path.len() - 1] {
            p.push(part);
            match fs::symlink_metadata(&p) {
                Ok(m) if m.is_dir() => {}
                Ok(_) => {
                    ok = false;
                    break;
                }
                Err(_) => fs::create_dir(&p).unwrap(),
            }
        }
        if !ok {
            continue;
        }
        p.push(path.last().unwrap());
        if fs::symlink_metadata(&p).is_ok() {
            continue;
        }
        match n {
            Node::File { data, mode, .. } => {
                fs::write(&p, data).unwrap();
                fs::set_permissions(&p, fs::Permissions::from_mode(*mode)).unwrap();
            }
            Node::Dir { mode, .. } => {
                fs::create_dir(&p).unwrap();
                dir_modes.push((p, *mode));
            }
            Node::Link { target, .. } => std::os::unix::fs::symlink(target, &p).unwrap(),
        }
    }
    for (p, mode) in dir_modes.into_iter().rev() {
        fs::set_permissions(&p, fs::Permissions::from_mode(mode)).unwrap();
    }
}

/// Per path: kind, permission bits, content (or link target), modification time (whole
/// seconds: what a tar header keeps).
pub type Snapshot = BTreeMap<String, (char, u32, Vec<u8>, i64)>;

/// Gives every path under `root` (files, dirs, links themselves) its own modification time,
/// years in the past, children before their directory, so a restore that re-dates files
/// (to "now" or to one shared time) cannot pass a comparison of [`snapshot`]s.
pub fn backdate(root: &Path) {
    fn walk(dir: &Path, n: &mut i64) {
        let mut names: Vec<_> = fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        names.sort();
        for p in names {
            let m = fs::symlink_metadata(&p).unwrap();
            if m.is_dir() {
                walk(&p, n);
            }
            *n += 1;
            set_mtime_nofollow(&p, 1_000_000_000 + *n * 3_607);
        }
    }
    walk(root, &mut 0);
}

/// `utimensat(AT_SYMLINK_NOFOLLOW)`: a link's own time, never its target's.
pub fn set_mtime_nofollow(p: &Path, secs: i64) {
    use nix::sys::stat::{UtimensatFlags, utimensat};
    use nix::sys::time::TimeSpec;
    let t = TimeSpec::new(secs, 0);
    utimensat(
        nix::fcntl::AT_FDCWD,
        p,
        &t,
        &t,
        UtimensatFlags::NoFollowSymlink,
    )
    .unwrap_or_else(|e| panic!("set mtime of {}: {e}", p.display()));
}

/// Kind, permission bits, content (or link target) and mtime of every path under `root`,
/// leaving out what a backup excludes and the root's own entry.
pub fn snapshot(root: &Path) -> Snapshot {
    fn walk(root: &Path, dir: &Path, out: &mut Snapshot) {
        let mut names: Vec<_> = fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        names.sort();
        for p in names {
            let rel = p.strip_prefix(root).unwrap().to_string_lossy().into_owned();
            if box_proto::archive::excludes::is_excluded(&rel) {
                continue;
            }
            let m = fs::symlink_metadata(&p).unwrap();
            let mode = m.mode() & 0o7777;
            let t = m.mtime();
            if m.file_type().is_symlink() {
                let target = fs::read_link(&p).unwrap();
                let target = target.as_os_str().as_encoded_bytes().to_vec();
                out.insert(rel, ('l', 0, target, t));
            } else if m.is_dir() {
                out.insert(rel, ('d', mode, Vec::new(), t));
                walk(root, &p, out);
            } else if m.is_file() {
                out.insert(rel, ('f', mode, fs::read(&p).unwrap(), t));
            } else {
                // FIFOs and other specials: never opened (a FIFO would block).
                out.insert(rel, ('s', mode, Vec::new(), t));
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(root, root, &mut out);
    out
}

/// Symlinks whose targets escape or dangle make a tree unsafe to restore; the validator
/// refuses those, so the property compares only trees it accepts.
pub fn without_mode_of(mut s: Snapshot, keys: &[&str]) -> Snapshot {
    for k in keys {
        if let Some(v) = s.get_mut(*k) {
            v.1 = 0;
        }
    }
    s
}

/// Leaves out the mtime of `keys`: directories the import itself writes into after
/// extraction (the re-armed pause marker's), whose times the restore cannot keep.
pub fn without_mtime_of(mut s: Snapshot, keys: &[&str]) -> Snapshot {
    for k in keys {
        if let Some(v) = s.get_mut(*k) {
            v.3 = 0;
        }
    }
    s
}

/// Whether GNU tar is here (the stock-tool checks need it). Without it: a visible
/// `SKIPPED` line, or a failure under CI=true, where scripts/setup.sh installed it.
pub fn gnu_tar() -> bool {
    let ok = std::process::Command::new("tar")
        .arg("--version")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("GNU tar"));
    if !ok {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "GNU tar is needed (scripts/setup.sh installs it)"
        );
        println!("SKIPPED: GNU tar not found");
    }
    ok
}

/// `zstd -d | tar -x -g /dev/null -C target` over `plain` (one link of a chain, zstd
/// compressed): how the README applies a link with stock tools.
pub fn tar_g_apply(compressed: &[u8], target: &Path) {
    use std::io::Write as _;
    let mut tar = std::process::Command::new("sh")
        .arg("-c")
        .arg("zstd -d -q | tar -x -g /dev/null -C \"$1\"")
        .arg("sh")
        .arg(target)
        .stdin(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    tar.stdin.take().unwrap().write_all(compressed).unwrap();
    assert!(tar.wait().unwrap().success(), "stock tools refused a link");
}

/// The least a data root an export accepts holds under `root`: `logs/`, the runtime
/// manifest, and `home/agent/workspace`, which is returned.
pub fn data_root(root: &Path) -> PathBuf {
    fs::create_dir_all(root.join("logs")).unwrap();
    let hb_config = root.join("home/agent/.config/hermes-box");
    fs::create_dir_all(&hb_config).unwrap();
    fs::write(hb_config.join("runtime-manifest"), "box=test\n").unwrap();
    let workspace = root.join("home/agent/workspace");
    fs::create_dir_all(&workspace).unwrap();
    workspace
}

/// One chain-mode export of `src` into `out` in parts of `part_size` (with
/// `block_files_above`, when given, as its threshold for files kept in blocks), on the
/// committed snapshot when `parent` is its digest; then commits this export's snapshot
/// under its own digest, as a save's export and publish do.
pub fn chain_link(
    src: &Path,
    out: &Path,
    parent: Option<&str>,
    part_size: u64,
    block_files_above: Option<u64>,
) -> (hb_guest::archive::export::ExportSummary, String) {
    use hb_guest::archive::export::{ChainOptions, ExportOptions, export};
    use hb_guest::archive::incremental::{self, next_path};
    let current = src.join(box_proto::layout::BACKUP_SNAPSHOT).join("current");
    let parent = parent.and_then(|d| incremental::parent_for(&current, d, 24).unwrap().0);
    let mut opts = ExportOptions::new(src, out, part_size);
    if let Some(above) = block_files_above {
        opts.block_files_above = above;
    }
    opts.chain = Some(ChainOptions {
        parent,
        record: next_path(&current),
    });
    let summary = export(&opts, Box::new(|_| {})).unwrap();
    let digest = hex::encode(summary.index.total_sha256.unwrap());
    incremental::commit(&current, &digest).unwrap();
    (summary, digest)
}
