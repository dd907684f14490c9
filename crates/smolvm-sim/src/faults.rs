//! Fault injection from SMOLVM_SIM_FAIL: a comma list of `VERB:MODE[@TEXT]`.
//!
//! Counted modes (`once`, `N`) keep a counter file under `$SMOLVM_SIM_HOME/faults/`, so
//! "fail the first start, then succeed" works across separate invocations.

use std::fs::OpenOptions;
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::fd::AsRawFd;

use sha2::{Digest, Sha256};

/// What an active fault asks the verb to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Fail before acting, with a realistic smolvm error.
    Fail,
    /// Act, then fail with a realistic smolvm error.
    After,
    /// Block until killed.
    Hang,
    /// Sleep a while, then act normally.
    Slow,
    /// `cp` download: write half the file and exit 0.
    Truncate,
    /// `delete`: the data dir cannot be removed.
    Datadir,
    /// `exec`: start the guest command, then hold this client (see [`hold_started`]), so a
    /// signal to the caller lands while the guest command is mid-run.
    Held,
}

#[derive(Debug, Clone)]
struct Spec {
    raw: String,
    verb: String,
    mode: String,
    text: Option<String>,
}

#[derive(Debug, Clone, Default)]
pub struct Faults {
    specs: Vec<Spec>,
    /// The invocation's arguments joined with spaces, for `@TEXT` matching.
    args: String,
}

impl Faults {
    pub fn from_env(args: &[String]) -> Self {
        let raw = std::env::var("SMOLVM_SIM_FAIL").unwrap_or_default();
        Self::parse(&raw, args.join(" "))
    }

    pub fn parse(raw: &str, args: String) -> Self {
        let mut specs = Vec::new();
        for item in raw.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let (head, text) = match item.split_once('@') {
                Some((h, t)) => (h, Some(t.to_string())),
                None => (item, None),
            };
            let Some((verb, mode)) = head.split_once(':') else {
                continue;
            };
            let verb = match verb.trim() {
                "rm" => "delete".to_string(),
                "list" => "ls".to_string(),
                v => v.to_string(),
            };
            specs.push(Spec {
                raw: item.to_string(),
                verb,
                mode: mode.trim().to_string(),
                text,
            });
        }
        Faults { specs, args }
    }

    /// The fault (if any) for this call of `verb`. Counted modes consume one count.
    pub fn check(&self, verb: &str) -> Option<Action> {
        for s in &self.specs {
            if s.verb != verb {
                continue;
            }
            if let Some(t) = &s.text
                && !self.args.contains(t.as_str())
            {
                continue;
            }
            let act = match s.mode.as_str() {
                "always" => Some(Action::Fail),
                "after" => Some(Action::After),
                "hang" => Some(Action::Hang),
                "slow" => Some(Action::Slow),
                "truncate" => Some(Action::Truncate),
                "datadir" => Some(Action::Datadir),
                "held" => Some(Action::Held),
                "once" => counted(&s.raw, 1).then_some(Action::Fail),
                n => match n.parse::<u64>() {
                    Ok(k) => counted(&s.raw, k).then_some(Action::Fail),
                    Err(_) => None,
                },
            };
            if act.is_some() {
                return act;
            }
        }
        None
    }

    /// `state:unreachable` / `state:failed`, optionally limited to names containing TEXT.
    pub fn state_override(&self, name: &str) -> Option<String> {
        self.specs
            .iter()
            .find(|s| s.verb == "state" && s.text.as_deref().is_none_or(|t| name.contains(t)))
            .map(|s| s.mode.clone())
    }
}

/// Increment the counter for `raw`; true while it was below `limit`.
fn counted(raw: &str, limit: u64) -> bool {
    let dir = crate::home::home().join("faults");
    if std::fs::create_dir_all(&dir).is_err() {
        return false;
    }
    let key = hex::encode(&Sha256::digest(raw.as_bytes())[..8]);
    let Ok(mut f) = OpenOptions::new()
        .create(true)
        .truncate(false)
        .read(true)
        .write(true)
        .open(dir.join(format!("{key}.count")))
    else {
        return false;
    };
    // SAFETY: flock on an fd we own; released when `f` closes.
    unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX) };
    let mut s = String::new();
    let _ = f.read_to_string(&mut s);
    let n: u64 = s.trim().parse().unwrap_or(0);
    let _ = f.seek(SeekFrom::Start(0));
    let _ = f.set_len(0);
    let _ = write!(f, "{}", n + 1);
    n < limit
}

/// Sleep SMOLVM_SIM_SLOW_SECS (default 3).
pub fn slow() {
    let secs: f64 = std::env::var("SMOLVM_SIM_SLOW_SECS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3.0);
    std::thread::sleep(std::time::Duration::from_secs_f64(secs.max(0.0)));
}

/// `exec:held`, once the guest command (process group `pgid`, from its setsid) started:
/// let it run SMOLVM_SIM_HELD_RUN_SECS (default 0.1), freeze it there (SIGSTOP), hold this
/// client for SMOLVM_SIM_SLOW_SECS (default 3), then let it go on (SIGCONT) and return to
/// the normal wait. The freeze is what makes "mid-run" deterministic: the command has done
/// part of its work (an export's first parts, a quiesce's record) and not the rest. The
/// guest command was started with PR_SET_PDEATHSIG=SIGKILL, so a caller that kills this
/// client mid-hold kills the guest command too, as the teardown of real smolvm's exec
/// session does.
pub fn hold_started(pgid: i32) {
    let secs = |var: &str, default: f64| {
        std::env::var(var)
            .ok()
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(default)
            .max(0.0)
    };
    wait_for_exec(pgid);
    std::thread::sleep(std::time::Duration::from_secs_f64(secs(
        "SMOLVM_SIM_HELD_RUN_SECS",
        0.1,
    )));
    // SAFETY: signals to the process group the guest command created with setsid.
    unsafe { libc::kill(-pgid, libc::SIGSTOP) };
    std::thread::sleep(std::time::Duration::from_secs_f64(secs(
        "SMOLVM_SIM_SLOW_SECS",
        3.0,
    )));
    // SAFETY: as above.
    unsafe { libc::kill(-pgid, libc::SIGCONT) };
}

/// Waits (up to 2 s) until the forked child has exec'd the guest command, so the run time
/// is counted from the command's own start: a fast command (an export of a small /data
/// takes milliseconds) must not be frozen before it has begun, nor finish before the freeze.
fn wait_for_exec(pid: i32) {
    let ours = std::fs::read("/proc/self/cmdline").unwrap_or_default();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
    while std::time::Instant::now() < deadline {
        match std::fs::read(format!("/proc/{pid}/cmdline")) {
            Ok(c) if c != ours => return,
            Ok(_) => std::thread::sleep(std::time::Duration::from_micros(200)),
            Err(_) => return,
        }
    }
}

/// Block forever (until a signal kills us).
pub fn hang() -> ! {
    loop {
        std::thread::sleep(std::time::Duration::from_secs(3600));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_matches_text() {
        let f = Faults::parse(
            "exec:hang@hb quiesce, cp:truncate ,rm:after,junk,state:unreachable@box-a",
            "machine exec --name b -- hb quiesce --now".into(),
        );
        assert_eq!(f.check("exec"), Some(Action::Hang));
        assert_eq!(f.check("cp"), Some(Action::Truncate));
        assert_eq!(f.check("delete"), Some(Action::After));
        assert_eq!(f.check("start"), None);
        let h = Faults::parse("exec:held@hb export", "machine exec -- hb export".into());
        assert_eq!(h.check("exec"), Some(Action::Held));
        assert_eq!(f.state_override("box-a1").as_deref(), Some("unreachable"));
        assert_eq!(f.state_override("other"), None);
        let g = Faults::parse(
            "exec:hang@hb quiesce",
            "machine exec --name b -- hb status".into(),
        );
        assert_eq!(g.check("exec"), None);
    }
}
