//! `hb import`: restore a data root from parts, staged and swapped with rollback, as the
//! seed's last restore did (docs/design.md, "load").
//!
//! 1. Check the part index: every part a regular file of the listed size. (With
//!    `--follow` the parts arrive while the import runs: each is checked as it is read,
//!    each link's index once its last part was taken; see [`super::follow`].)
//! 2. Extract into `<root>/.hb-restore-stage-<pid>` (0700, fresh), with no same-owner and
//!    every mode bit (as GNU tar as root), zero runs as holes and the room on `/data`'s
//!    filesystem checked as bytes are written, validating every member (every rule, each
//!    link after the tree the ones before it built) and checking each part's hash as
//!    it is read (once: a check of every part before the extraction read them all again).
//!    Any failure discards the stage, so nothing of an archive that breaks a rule is ever
//!    in `/data`; the host validated the same bytes before it copied them in. (A separate
//!    validation pass before the extraction read and decompressed everything once more:
//!    ~0.4 s of a 313 MiB box's load. The seed untarred straight into its stage.)
//! 3. [`verify_restored_databases`]: SQLite's integrity check on the databases the box's
//!    software keeps, with their `-wal` files; a damaged one stops the import here.
//! 4. Owners and modes, never following symlinks: `home` root-owned 0711; `home/agent` and
//!    `logs` (recursively) owned by the `agent` account (when it exists and we are root),
//!    set-id and sticky bits put back after the chown cleared them.
//! 5. Re-arm the quiesced marker, so the restored box comes up paused.
//! 6. Swap with HUP/INT/TERM blocked: move the old entries into
//!    `<root>/.hb-restore-rollback-<pid>`, move the staged ones in; on any failure move
//!    everything back. The root itself ends root-owned 0711.

use std::ffi::{CString, OsString};
use std::fs;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::rc::Rc;

use anyhow::{Context as _, Result, anyhow, bail};
use box_proto::archive::ArchiveError;
use box_proto::archive::chain_state::ChainState;
use box_proto::archive::parts::PartIndex;
use box_proto::archive::unpack::Unpacker;
use box_proto::archive::validate::{self, Limits, WalkError};
use box_proto::layout;

use super::follow::{Follow, FollowReader};
use super::parts::{PartsReader, check_part_files, check_parts};

/// Prefix of the staging dir inside the root.
pub const STAGE_PREFIX: &str = layout::RESTORE_STAGE_PREFIX;
/// Prefix of the rollback dir inside the root.
pub const ROLLBACK_PREFIX: &str = ".hb-restore-rollback-";

/// What an import did.
#[derive(Debug, Clone)]
pub struct ImportSummary {
    pub members: u64,
    pub files: u64,
    pub index: PartIndex,
}

/// Where a test wants the swap to fail (after this many moves), to prove the rollback.
#[doc(hidden)]
#[derive(Debug, Clone, Copy, Default)]
pub struct FaultInjection {
    pub fail_after_moves: Option<usize>,
}

/// Imports the parts in `from` into `root`.
pub fn import(root: &Path, from: &Path) -> Result<ImportSummary> {
    import_with(root, from, FaultInjection::default())
}

/// Imports a chain of incremental backups: the parts of each link in its own directory,
/// oldest (the full one) first. Each link is checked and validated after the tree the
/// links before it built, then all are applied in order into one staging dir (as `tar -x
/// -g /dev/null` applies them), which is swapped in once.
pub fn import_chain(root: &Path, links: &[PathBuf]) -> Result<ImportSummary> {
    import_links(root, links, Source::Indexed, FaultInjection::default())
}

/// [`import_chain`] from directories whose parts arrive while it runs (`hb import
/// --follow`, [`super::follow`]): each part is checked as it is read and removed, each
/// link's index checked against what arrived; nothing is swapped in before every link
/// ended.
pub fn import_following(
    root: &Path,
    links: &[PathBuf],
    follow: Follow<'_>,
) -> Result<ImportSummary> {
    import_links(
        root,
        links,
        Source::Following(follow),
        FaultInjection::default(),
    )
}

#[doc(hidden)]
pub fn import_with(root: &Path, from: &Path, fault: FaultInjection) -> Result<ImportSummary> {
    import_links(root, &[from.to_path_buf()], Source::Indexed, fault)
}

/// Where the links' parts come from.
enum Source<'f> {
    /// All there before the import starts, with their index.
    Indexed,
    /// Arriving while it runs.
    Following(Follow<'f>),
}

/// A link's archive read whole into the unpacker: the walk, then the rest of the stream
/// (the walk stops at the archive's end), so that the last part's bytes are checked whole.
fn apply_link(
    reader: &mut impl io::Read,
    unpacker: &mut Unpacker,
    prior: Option<Rc<ChainState>>,
) -> std::result::Result<(validate::Report, ChainState), WalkError<io::Error>> {
    let walked = validate::walk_link(&mut *reader, &Limits::default(), prior, |entry, key| {
        unpacker.unpack(entry, key)
    })?;
    io::copy(reader, &mut io::sink())
        .map_err(|e| WalkError::Archive(ArchiveError::Invalid(e.to_string())))?;
    Ok(walked)
}

fn import_links(
    root: &Path,
    links: &[PathBuf],
    mut source: Source<'_>,
    fault: FaultInjection,
) -> Result<ImportSummary> {
    let meta = fs::symlink_metadata(root)
        .with_context(|| format!("data root {} is missing", root.display()))?;
    if !meta.is_dir() {
        bail!("data root {} is not a directory", root.display());
    }
    if links.is_empty() {
        bail!("no parts to import");
    }
    // 1: every link's parts are there, before anything is written; their bytes are
    // checked as they are extracted into the private stage (a damaged part discards it).
    // Parts that arrive while the import runs are checked one by one as they come.
    let indexes = match source {
        Source::Indexed => links
            .iter()
            .map(|from| check_part_files(from))
            .collect::<Result<Vec<PartIndex>>>()?,
        Source::Following(_) => Vec::new(),
    };
    // 2.
    remove_stale_stages(root)?;
    let pid = std::process::id();
    let stage = root.join(format!("{STAGE_PREFIX}{pid}"));
    fs::DirBuilder::new()
        .mode(0o700)
        .create(&stage)
        .with_context(|| format!("cannot create staging dir {}", stage.display()))?;
    let result = (|| -> Result<ImportSummary> {
        let mut unpacker = Unpacker::new(&stage);
        let mut last = None;
        let mut prior: Option<Rc<ChainState>> = None;
        for (i, from) in links.iter().enumerate() {
            if i > 0 {
                unpacker.next_link();
            }
            let broken = |e: &dyn std::fmt::Display| match links.len() {
                1 => anyhow!("{e}"),
                _ => anyhow!("link {} of the chain ({}): {e}", i + 1, from.display()),
            };
            let cannot_extract =
                |e: &io::Error| anyhow!("cannot extract into {}: {e}", stage.display());
            // Each link after the tree the ones before it built.
            let (found, state, index) = match &mut source {
                Source::Indexed => {
                    let index = &indexes[i];
                    let mut reader = PartsReader::new(from, index);
                    match apply_link(&mut reader, &mut unpacker, prior.clone()) {
                        Ok((found, state)) => (found, state, index.clone()),
                        // A part unlike its index is the cause whatever the walk made of
                        // its bytes (a damaged part breaks the compression or a member
                        // first).
                        Err(e) => {
                            if let Err(damaged) = check_parts(from) {
                                return Err(broken(&damaged));
                            }
                            return Err(match e {
                                WalkError::Archive(e) => broken(&e),
                                WalkError::Callback(e) => {
                                    // The unpacker refuses what it cannot write safely;
                                    // some rules are judged only further on in the stream,
                                    // so when the archive breaks one, the rest of it is
                                    // read to say which, in the rule's words.
                                    let reader = PartsReader::new(from, index);
                                    match validate::validate_link(reader, &Limits::default(), prior)
                                    {
                                        Err(rule) => broken(&rule),
                                        Ok(_) => cannot_extract(&e),
                                    }
                                }
                            });
                        }
                    }
                }
                Source::Following(follow) => {
                    let mut reader = FollowReader::new(from, follow);
                    match apply_link(&mut reader, &mut unpacker, prior.clone()) {
                        Ok((found, state)) => match reader.index() {
                            Some(index) => (found, state, index.clone()),
                            None => {
                                bail!("the parts in {} ended without their index", from.display())
                            }
                        },
                        // The parts read are gone: the damaged part, if any, is the one
                        // the walk stopped in; the rule an unpacker's refusal stands for
                        // was judged by the host, which validated these bytes first.
                        Err(e) => {
                            if let Some(parts) = reader.own_failure() {
                                return Err(broken(&parts));
                            }
                            return Err(match e {
                                WalkError::Archive(e) => broken(&e),
                                WalkError::Callback(e) => cannot_extract(&e),
                            });
                        }
                    }
                }
            };
            if found.compression != index.compression {
                bail!(
                    "the part index says {} but the data is {}",
                    index.compression.as_str(),
                    found.compression.as_str()
                );
            }
            prior = Some(Rc::new(state));
            last = Some((found, index));
        }
        let Some((report, index)) = last else {
            bail!("no parts to import");
        };
        // Reassembles the files kept in blocks (refusing damaged ones), then sets directory
        // times and modes.
        unpacker.finish().context("cannot finish the restore")?;
        // 3, before the owners are fixed: whatever SQLite leaves beside a database is
        // then the agent's too.
        verify_restored_databases(&stage)?;
        // 4.
        fix_owners_and_modes(&stage)?;
        // 5.
        rearm_quiesced(&stage)?;
        // 6.
        swap(root, &stage, pid, fault)?;
        Ok(ImportSummary {
            members: report.members,
            files: report.files,
            index,
        })
    })();
    if stage.exists() {
        let _ = remove_tree(&stage);
    }
    result
}

/// SQLite's integrity check of the restored databases the box's software keeps (see
/// [`crate::sqlite::databases`]), run on the staged tree before the swap: a damaged one
/// of the box's services (Executor's, Hermes's) aborts the import with the box's current
/// `/data` untouched, naming the database. Codex's are the agent's own data, written by a
/// Codex that may have been running through the save: a damaged one is restored as it is
/// and said, never a reason to refuse the whole box.
pub fn verify_restored_databases(stage: &Path) -> Result<()> {
    let restored = crate::paths::Paths::new(stage);
    let codex = restored.codex_home();
    let mut damaged = Vec::new();
    for db in crate::sqlite::databases(&restored) {
        if let Err(why) = crate::sqlite::integrity_check(&db) {
            let shown = db.strip_prefix(stage).unwrap_or(&db).display().to_string();
            if db.starts_with(&codex) {
                eprintln!(
                    "hb: warning: Codex's database {shown} fails SQLite's integrity check ({why}); restored as it is"
                );
                continue;
            }
            damaged.push(format!("{shown} ({why})"));
        }
    }
    if damaged.is_empty() {
        return Ok(());
    }
    bail!(
        "the backup's database {} failed SQLite's integrity check; nothing in /data was changed. \
         To take the files out anyway, run `box extract <backup>` on the host",
        damaged.join(", ")
    )
}

fn remove_stale_stages(root: &Path) -> Result<()> {
    for entry in fs::read_dir(root)? {
        let entry = entry?;
        let name = entry.file_name();
        if name.as_bytes().starts_with(STAGE_PREFIX.as_bytes()) && entry.file_type()?.is_dir() {
            remove_tree(&entry.path())?;
        } else if name.as_bytes().starts_with(ROLLBACK_PREFIX.as_bytes()) {
            eprintln!(
                "hb: warning: {} is left from an interrupted restore; it holds the state from before it",
                entry.path().display()
            );
        }
    }
    Ok(())
}

fn remove_tree(p: &Path) -> io::Result<()> {
    // Make read-only dirs removable (never following links), then remove.
    fn open_up(p: &Path) {
        if let Ok(m) = fs::symlink_metadata(p)
            && m.is_dir()
        {
            let _ = fs::set_permissions(p, fs::Permissions::from_mode(0o700));
            if let Ok(rd) = fs::read_dir(p) {
                for e in rd.flatten() {
                    open_up(&e.path());
                }
            }
        }
    }
    open_up(p);
    fs::remove_dir_all(p)
}

fn agent_ids() -> Option<(u32, u32)> {
    if !nix::unistd::geteuid().is_root() {
        return None;
    }
    let user = nix::unistd::User::from_name(layout::AGENT_USER)
        .ok()
        .flatten()?;
    Some((user.uid.as_raw(), user.gid.as_raw()))
}

fn lchown(p: &Path, uid: u32, gid: u32) -> io::Result<()> {
    let c = CString::new(p.as_os_str().as_bytes()).map_err(io::Error::other)?;
    // SAFETY: a valid NUL-terminated path; lchown never follows a final symlink.
    if unsafe { libc::lchown(c.as_ptr(), uid, gid) } == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

fn chown_tree(p: &Path, uid: u32, gid: u32) -> io::Result<()> {
    let meta = fs::symlink_metadata(p)?;
    // chown clears set-id bits; put the whole mode back afterwards, setuid, setgid and
    // sticky included (links have none to restore).
    lchown(p, uid, gid)?;
    if !meta.file_type().is_symlink() {
        fs::set_permissions(
            p,
            fs::Permissions::from_mode(meta.permissions().mode() & 0o7777),
        )?;
    }
    if meta.is_dir() {
        for entry in fs::read_dir(p)? {
            chown_tree(&entry?.path(), uid, gid)?;
        }
    }
    Ok(())
}

fn fix_owners_and_modes(stage: &Path) -> Result<()> {
    let is_root = nix::unistd::geteuid().is_root();
    let home = stage.join("home");
    if is_root {
        lchown(&home, 0, 0).with_context(|| format!("cannot chown {}", home.display()))?;
    }
    fs::set_permissions(&home, fs::Permissions::from_mode(0o711))?;
    if let Some((uid, gid)) = agent_ids() {
        for sub in [layout::HOME, layout::LOGS_DIR] {
            let p = stage.join(sub);
            if fs::symlink_metadata(&p).is_ok() {
                chown_tree(&p, uid, gid)
                    .with_context(|| format!("cannot chown {}", p.display()))?;
            }
        }
    }
    Ok(())
}

fn rearm_quiesced(stage: &Path) -> Result<()> {
    let ids = agent_ids();
    let home = stage.join(layout::HOME);
    let mut dir = home.clone();
    let rel = Path::new(layout::HB_CONFIG_DIR)
        .strip_prefix(layout::HOME)
        .map_err(|_| anyhow!("layout: config dir outside the home"))?
        .to_path_buf();
    for part in rel.components() {
        dir.push(part);
        match fs::symlink_metadata(&dir) {
            Ok(m) if m.is_dir() => {}
            Ok(_) => bail!(
                "{} is not a directory; cannot re-arm the pause marker",
                dir.display()
            ),
            Err(_) => {
                fs::DirBuilder::new().mode(0o700).create(&dir)?;
                if let Some((uid, gid)) = ids {
                    lchown(&dir, uid, gid)?;
                }
            }
        }
    }
    let marker = stage.join(layout::QUIESCED_MARKER);
    if fs::symlink_metadata(&marker).is_ok() {
        fs::remove_file(&marker)?;
    }
    fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&marker)
        .with_context(|| format!("cannot re-arm {}", marker.display()))?;
    if let Some((uid, gid)) = ids {
        lchown(&marker, uid, gid)?;
    }
    Ok(())
}

/// Blocks HUP, INT and TERM for its lifetime (the swap must not be cut in half).
struct SignalsBlocked(nix::sys::signal::SigSet);

impl SignalsBlocked {
    fn new() -> Result<Self> {
        use nix::sys::signal::{SigSet, SigmaskHow, Signal, pthread_sigmask};
        let mut set = SigSet::empty();
        set.add(Signal::SIGHUP);
        set.add(Signal::SIGINT);
        set.add(Signal::SIGTERM);
        let mut old = SigSet::empty();
        pthread_sigmask(SigmaskHow::SIG_BLOCK, Some(&set), Some(&mut old))?;
        Ok(SignalsBlocked(old))
    }
}

impl Drop for SignalsBlocked {
    fn drop(&mut self) {
        use nix::sys::signal::{SigmaskHow, pthread_sigmask};
        let _ = pthread_sigmask(SigmaskHow::SIG_SETMASK, Some(&self.0), None);
    }
}

fn swap(root: &Path, stage: &Path, pid: u32, fault: FaultInjection) -> Result<()> {
    let _blocked = SignalsBlocked::new()?;
    let rollback = root.join(format!("{ROLLBACK_PREFIX}{pid}"));
    fs::DirBuilder::new()
        .mode(0o700)
        .create(&rollback)
        .with_context(|| format!("cannot create rollback dir {}", rollback.display()))?;
    let skip = |name: &OsString| {
        let b = name.as_bytes();
        b.starts_with(STAGE_PREFIX.as_bytes()) || b.starts_with(ROLLBACK_PREFIX.as_bytes())
    };
    let list = |dir: &Path| -> io::Result<Vec<OsString>> {
        let mut names: Vec<OsString> = fs::read_dir(dir)?
            .map(|e| e.map(|e| e.file_name()))
            .collect::<io::Result<_>>()?;
        names.sort();
        Ok(names)
    };
    let mut moves = 0usize;
    let mut step = |from: &Path, to: &Path| -> io::Result<()> {
        if fault.fail_after_moves.is_some_and(|n| moves >= n) {
            return Err(io::Error::other("injected failure"));
        }
        fs::rename(from, to)?;
        moves += 1;
        Ok(())
    };
    let mut old_moved: Vec<OsString> = Vec::new();
    let mut new_moved: Vec<OsString> = Vec::new();
    let attempt = (|| -> io::Result<()> {
        for name in list(root)?.into_iter().filter(|n| !skip(n)) {
            step(&root.join(&name), &rollback.join(&name))?;
            old_moved.push(name);
        }
        for name in list(stage)? {
            step(&stage.join(&name), &root.join(&name))?;
            new_moved.push(name);
        }
        Ok(())
    })();
    if let Err(e) = attempt {
        // Roll back: new entries back into the stage, old ones back into the root.
        let mut problems = Vec::new();
        for name in new_moved.iter().rev() {
            if let Err(e) = fs::rename(root.join(name), stage.join(name)) {
                problems.push(format!("{}: {e}", name.to_string_lossy()));
            }
        }
        for name in old_moved.iter().rev() {
            if let Err(e) = fs::rename(rollback.join(name), root.join(name)) {
                problems.push(format!("{}: {e}", name.to_string_lossy()));
            }
        }
        if problems.is_empty() {
            let _ = fs::remove_dir(&rollback);
            bail!("restore swap failed ({e}); the previous state was put back");
        }
        bail!(
            "restore swap failed ({e}) and the rollback could not move everything back ({}); the previous state is in {}",
            problems.join(", "),
            rollback.display()
        );
    }
    if nix::unistd::geteuid().is_root() {
        lchown(root, 0, 0).with_context(|| format!("cannot chown {}", root.display()))?;
    }
    fs::set_permissions(root, fs::Permissions::from_mode(0o711))?;
    let _ = fs::remove_dir(stage);
    remove_tree(&rollback).with_context(|| format!("cannot remove {}", rollback.display()))?;
    let _ = fs::File::open(root).and_then(|d| d.sync_all());
    Ok(())
}
