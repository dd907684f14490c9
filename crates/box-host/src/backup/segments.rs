//! A hash per fixed-size segment of a stream: how save checks each part with one hash
//! pass over the plaintext.
//!
//! A save's plaintext arrives in parts of one size (all but the last), each with its hash
//! (XXH3-128, or SHA-256 from an older `hb`) from `hb export`. The encrypting side hashes
//! the stream in segments of that size, each with the algorithm of the part it is about to
//! take, so the segment that ends with a part is that part's hash (checked against what
//! the export said); equal lists mean the backup holds exactly the checked parts, in
//! order, with no separate whole-stream hash. (The verification pass then proves the file
//! decrypts to those bytes through the MDC: backup/save.rs.) A segment size of `u64::MAX`
//! is one segment: the whole-stream SHA-256.

use box_proto::archive::part_hash::{PartHash, PartHashAlgo, PartHasher};

/// Hashes a stream in segments of a set size.
pub struct SegmentHasher {
    size: u64,
    current: PartHasher,
    filled: u64,
    done: Vec<PartHash>,
}

impl SegmentHasher {
    /// Segments of `size` bytes (at least 1; `u64::MAX`: the whole stream), SHA-256 until
    /// [`Self::hash_next_with`] says otherwise.
    pub fn new(size: u64) -> Self {
        SegmentHasher {
            size: size.max(1),
            current: PartHasher::new(PartHashAlgo::Sha256),
            filled: 0,
            done: Vec::new(),
        }
    }

    /// Hashes the segment about to start, and those after it, with `algo`. Only at a
    /// boundary: a segment has one algorithm (false, and nothing changed, otherwise).
    pub fn hash_next_with(&mut self, algo: PartHashAlgo) -> bool {
        if !self.at_boundary() {
            return false;
        }
        if self.current.algorithm() != algo {
            self.current = PartHasher::new(algo);
        }
        true
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
        let next = PartHasher::new(self.current.algorithm());
        self.done
            .push(std::mem::replace(&mut self.current, next).finish());
        self.filled = 0;
    }

    /// No bytes of an unfinished segment pending.
    pub fn at_boundary(&self) -> bool {
        self.filled == 0
    }

    /// The most recently finished segment's hash.
    pub fn last(&self) -> Option<&PartHash> {
        self.done.last()
    }

    /// Every segment's hash (a stream of no bytes has one, of nothing).
    pub fn finish(mut self) -> Vec<PartHash> {
        if self.filled > 0 || self.done.is_empty() {
            self.cut();
        }
        self.done
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sha(data: &[u8]) -> PartHash {
        PartHash::of(PartHashAlgo::Sha256, data)
    }

    fn xxh(data: &[u8]) -> PartHash {
        PartHash::of(PartHashAlgo::Xxh3_128, data)
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

    #[test]
    fn each_segment_takes_the_algorithm_set_at_its_start() {
        let data: Vec<u8> = (0..2500u32).map(|i| (i * 7 % 251) as u8).collect();
        let mut h = SegmentHasher::new(1000);
        assert!(h.hash_next_with(PartHashAlgo::Xxh3_128));
        h.update(&data[..10]);
        // Mid-segment: refused, the segment keeps its algorithm.
        assert!(!h.hash_next_with(PartHashAlgo::Sha256));
        h.update(&data[10..1000]);
        assert!(h.hash_next_with(PartHashAlgo::Xxh3_128));
        h.update(&data[1000..2000]);
        assert!(h.hash_next_with(PartHashAlgo::Sha256));
        h.update(&data[2000..]);
        assert_eq!(
            h.finish(),
            [
                xxh(&data[..1000]),
                xxh(&data[1000..2000]),
                sha(&data[2000..])
            ]
        );
    }
}
