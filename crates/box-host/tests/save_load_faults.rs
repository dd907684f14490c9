//! The fault matrix of `box save` and `box load` through the smolvm simulator: SIGINT,
//! SIGTERM and SIGKILL delivered while each step's smolvm call is in flight (held open with
//! the simulator's `slow` fault), and injected smolvm failures (`cp:truncate`, `exec:hang`,
//! `exec:always`, `cp:always`, a failing `start`). After each:
//!
//! * no plaintext on the host (state scratch, TMPDIR, beside the backups) or in the guest
//!   (`/root/hb-*`);
//! * no backup published, or a complete one that `box extract` verifies;
//! * save: the source box running and unpaused; load: no VM and no registry row left (a
//!   SIGKILL cannot clean up: the row stays and `box rm --force` finishes the job);
//! * no lock held.
//!
//! The save's export streams its parts (`hb export --stream-parts`: each announced part is
//! copied out and encrypted while the export goes on), so the matrix also runs a guest
//! `hb` that misbehaves mid-stream (a wrapper around the real one, [`GuestHb`]): it dies
//! after the first part, a part changes after it was announced, the index disagrees with
//! the announcements, an announcement goes missing; and older `hb`s that do not know
//! `--part-hash` (which must still save streaming, with SHA-256 part hashes) or either
//! flag (which must still save, the sequential path).
//!
//! By default a representative subset runs (one case per kind of step and fault); with
//! `SAVE_LOAD_FULL_MATRIX=1` every step × every signal and every fault runs.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod save_load_support;

use nix::sys::signal::Signal;
use save_load_support::{World, prerequisites, serial};

fn full() -> bool {
    std::env::var("SAVE_LOAD_FULL_MATRIX").is_ok_and(|v| v == "1")
}

/// What a case does to the run.
#[derive(Clone, Copy, Debug)]
enum Act {
    /// Hold the call whose argv contains the needle (`<verb>:slow@<needle>`), then signal.
    Signal(&'static str, &'static str, Signal),
    /// An injected smolvm fault (SMOLVM_SIM_FAIL), optionally with a short smolvm deadline.
    Fault(&'static str, Option<&'static str>),
    /// In machine `.0`, the guest command of the exec call containing the needle has
    /// started and is frozen (`exec:held@<needle>`; mid-run, or at its exec for one too
    /// quick to catch there: [`held_run_secs`]) when the signal arrives: the caller must
    /// kill the call (the guest command dies with it) and clean up what the command had
    /// already done.
    Held(&'static str, &'static str, Signal),
    /// The guest's `hb export` misbehaves as this wrapper makes it; box must fail with a
    /// message containing `.1`.
    Guest(GuestHb, &'static str),
}

/// Wrappers installed over the guest's `/usr/local/bin/hb` (the real one moved to
/// `hb.real`); every verb but `export` goes straight to the real one. `$out` is the
/// export's directory.
#[derive(Clone, Copy, Debug)]
enum GuestHb {
    /// Killed (SIGKILL) right after announcing its first part.
    DiesAfterFirstPart,
    /// part-000001 changes after it was announced (a byte overwritten in the guest).
    PartChangedAfterAnnounce,
    /// The index written at the end lists another hash for part-000001 than announced.
    IndexDisagrees,
    /// The announcement of part-000002 never reaches box.
    AnnouncementMissing,
    /// An `hb` from before `--stream-parts`: clap's usage error, exit 2.
    Old,
    /// An `hb` from before `--part-hash` that streams: clap's usage error for it, exit 2.
    NoPartHash,
}

impl GuestHb {
    fn body(self) -> &'static str {
        match self {
            GuestHb::DiesAfterFirstPart => {
                r#"rm -f /root/.wrap-fifo; mkfifo /root/.wrap-fifo
/usr/local/bin/hb.real "$@" > /root/.wrap-fifo & pid=$!
exec 3< /root/.wrap-fifo; rm -f /root/.wrap-fifo
IFS= read -r line <&3; printf '%s
' "$line"
kill -KILL $pid; wait $pid; exit 137"#
            }
            GuestHb::PartChangedAfterAnnounce => {
                r#"/usr/local/bin/hb.real "$@" | while IFS= read -r line; do
  case "$line" in "part-ready part-000001 "*) printf 'XXXX' | dd of="$out/part-000001" bs=1 seek=100 conv=notrunc 2>/dev/null;; esac
  printf '%s
' "$line"
done"#
            }
            GuestHb::IndexDisagrees => {
                r#"/usr/local/bin/hb.real "$@" || exit $?
sed -i "s/^part part-000001 \([0-9]*\) .*/part part-000001 \1 $(printf '0%.0s' $(seq 64))/" "$out/parts.index""#
            }
            GuestHb::AnnouncementMissing => {
                r#"/usr/local/bin/hb.real "$@" | grep --line-buffered -v '^part-ready part-000002 '; exit 0"#
            }
            GuestHb::Old => {
                r#"for a in "$@"; do
  case "$a" in --stream-parts|--part-hash)
    printf "error: unexpected argument '%s' found

Usage: hb export [OPTIONS] --out <DIR>

For more information, try '--help'.
" "$a" >&2
    exit 2;;
  esac
done
exec /usr/local/bin/hb.real "$@""#
            }
            GuestHb::NoPartHash => {
                r#"for a in "$@"; do
  if [ "$a" = --part-hash ]; then
    printf "error: unexpected argument '--part-hash' found

  tip: to pass '--part-hash' as a value, use '-- --part-hash'

Usage: hb export [OPTIONS] --out <DIR>

For more information, try '--help'.
" >&2
    exit 2
  fi
done
exec /usr/local/bin/hb.real "$@""#
            }
        }
    }

    fn install(self, w: &World, machine: &str) {
        let script = format!(
            "#!/bin/sh\n\
             [ \"$1\" = export ] || exec /usr/local/bin/hb.real \"$@\"\n\
             out=; prev=; for a in \"$@\"; do [ \"$prev\" = --out ] && out=$a; prev=$a; done\n\
             {}\n",
            self.body()
        );
        w.sh(
            machine,
            &format!(
                "set -e; mv /usr/local/bin/hb /usr/local/bin/hb.real; cat > /usr/local/bin/hb <<'WRAP'
{script}WRAP
chmod 0755 /usr/local/bin/hb"
            ),
        );
    }

    fn remove(w: &World, machine: &str) {
        w.sh(machine, "mv -f /usr/local/bin/hb.real /usr/local/bin/hb");
    }
}

/// `box extract` restores `backup` completely (into a scratch dir, removed afterwards).
fn assert_extracts(w: &World, backup: &std::path::Path, what: &str) {
    let into = w.dir.path().join("x");
    let x = w.run(
        &[
            "extract",
            &backup.display().to_string(),
            &into.display().to_string(),
        ],
        &[],
    );
    assert!(
        x.ok(),
        "{what}: the published backup is complete: {}",
        x.all()
    );
    std::fs::remove_dir_all(&into).unwrap();
}

fn describe(act: &Act) -> String {
    match act {
        Act::Signal(verb, needle, sig) => format!("{sig:?} during `{verb}` of '{needle}'"),
        Act::Fault(spec, cap) => format!(
            "{spec}{}",
            cap.map(|c| format!(" (deadline {c}s)")).unwrap_or_default()
        ),
        Act::Held(machine, needle, sig) => {
            format!("{sig:?} while '{needle}' runs in {machine}")
        }
        Act::Guest(hb, _) => format!("a guest hb export that {hb:?}"),
    }
}

/// Runs `box <args>` under `act`; returns the finished run.
fn run_case(w: &World, args: &[&str], act: Act, env: &[(&str, &str)]) -> save_load_support::Run {
    match act {
        Act::Guest(hb, _) => {
            hb.install(w, "alpha");
            let r = w.run(args, env);
            GuestHb::remove(w, "alpha");
            r
        }
        Act::Fault(spec, cap) => {
            let mut e: Vec<(&str, &str)> = env.to_vec();
            e.push(("SMOLVM_SIM_FAIL", spec));
            if let Some(c) = cap {
                e.push(("BOX_SMOLVM_TIMEOUT", c));
            }
            let child = w.spawn(args, &e);
            w.finish(args, child, 240)
        }
        Act::Signal(verb, needle, sig) => {
            let spec = format!("{verb}:slow@{needle}");
            let mut e: Vec<(&str, &str)> = env.to_vec();
            e.push(("SMOLVM_SIM_FAIL", &spec));
            e.push(("SMOLVM_SIM_SLOW_SECS", "3"));
            let from = w.calls().len();
            let child = w.spawn(args, &e);
            let pid = nix::unistd::Pid::from_raw(child.id() as i32);
            assert!(
                w.wait_for_call(from, needle, 120),
                "the call '{needle}' never came ({})",
                describe(&act)
            );
            nix::sys::signal::kill(pid, sig).unwrap();
            let run = w.finish(args, child, 240);
            if sig == Signal::SIGKILL {
                // The smolvm call in flight outlives box (as with real smolvm, where the
                // guest command keeps running): let it finish before the recovery run.
                std::thread::sleep(std::time::Duration::from_secs(5));
            }
            run
        }
        Act::Held(machine, needle, sig) => {
            let spec = format!("exec:held@{needle}");
            let mut e: Vec<(&str, &str)> = env.to_vec();
            e.push(("SMOLVM_SIM_FAIL", &spec));
            e.push(("SMOLVM_SIM_SLOW_SECS", "20"));
            e.push(("SMOLVM_SIM_HELD_RUN_SECS", held_run_secs(needle)));
            let from = w.calls().len();
            let child = w.spawn(args, &e);
            let pid = nix::unistd::Pid::from_raw(child.id() as i32);
            assert!(
                w.wait_for_call(from, needle, 120),
                "the call '{needle}' never came ({})",
                describe(&act)
            );
            // The guest command is there (frozen mid-run), so the signal lands on a
            // command that has started its work.
            let started = (0..200).any(|_| {
                std::thread::sleep(std::time::Duration::from_millis(50));
                !guest_processes(w, machine, needle).is_empty()
            });
            assert!(started, "'{needle}' never ran in {machine}");
            nix::sys::signal::kill(pid, sig).unwrap();
            w.finish(args, child, 240)
        }
    }
}

/// How long the held guest command runs before it is frozen. An export or a quiesce waits
/// on something outside itself (box copying parts out; the workload seeing the pause), so
/// 10 ms in it is still mid-run, where the default 0.1 s would find this small /data done.
/// An import has every part in the guest before it starts and restores 2.6 MB in a few
/// milliseconds (CI once saw it finish inside 10 ms): it is frozen at its exec, so the
/// signal surely lands while it runs; what it would have half-written dies with the VM.
fn held_run_secs(needle: &str) -> &'static str {
    if needle == "hb import" { "0" } else { "0.01" }
}

/// Command lines of the processes in `machine` whose argv contains `needle` (the probe
/// itself left out).
fn guest_processes(w: &World, machine: &str, needle: &str) -> Vec<String> {
    let (_, out) = w.sh_any(
        machine,
        "for p in /proc/[0-9]*; do c=$(tr '\\0' ' ' < $p/cmdline 2>/dev/null) && echo \"$c\"; done",
    );
    out.lines()
        .filter(|l| l.contains(needle) && !l.contains("/proc/[0-9]"))
        .map(String::from)
        .collect()
}

fn expected_code(act: &Act) -> Option<i32> {
    match act {
        Act::Signal(_, _, Signal::SIGKILL) => None,
        Act::Signal(_, _, sig) | Act::Held(_, _, sig) => Some(128 + *sig as i32),
        Act::Fault(..) | Act::Guest(..) => Some(1),
    }
}

/// Steps of a save, by the smolvm call that carries them.
fn save_steps() -> Vec<(&'static str, &'static str)> {
    vec![
        ("exec", "hb quiesce"),
        ("exec", "hb write-manifest"),
        ("exec", "hb export"),
        ("cp", "parts.index"),
        ("cp", "/part-000000"),
        ("cp", "/part-000001"),
        ("exec", "rm -rf -- /root/hb-save-"),
        ("exec", "hb resume"),
    ]
}

fn save_cases() -> Vec<Act> {
    let mut cases = Vec::new();
    if full() {
        for (verb, needle) in save_steps() {
            for sig in [Signal::SIGINT, Signal::SIGTERM, Signal::SIGKILL] {
                cases.push(Act::Signal(verb, needle, sig));
            }
        }
        cases.extend([
            Act::Fault("exec:always@hb quiesce", None),
            Act::Fault("exec:hang@hb quiesce", Some("8")),
            Act::Fault("exec:always@hb export", None),
            Act::Fault("exec:hang@hb export", Some("8")),
            Act::Fault("cp:always@parts.index", None),
            Act::Fault("cp:truncate@/part-000000", None),
            Act::Fault("cp:truncate@/part-000001", None),
            Act::Fault("cp:always@/part-000001", None),
            Act::Fault("exec:always@rm -rf -- /root/hb-save-", None),
            Act::Held("alpha", "hb quiesce", Signal::SIGINT),
            Act::Held("alpha", "hb export", Signal::SIGINT),
            Act::Held("alpha", "hb export", Signal::SIGTERM),
        ]);
        cases.extend(guest_cases());
    } else {
        cases.extend([
            Act::Signal("exec", "hb export", Signal::SIGINT),
            Act::Signal("cp", "/part-000001", Signal::SIGTERM),
            Act::Signal("exec", "hb resume", Signal::SIGINT),
            Act::Signal("cp", "/part-000000", Signal::SIGKILL),
            Act::Fault("cp:truncate@/part-000001", None),
            Act::Fault("exec:hang@hb export", Some("8")),
            Act::Held("alpha", "hb quiesce", Signal::SIGTERM),
            Act::Held("alpha", "hb export", Signal::SIGINT),
            // Mid-stream: the export holds parts 0 and 1 and waits for room while box
            // copies part 0 out; and a copy failing while the export runs on.
            Act::Signal("cp", "/part-000000", Signal::SIGINT),
            Act::Fault("cp:always@/part-000001", None),
        ]);
        cases.extend(guest_cases());
    }
    cases
}

/// A guest hb that misbehaves mid-stream, and what box must say.
fn guest_cases() -> Vec<Act> {
    vec![
        Act::Guest(
            GuestHb::DiesAfterFirstPart,
            "`hb export` in box 'alpha' failed",
        ),
        Act::Guest(
            GuestHb::PartChangedAfterAnnounce,
            "part-000001 is not what hb export listed for it",
        ),
        Act::Guest(GuestHb::IndexDisagrees, "part-000001 was announced as"),
        Act::Guest(GuestHb::AnnouncementMissing, "part-000002"),
    ]
}

/// Steps of a load; needles unique to the restore where the new-box phase repeats a verb.
fn load_steps() -> Vec<(&'static str, &'static str)> {
    vec![
        ("create", "machine create"),
        ("start", "machine start"),
        ("exec", "provision.sh"),
        ("exec", "hb quiesce"),
        ("exec", "mkdir -m 0700 -- /root/hb-load-"),
        ("cp", "/part-000000"),
        ("cp", "/part-000001"),
        ("exec", "hb import"),
        ("exec", "hb resume"),
    ]
}

fn load_cases() -> Vec<Act> {
    let mut cases = Vec::new();
    if full() {
        for (verb, needle) in load_steps() {
            for sig in [Signal::SIGINT, Signal::SIGTERM] {
                cases.push(Act::Signal(verb, needle, sig));
            }
        }
        cases.extend([
            Act::Signal("cp", "/part-000001", Signal::SIGKILL),
            Act::Signal("exec", "hb import", Signal::SIGKILL),
            Act::Fault("start:always", None),
            Act::Fault("create:after", None),
            Act::Fault("exec:always@hb quiesce", None),
            Act::Fault("cp:always@/part-000001", None),
            Act::Fault("exec:always@hb import", None),
            Act::Fault("exec:hang@hb import", Some("8")),
            Act::Fault("exec:always@hb resume", None),
            Act::Held("victim", "hb import", Signal::SIGINT),
            Act::Held("victim", "provision.sh", Signal::SIGTERM),
        ]);
    } else {
        cases.extend([
            Act::Signal("exec", "provision.sh", Signal::SIGTERM),
            Act::Signal("cp", "/part-000001", Signal::SIGINT),
            Act::Signal("exec", "hb import", Signal::SIGKILL),
            Act::Fault("start:always", None),
            Act::Fault("exec:hang@hb import", Some("8")),
            Act::Held("victim", "hb import", Signal::SIGTERM),
        ]);
    }
    cases
}

const PART: (&str, &str) = ("BOX_PART_SIZE", "1048576");

/// Data that needs at least three 1 MiB parts.
const DATA: &str = "set -e; mkdir -p /data/home/agent/workspace; head -c 2600000 /dev/urandom > /data/home/agent/workspace/blob; printf 'keep me\\n' > /data/home/agent/workspace/note; chown -R agent:agent /data/home/agent/workspace";

#[test]
fn save_fault_matrix() {
    if !prerequisites() {
        return;
    }
    let _serial = serial();
    let w = World::with_box("alpha");
    w.sh("alpha", DATA);
    let cases = save_cases();
    eprintln!("save fault matrix: {} cases", cases.len());
    for act in &cases {
        let what = describe(act);
        eprintln!("save case: {what}");
        let before = w.backups_published();
        let r = run_case(&w, &["save", "alpha"], *act, &[PART]);
        assert_eq!(r.code, expected_code(act), "{what}: {}", r.all());
        assert!(w.lock_free("alpha"), "{what}: lock released");
        let after = w.backups_published();
        let resume_step = matches!(act, Act::Signal(_, "hb resume", _));
        if let Act::Signal(_, _, Signal::SIGKILL) = act {
            // Nothing runs after a SIGKILL: the next save of the box cleans up after it.
            let again = w.run(&["save", "alpha"], &[PART]);
            assert!(
                again.ok(),
                "{what}: the next save recovers: {}",
                again.all()
            );
            assert_eq!(after.len(), before.len(), "{what}: nothing published");
            for p in w.backups_published() {
                if !before.contains(&p) {
                    std::fs::remove_file(p).unwrap();
                }
            }
        } else if let Act::Fault("exec:always@rm -rf -- /root/hb-save-", _) = act {
            // The plaintext copy cannot be removed: box says where it is and how to
            // remove it, resumes anyway (the same data is in /data), and the next save of
            // the box removes it.
            assert_eq!(after, before, "{what}: nothing published");
            assert!(
                r.stderr
                    .contains("could not remove the plaintext scratch dir /root/hb-save-"),
                "{what}: {}",
                r.stderr
            );
            let again = w.run(&["save", "alpha"], &[PART]);
            assert!(
                again.ok(),
                "{what}: the next save recovers: {}",
                again.all()
            );
            for p in w.backups_published() {
                if !before.contains(&p) {
                    std::fs::remove_file(p).unwrap();
                }
            }
        } else {
            assert_eq!(after, before, "{what}: nothing published");
            if !resume_step {
                assert!(
                    r.stderr.contains("box save alpha failed")
                        || r.stderr.contains("box save alpha interrupted"),
                    "{what}: {}",
                    r.stderr
                );
            }
        }
        if let Act::Guest(_, says) = act {
            assert!(
                r.stderr.contains(says),
                "{what}: wanted {says:?}: {}",
                r.stderr
            );
        }
        w.assert_no_plaintext(&["alpha"]);
        w.assert_running_unpaused("alpha");
        if !matches!(act, Act::Signal(_, _, Signal::SIGKILL)) {
            // Whatever stopped the save stopped the export with it (a killed exec takes
            // its guest command along).
            let left = guest_processes(&w, "alpha", "hb export");
            assert!(
                left.is_empty(),
                "{what}: still running in the guest: {left:?}"
            );
        }
        assert_eq!(w.machines().len(), 1, "{what}: no other VM");
    }
    // The box's own hb takes XXH3-128 part hashes at the first try; older hbs in the box:
    // one that streams but does not know --part-hash saves streaming with SHA-256 part
    // hashes; one that does not know --stream-parts either (clap names that one first)
    // saves the old way (export everything, then copy). Every backup is complete.
    for old in [None, Some(GuestHb::NoPartHash), Some(GuestHb::Old)] {
        let calls0 = w.calls().len();
        let r = match old {
            Some(old) => run_case(&w, &["save", "alpha"], Act::Guest(old, ""), &[PART]),
            None => w.run(&["save", "alpha"], &[PART]),
        };
        assert!(r.ok(), "{old:?}: the save works: {}", r.all());
        let calls = w.calls_since(calls0);
        let exports: Vec<&String> = calls
            .iter()
            .filter(|c| c.contains("-- /usr/local/bin/hb export"))
            .collect();
        let asked = |c: &str| {
            (
                c.contains("--stream-parts 2"),
                c.contains("--part-hash xxh3-128"),
            )
        };
        let tries: Vec<(bool, bool)> = exports.iter().map(|c| asked(c)).collect();
        let want: &[(bool, bool)] = match old {
            None => &[(true, true)],
            Some(GuestHb::NoPartHash) => &[(true, true), (true, false)],
            _ => &[(true, true), (false, false)],
        };
        assert_eq!(tries, want, "{old:?}: {exports:#?}");
        let released_one_by_one = calls
            .iter()
            .any(|c| c.contains("-- rm -f -- /root/hb-save-"));
        assert_eq!(
            released_one_by_one,
            !matches!(old, Some(GuestHb::Old)),
            "{old:?} streams unless it is too old to: {calls:#?}"
        );
        w.assert_no_plaintext(&["alpha"]);
        w.assert_running_unpaused("alpha");
        let published = w.backups_published();
        assert_eq!(published.len(), 1, "{published:?}");
        assert_extracts(&w, &published[0], &format!("{old:?}"));
        std::fs::remove_file(&published[0]).unwrap();
    }
    // A resume that fails: the backup is complete and verified and published, and the
    // user is told the box stays paused.
    let r = run_case(
        &w,
        &["save", "alpha"],
        Act::Fault("exec:always@hb resume", None),
        &[PART],
    );
    assert_eq!(r.code, Some(1), "{}", r.all());
    assert!(r.stdout.contains("Saved and verified"), "{}", r.all());
    assert!(r.stderr.contains("did not resume"), "{}", r.stderr);
    let published = w.backups_published();
    assert_eq!(published.len(), 1);
    assert_extracts(&w, &published[0], "after a failed resume");
    // The user's way out: doctor names the interrupted save (not "something else holds the
    // port") and `--fix` resumes it.
    let d = w.run(&["doctor", "alpha"], &[]);
    assert_eq!(d.code, Some(1), "{}", d.all());
    assert!(
        d.stdout
            .contains("executor paused by an interrupted save: paused by hb quiesce at 20"),
        "{}",
        d.all()
    );
    assert!(
        d.stdout.contains("`box doctor --fix alpha` resumes it"),
        "{}",
        d.all()
    );
    let d = w.run(&["doctor", "--fix", "alpha"], &[]);
    assert!(d.ok(), "{}", d.all());
    assert!(
        d.all()
            .contains("resumed 'alpha' after an interrupted save"),
        "{}",
        d.all()
    );
    w.assert_running_unpaused("alpha");
    w.assert_no_plaintext(&["alpha"]);
    w.scan_secrets();
    eprintln!("save fault matrix: {} cases passed", cases.len() + 1);
}

#[test]
fn load_fault_matrix() {
    if !prerequisites() {
        return;
    }
    let _serial = serial();
    let w = World::with_box("alpha");
    w.sh("alpha", DATA);
    let saved = w.run(&["save", "alpha"], &[PART]);
    assert!(saved.ok(), "{}", saved.all());
    let file = w.backups_published()[0].display().to_string();
    let cases = load_cases();
    eprintln!("load fault matrix: {} cases", cases.len());
    for act in &cases {
        let what = describe(act);
        eprintln!("load case: {what}");
        let r = run_case(&w, &["load", &file, "victim"], *act, &[PART]);
        assert_eq!(r.code, expected_code(act), "{what}: {}", r.all());
        assert!(w.lock_free("victim"), "{what}: lock released");
        if let Act::Signal(_, _, Signal::SIGKILL) = act {
            // The row and the VM stay; box rm --force removes both.
            assert!(w.registered("victim"), "{what}: the row stays for recovery");
            let rm = w.run(&["rm", "victim", "--force"], &[]);
            assert!(rm.ok(), "{what}: {}", rm.all());
            // The next load sweeps the plaintext parts the killed one left on the host.
            let again = w.run(&["load", &file, "victim"], &[PART]);
            assert!(again.ok(), "{what}: loading again works: {}", again.all());
            assert!(w.run(&["rm", "victim", "--force"], &[]).ok());
        } else if !matches!(act, Act::Fault("create:after", _)) {
            assert!(
                r.stderr.contains("transcript:") || r.stderr.contains("VM"),
                "{what}: {}",
                r.stderr
            );
        }
        let machines: Vec<String> = w.machines().into_iter().map(|(n, _)| n).collect();
        if let Act::Fault("create:after", _) = act {
            // smolvm created the machine but reported failure: ownership unknown, box
            // deletes nothing (docs/design.md, "new") and says how to inspect it.
            assert!(r.stderr.contains("ownership is unknown"), "{}", r.stderr);
            let _ = w.sim(&["machine", "delete", "--name", "victim", "-f"]);
        } else {
            assert_eq!(machines, vec!["alpha".to_string()], "{what}: no VM left");
        }
        assert!(!w.registered("victim"), "{what}: no row left");
        w.assert_no_plaintext(&["alpha"]);
        w.assert_running_unpaused("alpha");
        assert_eq!(w.backups_published().len(), 1, "{what}");
    }
    // --keep-on-failure: the half-restored VM stays, paused, without scratch.
    let r = run_case(
        &w,
        &["load", &file, "victim", "--keep-on-failure"],
        Act::Fault("exec:always@hb import", None),
        &[PART],
    );
    assert_eq!(r.code, Some(1), "{}", r.all());
    assert!(
        r.stderr.contains("keeping the half-restored VM"),
        "{}",
        r.stderr
    );
    assert!(w.registered("victim"));
    // doctor knows it was kept on purpose, not left by a killed run.
    let doc = w.run(&["doctor", "victim"], &[]);
    assert!(
        doc.stdout
            .contains("kept on purpose after a failure (box load failed while restoring")
            && !doc.stdout.contains("never finished"),
        "{}",
        doc.all()
    );
    w.assert_no_plaintext(&["alpha", "victim"]);
    let (_, paused) = w.sh_any(
        "victim",
        "ls /data/home/agent/.config/hermes-box/quiesced 2>/dev/null; true",
    );
    assert!(
        !paused.trim().is_empty(),
        "a half-restored box is never resumed"
    );
    assert!(w.run(&["rm", "victim", "--force"], &[]).ok());
    // SIGINT while a part is being copied in, the import already running in the guest
    // (it takes the parts as they arrive): the kept VM runs no import any more, holds no
    // part, and its /data was never swapped.
    let calls0 = w.calls().len();
    let r = run_case(
        &w,
        &["load", &file, "victim", "--keep-on-failure"],
        Act::Signal("cp", "/part-000001", Signal::SIGINT),
        &[PART],
    );
    assert_eq!(r.code, Some(130), "{}", r.all());
    let calls = w.calls_since(calls0);
    let import = calls.iter().position(|c| c.contains("hb import --follow"));
    let part1 = calls.iter().position(|c| c.contains("/part-000001"));
    assert!(
        matches!((import, part1), (Some(i), Some(p)) if i < p),
        "the import ran before the part was copied: {calls:#?}"
    );
    let left = guest_processes(&w, "victim", "hb import");
    assert!(left.is_empty(), "still running in the guest: {left:?}");
    w.assert_no_plaintext(&["alpha", "victim"]);
    let (_, restored) = w.sh_any(
        "victim",
        "ls /data/home/agent/workspace/blob 2>/dev/null; true",
    );
    assert!(restored.trim().is_empty(), "nothing was swapped in");
    assert!(w.run(&["rm", "victim", "--force"], &[]).ok());
    w.scan_secrets();
    eprintln!("load fault matrix: {} cases passed", cases.len() + 2);
}
