//! Shared helpers of the backup tests: trees, exports, backups, snapshots, gpg, `box`.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

pub mod harness;
#[path = "../../../hb-guest/tests/export_import_support/mod.rs"]
pub mod trees;

use std::collections::BTreeMap;
use std::fs;
use std::io::Write;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use box_host::backup::{crypto::EncryptWriter, save};
use secrecy::SecretString;

pub const PASS: &str = "correct horse battery staple";

pub fn secret(s: &str) -> SecretString {
    SecretString::from(s)
}

/// A small agent-like tree: dirs, files with modes, a symlink, a hardlink, a manifest.
pub fn sample_tree(root: &Path) {
    let home = root.join("home/agent");
    fs::create_dir_all(home.join("workspace/src")).unwrap();
    fs::create_dir_all(home.join(".config/hermes-box")).unwrap();
    fs::create_dir_all(home.join(".hermes")).unwrap();
    fs::create_dir_all(root.join("logs")).unwrap();
    fs::write(
        home.join(".config/hermes-box/runtime-manifest"),
        "created_at=2026-11-29T12:00:00Z\nbase_image=ubuntu:24.04\nbox=0.1.0\n",
    )
    .unwrap();
    fs::write(home.join("workspace/probe.txt"), "probe\n").unwrap();
    std::os::unix::fs::symlink("probe.txt", home.join("workspace/probe-link")).unwrap();
    fs::hard_link(
        home.join("workspace/probe.txt"),
        home.join("workspace/probe-hard"),
    )
    .unwrap();
    fs::write(
        home.join("workspace/src/main.rs"),
        "fn main() {}\n".repeat(500),
    )
    .unwrap();
    fs::set_permissions(
        home.join("workspace/src/main.rs"),
        fs::Permissions::from_mode(0o640),
    )
    .unwrap();
    let big: Vec<u8> = (0..300_000u32)
        .flat_map(|i| i.wrapping_mul(2654435761).to_le_bytes())
        .collect();
    fs::write(home.join("workspace/blob.bin"), big).unwrap();
    fs::write(home.join(".hermes/state.db"), b"SQLite format 3\0").unwrap();
    fs::write(home.join(".hermes/state.db-wal"), b"wal").unwrap();
    fs::write(root.join("logs/executor.log"), "started\n").unwrap();
    fs::set_permissions(root.join("logs"), fs::Permissions::from_mode(0o750)).unwrap();
    // Old, distinct times on everything: a restore that re-dates files shows.
    trees::backdate(root);
}

/// `hb export` through the library.
pub fn export(root: &Path, out: &Path, part_size: u64) -> box_proto::archive::parts::PartIndex {
    let opts = hb_guest::archive::export::ExportOptions::new(root, out, part_size);
    hb_guest::archive::export::export(&opts, Box::new(|_| {}))
        .unwrap()
        .index
}

/// Host facts as `box save` seals them (an allow list, a binding, the LAN closed).
pub fn sample_facts() -> box_host::backup::host_facts::HostFacts {
    let mut env = box_proto::BoxEnv::default();
    env.set("EGRESS", "allowlist").unwrap();
    env.set("EGRESS_ALLOW_HOSTS", "saved.example").unwrap();
    env.set("CREDENTIALS", "openai").unwrap();
    let mut policy =
        box_host::policy::Containment::from_config(&env, &box_host::policy::Overrides::default())
            .unwrap();
    policy.lan_closed = true;
    box_host::backup::host_facts::HostFacts {
        box_name: "alpha".into(),
        box_version: "0.1.0 (test)".into(),
        smolvm: Some("1.33.0".into()),
        saved_at: "2026-11-29T12:00:00Z".into(),
        policy: Some(policy),
        place: None,
    }
}

/// The save pipeline through the library, sealed as `box save` seals: parts dir →
/// published backup.
pub fn save_parts(parts: &Path, out: &Path, pass: &str) -> save::Published {
    let pass = secret(pass);
    let mut p = save::Pipeline::begin(out, &pass).unwrap();
    p.seal_with(save::SealPlan {
        facts: sample_facts(),
        chain: save::ChainIntent::Outside,
    })
    .unwrap();
    p.feed_parts_dir(parts).unwrap();
    p.finish().unwrap().verify().unwrap().publish().unwrap()
}

/// Encrypts arbitrary plaintext the way a backup is encrypted (no validation).
pub fn encrypt_bytes(plain: &[u8], out: &Path, pass: &str) {
    let file = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(out)
        .unwrap();
    let mut w = EncryptWriter::new(file, &secret(pass)).unwrap();
    w.write_all(plain).unwrap();
    w.finish().unwrap();
}

pub fn zstd(bytes: &[u8]) -> Vec<u8> {
    let mut e = zstd::stream::write::Encoder::new(Vec::new(), 3).unwrap();
    e.include_checksum(true).unwrap();
    e.write_all(bytes).unwrap();
    e.finish().unwrap()
}

pub fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    e.write_all(bytes).unwrap();
    e.finish().unwrap()
}

/// Per path: kind, permission bits, content or target, mtime (whole seconds).
pub type Tree = BTreeMap<String, (char, u32, Vec<u8>, i64)>;

/// What a tree holds, for byte-for-byte comparison: kind, permission bits, content or
/// target, and modification time (of links themselves too).
pub fn snapshot(root: &Path) -> Tree {
    let mut out = BTreeMap::new();
    fn walk(root: &Path, dir: &Path, out: &mut Tree) {
        let mut names: Vec<_> = fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        names.sort();
        for p in names {
            let rel = p.strip_prefix(root).unwrap().to_string_lossy().into_owned();
            let m = fs::symlink_metadata(&p).unwrap();
            let mode = m.mode() & 0o7777;
            let time = m.mtime();
            if m.file_type().is_symlink() {
                let t = fs::read_link(&p).unwrap();
                let t = t.as_os_str().as_encoded_bytes().to_vec();
                out.insert(rel, ('l', 0, t, time));
            } else if m.is_dir() {
                out.insert(rel, ('d', mode, Vec::new(), time));
                walk(root, &p, out);
            } else {
                out.insert(rel, ('f', mode, fs::read(&p).unwrap(), time));
            }
        }
    }
    walk(root, root, &mut out);
    out
}

/// The tree a backup of `root` should reproduce: the snapshot minus the excludes.
pub fn expected_after_excludes(root: &Path) -> Tree {
    snapshot(root)
        .into_iter()
        .filter(|(k, _)| {
            let mut prefix = String::new();
            for part in k.split('/') {
                if !prefix.is_empty() {
                    prefix.push('/');
                }
                prefix.push_str(part);
                if box_proto::archive::excludes::is_excluded(&prefix) {
                    return false;
                }
            }
            true
        })
        .collect()
}

pub fn gpg_home(dir: &Path) -> PathBuf {
    let h = dir.join("gnupg");
    fs::create_dir_all(&h).unwrap();
    fs::set_permissions(&h, fs::Permissions::from_mode(0o700)).unwrap();
    h
}

/// Starts stock gpg in batch mode with `home` as its homedir and writes the passphrase to
/// its stdin (fd 0, never argv); stdout is piped for the caller to read or stream.
pub fn gpg_child(home: &Path, pass: &str, args: &[&std::ffi::OsStr]) -> std::process::Child {
    let mut child = Command::new("gpg")
        .arg("--homedir")
        .arg(home)
        .args([
            "--batch",
            "--yes",
            "--pinentry-mode",
            "loopback",
            "--passphrase-fd",
            "0",
        ])
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("gpg is installed by scripts/setup.sh");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(format!("{pass}\n").as_bytes())
        .unwrap();
    child
}

/// Runs gpg with the passphrase on stdin (fd 0), never in argv.
pub fn gpg(home: &Path, pass: &str, args: &[&str]) -> Output {
    let args: Vec<&std::ffi::OsStr> = args.iter().map(std::ffi::OsStr::new).collect();
    gpg_child(home, pass, &args).wait_with_output().unwrap()
}

/// A `box` command isolated from the user's config and state.
pub fn box_cmd(sandbox: &Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_box"));
    c.env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", sandbox)
        .env("XDG_CONFIG_HOME", sandbox.join(".config"))
        .env("XDG_STATE_HOME", sandbox.join(".state"))
        .env("BOX_HOME", sandbox.join(".box-home"))
        .env("BOX_NO_PROGRESS", "1")
        .env("NO_COLOR", "1")
        .current_dir(sandbox);
    c
}

/// Every entry directly in `dir`, sorted.
pub fn listing(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = fs::read_dir(dir)
        .map(|rd| {
            rd.map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// Set in a re-executed test binary to make it run the save harness instead of tests.
pub const HARNESS_ARGS: &str = "BOX_TEST_BACKUP_HARNESS_ARGS";

/// A command that runs the save harness (`harness::main_with_args`) in a process of its
/// own: this test binary re-executed into its `harness_entry` test, which must exist in
/// the calling test file (see `backup_signals.rs`). No extra build target is needed, so
/// a plain `cargo test` has everything.
pub fn harness(args: &[&str]) -> Command {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args([
        "--ignored",
        "--exact",
        "harness_entry",
        "--nocapture",
        "--test-threads=1",
    ])
    .env(HARNESS_ARGS, args.join("\u{1f}"));
    cmd
}

/// The body of a `harness_entry` test: runs the harness and exits when asked to.
pub fn harness_entry() {
    if let Ok(joined) = std::env::var(HARNESS_ARGS) {
        let args: Vec<String> = joined.split('\u{1f}').map(String::from).collect();
        let code = harness::main_with_args(&args);
        let code = if code == std::process::ExitCode::SUCCESS {
            0
        } else {
            1
        };
        std::process::exit(code);
    }
}

/// One save of `src` as a link of its chain: a chain-mode export against the committed
/// snapshot, encrypted with `pass` into `backups/alpha-<stamp>.tar.zst.gpg`, the snapshot
/// committed under the file's digest (what `box save` will do).
pub fn save_link(
    src: &Path,
    work: &Path,
    backups: &Path,
    stamp: &str,
    parent: Option<[u8; 32]>,
    pass: &str,
) -> (PathBuf, [u8; 32]) {
    use hb_guest::archive::export::{ChainOptions, ExportOptions, export};
    use hb_guest::archive::incremental::{self, next_path};
    let current = src.join(box_proto::layout::BACKUP_SNAPSHOT).join("current");
    let parent = parent.and_then(|d| {
        incremental::parent_for(&current, &hex::encode(d), 24)
            .unwrap()
            .0
    });
    let out = work.join(format!("parts-{stamp}"));
    let mut opts = ExportOptions::new(src, &out, 1 << 20);
    opts.chain = Some(ChainOptions {
        parent,
        record: next_path(&current),
    });
    let summary = export(&opts, Box::new(|_| {})).unwrap();
    let mut plain = Vec::new();
    for part in &summary.index.parts {
        plain.extend(fs::read(out.join(&part.name)).unwrap());
    }
    let file = backups.join(format!("alpha-{stamp}.tar.zst.gpg"));
    encrypt_bytes(&plain, &file, pass);
    let digest = box_host::backup::chain::file_digest(&file).unwrap();
    incremental::commit(&current, &hex::encode(digest)).unwrap();
    (file, digest)
}

/// The README's loop over a chain's files, oldest first: `gpg -d | zstd -d | tar -x -g
/// /dev/null` into `target`, stock tools only.
pub fn stock_loop(work: &Path, pass: &str, links: &[&Path], target: &Path) {
    fs::create_dir_all(target).unwrap();
    let home = gpg_home(work);
    for link in links {
        let gpg = gpg_child(&home, pass, &["-d".as_ref(), link.as_os_str()]);
        let plain = gpg.wait_with_output().unwrap();
        assert!(plain.status.success(), "gpg -d {}", link.display());
        trees::tar_g_apply(&plain.stdout, target);
    }
}
