//! When the workload starts a process again after it exited on its own: at once the first
//! time, then waiting twice as long after each further exit up to a cap, and from the
//! start again once a run lasted long enough to count as healthy. Executor and the Hermes
//! services share it.

use std::time::Duration;

pub const FIRST_BACKOFF: Duration = Duration::from_secs(1);
pub const MAX_BACKOFF: Duration = Duration::from_secs(30);
/// A run this long counts as healthy: the next crash starts the backoff over.
pub const STABLE_AFTER: Duration = Duration::from_secs(60);

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Backoff {
    next: Duration,
}

impl Default for Backoff {
    fn default() -> Self {
        Self {
            next: FIRST_BACKOFF,
        }
    }
}

impl Backoff {
    /// Back to the first delay (a healthy run, a stop that was asked for).
    pub fn reset(&mut self) {
        self.next = FIRST_BACKOFF;
    }

    /// The delay before the next start after a failure; the one after it doubles. A
    /// failed run that lasted [`STABLE_AFTER`] (`ran`) starts over from the first delay.
    pub fn after_failure(&mut self, ran: Option<Duration>) -> Duration {
        if ran.is_some_and(|r| r >= STABLE_AFTER) {
            self.reset();
        }
        let delay = self.next;
        self.next = (self.next * 2).min(MAX_BACKOFF);
        delay
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_to_the_cap_and_starts_over_after_a_stable_run() {
        let mut b = Backoff::default();
        let delays: Vec<u64> = (0..7)
            .map(|_| b.after_failure(Some(Duration::from_secs(2))).as_secs())
            .collect();
        assert_eq!(delays, [1, 2, 4, 8, 16, 30, 30]);
        assert_eq!(b.after_failure(Some(STABLE_AFTER)), FIRST_BACKOFF);
        assert_eq!(b.after_failure(None).as_secs(), 2);
        b.reset();
        assert_eq!(b.after_failure(None), FIRST_BACKOFF);
    }
}
