//! Chunks from another thread read as one byte stream: how the engine runs decryption (or
//! encryption) and decompression + validation on two cores.

use std::io::{self, Read};
use std::sync::mpsc::Receiver;

use super::cleanup;

/// Reads a channel of chunks; EOF when the sender is gone.
pub(super) struct ChannelReader {
    rx: Receiver<Vec<u8>>,
    buf: Vec<u8>,
    pos: usize,
    /// Fail as soon as HUP/INT/TERM arrived (deferred mode), instead of reading on.
    stop_on_signal: bool,
}

impl ChannelReader {
    pub(super) fn new(rx: Receiver<Vec<u8>>, stop_on_signal: bool) -> Self {
        Self {
            rx,
            buf: Vec::new(),
            pos: 0,
            stop_on_signal,
        }
    }
}

impl Read for ChannelReader {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        if self.stop_on_signal {
            cleanup::check()?;
        }
        while self.pos >= self.buf.len() {
            match self.rx.recv() {
                Ok(chunk) => {
                    self.buf = chunk;
                    self.pos = 0;
                }
                Err(_) => return Ok(0),
            }
        }
        let n = out.len().min(self.buf.len() - self.pos);
        out[..n].copy_from_slice(&self.buf[self.pos..self.pos + n]);
        self.pos += n;
        Ok(n)
    }
}
