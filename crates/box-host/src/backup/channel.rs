//! Chunks from another thread read as one byte stream: how the engine runs decryption (or
//! encryption) and decompression + validation on two cores; and a hashing reader for the
//! consuming side.

use std::io::{self, Read};
use std::sync::mpsc::Receiver;

use box_proto::archive::part_hash::{PartHash, PartHasher};
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

/// A reader that hashes and counts what passes through it: on the consuming side of a
/// [`ChannelReader`], it keeps the hash off the producing thread. SHA-256 (load's whole
/// plaintext) unless made [`HashingReader::with`] a part's hasher.
pub(super) struct HashingReader<R, H = Sha256> {
    inner: R,
    hasher: H,
    bytes: u64,
}

/// What a [`HashingReader`] can hash with.
pub(super) trait Absorb {
    fn absorb(&mut self, data: &[u8]);
}

impl Absorb for Sha256 {
    fn absorb(&mut self, data: &[u8]) {
        self.update(data);
    }
}

impl Absorb for PartHasher {
    fn absorb(&mut self, data: &[u8]) {
        self.update(data);
    }
}

impl<R> HashingReader<R> {
    pub(super) fn new(inner: R) -> Self {
        Self::with(inner, Sha256::new())
    }

    /// The SHA-256 and size of everything read.
    pub(super) fn finish(self) -> ([u8; 32], u64) {
        (self.hasher.finalize().into(), self.bytes)
    }
}

impl<R, H> HashingReader<R, H> {
    pub(super) fn with(inner: R, hasher: H) -> Self {
        Self {
            inner,
            hasher,
            bytes: 0,
        }
    }
}

impl<R> HashingReader<R, PartHasher> {
    /// The part hash and size of everything read.
    pub(super) fn finish_part(self) -> (PartHash, u64) {
        (self.hasher.finish(), self.bytes)
    }
}

impl<R: Read, H: Absorb> Read for HashingReader<R, H> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.hasher.absorb(&buf[..n]);
        self.bytes += n as u64;
        Ok(n)
    }
}
