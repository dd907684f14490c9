//! The egress audit trail: `<data dir>/egress-denials.log`, one line per denied connect,
//! sendto or resolve, `[2026-12-03T10:00:00Z]: egress policy denied <op> <dest>`, appended
//! across boots and rotated once past 8 MiB, as smolvm-network 1.33.0 writes it
//! (`EgressPolicy::record_denial`); `machine egress-events` reads it back
//! (`read_egress_denials`, smolvm `src/agent/manager.rs` since 1.8.1).

use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

pub const LOG: &str = "egress-denials.log";
const ROTATE_BYTES: u64 = 8 * 1024 * 1024;
/// How much of the log's tail `egress-events` reads.
const SCAN_BYTES: u64 = 256 * 1024;

/// Where one machine's denials go.
#[derive(Clone, Debug)]
pub struct Audit {
    path: PathBuf,
}

impl Audit {
    pub fn new(data_dir: &Path) -> Self {
        Self {
            path: data_dir.join(LOG),
        }
    }

    /// Record one denial (and say it on the machine's console log, as smolvm's runtime
    /// does on stderr).
    pub fn denied(&self, op: &str, dest: &str) {
        let line = format!("[{}]: egress policy denied {op} {dest}", rfc3339_now());
        eprintln!("{line}");
        if std::fs::metadata(&self.path).is_ok_and(|m| m.len() > ROTATE_BYTES) {
            let _ = std::fs::rename(&self.path, self.path.with_extension("log.1"));
        }
        if let Ok(mut f) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.path)
        {
            // One write per line: resolves of A and AAAA run at once, and `writeln!` on a
            // file is two writes (text, then newline), which O_APPEND may interleave into
            // one line holding two denials.
            let _ = f.write_all(format!("{line}\n").as_bytes());
        }
    }
}

/// One recorded denial, as `egress-events --json` prints it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Denial {
    pub timestamp: String,
    pub operation: String,
    pub dest: String,
}

/// The newest `limit` denials of the log at `path`, oldest first; none when it is missing.
pub fn read(path: &Path, limit: usize) -> Vec<Denial> {
    let Ok(mut f) = std::fs::File::open(path) else {
        return Vec::new();
    };
    let len = f.metadata().map(|m| m.len()).unwrap_or(0);
    if len > SCAN_BYTES {
        let _ = f.seek(SeekFrom::End(-(SCAN_BYTES as i64)));
    }
    let mut tail = String::new();
    if f.read_to_string(&mut tail).is_err() {
        return Vec::new();
    }
    let mut out: Vec<Denial> = tail.lines().filter_map(parse_line).collect();
    if out.len() > limit {
        out.drain(..out.len() - limit);
    }
    out
}

fn parse_line(line: &str) -> Option<Denial> {
    const MARKER: &str = "egress policy denied ";
    let after = &line[line.find(MARKER)? + MARKER.len()..];
    let (op, rest) = after.split_once(' ')?;
    if !matches!(op, "connect" | "sendto" | "resolve") {
        return None;
    }
    let dest = rest.strip_prefix("to ").unwrap_or(rest).trim();
    if dest.is_empty() {
        return None;
    }
    let timestamp = line
        .strip_prefix('[')
        .and_then(|r| r.split_whitespace().next())
        .unwrap_or("")
        .trim_end_matches(':')
        .trim_end_matches(']')
        .to_string();
    Some(Denial {
        timestamp,
        operation: op.to_string(),
        dest: dest.to_string(),
    })
}

/// `YYYY-MM-DDTHH:MM:SSZ` for now, without a time crate (civil-from-days).
fn rfc3339_now() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn denials_round_trip_through_the_log() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let a = Audit::new(dir.path());
        a.denied("resolve", "evil.example");
        a.denied("connect", "to 10.1.2.3:443");
        std::fs::OpenOptions::new()
            .append(true)
            .open(dir.path().join(LOG))
            .and_then(|mut f| writeln!(f, "some other line\negress policy denied fly to x"))
            .unwrap_or_else(|e| panic!("{e}"));
        let got = read(&dir.path().join(LOG), 200);
        assert_eq!(got.len(), 2, "{got:?}");
        assert_eq!(got[0].operation, "resolve");
        assert_eq!(got[1].dest, "10.1.2.3:443");
        assert!(got[0].timestamp.ends_with('Z') && got[0].timestamp.len() == 20);
        assert_eq!(read(&dir.path().join(LOG), 1).len(), 1);
        assert!(read(&dir.path().join("missing"), 5).is_empty());
    }

    /// A and AAAA lookups of one name are denied at the same moment: every denial must
    /// still be its own line, naming its own destination.
    #[test]
    fn denials_recorded_at_once_stay_one_per_line() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let a = Audit::new(dir.path());
        std::thread::scope(|s| {
            for t in 0..8 {
                let a = a.clone();
                s.spawn(move || {
                    for i in 0..300 {
                        a.denied("resolve", &format!("n{t}-{i}.example"));
                    }
                });
            }
        });
        let got = read(&dir.path().join(LOG), 10_000);
        assert_eq!(got.len(), 8 * 300);
        for d in &got {
            assert!(
                d.dest.starts_with('n') && d.dest.ends_with(".example") && !d.dest.contains(' '),
                "{d:?}"
            );
        }
    }
}
