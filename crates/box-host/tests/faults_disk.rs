//! Faults counted (issue 42): full disks, through the simulator with the real `hb`.
//!
//! **The backup directory full.** The box's backup directory is a tmpfs in a private mount
//! namespace the test holds open (`unshare --mount`: nothing reaches the host's mounts, and
//! the namespace dies with the test); every `box` call runs inside it (`nsenter`). A
//! first full save goes in while it is roomy; then, case by case, the box gets new data (a
//! file of random bytes: what the backup must hold whatever zstd does), the tmpfs is shrunk
//! to what its backups use plus a random room between nothing and just less than those
//! random bytes, and `box save` runs out of space at a random point, as a link of the chain
//! or as a `--full` backup. Each must fail saying "No space left on device" and the
//! directory; leave no file under a backup name, no temporary and no space held (the
//! filesystem's used bytes are what they were); no plaintext on the host or in the guest;
//! the box running and unpaused; the save's state files untouched. Then the room comes
//! back (a remount) and the same save works, and `box backups check --read-data` calls
//! everything sound.
//!
//! **The state files full.** `<state dir>/chain-trees`, where every chain-mode save keeps
//! the tree its backup restores to (`<box>.tree`) and, after it, what it knew of the
//! chain's files (the memo, `<box>.known`), on a tmpfs of its own: room for less than the
//! tree (the save's record stops there), or, with the tree missing as after an upgrade,
//! room for the tree alone (the memo finds none: the tree's rename frees the old tree's
//! pages, so only then can the memo be the write that fails). The backup itself is good
//! and published; box says "No space left on device" and the directory; each file is as
//! it was or whole and new (read with box's own readers), never cut; no temporary left;
//! then, with room again, the next save works (a full one where box said it would be) and
//! the chain checks sound. A save writes nothing else there, nor anything but the backup
//! beside the backups.
//!
//! **The guest's disk full mid-export.** `hb export` writes into `/root/hb-save-*` (its
//! copy of each changed database, then its parts); real smolvm gives the guest an ext4
//! storage disk of `--storage` GiB, the simulator a directory of the host's filesystem
//! with no size limit of its own. So the test does what an agent (root in the guest, with
//! sudo) can do: it puts a tmpfs over the guest's `/root`, holding what `/root` held, and
//! fills it with a file of zeros to a random room. On a full ext4 disk and on a full tmpfs
//! a write fails alike (ENOSPC, what was written before it kept), and that failing write
//! is all `hb` and box see of it. Streaming (the default: the guest holds two parts at
//! most, so a bigger room could race box's copying) the room is below one part: the
//! export fails at its first write that does not fit, the database copy or the first
//! part. On the sequential path (`BOX_STREAM_PARTS=0`: every part in the guest before the
//! first is copied out) it is between one part and the export's new random bytes: a later
//! part fails. The save must fail naming the box's `hb export` and its words for a full
//! disk ("the disk is full" from SQLite's copy, "the box's disk is full" from the parts); nothing
//! named on the host; the guest scratch removed; the box running and unpaused; and after
//! the filler is removed the next save works.
//!
//! **The registry row.** The box's first save records where its backups are in its row
//! (`<state dir>/boxes/<box>.json`, as again whenever that place changes): with no room
//! there, the backup is published, the row is as it was, box says why, and the next save
//! records it.
//!
//! By default 8 backup-directory cases, 1 registry case, 2 state-file cases and 2 guest
//! cases; `BOX_HEAVY_FAULTS=1` runs 40, 1, 6 and 8. `FAULTS_SEED=<n>` replays a run (the
//! seed is printed). The counts go to stderr as a table; every bad column must be 0.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod save_load_support;

use std::fmt::Write as _;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use save_load_support::{Run, World, prerequisites, serial};

const PROJ: &str = "/data/home/agent/workspace/proj";
const PART_SIZE: u64 = 1 << 20;
const ENOSPC: &str = "No space left on device";
const PAGE: u64 = 4096;
/// The room every tmpfs gets back: more than the test ever writes there.
const ROOMY: u64 = 512 << 20;

/// A private mount namespace, held open by a child of the test that waits on its stdin:
/// the namespace (and every tmpfs in it) ends when the test drops it or dies.
struct PrivateMounts {
    holder: Child,
}

impl PrivateMounts {
    fn new() -> Self {
        let holder = Command::new("unshare")
            .args(["--mount", "--propagation", "private", "--", "sh", "-c"])
            .arg("read _")
            .stdin(Stdio::piped())
            .spawn()
            .expect("unshare");
        let m = PrivateMounts { holder };
        let ours = std::fs::read_link("/proc/self/ns/mnt").unwrap();
        let start = Instant::now();
        while std::fs::read_link(m.ns()).ok().as_ref() == Some(&ours) {
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "unshare --mount never made a mount namespace (root is needed)"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        m
    }

    fn ns(&self) -> PathBuf {
        PathBuf::from(format!("/proc/{}/ns/mnt", self.holder.id()))
    }

    /// `path` as seen inside the namespace, from the test's own.
    fn view(&self, path: &Path) -> PathBuf {
        PathBuf::from(format!("/proc/{}/root", self.holder.id()))
            .join(path.strip_prefix("/").unwrap())
    }

    /// A command run inside the namespace.
    fn inside(&self, program: &Path) -> Command {
        let mut cmd = Command::new("nsenter");
        cmd.arg(format!("--mount={}", self.ns().display()))
            .arg("--")
            .arg(program);
        cmd
    }

    fn sh(&self, script: &str) {
        let out = self
            .inside(Path::new("/bin/sh"))
            .args(["-c", script])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{script}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// A tmpfs of `bytes` at `at` (a directory), private to the box run inside.
    fn mount_tmpfs(&self, at: &Path, bytes: u64) {
        self.sh(&format!(
            "mount -t tmpfs -o size={bytes},mode=0700 box-faults-disk '{}'",
            at.display()
        ));
    }

    /// The tmpfs at `at` holds at most `bytes` from now on (never below what it uses).
    fn resize(&self, at: &Path, bytes: u64) {
        self.sh(&format!("mount -o remount,size={bytes} '{}'", at.display()));
    }

    /// Bytes used on the filesystem at `at`.
    fn used(&self, at: &Path) -> u64 {
        let s = nix::sys::statvfs::statvfs(&self.view(at)).unwrap();
        (s.blocks() - s.blocks_free()) * s.fragment_size()
    }

    /// Shrinks the tmpfs at `at` to what it uses plus `room` bytes (in whole pages, down).
    fn leave_room(&self, at: &Path, room: u64) {
        self.resize(at, self.used(at) + room / PAGE * PAGE);
    }

    /// `box <args>` inside the namespace, with the world's environment; recorded in its
    /// transcript (scanned for secrets at the end).
    fn run(&self, w: &World, args: &[&str], env: &[(&str, &str)]) -> Run {
        let outside = w.command(args, env);
        let mut cmd = self.inside(Path::new(outside.get_program()));
        cmd.args(outside.get_args()).stdin(Stdio::null());
        for (k, v) in outside.get_envs() {
            match v {
                Some(v) => cmd.env(k, v),
                None => cmd.env_remove(k),
            };
        }
        // As World::command: box in a session of its own, away from the test's terminal.
        // SAFETY: setsid is async-signal-safe and touches no memory of the parent.
        unsafe {
            cmd.pre_exec(|| {
                libc::setsid();
                Ok(())
            });
        }
        w.record(args, &cmd.output().unwrap())
    }
}

impl Drop for PrivateMounts {
    fn drop(&mut self) {
        // Its `read` ends at EOF: the namespace goes with it.
        drop(self.holder.stdin.take());
        let _ = self.holder.wait();
    }
}

/// Entries of `dir`, sorted (none when it does not exist).
fn entries(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .map(|r| {
            r.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// One row of the table.
#[derive(Default)]
struct Counts {
    cases: usize,
    /// The save failed (or, for the state files, warned) saying "No space left on device"
    /// and where.
    named_enospc: usize,
    /// A new file under a backup name, or a state file cut short or changed by a write
    /// that found no room: must stay 0.
    named_leftovers: usize,
    /// A temporary, or space still held, where the save wrote: must stay 0.
    temp_leftovers: usize,
    /// Plaintext in the host's scratch or TMPDIR, or in the guest: must stay 0.
    plaintext: usize,
    /// The box not running, or still paused, or its lock held: must stay 0.
    box_not_running: usize,
    /// With room again, the next save or the check of its chain failed: must stay 0.
    next_save_failures: usize,
}

fn table(rows: &[(&str, &Counts)]) -> String {
    let mut t = String::from(
        "| full | cases | named ENOSPC | named leftovers | temp leftovers | plaintext | box not running | next-save failures |\n|---|---|---|---|---|---|---|---|\n",
    );
    for (what, c) in rows {
        writeln!(
            t,
            "| {what} | {} | {} | {} | {} | {} | {} | {} |",
            c.cases,
            c.named_enospc,
            c.named_leftovers,
            c.temp_leftovers,
            c.plaintext,
            c.box_not_running,
            c.next_save_failures
        )
        .unwrap();
    }
    t
}

/// A state file after a save: as it was, whole and new, or neither (cut: the damage).
#[derive(Debug, PartialEq, Eq)]
enum Kept {
    Old,
    New,
    Neither,
}

impl Kept {
    fn judge(before: Option<Vec<u8>>, after: Option<Vec<u8>>, whole_new: bool) -> Kept {
        if whole_new {
            Kept::New
        } else if after == before {
            Kept::Old
        } else {
            Kept::Neither
        }
    }
}

/// The test's world: box `alpha` with its backup directory on a tmpfs in `mounts`.
struct Bench<'a> {
    w: &'a World,
    mounts: PrivateMounts,
    rng: StdRng,
    /// Files of random bytes in the box, with their sizes (what a full backup must hold).
    noise: Vec<(String, u64)>,
    made: usize,
    problems: Vec<String>,
}

impl Bench<'_> {
    fn backups(&self) -> PathBuf {
        self.w.backups()
    }

    fn trees(&self) -> PathBuf {
        self.w.home().join("chain-trees")
    }

    fn run(&self, args: &[&str], env: &[(&str, &str)]) -> Run {
        self.mounts.run(self.w, args, env)
    }

    /// A new file of `bytes` random bytes in the box; the oldest goes when `keep` are
    /// there already (so the box stays a few MiB). Returns the bytes a link must hold.
    fn add_noise(&mut self, bytes: u64, keep: usize) -> u64 {
        self.made += 1;
        let name = format!("noise-{}.bin", self.made);
        let mut script = format!(
            "set -e; cd {PROJ}; head -c {bytes} /dev/urandom > {name}; printf 'edit {}\\n' >> notes.md; ",
            self.made
        );
        while self.noise.len() >= keep {
            let (old, _) = self.noise.remove(0);
            script.push_str(&format!("rm {old}; "));
        }
        script.push_str("chown -R agent:agent /data/home/agent/workspace");
        self.w.sh("alpha", &script);
        self.noise.push((name, bytes));
        bytes
    }

    fn noise_total(&self) -> u64 {
        self.noise.iter().map(|(_, b)| b).sum()
    }

    /// Backup names (not starting with '.') in the backup dir, as box sees it.
    fn named(&self) -> Vec<String> {
        entries(&self.mounts.view(&self.backups()))
            .into_iter()
            .filter(|e| !e.starts_with('.'))
            .collect()
    }

    /// The chain state files, as box sees them: name and bytes.
    fn state_files(&self) -> Vec<(String, Vec<u8>)> {
        let dir = self.mounts.view(&self.trees());
        entries(&dir)
            .into_iter()
            .map(|e| {
                let bytes = std::fs::read(dir.join(&e)).unwrap();
                (e, bytes)
            })
            .collect()
    }

    /// Plaintext a failed save may leave: host scratch, TMPDIR, the guest's scratch.
    fn plaintext_left(&self) -> Vec<String> {
        let mut left = Vec::new();
        for dir in [self.w.home().join("tmp"), self.w.tmp()] {
            left.extend(
                entries(&dir)
                    .into_iter()
                    .map(|e| format!("{}", dir.join(e).display())),
            );
        }
        left.extend(self.w.guest_plaintext_left("alpha"));
        left
    }

    /// No plaintext on the host or in the guest; the box's Executor answers, nothing of
    /// a quiesce is left, its lock is free.
    fn left_well(&mut self, label: &str, counts: &mut Counts) {
        let plain = self.plaintext_left();
        if !plain.is_empty() {
            counts.plaintext += 1;
            self.problem(label, &format!("plaintext left: {plain:?}"), None);
        }
        let w = self.w;
        let running = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            w.assert_running_unpaused("alpha")
        }));
        let free = w.lock_free("alpha");
        if running.is_err() || !free {
            counts.box_not_running += 1;
            self.problem(
                label,
                &format!("the box is not running unpaused (its lock free: {free})"),
                None,
            );
        }
    }

    fn problem(&mut self, label: &str, what: &str, run: Option<&Run>) {
        let out = run.map(|r| format!(":\n{r}")).unwrap_or_default();
        self.problems.push(format!("{label}: {what}{out}"));
    }

    /// `box save alpha` (with `--full` when `full`), which must succeed now (and say
    /// `says`); then `box backups check --read-data` must call the box's backups sound.
    fn next_save_works(&mut self, label: &str, full: bool, says: Option<&str>) -> bool {
        let mut args = vec!["save", "alpha"];
        if full {
            args.push("--full");
        }
        let before = self.named();
        let r = self.run(&args, &[("BOX_PART_SIZE", &PART_SIZE.to_string())]);
        let published = self.named().len() == before.len() + 1;
        // Backups are named by the second: the next save must not share one.
        std::thread::sleep(Duration::from_millis(1100));
        if !r.ok() || !published {
            self.problem(label, "with room again, the save failed", Some(&r));
            return false;
        }
        if let Some(words) = says.filter(|w| !r.stdout.contains(w)) {
            self.problem(
                label,
                &format!("the next save did not say {words:?}"),
                Some(&r),
            );
            return false;
        }
        let check = self.run(&["backups", "check", "alpha", "--read-data"], &[]);
        if !check.ok() || !check.stdout.contains(": all sound") {
            self.problem(label, "the chain does not check sound after", Some(&check));
            return false;
        }
        // Only the newest chain stays: each check reads every byte, and the tmpfs is memory.
        let prune = self.run(&["backups", "prune", "alpha", "--keep-last", "1"], &[]);
        assert!(prune.ok(), "{label}: {prune}");
        true
    }

    /// One case of the backup directory full: new data, `room` bytes left, a save.
    fn backup_dir_case(&mut self, full: bool, counts: &mut Counts) {
        let bytes = self.rng.random_range(256 << 10..1536 << 10);
        let link_needs = self.add_noise(bytes, 3);
        // What the backup holds at least: the new random bytes (a link), all of them (full).
        let needs = if full { self.noise_total() } else { link_needs };
        let room = self.rng.random_range(0..needs);
        let label = format!(
            "backup dir full ({}, {room} of at least {needs} bytes free)",
            if full { "--full" } else { "link" }
        );
        eprintln!("case: {label}");
        counts.cases += 1;
        let dir = self.backups();
        self.mounts.leave_room(&dir, room);
        let args: &[&str] = if full {
            &["save", "alpha", "--full"]
        } else {
            &["save", "alpha"]
        };
        let there = dir.display().to_string();
        self.save_without_room(
            &label,
            args,
            &[("BOX_PART_SIZE", &PART_SIZE.to_string())],
            &|said| said.contains(ENOSPC) && said.contains(&there),
            counts,
        );
        self.mounts.resize(&dir, ROOMY);
        if !self.next_save_works(&label, full, None) {
            counts.next_save_failures += 1;
        }
    }

    /// `box <args>`, a save that finds no room: it must fail (exit 1) with words of
    /// which `names_the_fault` holds, and leave as they were the backups' names, the
    /// space used in their directory, the state files; no plaintext, the box running.
    fn save_without_room(
        &mut self,
        label: &str,
        args: &[&str],
        env: &[(&str, &str)],
        names_the_fault: &dyn Fn(&str) -> bool,
        counts: &mut Counts,
    ) {
        let dir = self.backups();
        let (named, used, state) = (self.named(), self.mounts.used(&dir), self.state_files());
        let r = self.run(args, env);
        if r.ok() {
            self.problem(
                label,
                "the save succeeded without the room it needs",
                Some(&r),
            );
        } else if r.code == Some(1)
            && r.stderr.contains("box save alpha failed")
            && names_the_fault(&r.stderr)
        {
            counts.named_enospc += 1;
        } else {
            self.problem(
                label,
                "the save did not say what ran out of space",
                Some(&r),
            );
        }
        let now = self.named();
        if now != named {
            counts.named_leftovers += 1;
            self.problem(
                label,
                &format!("backup names {named:?} became {now:?}"),
                None,
            );
        }
        let hidden = self.hidden(&dir);
        let used_now = self.mounts.used(&dir);
        if !hidden.is_empty() || used_now != used {
            counts.temp_leftovers += 1;
            self.problem(
                label,
                &format!(
                    "left {hidden:?} beside the backups; {used} bytes used before, {used_now} after"
                ),
                None,
            );
        }
        if self.state_files() != state {
            counts.named_leftovers += 1;
            self.problem(label, "a failed save changed the chain state files", None);
        }
        self.left_well(label, counts);
    }

    /// `dir` (of the state dir) on a tmpfs of its own, holding the files it held.
    fn onto_tmpfs(&self, dir: &Path) {
        let held: Vec<(String, Vec<u8>)> = entries(dir)
            .into_iter()
            .map(|e| {
                let bytes = std::fs::read(dir.join(&e)).unwrap();
                (e, bytes)
            })
            .collect();
        assert!(!held.is_empty(), "nothing in {}", dir.display());
        self.mounts.mount_tmpfs(dir, ROOMY);
        for (name, bytes) in &held {
            let to = self.mounts.view(dir).join(name);
            std::fs::write(&to, bytes).unwrap();
            std::fs::set_permissions(&to, std::os::unix::fs::PermissionsExt::from_mode(0o600))
                .unwrap();
        }
    }

    /// Entries starting with '.' in `dir` as box sees it: temporaries.
    fn hidden(&self, dir: &Path) -> Vec<String> {
        entries(&self.mounts.view(dir))
            .into_iter()
            .filter(|e| e.starts_with('.'))
            .collect()
    }

    /// The box's first save, with no room where box keeps its registry rows
    /// (`<state dir>/boxes`): the save records where the box's backups are there (once,
    /// and again whenever that changes). The backup is published; the row is as it was,
    /// box says why it could not record it; the next save, with room, records it.
    fn registry_case(&mut self, counts: &mut Counts) {
        let dir = self.w.home().join("boxes");
        let label = "registry row full (the first save records the backup dir)";
        eprintln!("case: {label}");
        counts.cases += 1;
        self.onto_tmpfs(&dir);
        self.mounts.leave_room(&dir, 0);
        let row = self.mounts.view(&dir).join("alpha.json");
        let before = std::fs::read(&row).unwrap();
        let r = self.run(
            &["save", "alpha"],
            &[("BOX_PART_SIZE", &PART_SIZE.to_string())],
        );
        std::thread::sleep(Duration::from_millis(1100));
        if !r.ok() || self.named().len() != 1 {
            self.problem(label, "the save must publish its backup", Some(&r));
            counts.next_save_failures += 1;
            return;
        }
        if std::fs::read(&row).ok() != Some(before) {
            counts.named_leftovers += 1;
            self.problem(
                label,
                "the row changed though there was no room for it",
                Some(&r),
            );
        }
        if r.stderr.contains("cannot record where its backups are")
            && r.stderr.contains(ENOSPC)
            && r.stderr.contains(&dir.display().to_string())
        {
            counts.named_enospc += 1;
        } else {
            self.problem(
                label,
                "box did not say why it could not record the backup dir",
                Some(&r),
            );
        }
        let hidden = self.hidden(&dir);
        if !hidden.is_empty() {
            counts.temp_leftovers += 1;
            self.problem(label, &format!("left {hidden:?} beside the rows"), None);
        }
        self.left_well(label, counts);
        self.mounts.resize(&dir, ROOMY);
        if !self.next_save_works(label, false, None) {
            counts.next_save_failures += 1;
        } else if self.recorded_backup_dir() != Some(self.backups()) {
            counts.next_save_failures += 1;
            self.problem(label, "the next save did not record the backup dir", None);
        }
    }

    /// One case of the state files' filesystem full: new data (only added, so what the
    /// save keeps there grows), then a save with room for less than it keeps. The tree is
    /// written first, the memo (`.known`) after it, each replacing its old file by a
    /// rename; so with the tree there, no room for it stops the save's record at the
    /// tree. With `memo`, the tree is missing (as after an upgrade) and there is room for
    /// the tree alone: the memo is what finds no room.
    fn state_files_case(&mut self, memo: bool, counts: &mut Counts) {
        let bytes = self.rng.random_range(64 << 10..512 << 10);
        self.add_noise(bytes, usize::MAX);
        let dir = self.trees();
        let tree_pages = (self.state_file("alpha.tree").unwrap().len() as u64).div_ceil(PAGE);
        let room = if memo {
            std::fs::remove_file(self.mounts.view(&dir).join("alpha.tree")).unwrap();
            tree_pages * PAGE
        } else {
            self.rng.random_range(0..tree_pages) * PAGE
        };
        let label = format!(
            "state files full ({room} bytes free; the tree {})",
            if memo { "missing" } else { "there" }
        );
        eprintln!("case: {label}");
        counts.cases += 1;
        self.mounts.leave_room(&dir, room);
        let (named, used) = (self.named(), self.mounts.used(&dir));
        let (tree_before, memo_before) = (
            self.state_file("alpha.tree"),
            self.state_file("alpha.known"),
        );

        let r = self.run(
            &["save", "alpha"],
            &[("BOX_PART_SIZE", &PART_SIZE.to_string())],
        );
        let new: Vec<String> = self
            .named()
            .into_iter()
            .filter(|n| !named.contains(n))
            .collect();
        std::thread::sleep(Duration::from_millis(1100));
        let ([published], true) = (new.as_slice(), r.ok()) else {
            self.problem(
                &label,
                &format!("the backup dir has room: the save must publish one backup, not {new:?}"),
                Some(&r),
            );
            counts.next_save_failures += 1;
            return;
        };
        let published = self.backups().join(published);
        let kept = self.kept_for(&published);
        let tree = Kept::judge(tree_before, self.state_file("alpha.tree"), kept.0);
        let known = Kept::judge(memo_before, self.state_file("alpha.known"), kept.1);
        if tree == Kept::Neither || known == Kept::Neither {
            counts.named_leftovers += 1;
            self.problem(
                &label,
                &format!("a state file is neither the old one nor a whole new one (tree: {tree:?}, memo: {known:?})"),
                Some(&r),
            );
        }
        // The write this case leaves no room for; the other is as said above.
        let hit = if memo {
            tree == Kept::New && known == Kept::Old
        } else {
            tree == Kept::Old && known == Kept::Old
        };
        if !hit {
            self.problem(
                &label,
                &format!(
                    "not the write the case left no room for (tree: {tree:?}, memo: {known:?})"
                ),
                Some(&r),
            );
        } else if r.stderr.contains(ENOSPC) && r.stderr.contains(&dir.display().to_string()) {
            counts.named_enospc += 1;
        } else {
            self.problem(
                &label,
                "a state file was not written and box did not say why",
                Some(&r),
            );
        }
        let hidden = self.hidden(&dir);
        let used_now = self.mounts.used(&dir);
        if !hidden.is_empty() || (tree == Kept::Old && known == Kept::Old && used_now != used) {
            counts.temp_leftovers += 1;
            self.problem(
                &label,
                &format!("left {hidden:?} beside the state files; {used} bytes used before, {used_now} after"),
                None,
            );
        }
        self.left_well(&label, counts);
        self.mounts.resize(&dir, ROOMY);
        // Without the tree of its newest backup, box said the next save is a full one.
        let says = (tree == Kept::Old).then_some("(full: starts a chain)");
        if !self.next_save_works(&label, false, says) {
            counts.next_save_failures += 1;
        }
    }

    /// The state dir as box sees it, to read with box's own readers; and the box's name.
    fn seen_state(&self) -> (box_host::state::StateDir, box_proto::BoxName) {
        (
            box_host::state::StateDir::at(self.mounts.view(&self.w.home())),
            box_proto::BoxName::parse("alpha").unwrap(),
        )
    }

    /// The backup dir the box's registry row records, as box sees the row.
    fn recorded_backup_dir(&self) -> Option<PathBuf> {
        let (state, alpha) = self.seen_state();
        box_host::state::Registry::new(&state)
            .get(&alpha)
            .unwrap()
            .and_then(|record| record.backup_dir)
    }

    /// A chain state file's bytes, as box sees it (`None`: there is none).
    fn state_file(&self, name: &str) -> Option<Vec<u8>> {
        std::fs::read(self.mounts.view(&self.trees()).join(name)).ok()
    }

    /// Whether box's own readers find the tree, and the memo's record, of `published`
    /// in the state dir as box sees it: each is then whole and new.
    fn kept_for(&self, published: &Path) -> (bool, bool) {
        use box_host::backup::tree_cache::{self, Known};
        let digest: [u8; 32] = {
            use sha2::Digest as _;
            sha2::Sha256::digest(std::fs::read(self.mounts.view(published)).unwrap()).into()
        };
        let (state, alpha) = self.seen_state();
        (
            tree_cache::load(&state, &alpha, &digest).is_some(),
            Known::recorded_digest(&state, &alpha, published) == Some(digest),
        )
    }

    /// One case of the guest's disk full mid-export: new data in the box, the guest's
    /// `/root` (where `hb export` writes its parts) left with `room`, a save.
    fn guest_case(&mut self, streaming: bool, counts: &mut Counts) {
        const GUEST_PART: u64 = 256 << 10;
        let bytes = self.rng.random_range(1536 << 10..2560 << 10);
        let new_bytes = self.add_noise(bytes, 3);
        let room = if streaming {
            self.rng.random_range(0..GUEST_PART)
        } else {
            self.rng.random_range(GUEST_PART..new_bytes)
        };
        let label = format!(
            "guest disk full ({}, {room} bytes free for {new_bytes} new random bytes)",
            if streaming { "streaming" } else { "sequential" }
        );
        eprintln!("case: {label}");
        counts.cases += 1;
        self.fill_guest_root(room);
        let part = GUEST_PART.to_string();
        let mut env = vec![("BOX_PART_SIZE", part.as_str())];
        if !streaming {
            env.push(("BOX_STREAM_PARTS", "0"));
        }
        self.save_without_room(
            &label,
            &["save", "alpha"],
            &env,
            &|said| {
                // hb names the full disk, not the file it was archiving when it ran out:
                // SQLite's copy says "the disk is full", the parts "the box's disk is full".
                said.contains("in box 'alpha' failed") && said.contains("disk is full")
            },
            counts,
        );
        self.w.sh("alpha", "rm -f /root/.faults-disk-filler");
        if !self.next_save_works(&label, false, None) {
            counts.next_save_failures += 1;
        }
    }

    /// The guest's `/root` on a tmpfs (once; holding what `/root` held), filled with a
    /// file of zeros but for `room` bytes: what an agent, root in the guest, can do.
    fn fill_guest_root(&self, room: u64) {
        self.w.sh(
            "alpha",
            &format!(
                "set -e
if ! grep -q ' /root tmpfs ' /proc/self/mounts; then
  mkdir -p /mnt/faults-disk
  mount -t tmpfs -o size=64m,mode=0700 faults-disk /mnt/faults-disk
  cp -a /root/. /mnt/faults-disk/
  mount --bind /mnt/faults-disk /root
  umount /mnt/faults-disk
fi
cat /dev/zero > /root/.faults-disk-filler 2>/dev/null || true
truncate -s -{room} /root/.faults-disk-filler"
            ),
        );
    }
}

#[test]
fn full_disks_fail_naming_enospc_leave_nothing_and_the_next_save_works() {
    if !prerequisites() {
        return;
    }
    let _serial = serial();
    let (heavy, seed) = save_load_support::fault_run("faults_disk");
    let (dir_cases, state_cases, guest_cases) = if heavy { (40, 6, 8) } else { (8, 2, 2) };

    let w = World::with_box("alpha");
    let mut bench = Bench {
        w: &w,
        mounts: PrivateMounts::new(),
        rng: StdRng::seed_from_u64(seed),
        noise: Vec::new(),
        made: 0,
        problems: Vec::new(),
    };
    // The backup dir a tmpfs, roomy for the first full save.
    bench.mounts.mount_tmpfs(&w.backups(), ROOMY);
    w.sh(
        "alpha",
        &format!("set -e; mkdir -p {PROJ}; seq 1 100000 > {PROJ}/notes.md"),
    );
    bench.add_noise(2 << 20, 3);
    let mut registry_counts = Counts::default();
    bench.registry_case(&mut registry_counts);

    let mut dir_counts = Counts::default();
    for i in 0..dir_cases {
        // Every third one --full.
        let full = i % 3 == 2;
        bench.backup_dir_case(full, &mut dir_counts);
    }

    bench.onto_tmpfs(&bench.trees());
    let mut state_counts = Counts::default();
    for i in 0..state_cases {
        bench.state_files_case(i % 2 == 1, &mut state_counts);
    }

    let mut guest_counts = Counts::default();
    for i in 0..guest_cases {
        bench.guest_case(i % 2 == 0, &mut guest_counts);
    }

    let rows = [
        ("backup dir", &dir_counts),
        ("state: registry row", &registry_counts),
        ("state: chain tree and memo", &state_counts),
        ("guest disk", &guest_counts),
    ];
    let table = table(&rows);
    eprintln!("faults_disk (seed {seed}):\n{table}");
    assert!(
        bench.problems.is_empty(),
        "{} problem(s) (seed {seed}):\n{}\n{table}",
        bench.problems.len(),
        bench.problems.join("\n---\n")
    );
    for (what, c) in rows {
        assert_eq!(
            c.named_enospc, c.cases,
            "{what}: every one names ENOSPC\n{table}"
        );
    }
    drop(bench);
    w.scan_secrets();
}
