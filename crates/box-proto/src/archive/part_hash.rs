//! The hash a part is checked by: SHA-256, or XXH3-128 where both sides know it.
//!
//! A part's hash checks that the bytes box copied out of the box (or into it) are the ones
//! `hb` wrote (or box wrote): a part cut short, a copy of the wrong file, a byte changed on
//! the way. It is not what a backup's integrity rests on — the guest chooses the bytes of
//! its own backup anyway, the validator reads every member of what is encrypted, and the
//! verification proves the file decrypts to exactly that (backup/save.rs in box). So the
//! hash needs to catch accidents, not resist a forger, and XXH3-128 does that at ~7 GB/s
//! where SHA-256 (with the CPU's SHA extensions) runs at ~1.1 GB/s. A save hashes every
//! part twice (hb as it writes, box as it encrypts): that was ~1 CPU second of a 1.5 GiB
//! save.
//!
//! In an index and an announcement a SHA-256 is 64 lowercase hex digits, as before this
//! existed (older readers read those), and an XXH3-128 is `xxh3-128:` and 32: an index
//! names its algorithm on every line, so a reader never guesses. `hb export` writes
//! XXH3-128 only when asked (`--part-hash xxh3-128`), which an `hb` older than this
//! refuses with a usage error.

use sha2::Digest as _;
use xxhash_rust::xxh3::Xxh3;

/// The algorithms a part may be hashed with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PartHashAlgo {
    /// What every index held before XXH3: the default.
    #[default]
    Sha256,
    Xxh3_128,
}

const XXH3_PREFIX: &str = "xxh3-128:";

impl PartHashAlgo {
    /// The name `hb export --part-hash` takes.
    pub fn as_str(self) -> &'static str {
        match self {
            PartHashAlgo::Sha256 => "sha256",
            PartHashAlgo::Xxh3_128 => "xxh3-128",
        }
    }

    pub fn parse(name: &str) -> Option<Self> {
        [PartHashAlgo::Sha256, PartHashAlgo::Xxh3_128]
            .into_iter()
            .find(|a| a.as_str() == name)
    }
}

/// A part's hash.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum PartHash {
    Sha256([u8; 32]),
    Xxh3_128([u8; 16]),
}

impl PartHash {
    pub fn algorithm(&self) -> PartHashAlgo {
        match self {
            PartHash::Sha256(_) => PartHashAlgo::Sha256,
            PartHash::Xxh3_128(_) => PartHashAlgo::Xxh3_128,
        }
    }

    /// The hash of `data` with `algo`.
    pub fn of(algo: PartHashAlgo, data: &[u8]) -> Self {
        let mut h = PartHasher::new(algo);
        h.update(data);
        h.finish()
    }

    /// How an index and an announcement write it.
    pub fn render(&self) -> String {
        match self {
            PartHash::Sha256(h) => hex::encode(h),
            PartHash::Xxh3_128(h) => format!("{XXH3_PREFIX}{}", hex::encode(h)),
        }
    }

    /// Reads [`Self::render`]'s form: lowercase hex digits only, of the algorithm's length.
    pub fn parse(s: &str) -> Option<Self> {
        match s.strip_prefix(XXH3_PREFIX) {
            Some(hex) => lower_hex(hex).map(PartHash::Xxh3_128),
            None => lower_hex(s).map(PartHash::Sha256),
        }
    }
}

/// `N` bytes written as `2N` lowercase hex digits, and nothing else.
pub(crate) fn lower_hex<const N: usize>(s: &str) -> Option<[u8; N]> {
    let mut out = [0u8; N];
    if s.len() != 2 * N
        || !s
            .bytes()
            .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
    {
        return None;
    }
    hex::decode_to_slice(s, &mut out).ok()?;
    Some(out)
}

/// `SHA-256 <hex>` or `XXH3-128 <hex>`: for messages.
impl std::fmt::Display for PartHash {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PartHash::Sha256(h) => write!(f, "SHA-256 {}", hex::encode(h)),
            PartHash::Xxh3_128(h) => write!(f, "XXH3-128 {}", hex::encode(h)),
        }
    }
}

impl std::fmt::Debug for PartHash {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(self, f)
    }
}

/// Hashing a part as its bytes go by.
#[derive(Clone)]
pub enum PartHasher {
    Sha256(sha2::Sha256),
    // Boxed: its state (with its 256-byte buffer) is several times a SHA-256's.
    Xxh3_128(Box<Xxh3>),
}

impl PartHasher {
    pub fn new(algo: PartHashAlgo) -> Self {
        match algo {
            PartHashAlgo::Sha256 => PartHasher::Sha256(sha2::Sha256::new()),
            PartHashAlgo::Xxh3_128 => PartHasher::Xxh3_128(Box::new(Xxh3::new())),
        }
    }

    pub fn algorithm(&self) -> PartHashAlgo {
        match self {
            PartHasher::Sha256(_) => PartHashAlgo::Sha256,
            PartHasher::Xxh3_128(_) => PartHashAlgo::Xxh3_128,
        }
    }

    pub fn update(&mut self, data: &[u8]) {
        match self {
            PartHasher::Sha256(h) => h.update(data),
            PartHasher::Xxh3_128(h) => h.update(data),
        }
    }

    pub fn finish(self) -> PartHash {
        match self {
            PartHasher::Sha256(h) => PartHash::Sha256(h.finalize().into()),
            // Big-endian: the canonical form XXH3's own tools print.
            PartHasher::Xxh3_128(h) => PartHash::Xxh3_128(h.digest128().to_be_bytes()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_algorithm_renders_and_parses_back_and_nothing_else_parses() {
        let sha = PartHash::of(PartHashAlgo::Sha256, b"abc");
        assert_eq!(
            sha.render(),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        let xxh = PartHash::of(PartHashAlgo::Xxh3_128, b"abc");
        // XXH3-128 of "abc" as `xxhsum -H2` prints it.
        assert_eq!(xxh.render(), "xxh3-128:06b05ab6733a618578af5f94892f3950");
        for h in [sha, xxh] {
            assert_eq!(PartHash::parse(&h.render()), Some(h));
        }
        let upper = sha.render().to_uppercase();
        for bad in [
            "",
            "xxh3-128:",
            &upper,
            &sha.render()[..63],
            "xxh3-128:06b05ab6733a618578af5f94892f395",
            "xxh3-128:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad",
            "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad",
            "xxh3-64:06b05ab6733a6185",
        ] {
            assert_eq!(PartHash::parse(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn hashing_in_pieces_is_hashing_at_once() {
        let data: Vec<u8> = (0..100_000u32).map(|i| (i * 31 % 253) as u8).collect();
        for algo in [PartHashAlgo::Sha256, PartHashAlgo::Xxh3_128] {
            let mut h = PartHasher::new(algo);
            for chunk in data.chunks(777) {
                h.update(chunk);
            }
            let got = h.finish();
            assert_eq!(got, PartHash::of(algo, &data));
            assert_eq!(got.algorithm(), algo);
            assert_ne!(got, PartHash::of(algo, &data[1..]));
        }
        assert_eq!(
            PartHashAlgo::parse("xxh3-128"),
            Some(PartHashAlgo::Xxh3_128)
        );
        assert_eq!(PartHashAlgo::parse("sha256"), Some(PartHashAlgo::Sha256));
        assert_eq!(PartHashAlgo::parse("md5"), None);
    }
}
