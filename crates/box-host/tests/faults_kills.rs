//! Faults counted (issue 42): kills. `box save`, `load`, `new`, `clone`, `rm` and `base
//! build` SIGKILLed at a random moment, through the simulator with the real `hb`.
//!
//! Each verb's uninterrupted duration is measured once; each case then starts the verb and
//! SIGKILLs the `box` process alone (`kill -9 PID` from another terminal, or the OOM
//! killer: not its process group, which only a terminal's Ctrl-C reaches) at a uniformly
//! random moment of that duration. The smolvm calls in flight are left to end as they
//! would; then, after each kill:
//!
//! * no named partial backup: every new file in the backup dir is one `box backups check
//!   --read-data` calls sound;
//! * no smolvm machine the registry does not know, or else `box doctor` names it with its
//!   way out and `box doctor --fix` removes it;
//! * no box lost from the registry (every box there before but the one `rm` removes);
//! * the same command run again succeeds, after what box's own words say to do when the
//!   first retry is refused (an incomplete row: `box rm NAME --force`; a machine no row
//!   names: `box doctor --fix`); a retry refused because the killed run had done all its
//!   work (the box is there and complete; `rm`: it is gone) is that run's success;
//! * then no plaintext on the host (box's scratch, TMPDIR, temporaries beside the backups)
//!   nor in the guests' scratch, and `alpha` (the box saved and cloned) running unpaused.
//!   A SIGKILL cannot clean up: what it left is counted ("at the kill") and must be gone
//!   once the same command ran again (the next save, load or clone sweeps it).
//!
//! And a SIGKILL of the simulator's machine itself (its supervisor, the VM process) in the
//! middle of a save: the save fails naming the box, nothing is published, and after `box
//! start` the next save works.
//!
//! 30 cases by default (one of them a base build, of a small base: no Executor);
//! `BOX_HEAVY_FAULTS=1` runs 300. `FAULTS_SEED=<n>` replays a run (the seed is printed).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod save_load_support;

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use box_host::state::Registry;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use save_load_support::{Run, World, prerequisites, serial};

const PART: (&str, &str) = ("BOX_PART_SIZE", "1048576");

/// Data that needs at least three 1 MiB parts.
const DATA: &str = "set -e; mkdir -p /data/home/agent/workspace; head -c 2600000 /dev/urandom > /data/home/agent/workspace/blob; printf 'keep me\\n' > /data/home/agent/workspace/note; chown -R agent:agent /data/home/agent/workspace";

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Verb {
    Save,
    Load,
    New,
    Clone,
    Rm,
    BaseBuild,
}

impl Verb {
    const ALL: [Verb; 6] = [
        Verb::Save,
        Verb::Load,
        Verb::New,
        Verb::Clone,
        Verb::Rm,
        Verb::BaseBuild,
    ];

    fn label(self) -> &'static str {
        match self {
            Verb::Save => "save",
            Verb::Load => "load",
            Verb::New => "new",
            Verb::Clone => "clone",
            Verb::Rm => "rm",
            Verb::BaseBuild => "base build",
        }
    }

    /// Cases of this verb: 30 in all by default, 300 heavy. A base build is the slow one
    /// (one case in CI); an rm the quick one.
    fn cases(self, heavy: bool) -> usize {
        match (self, heavy) {
            (Verb::BaseBuild, false) => 1,
            (Verb::BaseBuild, true) => 20,
            (Verb::Rm, false) => 7,
            (Verb::Save | Verb::New, false) => 6,
            (_, false) => 5,
            (_, true) => 56,
        }
    }

    /// Whether it quiesces alpha (whose Executor must run unpaused after the rerun).
    fn touches_alpha(self) -> bool {
        matches!(self, Verb::Save | Verb::Clone)
    }

    /// Whether a killed run of it makes a box named by the case (its target).
    fn makes_a_box(self) -> bool {
        matches!(self, Verb::Load | Verb::New | Verb::Clone)
    }
}

/// One row of the table.
#[derive(Default)]
struct Counts {
    cases: usize,
    /// Cases where box was still running when the SIGKILL came (the others had finished).
    killed: usize,
    /// Every invariant held.
    clean: usize,
    /// New files in the backup dir that are not sound backups.
    named_partials: usize,
    /// Cases that left scratch (plaintext parts, their dir) or temporaries on the host at the
    /// kill (a SIGKILL runs no cleanup): the next save, load or clone sweeps them.
    /// Informative.
    left_at_kill: usize,
    /// Plaintext or temporaries still there after the same command ran again.
    plaintext_left: usize,
    /// Machines smolvm lists that no registry row names, after the kill.
    unknown_machines: usize,
    /// ... of which `box doctor` named with its way out and `box doctor --fix` removed.
    unknown_fixed: usize,
    /// Boxes registered before the kill (but the one `rm` removes) and not after.
    lost_boxes: usize,
    /// The retry was refused, saying what to do first (informative).
    advised: usize,
    /// The same command, after what box said to do, still failed.
    rerun_failures: usize,
    /// `alpha` paused or not running after the rerun.
    alpha_unhealthy: usize,
}

/// The registry now: (box name, machine, incomplete) of every row; corrupt records as
/// problems.
fn rows(w: &World) -> (Vec<(String, String, bool)>, Vec<String>) {
    let listing = Registry::new(&w.state()).list().unwrap();
    let rows = listing
        .records
        .iter()
        .map(|r| (r.name.to_string(), r.machine.clone(), r.incomplete))
        .collect();
    let corrupt = listing
        .corrupt
        .iter()
        .map(|c| format!("{}: {}", c.path.display(), c.problem))
        .collect();
    (rows, corrupt)
}

/// Names of the machines smolvm lists.
fn machine_names(w: &World) -> BTreeSet<String> {
    w.machines().into_iter().map(|(n, _)| n).collect()
}

/// Whether `pid` is gone (or a zombie nobody reaped yet).
fn gone(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
    }
}

/// pids of the smolvm calls logged since call `from`.
fn call_pids(w: &World, from: usize) -> Vec<i32> {
    let text = std::fs::read_to_string(w.sim_home().join("calls.jsonl")).unwrap_or_default();
    text.lines()
        .skip(from)
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter_map(|v| v["pid"].as_i64())
        .map(|p| p as i32)
        .collect()
}

/// Waits (at most `limit`) until the smolvm calls logged since call `from` have ended.
fn calls_ended(w: &World, from: usize, limit: Duration) -> bool {
    let pids = call_pids(w, from);
    let start = Instant::now();
    while !pids.iter().all(|p| gone(*p)) {
        if start.elapsed() > limit {
            return false;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    true
}

/// A box.env beside the world's for a small base: no Executor.
fn small_base_config(w: &World) -> PathBuf {
    let path = w.dir.path().join("small.env");
    std::fs::write(
        &path,
        std::fs::read_to_string(w.config())
            .unwrap()
            .replace("INSTALL_EXECUTOR=1", "INSTALL_EXECUTOR=0"),
    )
    .unwrap();
    path
}

/// The test's world: `alpha` (saved and cloned), the backup loads read, spare boxes for
/// `rm`, and what went wrong.
struct Bench<'a> {
    w: &'a World,
    /// A backup of alpha, outside the backup dir (which save cases empty of their files).
    backup: String,
    /// box.env of the small base: no Executor.
    small_config: String,
    /// Complete boxes left by reruns, for `rm` cases.
    spare: Vec<String>,
    next: usize,
    problems: Vec<String>,
}

impl Bench<'_> {
    fn fresh_name(&mut self, prefix: &str) -> String {
        self.next += 1;
        format!("{prefix}{}", self.next)
    }

    fn problem(&mut self, label: &str, what: String) {
        self.problems.push(format!("{label}: {what}"));
    }

    /// The verb's argv and environment, and the box it acts on (what rm removes, what
    /// new/load/clone make).
    fn prepare(&mut self, verb: Verb) -> (Vec<String>, Vec<(&'static str, String)>, String) {
        let part = vec![(PART.0, PART.1.to_string())];
        match verb {
            Verb::Save => (vec!["save".into(), "alpha".into()], part, "alpha".into()),
            Verb::Load => {
                let t = self.fresh_name("l");
                (vec!["load".into(), self.backup.clone(), t.clone()], part, t)
            }
            Verb::New => {
                let t = self.fresh_name("n");
                (vec!["new".into(), t.clone()], Vec::new(), t)
            }
            Verb::Clone => {
                let t = self.fresh_name("c");
                (vec!["clone".into(), "alpha".into(), t.clone()], part, t)
            }
            Verb::Rm => {
                let t = match self.spare.pop() {
                    Some(t) => t,
                    None => {
                        let t = self.fresh_name("r");
                        let r = self.w.run(&["new", &t], &[]);
                        assert!(r.ok(), "a box for rm: {}", r.all());
                        t
                    }
                };
                (
                    vec!["rm".into(), t.clone(), "--force".into()],
                    Vec::new(),
                    t,
                )
            }
            Verb::BaseBuild => {
                let env = vec![("BOX_CONFIG", self.small_config.clone())];
                let r = self.run(&["base", "rm", "--all"], &env);
                assert!(r.ok(), "box base rm --all: {}", r.all());
                (vec!["base".into(), "build".into()], env, String::new())
            }
        }
    }

    fn run(&self, args: &[&str], env: &[(&str, String)]) -> Run {
        let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
        self.w.run(args, &env)
    }

    /// Runs the verb uninterrupted (it must succeed) and returns how long it took; what it
    /// made is handled as a case's rerun product.
    fn measure(&mut self, verb: Verb) -> Duration {
        let (args, env, target) = self.prepare(verb);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let t0 = Instant::now();
        let r = self.run(&args, &env);
        let took = t0.elapsed();
        assert!(r.ok(), "box {}: {}", args.join(" "), r.all());
        self.dispose(verb, &target);
        took
    }

    /// After a case: the backups saves made are kept (the next save extends their chain:
    /// kills land in full saves and in links) up to six, then all removed (a new chain
    /// starts); a box new/load/clone made becomes a spare for rm (two at most; the rest
    /// removed).
    fn dispose(&mut self, verb: Verb, target: &str) {
        match verb {
            Verb::Save => {
                let published = self.w.backups_published();
                if published.len() > 6 {
                    for p in published {
                        std::fs::remove_file(p).unwrap();
                    }
                }
            }
            v if v.makes_a_box() => {
                let complete = rows(self.w).0.iter().any(|(n, _, inc)| n == target && !inc);
                if complete && self.spare.len() < 2 {
                    self.spare.push(target.to_string());
                } else if self.w.registered(target) {
                    let r = self.w.run(&["rm", target, "--force"], &[]);
                    assert!(r.ok(), "box rm {target} --force: {}", r.all());
                }
            }
            _ => {}
        }
    }

    /// One case: `verb` SIGKILLed `at` after its start, then every check.
    fn case(&mut self, verb: Verb, at: Duration, counts: &mut Counts) {
        let (args, env, target) = self.prepare(verb);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let label = format!("box {} killed at {:.2}s", args.join(" "), at.as_secs_f64());
        counts.cases += 1;
        let problems_before = self.problems.len();
        let (rows_before, _) = rows(self.w);
        let backups_before: BTreeSet<PathBuf> = self.w.backups_published().into_iter().collect();

        let machines_before = machine_names(self.w);
        let from = self.w.calls().len();
        let env_refs: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let mut child = self.w.spawn(&args, &env_refs);
        std::thread::sleep(at);
        if child.try_wait().unwrap().is_none() {
            // The box process only: its smolvm calls are left as a real kill leaves them.
            kill(Pid::from_raw(child.id() as i32), Signal::SIGKILL).unwrap();
            counts.killed += 1;
        }
        let first = self.w.finish(&args, child, 300);
        self.settle(from, &label);

        // Named partial backups: each new file must be a sound backup.
        let new_files: Vec<PathBuf> = self
            .w
            .backups_published()
            .into_iter()
            .filter(|p| !backups_before.contains(p))
            .collect();
        if !new_files.is_empty() {
            let check = self
                .w
                .run(&["backups", "check", "alpha", "--read-data"], &[]);
            for f in &new_files {
                let name = f.file_name().unwrap().to_string_lossy().into_owned();
                let sound = check
                    .stdout
                    .lines()
                    .any(|l| l.trim_start().starts_with("sound") && l.contains(&name));
                if !sound {
                    counts.named_partials += 1;
                    self.problem(
                        &label,
                        format!("{name} is not a sound backup: {}", check.all()),
                    );
                }
            }
        }

        if !self.w.host_leftovers().is_empty() {
            counts.left_at_kill += 1;
        }

        // Boxes lost: every row before, but the one rm removes.
        let (rows_after, corrupt) = rows(self.w);
        for c in corrupt {
            self.problem(&label, format!("a corrupt registry record: {c}"));
        }
        let after: BTreeSet<&str> = rows_after.iter().map(|(n, _, _)| n.as_str()).collect();
        let removed_on_purpose = |name: &str| verb == Verb::Rm && name == target;
        for (name, _, _) in &rows_before {
            if !after.contains(name.as_str()) && !removed_on_purpose(name) {
                counts.lost_boxes += 1;
                self.problem(&label, format!("box '{name}' is no longer registered"));
            }
        }

        self.unknown_machines(&label, &rows_after, &machines_before, counts);

        match self.rerun(verb, &args, &env, &target, &label, &first) {
            Rerun::Ok => {}
            Rerun::OkAfterAdvice => counts.advised += 1,
            Rerun::Failed => counts.rerun_failures += 1,
        }

        // The guests a transfer had scratch in: alpha (saved, cloned) and the box made.
        let left = self.w.host_leftovers();
        let mut guest_left = Vec::new();
        if verb.touches_alpha() {
            guest_left.extend(self.w.guest_plaintext_left("alpha"));
        }
        if verb.makes_a_box() && self.w.registered(&target) {
            guest_left.extend(self.w.guest_plaintext_left(&target));
        }
        if !left.is_empty() || !guest_left.is_empty() {
            counts.plaintext_left += 1;
            self.problem(
                &label,
                format!("left after the rerun: host {left:?}, guests {guest_left:?}"),
            );
        }
        if let Some(why) = verb
            .touches_alpha()
            .then(|| self.w.not_running_unpaused("alpha"))
            .flatten()
        {
            counts.alpha_unhealthy += 1;
            self.problem(&label, format!("alpha after the rerun: {why}"));
        }
        if self.problems.len() == problems_before {
            counts.clean += 1;
        }
        self.dispose(verb, &target);
    }

    /// Waits until the smolvm calls the killed run made have ended (they go on, or die, as
    /// they would after a real kill), at most two minutes.
    fn settle(&mut self, from: usize, label: &str) {
        if !calls_ended(self.w, from, Duration::from_secs(120)) {
            self.problem(
                label,
                "smolvm calls still running 2 min after the kill".into(),
            );
        }
    }

    /// Machines the case left that smolvm lists and no row names: `box doctor` must name
    /// each with its way out, and `box doctor --fix` must remove them.
    fn unknown_machines(
        &mut self,
        label: &str,
        rows: &[(String, String, bool)],
        before: &BTreeSet<String>,
        counts: &mut Counts,
    ) {
        let known: BTreeSet<&str> = rows.iter().map(|(_, m, _)| m.as_str()).collect();
        let unknown: Vec<String> = machine_names(self.w)
            .into_iter()
            .filter(|m| !known.contains(m.as_str()) && !before.contains(m))
            .collect();
        if unknown.is_empty() {
            return;
        }
        counts.unknown_machines += 1;
        let doctor = self.w.run(&["doctor"], &[]);
        let named = unknown.iter().all(|m| {
            doctor
                .stdout
                .lines()
                .any(|l| l.contains(&format!("'{m}'")) && l.contains("box doctor --fix"))
        });
        let fix = self.w.run(&["doctor", "--fix"], &[]);
        let still: Vec<&String> = {
            let now = machine_names(self.w);
            unknown.iter().filter(|m| now.contains(*m)).collect()
        };
        if named && still.is_empty() {
            counts.unknown_fixed += 1;
        } else {
            self.problem(
                label,
                format!(
                    "machines no row names: {unknown:?}; box doctor named them: {named}; \
                     left after box doctor --fix: {still:?}\n{}\n{}",
                    doctor.all(),
                    fix.all()
                ),
            );
        }
    }

    /// The same command again; when box refuses it, what box says to do, then once more.
    fn rerun(
        &mut self,
        verb: Verb,
        args: &[&str],
        env: &[(&'static str, String)],
        target: &str,
        label: &str,
        first: &Run,
    ) -> Rerun {
        let again = self.run(args, env);
        if again.ok() {
            return Rerun::Ok;
        }
        let registered = rows(self.w)
            .0
            .into_iter()
            .find(|(n, _, _)| n == target)
            .map(|(_, _, incomplete)| incomplete);
        // The killed run had done all its work: the retry's refusal is the right answer.
        let finished = match verb {
            Verb::Rm => registered.is_none() && again.stderr.contains("no box named"),
            v if v.makes_a_box() => registered == Some(false) && again.stderr.contains("already"),
            _ => false,
        };
        if finished {
            return Rerun::Ok;
        }
        let rm = format!("box rm {target} --force");
        let remedy: Vec<&str> = if !target.is_empty() && again.stderr.contains(&rm) {
            vec!["rm", target, "--force"]
        } else if again.stderr.contains("box doctor --fix") {
            vec!["doctor", "--fix"]
        } else {
            self.problem(
                label,
                format!(
                    "the retry failed without saying what to do:\n{}\n(the killed run: {})",
                    again.all(),
                    first.all()
                ),
            );
            return Rerun::Failed;
        };
        let r = self.w.run(&remedy, &[]);
        if !r.ok() {
            self.problem(
                label,
                format!("box {} failed: {}", remedy.join(" "), r.all()),
            );
            return Rerun::Failed;
        }
        let last = self.run(args, env);
        if !last.ok() {
            self.problem(
                label,
                format!(
                    "the retry after box {} failed: {}",
                    remedy.join(" "),
                    last.all()
                ),
            );
            return Rerun::Failed;
        }
        Rerun::OkAfterAdvice
    }
}

/// How the same command went when run again.
enum Rerun {
    Ok,
    /// Refused first, then it worked after what the refusal said to do.
    OkAfterAdvice,
    Failed,
}

fn table(rows: &[(Verb, Counts)]) -> String {
    let mut t = String::from(
        "| verb | cases | killed | clean | named partials | scratch at kill (swept later) | plaintext left | unknown machines (fixed by doctor --fix) | lost boxes | retried after box's advice | rerun failures | alpha unhealthy |\n|---|---|---|---|---|---|---|---|---|---|---|---|\n",
    );
    for (verb, c) in rows {
        writeln!(
            t,
            "| {} | {} | {} | {} | {} | {} | {} | {} ({}) | {} | {} | {} | {} |",
            verb.label(),
            c.cases,
            c.killed,
            c.clean,
            c.named_partials,
            c.left_at_kill,
            c.plaintext_left,
            c.unknown_machines,
            c.unknown_fixed,
            c.lost_boxes,
            c.advised,
            c.rerun_failures,
            c.alpha_unhealthy
        )
        .unwrap();
    }
    t
}

#[test]
fn sigkilled_verbs_leave_nothing_behind_and_run_again() {
    if !prerequisites() {
        return;
    }
    let _serial = serial();
    let (heavy, seed) = save_load_support::fault_run("faults_kills");
    let mut rng = StdRng::seed_from_u64(seed);

    let w = World::with_box("alpha");
    w.sh("alpha", DATA);
    let saved = w.run(&["save", "alpha"], &[PART]);
    assert!(saved.ok(), "{}", saved.all());
    let kept = w.dir.path().join("kept");
    std::fs::create_dir(&kept).unwrap();
    let first = &w.backups_published()[0];
    let backup = kept.join(first.file_name().unwrap());
    std::fs::rename(first, &backup).unwrap();
    let small_config = small_base_config(&w);
    let mut bench = Bench {
        w: &w,
        backup: backup.display().to_string(),
        small_config: small_config.display().to_string(),
        spare: Vec::new(),
        next: 0,
        problems: Vec::new(),
    };

    let durations: Vec<(Verb, Duration)> =
        Verb::ALL.iter().map(|v| (*v, bench.measure(*v))).collect();
    eprintln!(
        "faults_kills: uninterrupted {}",
        durations
            .iter()
            .map(|(v, d)| format!("{} {:.1}s", v.label(), d.as_secs_f64()))
            .collect::<Vec<_>>()
            .join(", ")
    );
    let mut plan: Vec<Verb> = Verb::ALL
        .iter()
        .flat_map(|v| std::iter::repeat_n(*v, v.cases(heavy)))
        .collect();
    plan.shuffle(&mut rng);
    let mut rows: Vec<(Verb, Counts)> = Verb::ALL.iter().map(|v| (*v, Counts::default())).collect();
    for verb in plan {
        let took = durations.iter().find(|(v, _)| *v == verb).unwrap().1;
        let at = took.mul_f64(rng.random_range(0.0..1.0));
        let counts = &mut rows.iter_mut().find(|(v, _)| *v == verb).unwrap().1;
        bench.case(verb, at, counts);
    }

    let table = table(&rows);
    eprintln!("faults_kills (seed {seed}):\n{table}");
    let total: usize = rows.iter().map(|(_, c)| c.cases).sum();
    assert_eq!(total, if heavy { 300 } else { 30 });
    assert!(
        bench.problems.is_empty(),
        "{} problem(s) (seed {seed}):\n{}\n{table}",
        bench.problems.len(),
        bench.problems.join("\n---\n")
    );
    w.scan_secrets();
}

/// The host pid of `machine`'s supervisor (the VM process), as `smolvm machine ls --json`
/// shows it.
fn vm_pid(w: &World, machine: &str) -> i32 {
    let out = w.sim(&["machine", "ls", "--json"]);
    let list: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let m = list
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == machine)
        .unwrap_or_else(|| panic!("{machine} is not listed"));
    m["pid"].as_i64().expect("a running machine has a pid") as i32
}

#[test]
fn a_machine_killed_mid_save_fails_the_save_and_the_next_save_works() {
    if !prerequisites() {
        return;
    }
    let _serial = serial();
    let w = World::with_box("alpha");
    w.sh("alpha", DATA);
    // The copy of the second part is held open; the VM dies under it, mid-stream.
    let args = ["save", "alpha"];
    let from = w.calls().len();
    let child = w.spawn(
        &args,
        &[
            PART,
            ("SMOLVM_SIM_FAIL", "cp:slow@/part-000001"),
            ("SMOLVM_SIM_SLOW_SECS", "3"),
        ],
    );
    assert!(
        w.wait_for_call(from, "/part-000001", 120),
        "the save never reached its second part"
    );
    kill(Pid::from_raw(vm_pid(&w, "alpha")), Signal::SIGKILL).unwrap();
    let r = w.finish(&args, child, 240);
    assert_eq!(r.code, Some(1), "{}", r.all());
    assert!(
        r.stderr.contains("box save alpha failed")
            && r.stderr.contains("machine 'alpha' is not running"),
        "the failure names the box and why: {}",
        r.all()
    );
    assert!(
        w.backups_published().is_empty(),
        "nothing published: {:?}",
        w.backups_published()
    );
    let left = w.host_leftovers();
    assert!(left.is_empty(), "the failed save cleaned up: {left:?}");
    let ls = w.run(&["ls"], &[]);
    assert!(
        ls.stdout
            .lines()
            .any(|l| l.starts_with("alpha") && l.contains("stopped")),
        "{}",
        ls.all()
    );

    let start = w.run(&["start", "alpha"], &[]);
    assert!(start.ok(), "box start alpha: {}", start.all());
    let again = w.run(&args, &[PART]);
    assert!(
        again.ok() && again.stdout.contains("Saved and verified"),
        "the next save works: {}",
        again.all()
    );
    assert_eq!(w.backups_published().len(), 1);
    let check = w.run(&["backups", "check", "alpha", "--read-data"], &[]);
    assert!(check.ok(), "{}", check.all());
    w.assert_no_plaintext(&["alpha"]);
    w.assert_running_unpaused("alpha");
    w.scan_secrets();
}

/// The window no random kill is sure to hit: `box new` killed while its `machine create`
/// runs. The create finishes after box is gone, so smolvm has a machine with box's labels
/// and no row names it: the retry and `box doctor` say so and how to remove it, `box doctor
/// --fix` removes it and nothing else (a machine of another state dir, one without labels),
/// and the retry works.
#[test]
fn a_new_killed_in_its_create_leaves_a_machine_doctor_fix_removes() {
    if !prerequisites() {
        return;
    }
    let _serial = serial();
    let w = World::new();
    let foreign = [
        (
            "other",
            "--label=hermes-box-id=0123456789abcdef0123456789abcdef",
        ),
        ("plain", "--label=owner=someone"),
    ];
    for (name, label) in foreign {
        let out = w.sim(&[
            "machine",
            "create",
            "--name",
            name,
            "--image",
            "debian:12",
            label,
            "--",
            "sleep",
            "1",
        ]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let args = ["new", "gamma"];
    let from = w.calls().len();
    let child = w.spawn(
        &args,
        &[
            ("SMOLVM_SIM_FAIL", "create:slow"),
            ("SMOLVM_SIM_SLOW_SECS", "2"),
        ],
    );
    assert!(w.wait_for_call(from, "machine create", 60));
    kill(Pid::from_raw(child.id() as i32), Signal::SIGKILL).unwrap();
    let killed = w.finish(&args, child, 60);
    assert_eq!(killed.code, None, "{}", killed.all());
    assert!(
        calls_ended(&w, from, Duration::from_secs(60)),
        "the create never ended"
    );
    assert!(machine_names(&w).contains("gamma"), "the create finished");
    assert!(!w.registered("gamma"), "box was killed before its row");

    let retry = w.run(&args, &[]);
    assert_eq!(retry.code, Some(1), "{}", retry.all());
    assert!(
        retry
            .stderr
            .contains("smolvm machine 'gamma' was made by box here")
            && retry.stderr.contains("`box doctor --fix` removes it"),
        "{}",
        retry.all()
    );
    let doctor = w.run(&["doctor"], &[]);
    assert_eq!(doctor.code, Some(1), "{}", doctor.all());
    assert!(
        doctor.stdout.lines().any(|l| l.contains("FAIL")
            && l.contains("'gamma' was made by box here")
            && l.contains("box doctor --fix")),
        "{}",
        doctor.all()
    );
    for (name, _) in foreign {
        assert!(
            doctor.stdout.contains(&format!(
                "smolvm machine '{name}' is not managed by box (left alone)"
            )),
            "{}",
            doctor.all()
        );
    }
    let fix = w.run(&["doctor", "--fix"], &[]);
    assert!(
        fix.all()
            .contains("removed smolvm machine 'gamma', made by a box command killed"),
        "{}",
        fix.all()
    );
    assert_eq!(
        machine_names(&w),
        ["other", "plain"].map(String::from).into_iter().collect(),
        "only gamma removed"
    );
    let again = w.run(&args, &[]);
    assert!(again.ok(), "{}", again.all());
    assert!(w.registered("gamma"));
}

/// A window a random kill hits rarely: `box base build` killed while its `pack create`
/// writes. The staging pack stays, under a name only that run knew; the next build removes
/// it (and builds), and doctor --fix removes the builder.
#[test]
fn a_base_build_killed_mid_pack_leaves_nothing_after_the_next_build() {
    if !prerequisites() {
        return;
    }
    let _serial = serial();
    let w = World::new();
    let small = small_base_config(&w);
    let env = [("BOX_CONFIG", small.to_str().unwrap())];
    let args = ["base", "build"];
    let from = w.calls().len();
    let child = w.spawn(&args, &env);
    // Killed once the pack has begun writing (before, the pack create dies too: its
    // progress lines go to box's closed pipe).
    let bases = w.home().join("bases");
    let writing = || {
        std::fs::read_dir(&bases)
            .into_iter()
            .flatten()
            .flatten()
            .any(|e| e.file_name().to_string_lossy().starts_with(".build-"))
    };
    let start = Instant::now();
    while !writing() {
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "the build never packed"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    kill(Pid::from_raw(child.id() as i32), Signal::SIGKILL).unwrap();
    let killed = w.finish(&args, child, 60);
    assert_eq!(killed.code, None, "{}", killed.all());
    assert!(
        calls_ended(&w, from, Duration::from_secs(60)),
        "the pack never ended"
    );
    let left = w.host_leftovers();
    assert!(
        left.iter().any(|l| l.starts_with(".build-")),
        "the killed build's pack is there to be swept: {left:?}"
    );
    let again = w.run(&args, &env);
    assert!(again.ok(), "{}", again.all());
    let left = w.host_leftovers();
    assert!(left.is_empty(), "after the next build: {left:?}");
    let fix = w.run(&["doctor", "--fix"], &env);
    assert!(
        fix.all().contains("removed smolvm machine 'box-base-"),
        "{}",
        fix.all()
    );
    assert!(w.machines().is_empty(), "{:?}", w.machines());
}

/// What a save killed with SIGKILL leaves on the host, its scratch dir with a decrypted
/// part (0600 in a 0700 dir, named after the dead process), is named by `box doctor` with
/// its size and way out, and `box doctor --fix` removes it, and only it: a scratch dir whose
/// process still runs stays.
#[test]
fn doctor_names_the_plaintext_a_killed_save_left_and_fix_removes_it() {
    if !prerequisites() {
        return;
    }
    let _serial = serial();
    let w = World::new();
    let scratch = w.home().join("tmp");
    std::fs::create_dir_all(&scratch).unwrap();
    // A pid far above pid_max never runs; this test's own pid does.
    let dead = scratch.join("save-999999999-k1llpart");
    let live = scratch.join(format!("load-{}-stillrunning", std::process::id()));
    for dir in [&dead, &live] {
        std::fs::create_dir(dir).unwrap();
        std::fs::write(dir.join("part-000000"), vec![7u8; 3 << 20]).unwrap();
    }

    let doctor = w.run(&["doctor"], &[]);
    let line = doctor
        .stdout
        .lines()
        .chain(doctor.stderr.lines())
        .find(|l| l.contains("plaintext"))
        .unwrap_or_else(|| panic!("box doctor names the plaintext: {}", doctor.all()));
    assert!(
        line.contains("1 scratch dir(s) of a killed save or load")
            && line.contains("3.0 MiB")
            && line.contains("box doctor --fix"),
        "{line}"
    );
    assert!(dead.exists(), "box doctor alone changes nothing");

    let fix = w.run(&["doctor", "--fix"], &[]);
    assert!(
        fix.all().contains("removed 1 of 1 scratch dir(s)"),
        "{}",
        fix.all()
    );
    assert!(
        !dead.exists(),
        "box doctor --fix removed the dead save's plaintext"
    );
    assert!(
        live.join("part-000000").exists(),
        "a running load's scratch stays"
    );
    let again = w.run(&["doctor"], &[]);
    assert!(!again.all().contains("plaintext"), "{}", again.all());
}
