//! Where a verb's seconds went: named steps timed back to back, said in one line
//! (`where the seconds went: quiesce 0.41 s; export 0.20 s; … = 1.93 s`) that `box save`,
//! `box new` and `box load` write into their transcript and show under `-v`. Each step
//! ends where the next begins, so the steps add up to the whole; a step that runs again
//! (a retry) adds to its first entry.

use std::time::{Duration, Instant};

/// Steps timed back to back from [`Timings::start`].
#[derive(Debug)]
pub struct Timings {
    started: Instant,
    last: Instant,
    steps: Vec<(String, Duration)>,
}

impl Timings {
    pub fn start() -> Self {
        let now = Instant::now();
        Timings {
            started: now,
            last: now,
            steps: Vec::new(),
        }
    }

    /// Ends the step that ran since the last mark (or the start) as `step`.
    pub fn mark(&mut self, step: &str) {
        let now = Instant::now();
        let took = now - self.last;
        self.last = now;
        self.add(step, took);
    }

    /// Adds `took` to `step`'s entry (its first, when it ran before).
    fn add(&mut self, step: &str, took: Duration) {
        match self.steps.iter_mut().find(|(name, _)| name == step) {
            Some((_, total)) => *total += took,
            None => self.steps.push((step.to_string(), took)),
        }
    }

    /// Takes in `later`'s steps, which ran after this one's last mark (a verb that hands
    /// part of its work to another's timings).
    pub fn absorb(&mut self, later: Timings) {
        for (name, took) in later.steps {
            self.add(&name, took);
        }
        self.last = later.last.max(self.last);
    }

    /// Seconds since the start.
    pub fn elapsed(&self) -> Duration {
        self.started.elapsed()
    }

    /// How long `step` took in all (zero if it never ran).
    #[cfg(test)]
    pub fn of(&self, step: &str) -> Duration {
        self.steps
            .iter()
            .find(|(name, _)| name == step)
            .map_or(Duration::ZERO, |(_, d)| *d)
    }

    /// `where the seconds went: a 0.10 s; b 1.20 s = 1.30 s` (the total to the last mark).
    pub fn line(&self) -> String {
        let steps: Vec<String> = self
            .steps
            .iter()
            .map(|(name, d)| format!("{name} {:.2} s", d.as_secs_f64()))
            .collect();
        format!(
            "where the seconds went: {} = {:.2} s",
            steps.join("; "),
            (self.last - self.started).as_secs_f64()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_add_up_to_the_whole_and_repeats_accumulate() {
        let mut t = Timings::start();
        std::thread::sleep(Duration::from_millis(20));
        t.mark("quiesce");
        std::thread::sleep(Duration::from_millis(10));
        t.mark("export");
        std::thread::sleep(Duration::from_millis(10));
        t.mark("quiesce");
        let line = t.line();
        assert!(
            line.starts_with("where the seconds went: quiesce "),
            "{line}"
        );
        assert!(line.contains("; export "), "{line}");
        assert_eq!(line.matches("quiesce").count(), 1, "{line}");
        assert!(t.of("quiesce") >= Duration::from_millis(30));
        assert_eq!(t.of("resume"), Duration::ZERO);
        let total: Duration = [t.of("quiesce"), t.of("export")].into_iter().sum();
        assert!(
            line.ends_with(&format!("= {:.2} s", total.as_secs_f64())),
            "{line}"
        );
    }

    /// A verb that hands part of its work to another's timings (load: new's create and
    /// provision) shows each step once, however many times it ran on either side.
    #[test]
    fn absorbed_steps_join_the_ones_of_the_same_name() {
        let mut load = Timings::start();
        load.mark("checks");
        let mut new = Timings::start();
        std::thread::sleep(Duration::from_millis(5));
        new.mark("checks");
        new.mark("provision");
        load.absorb(new);
        load.mark("import");
        let line = load.line();
        assert_eq!(line.matches("checks").count(), 1, "{line}");
        assert!(load.of("checks") >= Duration::from_millis(5));
        assert!(
            line.contains("; provision ") && line.contains("; import "),
            "{line}"
        );
    }
}
