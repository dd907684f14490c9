//! The gateway's clock for sign-in links, sessions and its idle timeout: one that keeps
//! counting while the machine sleeps.
//!
//! `std::time::Instant` stops while a laptop is suspended (Linux `CLOCK_MONOTONIC`, macOS
//! `CLOCK_UPTIME_RAW`): a session left idle over a night of sleep would still be live in the
//! morning, and a one-minute sign-in link would outlive the lid being closed. Linux's
//! `CLOCK_BOOTTIME` and macOS's `CLOCK_MONOTONIC` count the time asleep and, unlike the wall
//! clock, never jump when the date is set.

use std::time::Duration;

#[cfg(target_os = "linux")]
const CLOCK: libc::clockid_t = libc::CLOCK_BOOTTIME;
#[cfg(not(target_os = "linux"))]
const CLOCK: libc::clockid_t = libc::CLOCK_MONOTONIC;

/// A point in time on the clock that counts sleep. Only differences mean anything.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Moment(Duration);

impl Moment {
    pub fn now() -> Self {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: clock_gettime writes one timespec, into the one owned here.
        let rc = unsafe { libc::clock_gettime(CLOCK, &mut ts) };
        if rc == 0
            && let (Ok(secs), Ok(nanos)) = (u64::try_from(ts.tv_sec), u32::try_from(ts.tv_nsec))
        {
            return Self(Duration::new(secs, nanos));
        }
        // A kernel without the clock (none box supports) would fail every call alike: the
        // process's own monotonic time keeps the comparisons consistent.
        static START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
        Self(START.get_or_init(std::time::Instant::now).elapsed())
    }

    /// How long after `earlier` this is; zero if it is not after it.
    pub fn saturating_since(self, earlier: Moment) -> Duration {
        self.0.saturating_sub(earlier.0)
    }

    /// How long ago this was.
    pub fn elapsed(self) -> Duration {
        Moment::now().saturating_since(self)
    }

    /// The clock's reading, for a test in another process (a time namespace).
    #[cfg(test)]
    pub fn as_nanos(self) -> u128 {
        self.0.as_nanos()
    }

    #[cfg(test)]
    pub fn from_nanos(nanos: u128) -> Self {
        let secs = u64::try_from(nanos / 1_000_000_000).unwrap_or(u64::MAX);
        Self(Duration::new(secs, (nanos % 1_000_000_000) as u32))
    }
}

impl std::ops::Add<Duration> for Moment {
    type Output = Moment;
    fn add(self, d: Duration) -> Moment {
        Moment(self.0.saturating_add(d))
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// What a time namespace reports: set in the child run of
    /// [`print_the_clock_for_a_parent_test`].
    const PRINT_VAR: &str = "BOX_TEST_PRINT_GATEWAY_CLOCK";

    /// Not a test of its own: the child of [`after_a_sleep`], run in a time namespace,
    /// prints this clock's reading there.
    #[test]
    #[ignore = "entry point of the time-namespace child process, not a test"]
    fn print_the_clock_for_a_parent_test() {
        if std::env::var_os(PRINT_VAR).is_some() {
            println!("moment={}", Moment::now().as_nanos());
        }
    }

    /// The clock as this process would read it after sleeping `asleep` (on Linux): this
    /// test binary's [`print_the_clock_for_a_parent_test`] run in a new time namespace whose
    /// CLOCK_BOOTTIME is `asleep` ahead and whose CLOCK_MONOTONIC is not, which is what
    /// a suspend and resume leave behind. `None` (with a `SKIPPED:` line, or a failure
    /// under `CI=true`) where time namespaces cannot be made (not root, no `unshare`).
    pub(crate) fn after_a_sleep(asleep: Duration) -> Option<Moment> {
        let exe = std::env::current_exe().ok()?;
        let out = std::process::Command::new("unshare")
            .args([
                "--time",
                "--fork",
                "--boottime",
                &asleep.as_secs().to_string(),
            ])
            .arg("--")
            .arg(exe)
            .args([
                "--exact",
                "gateway::clock::tests::print_the_clock_for_a_parent_test",
                "--ignored",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(PRINT_VAR, "1")
            .output();
        // libtest may print the line after its own `test … ` on the same line.
        let printed = out.as_ref().ok().and_then(|o| {
            let text = String::from_utf8_lossy(&o.stdout);
            let (_, after) = text.split_once("moment=")?;
            let digits: String = after.chars().take_while(char::is_ascii_digit).collect();
            digits.parse::<u128>().ok()
        });
        match printed {
            Some(n) => Some(Moment::from_nanos(n)),
            None => {
                let why = format!(
                    "a clock after a sleep needs a time namespace (root, util-linux unshare --time): {}",
                    match &out {
                        Ok(o) => String::from_utf8_lossy(&o.stderr).trim().to_string(),
                        Err(e) => e.to_string(),
                    }
                );
                if std::env::var("CI").is_ok_and(|v| v == "true") {
                    panic!("{why}");
                }
                use std::io::Write as _;
                let _ = writeln!(std::io::stderr(), "SKIPPED: {why}");
                None
            }
        }
    }

    #[test]
    fn the_clock_counts_time_asleep() {
        let before = Moment::now();
        let Some(after) = after_a_sleep(Duration::from_secs(3 * 3600)) else {
            return;
        };
        let passed = after.saturating_since(before);
        assert!(
            passed >= Duration::from_secs(3 * 3600) && passed < Duration::from_secs(3 * 3600 + 60),
            "3 h asleep read as {passed:?}"
        );
        assert!(Moment::now() >= before);
    }
}
