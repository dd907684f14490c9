//! A real pseudo-terminal for the prompts `box` asks on `/dev/tty` (the rm name check, the
//! passphrase): the child gets the pty as its controlling terminal and stdio, the test
//! reads everything the terminal showed, types answers after the prompt appeared, sends
//! signals through the line discipline (^C), and reads the terminal's settings (`stty -g`)
//! before and after.
#![allow(dead_code)]

use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub struct Pty {
    master: File,
    /// Kept open so the terminal outlives the child: its settings are read afterwards.
    slave: OwnedFd,
    child: Child,
    shown: Arc<Mutex<Vec<u8>>>,
    /// `stty -g` of the fresh terminal, read before the child started.
    pub initial_stty: String,
}

/// Starts `cmd` (its env and args as prepared by the caller) on a fresh pty.
pub fn spawn(mut cmd: Command) -> Pty {
    let pty = nix::pty::openpty(None, None).expect("openpty");
    let slave = pty.slave;
    for (i, which) in ["stdin", "stdout", "stderr"].iter().enumerate() {
        let fd = slave
            .try_clone()
            .unwrap_or_else(|e| panic!("dup pty {which}: {e}"));
        match i {
            0 => cmd.stdin(Stdio::from(fd)),
            1 => cmd.stdout(Stdio::from(fd)),
            _ => cmd.stderr(Stdio::from(fd)),
        };
    }
    // SAFETY: setsid and ioctl are async-signal-safe; nothing of the parent is touched.
    unsafe {
        cmd.pre_exec(|| {
            // The caller may already have made us a session leader (EPERM then): fine.
            libc::setsid();
            if libc::ioctl(0, libc::TIOCSCTTY as _, 0) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let initial_stty = stty_of(&slave);
    let child = cmd.spawn().expect("spawn on the pty");
    let master = File::from(pty.master);
    let shown = Arc::new(Mutex::new(Vec::new()));
    let mut reader = master.try_clone().expect("dup pty master");
    let sink = Arc::clone(&shown);
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        // Ends with EIO once the test dropped the slave and every child closed it.
        while let Ok(n) = reader.read(&mut buf) {
            if n == 0 {
                break;
            }
            sink.lock()
                .unwrap_or_else(|e| e.into_inner())
                .extend_from_slice(&buf[..n]);
        }
    });
    Pty {
        master,
        slave,
        child,
        shown,
        initial_stty,
    }
}

impl Pty {
    /// Everything the terminal showed so far.
    pub fn shown(&self) -> String {
        String::from_utf8_lossy(&self.shown.lock().unwrap_or_else(|e| e.into_inner())).into_owned()
    }

    /// Waits until the terminal showed `needle` (after everything seen before).
    pub fn expect(&self, needle: &str, timeout: Duration) {
        self.expect_times(needle, 1, timeout);
    }

    /// Waits until the terminal showed `needle` `times` times in all (a prompt asked again).
    pub fn expect_times(&self, needle: &str, times: usize, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if self.shown().matches(needle).count() >= times {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!(
            "the terminal never showed {needle:?} {times} time(s) within {timeout:?}; it showed:\n{}",
            self.shown()
        );
    }

    /// Types `bytes` as the user would.
    pub fn send(&mut self, bytes: &[u8]) {
        self.master.write_all(bytes).expect("write to the pty");
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Waits for the child (killing it after `timeout`) and returns its status.
    pub fn wait(&mut self, timeout: Duration) -> ExitStatus {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.child.try_wait().expect("wait") {
                // Let the reader drain what the child wrote last.
                std::thread::sleep(Duration::from_millis(100));
                return status;
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                let _ = self.child.wait();
                panic!(
                    "still running after {timeout:?} on the pty; it showed:\n{}",
                    self.shown()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// `stty -g` of this terminal now, as a shell on it would see it.
    pub fn stty(&self) -> String {
        stty_of(&self.slave)
    }

    /// The raw fd of the terminal (for the test's own termios reads).
    pub fn slave_fd(&self) -> i32 {
        self.slave.as_raw_fd()
    }
}

fn stty_of(slave: &OwnedFd) -> String {
    let fd = slave.try_clone().expect("dup pty slave");
    let out = Command::new("stty")
        .arg("-g")
        .stdin(Stdio::from(fd))
        .output()
        .expect("run stty");
    assert!(
        out.status.success(),
        "stty -g: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

impl Drop for Pty {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}
