//! What keeps a gateway alive: the time of the last request, and the requests, streams
//! and WebSockets still open (an SSE stream that runs for hours is not "idle"). Idle time
//! counts the time the machine sleeps ([`super::clock`]).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use super::clock::Moment;

#[derive(Debug)]
pub struct Activity {
    epoch: Moment,
    last_ms: AtomicU64,
    busy: AtomicUsize,
}

impl Activity {
    pub fn new() -> Arc<Self> {
        Arc::new(Self {
            epoch: Moment::now(),
            last_ms: AtomicU64::new(0),
            busy: AtomicUsize::new(0),
        })
    }

    pub fn touch(&self) {
        let ms = u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.last_ms.fetch_max(ms, Ordering::Relaxed);
    }

    /// Marks something in progress until the returned guard is dropped.
    pub fn begin(self: &Arc<Self>) -> Busy {
        self.busy.fetch_add(1, Ordering::SeqCst);
        self.touch();
        Busy(Arc::clone(self))
    }

    /// How long nothing has happened; `None` while something is in progress.
    pub fn idle_for(&self) -> Option<Duration> {
        if self.busy.load(Ordering::SeqCst) > 0 {
            return None;
        }
        let last = Duration::from_millis(self.last_ms.load(Ordering::Relaxed));
        Some(self.epoch.elapsed().saturating_sub(last))
    }
}

/// Something in progress (a request, a streaming body, a WebSocket).
#[derive(Debug)]
pub struct Busy(Arc<Activity>);

impl Busy {
    pub fn touch(&self) {
        self.0.touch();
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        self.0.touch();
        self.0.busy.fetch_sub(1, Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn busy_is_never_idle_and_the_clock_restarts_after() {
        let a = Activity::new();
        std::thread::sleep(Duration::from_millis(30));
        assert!(a.idle_for().unwrap() >= Duration::from_millis(30));
        let b = a.begin();
        let c = a.begin();
        assert_eq!(a.idle_for(), None);
        drop(b);
        assert_eq!(a.idle_for(), None);
        drop(c);
        assert!(a.idle_for().unwrap() < Duration::from_millis(30));
    }
}
