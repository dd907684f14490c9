//! The host's facts about a backup, sealed into its first bytes.
//!
//! Everything inside a backup after these bytes comes from the guest, where an agent runs
//! with sudo: its runtime manifest, its chain keys, every member. What the host relies on
//! later (the box's network policy and key bindings, the box and smolvm versions, where the
//! backup sits in its chain) is therefore written by `box` itself, before the first byte
//! of the guest's stream, as one zstd *skippable frame*:
//!
//! ```text
//! magic 0x184D2A5B (LE) | length u32 (LE) | version 1 | tag (32 bytes) | facts (key=value lines)
//! ```
//!
//! Stock `zstd -d` skips such a frame (the format defines it for exactly this), so `gpg -d |
//! zstd -d | tar -x` reads a sealed backup as before. The tag is an HMAC-SHA-256 of the
//! facts under a key derived from the backup's session key (`box` computes it; this module
//! only lays the bytes out and reads them back), which the guest never holds: a guest that
//! writes a frame of this shape at the start of its own stream (in a backup made before
//! box sealed its facts, where the guest's bytes came first) cannot give it a tag that
//! opens. The facts are the runtime manifest's `key=value` format, read with its parser.

use crate::manifest::RuntimeManifest;

/// The frame's magic number: one of the 16 zstd reserves for skippable frames.
pub const MAGIC: [u8; 4] = 0x184D_2A5Bu32.to_le_bytes();
/// The layout written by this version.
pub const VERSION: u8 = 1;
/// Bytes of the tag (an HMAC-SHA-256).
pub const TAG_LEN: usize = 32;
/// The most facts box writes or reads: a policy with a long allow list fits many times.
pub const MAX_FACTS: usize = 16 << 10;
/// Bytes before the facts: magic, length, version, tag.
pub const HEADER: usize = 4 + 4 + 1 + TAG_LEN;

/// A frame read back: the facts, the exact bytes the tag covers, and the tag.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    pub facts: RuntimeManifest,
    /// The facts as written (what the tag was computed over).
    pub signed: Vec<u8>,
    pub tag: [u8; TAG_LEN],
}

/// What the first bytes of a plaintext are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Head {
    /// Not this frame (a backup made before box sealed its facts, or one from elsewhere):
    /// the bytes are the archive's own.
    NotAFrame,
    /// This frame, `len` bytes long in all, but not all of it is here yet.
    Incomplete { len: usize },
    /// A well-formed frame of `len` bytes.
    Frame { frame: Frame, len: usize },
    /// The magic of this frame with a body box cannot read (`len`: the frame's whole length
    /// when its header could be read; a skippable frame of that length, which zstd skips).
    Malformed { why: String, len: Option<usize> },
}

/// The frame for `facts`, tagged by `tag` (which is given the exact bytes it covers).
/// `None` when the facts are larger than [`MAX_FACTS`].
pub fn render(
    facts: &RuntimeManifest,
    tag: impl FnOnce(&[u8]) -> [u8; TAG_LEN],
) -> Option<Vec<u8>> {
    let signed = facts.render().into_bytes();
    if signed.len() > MAX_FACTS {
        return None;
    }
    let body_len = u32::try_from(1 + TAG_LEN + signed.len()).ok()?;
    let mut out = Vec::with_capacity(HEADER + signed.len());
    out.extend_from_slice(&MAGIC);
    out.extend_from_slice(&body_len.to_le_bytes());
    out.push(VERSION);
    out.extend_from_slice(&tag(&signed));
    out.extend_from_slice(&signed);
    Some(out)
}

/// Reads the frame at the start of `head` (as much of the plaintext's start as is at hand).
/// Never panics, whatever the bytes.
pub fn parse(head: &[u8]) -> Head {
    if head.len() < 4 {
        // Too short to tell; a plaintext this short is no archive either.
        return if MAGIC.starts_with(head) && !head.is_empty() {
            Head::Incomplete { len: 8 }
        } else {
            Head::NotAFrame
        };
    }
    if head[..4] != MAGIC {
        return Head::NotAFrame;
    }
    let Some(size) = head.get(4..8) else {
        return Head::Incomplete { len: 8 };
    };
    let body = u32::from_le_bytes([size[0], size[1], size[2], size[3]]) as usize;
    if !(1 + TAG_LEN..=1 + TAG_LEN + MAX_FACTS).contains(&body) {
        return Head::Malformed {
            why: format!("a host-facts frame of {body} bytes"),
            len: Some(8 + body),
        };
    }
    let len = 8 + body;
    let Some(frame) = head.get(..len) else {
        return Head::Incomplete { len };
    };
    if frame[8] != VERSION {
        return Head::Malformed {
            why: format!(
                "host facts of layout {} (this box reads {VERSION})",
                frame[8]
            ),
            len: Some(len),
        };
    }
    let mut tag = [0u8; TAG_LEN];
    tag.copy_from_slice(&frame[9..HEADER]);
    let signed = frame[HEADER..].to_vec();
    match RuntimeManifest::parse_bytes(&signed) {
        Ok(facts) => Head::Frame {
            frame: Frame { facts, signed, tag },
            len,
        },
        Err(e) => Head::Malformed {
            why: format!("host facts that do not parse: {e}"),
            len: Some(len),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts() -> RuntimeManifest {
        let mut m = RuntimeManifest::new();
        m.set("box_version", "0.1.0");
        m.set("egress", "allowlist");
        m
    }

    #[test]
    fn a_frame_reads_back_with_the_bytes_its_tag_covers() {
        let mut covered = Vec::new();
        let bytes = render(&facts(), |b| {
            covered = b.to_vec();
            [7; TAG_LEN]
        })
        .unwrap();
        let mut stream = bytes.clone();
        stream.extend_from_slice(&crate::archive::compress::ZSTD_MAGIC);
        match parse(&stream) {
            Head::Frame { frame, len } => {
                assert_eq!(len, bytes.len());
                assert_eq!(frame.facts, facts());
                assert_eq!(frame.signed, covered);
                assert_eq!(frame.tag, [7; TAG_LEN]);
            }
            other => panic!("{other:?}"),
        }
        // Every shorter prefix asks for more, never misreads.
        for cut in 1..bytes.len() {
            assert!(
                matches!(parse(&bytes[..cut]), Head::Incomplete { .. }),
                "{cut}"
            );
        }
    }

    #[test]
    fn archives_and_other_frames_are_not_this_frame() {
        assert_eq!(
            parse(&crate::archive::compress::ZSTD_MAGIC),
            Head::NotAFrame
        );
        assert_eq!(parse(&[0x1f, 0x8b, 8, 0]), Head::NotAFrame);
        assert_eq!(parse(&[]), Head::NotAFrame);
        // Another skippable frame's magic (0x184D2A50).
        assert_eq!(
            parse(&[0x50, 0x2a, 0x4d, 0x18, 0, 0, 0, 0]),
            Head::NotAFrame
        );
    }

    #[test]
    fn bad_bodies_are_malformed_with_their_length() {
        let mut bytes = render(&facts(), |_| [0; TAG_LEN]).unwrap();
        bytes[8] = 9;
        assert!(matches!(
            parse(&bytes),
            Head::Malformed { len: Some(l), .. } if l == bytes.len()
        ));
        let mut bytes = render(&facts(), |_| [0; TAG_LEN]).unwrap();
        let last = bytes.len() - 2;
        bytes[last] = 0x1b;
        assert!(matches!(parse(&bytes), Head::Malformed { .. }));
        let mut huge = MAGIC.to_vec();
        huge.extend_from_slice(&u32::MAX.to_le_bytes());
        assert!(matches!(parse(&huge), Head::Malformed { .. }));
        let mut tiny = MAGIC.to_vec();
        tiny.extend_from_slice(&3u32.to_le_bytes());
        assert!(matches!(parse(&tiny), Head::Malformed { .. }));
    }

    #[test]
    fn facts_larger_than_the_cap_are_not_rendered() {
        let mut m = RuntimeManifest::new();
        m.set("egress_allow_hosts", &"a.example ".repeat(MAX_FACTS / 8));
        assert!(render(&m, |_| [0; TAG_LEN]).is_none());
    }
}
