//! Progress of box's long work (save, load, clone, extract, base build): one display per
//! phase with bytes, rate and an ETA, in one of four forms chosen once per run:
//!
//! * on a terminal (stderr), a bar per phase drawn by indicatif, cleared when it ends;
//! * without a terminal, a plain line every 10 s on stderr
//!   (`box save: copying in 3.1 GiB / 8.0 GiB, 42 MiB/s, ETA 2m`), and one when a phase
//!   that printed one ends (as rustic does in CI logs);
//! * with `--progress=json`, one JSON object a line on stderr, every second and when a
//!   phase ends (`type, verb, phase, bytes_done, bytes_total, rate_bps, eta_s, elapsed_s,
//!   finished`), for wrappers; in the style of restic's `status` and borg's
//!   `progress_percent` (restic's scripting docs, borg's `docs/internals/frontends.rst`);
//! * nothing with `-q`, `--progress=none` or `BOX_NO_PROGRESS`.
//!
//! The rate, and so the ETA, is that of the last [`WINDOW`] (restic's estimator looks back
//! two minutes), not the lifetime average: a save that slowed down says so. A phase whose
//! total is unknown (a streamed export) shows bytes and rate, no ETA.
//!
//! Each phase has a thread that samples its byte count and draws; counting is one atomic
//! add, so the hot loops that count (encryption, decryption) pay nothing for the display.

use std::collections::VecDeque;
use std::io::{IsTerminal, Write};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};

/// How far back the rate is measured.
pub const WINDOW: Duration = Duration::from_secs(30);
/// A plain line this often without a terminal.
const LINE_INTERVAL: Duration = Duration::from_secs(10);
/// A JSON line this often.
const JSON_INTERVAL: Duration = Duration::from_secs(1);
/// A bar is redrawn this often.
const BAR_INTERVAL: Duration = Duration::from_millis(250);
/// Test hook: both intervals above, in milliseconds, so a fast test sees periodic lines.
pub const TEST_INTERVAL_ENV: &str = "BOX_TEST_PROGRESS_INTERVAL_MS";

/// `--progress`: what the user asked for.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Choice {
    /// A bar on a terminal, else a plain line every 10 s
    #[default]
    Auto,
    /// Plain lines every 10 s, even on a terminal
    Plain,
    /// JSON lines on stderr, for scripts
    Json,
    /// No progress
    None,
}

/// The form progress takes in this run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Bar,
    Lines,
    Json,
    Off,
}

struct Settings {
    mode: Mode,
    /// `box save`: the words before a plain line and the `verb` of a JSON one.
    verb: String,
    line_interval: Duration,
    json_interval: Duration,
}

static SETTINGS: OnceLock<Settings> = OnceLock::new();
/// Every bar of the run: one per phase, drawn together.
static BARS: OnceLock<MultiProgress> = OnceLock::new();

/// Chooses the form for this run (`box` calls it once, before any verb runs): `-q`
/// silences everything; `BOX_NO_PROGRESS` is `--progress=none` unless `--progress` says
/// otherwise.
pub fn configure(choice: Option<Choice>, quiet: bool, verb: &str) {
    let choice = match choice {
        Some(c) => c,
        None if std::env::var_os("BOX_NO_PROGRESS").is_some() => Choice::None,
        None => Choice::Auto,
    };
    let mode = if quiet {
        Mode::Off
    } else {
        match choice {
            Choice::Auto if std::io::stderr().is_terminal() => Mode::Bar,
            Choice::Auto | Choice::Plain => Mode::Lines,
            Choice::Json => Mode::Json,
            Choice::None => Mode::Off,
        }
    };
    let hook = std::env::var(TEST_INTERVAL_ENV)
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
        .filter(|ms| *ms > 0)
        .map(Duration::from_millis);
    let _ = SETTINGS.set(Settings {
        mode,
        verb: verb.to_string(),
        line_interval: hook.unwrap_or(LINE_INTERVAL),
        json_interval: hook.unwrap_or(JSON_INTERVAL),
    });
}

fn settings() -> &'static Settings {
    SETTINGS.get_or_init(|| Settings {
        // Library use without `configure` (tests of the engine): quiet.
        mode: Mode::Off,
        verb: "box".into(),
        line_interval: LINE_INTERVAL,
        json_interval: JSON_INTERVAL,
    })
}

pub fn mode() -> Mode {
    settings().mode
}

/// Runs `print` (a line for the user) without tearing a bar being drawn.
pub fn suspend_bars<R>(print: impl FnOnce() -> R) -> R {
    match BARS.get() {
        Some(bars) => bars.suspend(print),
        None => print(),
    }
}

/// Byte counts over time, for the rate of the last [`WINDOW`].
#[derive(Debug)]
struct RateWindow {
    samples: VecDeque<(Instant, u64)>,
}

impl RateWindow {
    fn new(start: Instant) -> Self {
        Self {
            samples: VecDeque::from([(start, 0)]),
        }
    }

    /// Records `done` at `now`; returns bytes per second over the window (from the start
    /// until the window is full).
    fn sample(&mut self, now: Instant, done: u64) -> f64 {
        self.samples.push_back((now, done));
        // Keep one sample at or before the window's start, so the span covers it all.
        while self.samples.len() > 2
            && self
                .samples
                .get(1)
                .is_some_and(|(t, _)| now.duration_since(*t) >= WINDOW)
        {
            self.samples.pop_front();
        }
        let Some(&(t0, d0)) = self.samples.front() else {
            return 0.0;
        };
        let span = now.duration_since(t0).as_secs_f64();
        if span <= 0.0 {
            return 0.0;
        }
        done.saturating_sub(d0) as f64 / span
    }
}

/// What one phase looks like at one moment.
#[derive(Debug, Clone, PartialEq)]
struct Snapshot {
    done: u64,
    total: Option<u64>,
    rate: f64,
    elapsed: Duration,
}

impl Snapshot {
    /// Seconds left at the recent rate; none without a total or a rate.
    fn eta(&self) -> Option<u64> {
        let total = self.total?;
        if self.rate < 1.0 {
            return None;
        }
        Some((total.saturating_sub(self.done) as f64 / self.rate).ceil() as u64)
    }

    /// `3.1 GiB / 8.0 GiB, 42.0 MiB/s, ETA 2m` (no total: `3.1 GiB, 42.0 MiB/s`).
    fn text(&self) -> String {
        let mut s = human(self.done);
        if let Some(total) = self.total {
            s.push_str(&format!(" / {}", human(total)));
        }
        s.push_str(&format!(", {}/s", human(self.rate as u64)));
        if let Some(eta) = self.eta() {
            s.push_str(&format!(", ETA {}", short_duration(eta)));
        }
        s
    }

    fn json(&self, verb: &str, phase: &str, finished: bool) -> String {
        serde_json::json!({
            "type": "progress",
            "verb": verb,
            "phase": phase,
            "bytes_done": self.done,
            "bytes_total": self.total,
            "rate_bps": self.rate.round() as u64,
            "eta_s": if finished { Some(0) } else { self.eta() },
            "elapsed_s": (self.elapsed.as_secs_f64() * 10.0).round() / 10.0,
            "finished": finished,
        })
        .to_string()
    }
}

/// The counters a phase shares with its drawing thread.
#[derive(Debug)]
struct Counters {
    done: AtomicU64,
    /// `u64::MAX`: unknown.
    total: AtomicU64,
    start: Instant,
    window: Mutex<RateWindow>,
}

impl Counters {
    fn snapshot(&self) -> Snapshot {
        let now = Instant::now();
        let done = self.done.load(Ordering::Relaxed);
        let total = match self.total.load(Ordering::Relaxed) {
            u64::MAX => None,
            // Approximate totals (a backup file's size for its plaintext) may be passed.
            t => Some(t.max(done)),
        };
        let rate = self
            .window
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .sample(now, done);
        Snapshot {
            done,
            total,
            rate,
            elapsed: now.duration_since(self.start),
        }
    }
}

/// One phase of long work. Count with [`Phase::add`]; [`Phase::finish`] ends it (a
/// dropped phase ends too, as failed work does, without a final line).
pub struct Phase {
    name: String,
    /// Shown in some form and not yet ended.
    shown: bool,
    counters: Arc<Counters>,
    stop: Option<mpsc::Sender<()>>,
    drawer: Option<JoinHandle<bool>>,
    bar: Option<ProgressBar>,
}

impl Phase {
    /// Starts showing `name` with `total` bytes to go (when known; an estimate is fine:
    /// the display never shows more done than total).
    pub fn start(name: impl Into<String>, total: Option<u64>) -> Self {
        let mut phase = Phase::hidden();
        phase.name = name.into();
        if let Some(total) = total {
            phase.counters.total.store(total, Ordering::Relaxed);
        }
        let s = settings();
        let every = match s.mode {
            Mode::Off => return phase,
            Mode::Bar => {
                phase.bar = Some(new_bar(&phase.name, total));
                BAR_INTERVAL
            }
            Mode::Lines => s.line_interval,
            Mode::Json => {
                emit(&phase.counters.snapshot().json(&s.verb, &phase.name, false));
                s.json_interval
            }
        };
        phase.shown = true;
        let (tx, rx) = mpsc::channel::<()>();
        let counters = Arc::clone(&phase.counters);
        let name = phase.name.clone();
        let bar = phase.bar.clone();
        let drawer = std::thread::Builder::new()
            .name("box-progress".into())
            .spawn(move || draw_until_stopped(&rx, every, &counters, &name, bar.as_ref()));
        // Without a thread the work goes on, undisplayed.
        if let Ok(handle) = drawer {
            phase.stop = Some(tx);
            phase.drawer = Some(handle);
        }
        phase
    }

    /// A phase shown nowhere (another display counts the same work).
    pub fn hidden() -> Self {
        let start = Instant::now();
        Phase {
            name: String::new(),
            shown: false,
            counters: Arc::new(Counters {
                done: AtomicU64::new(0),
                total: AtomicU64::new(u64::MAX),
                start,
                window: Mutex::new(RateWindow::new(start)),
            }),
            stop: None,
            drawer: None,
            bar: None,
        }
    }

    /// Counts `n` more bytes done.
    pub fn add(&mut self, n: u64) {
        self.counters.done.fetch_add(n, Ordering::Relaxed);
    }

    /// Ends the phase: a bar is cleared, a plain phase that printed a line says it is done,
    /// JSON says `finished`. Returns the time it took.
    pub fn finish(&mut self) -> Duration {
        self.end(true)
    }

    fn end(&mut self, finished: bool) -> Duration {
        let elapsed = self.counters.start.elapsed();
        if !std::mem::take(&mut self.shown) {
            return elapsed;
        }
        // The drawing thread ends when its channel closes.
        self.stop.take();
        let printed = self
            .drawer
            .take()
            .and_then(|h| h.join().ok())
            .unwrap_or(false);
        if let Some(bar) = self.bar.take() {
            bar.finish_and_clear();
            if let Some(bars) = BARS.get() {
                bars.remove(&bar);
            }
        }
        if !finished {
            return elapsed;
        }
        let s = settings();
        let mut last = self.counters.snapshot();
        // Finished: everything that was to be done is done.
        last.total = Some(last.done);
        last.rate = last.done as f64 / elapsed.as_secs_f64().max(0.001);
        match s.mode {
            Mode::Json => emit(&last.json(&s.verb, &self.name, true)),
            Mode::Lines if printed => emit(&format!(
                "{}: {} done: {} in {}, {}/s",
                s.verb,
                self.name,
                human(last.done),
                short_duration(elapsed.as_secs()),
                human(last.rate as u64)
            )),
            _ => {}
        }
        elapsed
    }
}

impl Drop for Phase {
    fn drop(&mut self) {
        self.end(false);
    }
}

/// The drawing thread: every `every` until the phase ends. Returns whether it printed a
/// plain line.
fn draw_until_stopped(
    stop: &mpsc::Receiver<()>,
    every: Duration,
    counters: &Counters,
    name: &str,
    bar: Option<&ProgressBar>,
) -> bool {
    let s = settings();
    let mut printed = false;
    loop {
        match stop.recv_timeout(every) {
            Err(RecvTimeoutError::Timeout) => {}
            Ok(()) | Err(RecvTimeoutError::Disconnected) => return printed,
        }
        let now = counters.snapshot();
        match (s.mode, bar) {
            (Mode::Bar, Some(bar)) => {
                if let Some(total) = now.total {
                    bar.set_length(total);
                }
                bar.set_position(now.done);
                bar.set_message(now.text());
            }
            (Mode::Lines, _) => {
                emit(&format!("{}: {name} {}", s.verb, now.text()));
                printed = true;
            }
            (Mode::Json, _) => emit(&now.json(&s.verb, name, false)),
            _ => {}
        }
    }
}

fn new_bar(name: &str, total: Option<u64>) -> ProgressBar {
    let bars = BARS.get_or_init(|| MultiProgress::with_draw_target(ProgressDrawTarget::stderr()));
    let template = if total.is_some() {
        "  {prefix} [{bar:30}] {msg}"
    } else {
        "  {prefix} {spinner} {msg}"
    };
    let style = ProgressStyle::with_template(template)
        .unwrap_or_else(|_| ProgressStyle::default_bar())
        .progress_chars("=> ");
    let bar = match total {
        Some(t) => ProgressBar::new(t),
        None => ProgressBar::new_spinner(),
    };
    bar.set_style(style);
    bar.set_prefix(name.to_string());
    bars.add(bar)
}

/// Turns streamed provisioning output into step lines on the terminal (`==> [mm:ss]
/// step`, as `provision.sh` names its steps), and with `--progress=json` into a phase
/// per step (`provisioning: <step>`, no bytes).
pub struct StepProgress {
    started: Instant,
    step: Option<(String, Instant)>,
    /// The step as a JSON phase.
    phase: Option<Phase>,
}

impl Default for StepProgress {
    fn default() -> Self {
        Self::new()
    }
}

impl StepProgress {
    pub fn new() -> Self {
        Self {
            started: Instant::now(),
            step: None,
            phase: None,
        }
    }

    /// The step name in a `==> step: <name>` line.
    pub fn step_of(line: &str) -> Option<&str> {
        line.trim()
            .strip_prefix("==> step:")
            .map(str::trim)
            .filter(|s| !s.is_empty())
    }

    /// Feeds one output line; prints a progress line when a new step begins.
    pub fn feed(&mut self, line: &str) {
        if let Some(name) = Self::step_of(line) {
            self.finish_step();
            let name: String = name.chars().take(80).collect();
            let shown = super::terminal_text::quoted(&name);
            super::say(format!(
                "  [{}] {shown}",
                mmss(self.started.elapsed().as_secs())
            ));
            if mode() == Mode::Json {
                self.phase = Some(Phase::start(format!("provisioning: {shown}"), None));
            }
            self.step = Some((shown, Instant::now()));
        }
    }

    fn finish_step(&mut self) {
        if let Some(mut phase) = self.phase.take() {
            phase.finish();
        }
        if let Some((name, at)) = self.step.take() {
            tracing::info!(
                "provision step '{name}' took {:.1}s",
                at.elapsed().as_secs_f64()
            );
        }
    }

    /// Ends the last step; returns the total elapsed seconds.
    pub fn done(&mut self) -> u64 {
        self.finish_step();
        self.started.elapsed().as_secs()
    }
}

pub fn mmss(secs: u64) -> String {
    format!("{:02}:{:02}", secs / 60, secs % 60)
}

/// One line on stderr; a closed stderr is not box's failure.
fn emit(line: &str) {
    let mut err = std::io::stderr().lock();
    let _ = writeln!(err, "{line}");
    let _ = err.flush();
}

/// `1.2 GiB`.
pub fn human(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = bytes as f64;
    let mut unit = 0;
    while v >= 1024.0 && unit < UNITS.len() - 1 {
        v /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes} B")
    } else {
        format!("{v:.1} {}", UNITS[unit])
    }
}

/// `45s`, `2m`, `1h05m`: an ETA or a duration as a person reads it.
pub fn short_duration(secs: u64) -> String {
    if secs < 90 {
        format!("{secs}s")
    } else if secs < 90 * 60 {
        format!("{}m", (secs + 30) / 60)
    } else {
        format!("{}h{:02}m", secs / 3600, secs / 60 % 60)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recognises_step_markers_only() {
        assert_eq!(
            StepProgress::step_of("==> step: apt packages"),
            Some("apt packages")
        );
        assert_eq!(StepProgress::step_of("  ==> step:node  "), Some("node"));
        assert_eq!(StepProgress::step_of("==> step: "), None);
        assert_eq!(StepProgress::step_of("Get:1 http://deb.debian.org"), None);
        assert_eq!(mmss(125), "02:05");
    }

    #[test]
    fn durations_read_as_people_say_them() {
        assert_eq!(short_duration(5), "5s");
        assert_eq!(short_duration(89), "89s");
        assert_eq!(short_duration(125), "2m");
        assert_eq!(short_duration(3725), "62m");
        assert_eq!(short_duration(3 * 3600 + 5 * 60), "3h05m");
        assert_eq!(human(512), "512 B");
        assert_eq!(human(3 << 29), "1.5 GiB");
    }

    #[test]
    fn the_rate_is_the_recent_one_not_the_lifetime_average() {
        let t0 = Instant::now();
        let mut w = RateWindow::new(t0);
        // A fast first minute (100 MiB/s), then 10 MiB/s.
        let mut done = 0u64;
        for s in 1..=60 {
            done += 100 << 20;
            w.sample(t0 + Duration::from_secs(s), done);
        }
        let mut rate = 0.0;
        for s in 61..=120 {
            done += 10 << 20;
            rate = w.sample(t0 + Duration::from_secs(s), done);
        }
        let mib = rate / f64::from(1 << 20);
        assert!((mib - 10.0).abs() < 0.5, "recent rate {mib} MiB/s");
        // The lifetime average would have said 55 MiB/s.
    }

    #[test]
    fn a_young_phase_measures_from_its_start() {
        let t0 = Instant::now();
        let mut w = RateWindow::new(t0);
        let rate = w.sample(t0 + Duration::from_secs(2), 4 << 20);
        assert_eq!(rate, f64::from(2 << 20));
    }

    #[test]
    fn eta_and_text_follow_the_snapshot() {
        let s = Snapshot {
            done: 3 << 30,
            total: Some(8 << 30),
            rate: f64::from(42 << 20),
            elapsed: Duration::from_secs(70),
        };
        assert_eq!(s.eta(), Some(122));
        assert_eq!(s.text(), "3.0 GiB / 8.0 GiB, 42.0 MiB/s, ETA 2m");
        let unknown = Snapshot {
            total: None,
            ..s.clone()
        };
        assert_eq!(unknown.eta(), None);
        assert_eq!(unknown.text(), "3.0 GiB, 42.0 MiB/s");
        let stalled = Snapshot {
            rate: 0.0,
            ..s.clone()
        };
        assert_eq!(stalled.eta(), None);
        let v: serde_json::Value =
            serde_json::from_str(&s.json("save", "encrypting", false)).unwrap();
        assert_eq!(v["type"], "progress");
        assert_eq!(v["verb"], "save");
        assert_eq!(v["phase"], "encrypting");
        assert_eq!(v["bytes_done"], 3u64 << 30);
        assert_eq!(v["bytes_total"], 8u64 << 30);
        assert_eq!(v["rate_bps"], 42u64 << 20);
        assert_eq!(v["eta_s"], 122);
        assert_eq!(v["finished"], false);
        let v: serde_json::Value =
            serde_json::from_str(&unknown.json("save", "encrypting", false)).unwrap();
        assert!(v["bytes_total"].is_null() && v["eta_s"].is_null());
    }
}
