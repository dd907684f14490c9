//! The web port bridge (replaces the seed's socat): guest `0.0.0.0:<web port>` →
//! `127.0.0.1:<Executor port>`, so the host's published port reaches Executor, which
//! listens on loopback only. It listens only while Executor should run: while paused the
//! port is closed, so a host-side check sees "down", not a half-open relay.

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::Duration;

use super::logfile::SharedLog;

pub struct Bridge {
    pub listen: SocketAddr,
    pub target: SocketAddr,
    /// Listen while true.
    pub active: Arc<AtomicBool>,
    /// Stop the thread.
    pub stop: Arc<AtomicBool>,
}

impl Bridge {
    pub fn spawn(self, log: SharedLog) -> thread::JoinHandle<()> {
        thread::spawn(move || self.run(log))
    }

    fn run(self, log: SharedLog) {
        let mut listener: Option<TcpListener> = None;
        let mut bind_error_logged = false;
        while !self.stop.load(Ordering::Relaxed) {
            let want = self.active.load(Ordering::Relaxed);
            if want && listener.is_none() {
                match TcpListener::bind(self.listen).and_then(|l| {
                    l.set_nonblocking(true)?;
                    Ok(l)
                }) {
                    Ok(l) => {
                        say(
                            &log,
                            &format!("bridge: listening on {} -> {}", self.listen, self.target),
                        );
                        listener = Some(l);
                        bind_error_logged = false;
                    }
                    Err(e) => {
                        if !bind_error_logged {
                            say(
                                &log,
                                &format!(
                                    "bridge: cannot listen on {}: {e} (retrying)",
                                    self.listen
                                ),
                            );
                            bind_error_logged = true;
                        }
                    }
                }
            } else if !want && listener.is_some() {
                listener = None;
                say(
                    &log,
                    &format!("bridge: closed {} (Executor not running)", self.listen),
                );
            }
            let accepted = listener.as_ref().map(|l| l.accept());
            match accepted {
                Some(Ok((client, _))) => {
                    let target = self.target;
                    thread::spawn(move || relay(client, target));
                }
                _ => thread::sleep(Duration::from_millis(100)),
            }
        }
    }
}

fn say(log: &SharedLog, text: &str) {
    if let Ok(mut l) = log.lock() {
        l.line(text);
    }
}

/// Copies both directions until either side closes.
fn relay(client: TcpStream, target: SocketAddr) {
    let _ = client.set_nonblocking(false);
    let Ok(upstream) = TcpStream::connect_timeout(&target, Duration::from_secs(2)) else {
        return;
    };
    let (Ok(c2), Ok(u2)) = (client.try_clone(), upstream.try_clone()) else {
        return;
    };
    let up = thread::spawn(move || copy(client, upstream));
    copy(u2, c2);
    let _ = up.join();
}

fn copy(mut from: TcpStream, mut to: TcpStream) {
    let mut buf = [0u8; 16 * 1024];
    loop {
        match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                if to.write_all(&buf[..n]).is_err() {
                    break;
                }
            }
        }
    }
    let _ = to.shutdown(Shutdown::Write);
    let _ = from.shutdown(Shutdown::Read);
}
