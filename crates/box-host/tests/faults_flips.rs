//! Faults counted (issue 42): bit flips, truncations, zeroed blocks, missing and foreign
//! files, against backups `box save` wrote through the simulator with the real `hb`.
//!
//! Four backup shapes are saved once: a full backup; a chain of three links; a full backup
//! of many parts (a 64 KiB `BOX_PART_SIZE`: parts above 4 GiB, simulated by a small part
//! size); a chain whose link holds a 3 MiB file in blocks (`BACKUP_BLOCK_FILES_ABOVE=1M`).
//! Each case copies one shape's files into the backup directory, damages one file (one
//! random bit flipped at a random offset; a cut at a random length; a zeroed 4 KiB block; or
//! a bit of the OpenPGP headers or of the encrypted start that holds the sealed host facts),
//! then runs `box backups check --read-data`, `box extract` and `box load` on the newest
//! link. Each must refuse, naming the damaged file; `box load` before any machine exists;
//! nothing may be left beside the target or in the scratch dirs; and an extract that
//! succeeds anyway must be byte for byte the clean one (else it is a wrong restore).
//!
//! Then the files themselves: a link deleted from the middle of a chain, a link copied
//! into another box's backup directory, two chains mixed in one directory, a backup
//! renamed: `box backups check` reports each exactly, and `box backups prune` keeps
//! everything a kept backup stands on.
//!
//! 50 damage cases in all by default, spread over the shapes; `BOX_HEAVY_FAULTS=1` runs
//! 1,000 per shape. `FAULTS_SEED=<n>` replays a run (the seed is printed).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod backup_support;
mod save_load_support;

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use backup_support::{Tree, snapshot};
use box_proto::BoxName;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use save_load_support::{Run, World, prerequisites, serial};

const PROJ: &str = "/data/home/agent/workspace/proj";

/// One backup shape: its files, oldest first (the last is the one restored), kept aside.
struct Shape {
    name: &'static str,
    files: Vec<PathBuf>,
    /// Whether the last save's record of its chain (file digests and places) is kept in
    /// the state dir while it is checked: only for the chain the last save extended.
    recorded: bool,
    /// `box extract` of the undamaged shape.
    clean: Tree,
}

impl Shape {
    fn newest(&self) -> &Path {
        self.files.last().unwrap()
    }
}

/// What is done to one file of a shape.
#[derive(Debug, Clone, Copy)]
enum Damage {
    Flip { at: u64, bit: u8 },
    Cut { to: u64 },
    ZeroBlock { at: u64 },
}

impl Damage {
    /// Whether it flips a bit of the key packet (SKESK: cipher, S2K salt and count, the
    /// encrypted session key) of `original`, an undamaged file box wrote.
    fn flips_key_packet(self, original: &[u8]) -> bool {
        // A new-format packet header, as box writes it: tag, then a one-byte length
        // (below 192) or a two-byte one (192..=223).
        let end = match original[1] {
            len @ 0..192 => 2 + len as u64,
            first @ 192..224 => 3 + ((first as u64 - 192) << 8) + original[2] as u64 + 192,
            other => panic!("a key packet length box does not write: {other:#x}"),
        };
        assert_eq!(original[0], 0xC3, "a new-format SKESK packet first");
        matches!(self, Damage::Flip { at, .. } if at < end)
    }

    fn apply(self, file: &Path) {
        let mut bytes = std::fs::read(file).unwrap();
        match self {
            Damage::Flip { at, bit } => bytes[at as usize] ^= 1 << bit,
            Damage::Cut { to } => bytes.truncate(to as usize),
            Damage::ZeroBlock { at } => {
                let end = (at as usize + 4096).min(bytes.len());
                bytes[at as usize..end].fill(0);
            }
        }
        std::fs::write(file, bytes).unwrap();
    }
}

fn name(p: &Path) -> String {
    p.file_name().unwrap().to_string_lossy().into_owned()
}

fn copy(from: &Path, to: &Path) {
    std::fs::copy(from, to).unwrap_or_else(|e| panic!("cp {from:?} {to:?}: {e}"));
}

/// Every entry of `dir`, sorted (none when it does not exist).
fn entries(dir: &Path) -> Vec<String> {
    backup_support::listing(dir)
}

/// Counts of one row of the table.
#[derive(Default)]
struct Counts {
    cases: usize,
    check_refused: usize,
    extract_refused: usize,
    load_refused: usize,
    /// An extract that succeeded with a tree other than the clean one: must stay 0.
    wrong_restores: usize,
    /// An extract that succeeded with exactly the clean tree (possible only when the
    /// damage hit bytes nothing reads): counted, never taken for a refusal.
    identical_accepts: usize,
    /// Files left in the target's dir, the scratch dirs or beside the backups after a
    /// refusal: must stay 0.
    leftovers: usize,
}

/// The test's world: one box `alpha`, the shapes, and where each case runs.
struct Bench<'a> {
    w: &'a World,
    /// The last save's record of its chain, kept aside: installed while that chain is
    /// checked, removed for the others (which it would report missing).
    memo: (PathBuf, Vec<u8>),
    /// The parent of each extract's target: must be empty after every case.
    extracts: PathBuf,
    problems: Vec<String>,
}

impl Bench<'_> {
    /// The backup dir holding exactly `files` (copied from the store), the saves' record
    /// of them there when `recorded`.
    fn stage(&self, files: &[&Path], recorded: bool) {
        let (memo, record) = &self.memo;
        if recorded {
            std::fs::write(memo, record).unwrap();
        } else if memo.exists() {
            std::fs::remove_file(memo).unwrap();
        }
        let dir = self.w.backups();
        std::fs::remove_dir_all(&dir).unwrap();
        std::fs::create_dir(&dir).unwrap();
        for f in files {
            copy(f, &dir.join(name(f)));
        }
    }

    fn staged(&self, file: &Path) -> PathBuf {
        self.w.backups().join(name(file))
    }

    fn extract(&self, file: &Path) -> (Run, PathBuf) {
        let target = self.extracts.join("out");
        let r = self.w.run(
            &["extract", file.to_str().unwrap(), target.to_str().unwrap()],
            &[],
        );
        (r, target)
    }

    /// What a refused verb left: entries beside the extract target, in box's scratch and
    /// TMPDIR, temporaries beside the backups.
    fn leftovers(&self) -> Vec<String> {
        let mut left = Vec::new();
        for (what, dir) in [
            ("beside the target", self.extracts.clone()),
            ("in the state dir's scratch", self.w.home().join("tmp")),
            ("in TMPDIR", self.w.tmp()),
        ] {
            left.extend(entries(&dir).into_iter().map(|e| format!("{e} {what}")));
        }
        left.extend(
            entries(&self.w.backups())
                .into_iter()
                .filter(|e| e.starts_with('.'))
                .map(|e| format!("{e} beside the backups")),
        );
        left
    }

    fn clear_leftovers(&self) {
        for dir in [
            self.extracts.clone(),
            self.w.home().join("tmp"),
            self.w.tmp(),
        ] {
            for e in entries(&dir) {
                let p = dir.join(e);
                let _ = std::fs::remove_dir_all(&p).or_else(|_| std::fs::remove_file(&p));
            }
        }
    }

    /// One damaged case of `shape`: `damage` applied to its file `victim`, then the three
    /// verbs on the newest link. Every failed expectation is recorded as a problem.
    fn case(&mut self, shape: &Shape, victim: usize, damage: Damage, counts: &mut Counts) {
        let files: Vec<&Path> = shape.files.iter().map(PathBuf::as_path).collect();
        self.stage(&files, shape.recorded);
        let damaged = self.staged(&shape.files[victim]);
        damage.apply(&damaged);
        let newest = self.staged(shape.newest());
        let label = format!("{} {damage:?} in {}", shape.name, name(&damaged));
        let victim_name = name(&damaged);
        counts.cases += 1;
        // A lone file whose key packet is damaged: a changed salt, S2K count or encrypted
        // session key derives another key, exactly as another passphrase does, and with no
        // other file of the box that the passphrase opens nothing can tell the two apart.
        // There, and only there, `backups check` cannot say "damaged": it must fail (exit
        // 1) naming the file and both causes.
        let undecidable = shape.files.len() == 1
            && damage.flips_key_packet(&std::fs::read(&shape.files[victim]).unwrap());

        // box backups check --read-data: a damage report (exit 3) naming the file.
        let r = self
            .w
            .run(&["backups", "check", "alpha", "--read-data"], &[]);
        if r.code != Some(0) {
            counts.check_refused += 1;
        }
        let names_it = r
            .stdout
            .lines()
            .any(|l| l.trim_start().starts_with("damaged") && l.contains(&victim_name));
        let both_causes = r.code == Some(1)
            && r.stderr.contains(&victim_name)
            && r.stderr.contains("wrong passphrase")
            && r.stderr.contains("damaged");
        if (r.code != Some(3) || !names_it) && !(undecidable && both_causes) {
            self.problems.push(format!(
                "{label}: box backups check --read-data did not report it damaged:\n{}",
                r.all()
            ));
        }
        self.note_leftovers(&label, "backups check", counts);

        // box extract of the newest link: refused naming the file, or the clean tree.
        let (r, target) = self.extract(&newest);
        if r.ok() {
            if snapshot(&target) == shape.clean {
                counts.identical_accepts += 1;
                self.problems.push(format!(
                    "{label}: box extract accepted it (an identical restore): {}",
                    r.all()
                ));
            } else {
                counts.wrong_restores += 1;
                self.problems.push(format!(
                    "{label}: box extract gave a WRONG restore: {}",
                    r.all()
                ));
            }
            std::fs::remove_dir_all(&target).unwrap();
        } else {
            counts.extract_refused += 1;
            if !r.stderr.contains(&victim_name) || r.code != Some(1) {
                self.problems.push(format!(
                    "{label}: box extract refused without naming {victim_name}:\n{}",
                    r.all()
                ));
            }
            self.note_leftovers(&label, "extract", counts);
        }

        // box load of the newest link: refused before any machine is made.
        let calls = self.w.calls().len();
        let r = self.w.run(&["load", newest.to_str().unwrap(), "beta"], &[]);
        let created = self
            .w
            .calls_since(calls)
            .into_iter()
            .any(|c| c.contains("machine create"));
        if r.ok() {
            self.problems
                .push(format!("{label}: box load accepted it: {}", r.all()));
            let _ = self.w.run(&["rm", "beta", "--force"], &[]);
        } else {
            counts.load_refused += 1;
            if !r.stderr.contains(&victim_name) || r.code != Some(1) {
                self.problems.push(format!(
                    "{label}: box load refused without naming {victim_name}:\n{}",
                    r.all()
                ));
            }
            if created || self.w.registered("beta") || self.w.machines().len() != 1 {
                self.problems.push(format!(
                    "{label}: box load made a machine or a box before refusing: {}",
                    r.all()
                ));
                let _ = self.w.run(&["rm", "beta", "--force"], &[]);
            }
            self.note_leftovers(&label, "load", counts);
        }
    }

    fn note_leftovers(&mut self, label: &str, verb: &str, counts: &mut Counts) {
        let left = self.leftovers();
        if !left.is_empty() {
            counts.leftovers += 1;
            self.problems.push(format!("{label}: {verb} left {left:?}"));
            self.clear_leftovers();
        }
    }
}

/// The sizes of a shape's files, in order.
fn sizes(shape: &Shape) -> Vec<u64> {
    shape
        .files
        .iter()
        .map(|f| std::fs::metadata(f).unwrap().len())
        .collect()
}

/// `n` random cases of `shape`: mostly single bit flips (in each link in turn), one cut at
/// a random length and one zeroed 4 KiB block (4 KiB-aligned, as a disk loses a sector).
fn random_cases(rng: &mut StdRng, shape: &Shape, n: usize) -> Vec<(usize, Damage)> {
    let sizes = sizes(shape);
    let mut cases = Vec::new();
    for i in 0..n {
        let victim = i % sizes.len();
        let len = sizes[victim];
        cases.push((
            victim,
            Damage::Flip {
                at: rng.random_range(0..len),
                bit: rng.random_range(0..8),
            },
        ));
    }
    let victim = rng.random_range(0..sizes.len());
    cases.push((
        victim,
        Damage::Cut {
            to: rng.random_range(0..sizes[victim]),
        },
    ));
    let victim = rng.random_range(0..sizes.len());
    cases.push((
        victim,
        Damage::ZeroBlock {
            at: rng.random_range(0..sizes[victim].div_ceil(4096)) * 4096,
        },
    ));
    cases
}

/// Flips in the head of the full backup: the OpenPGP packet headers (the SKESK with its
/// cipher and S2K salt and count, the SEIPD header) and the start of the encrypted data,
/// which holds the sealed host-facts frame. One random bit in each of the first bytes.
fn head_cases(rng: &mut StdRng, bytes: u64) -> Vec<(usize, Damage)> {
    (0..bytes)
        .map(|at| {
            (
                0,
                Damage::Flip {
                    at,
                    bit: rng.random_range(0..8),
                },
            )
        })
        .collect()
}

fn table(rows: &[(String, Counts)]) -> String {
    let mut t = String::from(
        "| shape | cases | check refused | extract refused | load refused | wrong restores | identical accepts | leftovers |\n|---|---|---|---|---|---|---|---|\n",
    );
    for (shape, c) in rows {
        writeln!(
            t,
            "| {shape} | {} | {} | {} | {} | {} | {} | {} |",
            c.cases,
            c.check_refused,
            c.extract_refused,
            c.load_refused,
            c.wrong_restores,
            c.identical_accepts,
            c.leftovers
        )
        .unwrap();
    }
    t
}

/// `box save alpha` with `env`, which must succeed and say `words`; returns the new file.
fn save(w: &World, args: &[&str], env: &[(&str, &str)], words: &str) -> PathBuf {
    let before = w.backups_published();
    let mut argv = vec!["save", "alpha"];
    argv.extend_from_slice(args);
    let r = w.run(&argv, env);
    assert!(
        r.ok() && r.stdout.contains(words),
        "box save {args:?}: {}",
        r.all()
    );
    let new: Vec<_> = w
        .backups_published()
        .into_iter()
        .filter(|p| !before.contains(p))
        .collect();
    assert_eq!(new.len(), 1, "{new:?}");
    // Backups are named by the second: the next save must not share one.
    std::thread::sleep(std::time::Duration::from_millis(1100));
    new[0].clone()
}

const BLOCKS: &str = "blocks link";
const PART_1M: (&str, &str) = ("BOX_PART_SIZE", "1048576");

/// Saves the four shapes through the simulator and keeps their files in `store`.
fn make_shapes(w: &World, store: &Path) -> Vec<(&'static str, Vec<PathBuf>)> {
    w.sh(
        "alpha",
        &format!(
            "set -e; mkdir -p {PROJ} && cd {PROJ}; printf 'v1\\n' > notes.md
             head -c 300000 /dev/urandom > data.bin; chown -R agent:agent /data/home/agent/workspace"
        ),
    );
    let a1 = save(w, &[], &[PART_1M], "(full: starts a chain)");
    w.sh(
        "alpha",
        &format!(
            "cd {PROJ} && head -c 100000 /dev/urandom > more.bin && printf 'v2\\n' > notes.md"
        ),
    );
    let a2 = save(w, &[], &[PART_1M], "(incremental: link 2 of its chain)");
    w.sh(
        "alpha",
        &format!("cd {PROJ} && printf 'v3\\n' > notes.md && rm data.bin"),
    );
    let a3 = save(w, &[], &[PART_1M], "(incremental: link 3 of its chain)");

    // Many parts: 64 KiB each over ~0.5 MB of data that does not compress.
    w.sh(
        "alpha",
        &format!("cd {PROJ} && head -c 400000 /dev/urandom > parts.bin"),
    );
    let p1 = save(
        w,
        &["--full"],
        &[("BOX_PART_SIZE", "65536")],
        "(full: starts a chain)",
    );

    // A 3 MiB file in 1 MiB blocks; the link holds the one block that changed.
    std::fs::write(
        w.config(),
        std::fs::read_to_string(w.config()).unwrap() + "BACKUP_BLOCK_FILES_ABOVE=1M\n",
    )
    .unwrap();
    w.sh(
        "alpha",
        &format!("cd {PROJ} && rm parts.bin && head -c 3145728 /dev/urandom > big.img"),
    );
    let b1 = save(w, &["--full"], &[PART_1M], "(full: starts a chain)");
    w.sh(
        "alpha",
        &format!(
            "cd {PROJ} && head -c 5000 /dev/urandom | dd of=big.img bs=1 seek=1500000 conv=notrunc status=none"
        ),
    );
    let b2 = save(w, &[], &[PART_1M], "(incremental: link 2 of its chain)");
    let b2_size = std::fs::metadata(&b2).unwrap().len();
    assert!(
        (1 << 20) < b2_size && b2_size < (2 << 20),
        "the link holds one 1 MiB block of big.img, not all of it: {b2_size} bytes"
    );

    let keep = |shape: &'static str, files: &[&PathBuf]| {
        let dir = store.join(shape);
        std::fs::create_dir_all(&dir).unwrap();
        let kept = files
            .iter()
            .map(|f| {
                let to = dir.join(name(f));
                copy(f, &to);
                to
            })
            .collect();
        (shape, kept)
    };
    vec![
        keep("full", &[&a1]),
        keep("chain of 3", &[&a1, &a2, &a3]),
        keep("parts (64 KiB)", &[&p1]),
        keep(BLOCKS, &[&b1, &b2]),
    ]
}

#[test]
fn damaged_backups_are_refused_and_counted() {
    if !prerequisites() {
        return;
    }
    let _serial = serial();
    let (heavy, seed) = save_load_support::fault_run("faults_flips");
    let mut rng = StdRng::seed_from_u64(seed);

    let w = World::with_box("alpha");
    let store = w.dir.path().join("shapes");
    let made = make_shapes(&w, &store);
    let memo = box_host::backup::tree_cache::kept_at(&w.state(), &BoxName::parse("alpha").unwrap())
        .with_extension("known");
    let record = std::fs::read(&memo).expect("the last save's record of its chain");
    let mut bench = Bench {
        w: &w,
        memo: (memo, record),
        extracts: w.dir.path().join("extracts"),
        problems: Vec::new(),
    };
    std::fs::create_dir_all(&bench.extracts).unwrap();

    // Each shape undamaged: checks sound, and its extract is what a damaged one must equal.
    let mut shapes = Vec::new();
    for (shape, files) in made {
        let refs: Vec<&Path> = files.iter().map(PathBuf::as_path).collect();
        // The blocks chain is the one the last save extended.
        let recorded = shape == BLOCKS;
        bench.stage(&refs, recorded);
        let r = w.run(&["backups", "check", "alpha", "--read-data"], &[]);
        assert!(r.ok(), "{shape} undamaged: {}", r.all());
        let (r, target) = bench.extract(&bench.staged(files.last().unwrap()));
        assert!(r.ok(), "{shape} undamaged: {}", r.all());
        let clean = snapshot(&target);
        std::fs::remove_dir_all(&target).unwrap();
        shapes.push(Shape {
            name: shape,
            files,
            recorded,
            clean,
        });
    }

    // 50 in all by default (2 of each shape are the cut and the zeroed block).
    let per_shape = |i: usize| if heavy { 1000 } else { [10, 13, 10, 9][i] };
    let mut rows = Vec::new();
    for (i, shape) in shapes.iter().enumerate() {
        let mut counts = Counts::default();
        for (victim, damage) in random_cases(&mut rng, shape, per_shape(i)) {
            bench.case(shape, victim, damage, &mut counts);
        }
        rows.push((shape.name.to_string(), counts));
    }
    let mut counts = Counts::default();
    for (victim, damage) in head_cases(&mut rng, if heavy { 400 } else { 24 }) {
        bench.case(&shapes[0], victim, damage, &mut counts);
    }
    rows.push(("full: head (OpenPGP headers, sealed facts)".into(), counts));

    let table = table(&rows);
    eprintln!("faults_flips (seed {seed}):\n{table}");
    let total_cases: usize = rows.iter().map(|(_, c)| c.cases).sum();
    assert!(total_cases >= 50, "{total_cases} cases");
    assert!(
        bench.problems.is_empty(),
        "{} problem(s) (seed {seed}):\n{}\n{table}",
        bench.problems.len(),
        bench.problems.join("\n---\n")
    );
    w.scan_secrets();
}

/// `box backups check alpha --read-data` (or `--all`), for the files cases.
fn check_all(w: &World, who: &str) -> Run {
    w.run(&["backups", "check", who, "--read-data"], &[])
}

/// Registers `beta` without a VM, its backups in `dir` (another box's backup directory).
fn register_beta(w: &World, dir: &Path) {
    use box_host::state::{BoxRecord, Registry};
    Registry::new(&w.state())
        .insert(&BoxRecord {
            name: BoxName::parse("beta").unwrap(),
            machine: "beta".into(),
            web_port: None,
            created_at: "2026-12-01T09:00:00Z".into(),
            box_version: "test".into(),
            base_image: "debian:12".into(),
            incomplete: false,
            kept_after_failure: None,
            machine_label: None,
            host: None,
            containment: None,
            backup_dir: Some(dir.to_path_buf()),
        })
        .unwrap();
}

#[test]
fn missing_and_foreign_files_are_reported_and_prune_keeps_what_kept_ones_need() {
    if !prerequisites() {
        return;
    }
    let _serial = serial();
    let w = World::with_box("alpha");
    let store = w.dir.path().join("shapes");
    let made = make_shapes(&w, &store);
    let memo = box_host::backup::tree_cache::kept_at(&w.state(), &BoxName::parse("alpha").unwrap())
        .with_extension("known");
    std::fs::remove_file(&memo).unwrap();
    let chain3 = &made[1].1;
    let blocks = &made[3].1;
    let bench = Bench {
        w: &w,
        memo: (memo.clone(), Vec::new()),
        extracts: w.dir.path().join("extracts"),
        problems: Vec::new(),
    };
    let n = |i: usize| name(&chain3[i]);
    let line = |r: &Run, starts: &str, file: &str| -> String {
        r.stdout
            .lines()
            .find(|l| l.trim_start().starts_with(starts) && l.contains(file))
            .unwrap_or_else(|| panic!("no '{starts}' line of {file}: {}", r.all()))
            .to_string()
    };

    // A link deleted from the middle of a chain: the last link incomplete, the missing
    // one named by its place and digest, with what it takes down.
    bench.stage(&[&chain3[0], &chain3[2]], false);
    let r = check_all(&w, "alpha");
    assert_eq!(r.code, Some(3), "{}", r.all());
    assert!(line(&r, "sound", &n(0)).contains("the full backup of its chain"));
    assert!(
        line(&r, "incomplete", &n(2))
            .contains("link 3 of its chain: stands on link 2 of the chain, which is missing"),
        "{}",
        r.all()
    );
    assert!(
        line(&r, "missing", "link 2 of a chain").contains(&format!(
            "{} names it as its parent; it takes down {}",
            n(2),
            n(2)
        )),
        "{}",
        r.all()
    );
    assert!(
        r.stdout
            .contains("1 sound, 0 damaged, 1 incomplete, 1 missing link(s)")
    );
    // Prune keeps the unjudged link and, as the README promises, everything before it:
    // the missing link may come back, and then the link stands on the full backup again.
    let r = w.run(&["backups", "prune", "alpha", "--keep-last", "1"], &[]);
    assert!(r.ok(), "{}", r.all());
    assert!(
        r.stderr
            .contains(&format!("keeping {} and every backup it stands on", n(2))),
        "{}",
        r.all()
    );
    assert_eq!(
        entries(&w.backups()),
        vec![n(0), n(2)],
        "prune removed what the kept link stands on: {}",
        r.all()
    );

    // Two chains mixed in one directory: each link found by digest, all sound.
    let all: Vec<&Path> = chain3.iter().chain(blocks).map(PathBuf::as_path).collect();
    bench.stage(&all, false);
    let r = check_all(&w, "alpha");
    assert!(r.ok(), "{}", r.all());
    for (f, place) in [
        (&chain3[0], "the full backup of its chain"),
        (&chain3[1], "link 2 of its chain"),
        (&chain3[2], "link 3 of its chain"),
        (&blocks[0], "the full backup of its chain"),
        (&blocks[1], "link 2 of its chain"),
    ] {
        assert!(line(&r, "sound", &name(f)).contains(place), "{}", r.all());
    }
    assert!(
        r.stdout
            .contains("5 sound, 0 damaged, 0 incomplete, 0 missing link(s): all sound")
    );
    // Prune of the newest (the blocks chain's link) keeps its full backup too.
    let r = w.run(&["backups", "prune", "alpha", "--keep-last", "1"], &[]);
    assert!(r.ok(), "{}", r.all());
    assert_eq!(
        entries(&w.backups()),
        vec![name(&blocks[0]), name(&blocks[1])]
    );

    // A backup renamed: the middle link given a later name than its child's. The child
    // is damaged, naming both files; prune keeping the renamed one keeps its full backup,
    // and keeps the child it cannot judge with everything before it.
    bench.stage(&all, false);
    let renamed = "alpha-20300101-000000.tar.zst.gpg";
    std::fs::rename(bench.staged(&chain3[1]), w.backups().join(renamed)).unwrap();
    let r = check_all(&w, "alpha");
    assert_eq!(r.code, Some(3), "{}", r.all());
    let child = line(&r, "damaged", &n(2));
    assert!(
        child.contains(&format!("names {}", w.backups().join(renamed).display()))
            && child.contains("as its parent, which is not older: not a chain box saved"),
        "{}",
        r.all()
    );
    assert!(line(&r, "sound", renamed).contains("link 2 of its chain"));
    let r = w.run(&["backups", "prune", "alpha", "--keep-last", "1"], &[]);
    assert!(r.ok(), "{}", r.all());
    let mut kept = vec![n(0), n(2), renamed.to_string()];
    kept.sort();
    assert_eq!(entries(&w.backups()), kept, "{}", r.all());

    // A link copied into another box's backup directory: there, it is incomplete (its
    // full backup is not beside it); the original chain stays sound; prune removes
    // nothing a copy of a link could stand on.
    bench.stage(&all, false);
    let other = w.dir.path().join("beta-backups");
    std::fs::create_dir(&other).unwrap();
    register_beta(&w, &other);
    copy(&chain3[1], &other.join(n(1)));
    let r = w.run(&["backups", "check", "--all", "--read-data"], &[]);
    assert_eq!(r.code, Some(3), "{}", r.all());
    let (here, there) = r
        .stdout
        .split_once(&format!("\nalpha in {}", other.display()))
        .unwrap_or_else(|| panic!("a section for {}: {}", other.display(), r.all()));
    assert!(
        here.contains(&format!("sound       {}  link 2 of its chain", n(1))),
        "{}",
        r.all()
    );
    assert!(
        there.contains(&format!(
            "incomplete  {}  link 2 of its chain: stands on the full backup of the chain, which is missing",
            n(1)
        )) && there.contains(&format!("it takes down {}", n(1))),
        "{}",
        r.all()
    );
    assert!(
        r.stdout
            .contains("5 sound, 0 damaged, 1 incomplete, 1 missing link(s)")
    );
    // Every box's places, so the copy is seen beside the original (a prune of alpha
    // alone looks only in alpha's directory).
    let r = w.run(&["backups", "prune", "--keep-last", "1"], &[]);
    assert!(
        r.ok() && r.stderr.contains("box never forks a chain"),
        "{}",
        r.all()
    );
    assert_eq!(entries(&w.backups()).len(), 5, "{}", r.all());
    assert_eq!(entries(&other), vec![n(1)]);
    w.scan_secrets();
}
