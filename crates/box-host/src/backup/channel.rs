//! Chunks from another thread read as one byte stream: how the engine runs decryption (or
//! encryption) and decompression + validation on two cores; and a hashing reader for the
//! consuming side.

use std::io::{self, Read};
use std::sync::mpsc::Receiver;

use sha2::{Digest, Sha256};

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

/// A reader that hashes (SHA-256) and counts what passes through it: on the consuming
/// side of a [`ChannelReader`], it keeps the hash off the producing thread.
pub(super) struct HashingReader<R> {
    inner: R,
    hasher: Sha256,
    bytes: u64,
}

impl<R> HashingReader<R> {
    pub(super) fn new(inner: R) -> Self {
        Self {
            inner,
            hasher: Sha256::new(),
            bytes: 0,
        }
    }

    /// The SHA-256 and size of everything read.
    pub(super) fn finish(self) -> ([u8; 32], u64) {
        (self.hasher.finalize().into(), self.bytes)
    }
}

impl<R: Read> Read for HashingReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.hasher.update(&buf[..n]);
        self.bytes += n as u64;
        Ok(n)
    }
}
