//! SHA-256 per fixed-size segment of a stream: how save checks each part with one hash
//! pass over the plaintext.
//!
//! A save's plaintext arrives in parts of one size (all but the last), each with its
//! SHA-256 from `hb export`. The encrypting side hashes the stream in segments of that
//! size, so the segment that ends with a part is that part's hash (checked against what
//! the export said); equal lists mean the backup holds exactly the checked parts, in
//! order, with no separate whole-stream hash. (The verification pass then proves the file
//! decrypts to those bytes through the MDC: backup/save.rs.) A segment size of `u64::MAX`
//! is one segment: the whole-stream SHA-256.

use sha2::{Digest, Sha256};

/// Hashes a stream in segments of a set size.
pub struct SegmentHasher {
    size: u64,
    current: Sha256,
    filled: u64,
    done: Vec<[u8; 32]>,
}

impl SegmentHasher {
    /// Segments of `size` bytes (at least 1; `u64::MAX`: the whole stream).
    pub fn new(size: u64) -> Self {
        SegmentHasher {
            size: size.max(1),
            current: Sha256::new(),
            filled: 0,
            done: Vec::new(),
        }
    }

    pub fn segment_size(&self) -> u64 {
        self.size
    }

    pub fn update(&mut self, mut data: &[u8]) {
        while !data.is_empty() {
            let room = (self.size - self.filled).min(data.len() as u64) as usize;
            self.current.update(&data[..room]);
            self.filled += room as u64;
            data = &data[room..];
            if self.filled == self.size {
                self.cut();
            }
        }
    }

    /// Ends the current segment here, however full (a last, shorter part).
    pub fn cut(&mut self) {
        let digest = std::mem::replace(&mut self.current, Sha256::new()).finalize();
        self.done.push(digest.into());
        self.filled = 0;
    }

    /// No bytes of an unfinished segment pending.
    pub fn at_boundary(&self) -> bool {
        self.filled == 0
    }

    /// The most recently finished segment's hash.
    pub fn last(&self) -> Option<&[u8; 32]> {
        self.done.last()
    }

    /// Every segment's hash (a stream of no bytes has one, of nothing).
    pub fn finish(mut self) -> Vec<[u8; 32]> {
        if self.filled > 0 || self.done.is_empty() {
            self.cut();
        }
        self.done
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sha(data: &[u8]) -> [u8; 32] {
        Sha256::digest(data).into()
    }

    #[test]
    fn segments_are_the_hashes_of_the_pieces_however_the_bytes_arrive() {
        let data: Vec<u8> = (0..2500u32).map(|i| (i * 7 % 251) as u8).collect();
        for feed in [1usize, 3, 999, 1000, 1001, 4096] {
            let mut h = SegmentHasher::new(1000);
            for chunk in data.chunks(feed) {
                h.update(chunk);
            }
            let segs = h.finish();
            assert_eq!(
                segs,
                [
                    sha(&data[..1000]),
                    sha(&data[1000..2000]),
                    sha(&data[2000..])
                ],
                "fed in chunks of {feed}"
            );
        }
    }

    #[test]
    fn one_segment_is_the_whole_stream_hash_and_nothing_hashes_nothing() {
        let mut h = SegmentHasher::new(u64::MAX);
        h.update(b"hello ");
        h.update(b"world");
        assert_eq!(h.finish(), [sha(b"hello world")]);
        assert_eq!(SegmentHasher::new(10).finish(), [sha(b"")]);
        let mut exact = SegmentHasher::new(5);
        exact.update(b"12345");
        assert!(exact.at_boundary());
        assert_eq!(exact.finish(), [sha(b"12345")]);
    }

    #[test]
    fn a_cut_ends_a_short_segment() {
        let mut h = SegmentHasher::new(10);
        h.update(b"abc");
        assert!(!h.at_boundary());
        h.cut();
        assert_eq!(h.last(), Some(&sha(b"abc")));
        assert_eq!(h.finish(), [sha(b"abc")]);
    }
}
