//! Service logs under `/data/logs` with size rotation (`x.log` → `x.log.1`).
//!
//! The workload runs as root, but the agent reads the logs (`hb logs` runs as the agent),
//! so files are created 0600 and given to the agent.

use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use nix::unistd::{Gid, Uid};

/// Rotate when a log passes this size; one old generation is kept.
pub const MAX_LOG_BYTES: u64 = 10 * 1024 * 1024;

pub struct RotatingLog {
    path: PathBuf,
    max_bytes: u64,
    owner: Option<(Uid, Gid)>,
    file: Option<File>,
    size: u64,
}

/// A log shared between threads.
pub type SharedLog = Arc<Mutex<RotatingLog>>;

impl RotatingLog {
    pub fn new(path: PathBuf, max_bytes: u64, owner: Option<(Uid, Gid)>) -> Self {
        Self {
            path,
            max_bytes,
            owner,
            file: None,
            size: 0,
        }
    }

    pub fn shared(path: PathBuf, max_bytes: u64, owner: Option<(Uid, Gid)>) -> SharedLog {
        Arc::new(Mutex::new(Self::new(path, max_bytes, owner)))
    }

    fn open(&mut self) -> std::io::Result<&mut File> {
        if self.file.is_none() {
            let f = OpenOptions::new()
                .create(true)
                .append(true)
                .mode(0o600)
                .custom_flags(libc::O_NOFOLLOW)
                .open(&self.path)?;
            self.size = f.metadata()?.len();
            let _ = crate::account::chown_nofollow(&self.path, self.owner);
            self.file = Some(f);
        }
        self.file
            .as_mut()
            .ok_or_else(|| std::io::Error::other("log not open"))
    }

    /// Sets the owner once the agent account exists (the workload starts before
    /// provisioning creates it) and gives the open file to it.
    pub fn set_owner(&mut self, owner: Option<(Uid, Gid)>) {
        if owner.is_some() && owner != self.owner {
            self.owner = owner;
            if self.file.is_some() {
                let _ = crate::account::chown_nofollow(&self.path, owner);
            }
        }
    }

    /// Appends bytes, rotating first if the file would pass the limit.
    pub fn write(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        self.open()?;
        if self.size > 0 && self.size + bytes.len() as u64 > self.max_bytes {
            self.file = None;
            let mut old = self.path.clone().into_os_string();
            old.push(".1");
            std::fs::rename(&self.path, &old)?;
            self.open()?;
        }
        let f = self.open()?;
        f.write_all(bytes)?;
        self.size += bytes.len() as u64;
        Ok(())
    }

    /// One timestamped line.
    pub fn line(&mut self, text: &str) {
        let stamp = chrono::Utc::now().format("%Y-%m-%dT%H:%M:%SZ");
        let _ = self.write(format!("{stamp} {text}\n").as_bytes());
    }
}

/// Copies a child's output into the log line by line until EOF (on its own thread).
pub fn pump(source: impl Read + Send + 'static, log: SharedLog) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let mut reader = BufReader::new(source);
        let mut line = Vec::new();
        loop {
            line.clear();
            match reader.read_until(b'\n', &mut line) {
                Ok(0) | Err(_) => break,
                Ok(_) => {
                    if let Ok(mut l) = log.lock() {
                        let _ = l.write(&line);
                    }
                }
            }
        }
    })
}

/// Starts `cmd` with no stdin and its stdout and stderr copied into `log`; returns its pid.
/// The caller's reaper collects its exit status (the `Child` is dropped here, which
/// neither waits for nor kills it).
pub fn spawn_logged(
    cmd: &mut std::process::Command,
    log: &SharedLog,
) -> std::io::Result<nix::unistd::Pid> {
    use std::process::Stdio;
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    if let Some(out) = child.stdout.take() {
        pump(out, log.clone());
    }
    if let Some(err) = child.stderr.take() {
        pump(err, log.clone());
    }
    Ok(nix::unistd::Pid::from_raw(child.id() as i32))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rotates_at_the_limit_and_keeps_one_generation() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.log");
        let mut log = RotatingLog::new(path.clone(), 100, None);
        for i in 0..30 {
            log.write(format!("line {i:04}\n").as_bytes()).unwrap();
        }
        let cur = std::fs::read_to_string(&path).unwrap();
        let old = std::fs::read_to_string(dir.path().join("x.log.1")).unwrap();
        assert!(cur.len() <= 100 && old.len() <= 100);
        assert!(cur.ends_with("line 0029\n"));
        assert!(old.ends_with(&format!("line {:04}\n", 29 - cur.lines().count())));
        assert_eq!(crate::fsutil::mode_of(&path), Some(0o600));
    }
}
