//! What kind of OpenPGP envelope a backup is, read from its first packets before anything
//! is decrypted (issue 21).
//!
//! sequoia reads what every GnuPG writes by default (SKESK v4 + SEIPD v1 with MDC) and RFC
//! 9580's AEAD (SKESK v6 + SEIPD v2). Other envelopes a user's gpg can write make it fail
//! with messages that blame the wrong thing ("Policy rejected packet type", "corrupt or
//! truncated"). This finds them first, so the refusal names the real reason and the way
//! out, and never calls a sound file corrupt:
//!
//! - LibrePGP AEAD (packet 20, OCB or EAX) from GnuPG 2.3+ with `--force-aead`: sequoia 2
//!   removed its reader (NEWS: `Packet::AED` and `SKESK5` removed), and box does not carry
//!   its own AEAD packet decoder;
//! - an old 64-bit-block cipher (IDEA, 3DES, CAST5, Blowfish);
//! - no integrity protection (SED, packet 9, without MDC): tampering would go unseen.
//!
//! Only headers are read: packet framing, the key packet's version and cipher, the first
//! bytes of the encrypted packet. Whatever it does not recognise is left to sequoia, whose
//! errors stand for everything else. A cipher hidden inside an encrypted session key is
//! checked after decryption instead (crypto.rs, `Helper`).

use std::borrow::Cow;
use std::io::{self, Read};

use sequoia_openpgp as openpgp;

/// How much of a file is looked at: the key packets and the encrypted packet's header are
/// far smaller, even armored.
pub const HEAD: usize = 64 << 10;

/// Why a well-formed OpenPGP file is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// LibrePGP's AEAD packet (tag 20): cipher and AEAD mode (OpenPGP algorithm ids).
    Aead { cipher: u8, aead: u8 },
    /// An old 64-bit-block cipher (OpenPGP algorithm id).
    WeakCipher(u8),
    /// A SED packet: encrypted without an MDC. The cipher, when the key packet names it.
    NoIntegrity { cipher: Option<u8> },
}

/// A refusal for one file, with the way out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unsupported {
    pub file: String,
    pub refusal: Refusal,
}

/// IDEA, 3DES, CAST5 and Blowfish: 64-bit blocks (birthday-bound after a few GiB, the size
/// of a backup) and long deprecated; GnuPG 2.4 itself no longer encrypts with them.
pub fn is_weak(cipher: u8) -> bool {
    (1..=4).contains(&cipher)
}

/// The cipher as gpg's `--cipher-algo` spells it, so the message reads like the command
/// that made the file.
pub fn cipher_name(cipher: u8) -> Cow<'static, str> {
    Cow::Borrowed(match cipher {
        1 => "IDEA",
        2 => "3DES",
        3 => "CAST5",
        4 => "BLOWFISH",
        7 => "AES128",
        8 => "AES192",
        9 => "AES256",
        10 => "TWOFISH",
        11 => "CAMELLIA128",
        12 => "CAMELLIA192",
        13 => "CAMELLIA256",
        n => return Cow::Owned(format!("cipher {n}")),
    })
}

fn aead_name(aead: u8) -> Cow<'static, str> {
    Cow::Borrowed(match aead {
        1 => "EAX",
        2 => "OCB",
        3 => "GCM",
        n => return Cow::Owned(format!("AEAD mode {n}")),
    })
}

/// `s` quoted for a POSIX shell, so the printed command can be pasted as is.
pub(crate) fn shell_quote(s: &str) -> String {
    if !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"/._-+,:@%".contains(&b))
    {
        return s.to_string();
    }
    format!("'{}'", s.replace('\'', r"'\''"))
}

impl std::fmt::Display for Unsupported {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let file = &self.file;
        let stem = [".gpg", ".pgp", ".asc"]
            .iter()
            .find_map(|ext| file.strip_suffix(ext))
            .unwrap_or(file);
        let new = shell_quote(&format!("{stem}.aes256.gpg"));
        let old = shell_quote(file);
        // The plaintext stays in the pipe; `--rfc4880` turns off AEAD even where gpg.conf
        // forces it, and AES256 is what box itself writes.
        let reencrypt = format!("gpg --symmetric --rfc4880 --cipher-algo AES256 -o {new}");
        match self.refusal {
            Refusal::Aead { cipher, aead } => write!(
                f,
                "{file} is encrypted with AEAD ({}-{}, the LibrePGP packet GnuPG 2.3 and \
                 later write with --force-aead). The file is not corrupt, but box cannot \
                 decrypt this format: it reads OpenPGP's standard AEAD (RFC 9580, SEIPD v2) \
                 and the MDC format every gpg writes by default. Re-encrypt it without AEAD \
                 and use the new file:\n    gpg -d {old} | {reencrypt}",
                cipher_name(cipher),
                aead_name(aead),
            ),
            Refusal::WeakCipher(cipher) => write!(
                f,
                "{file} is encrypted with {}, an old 64-bit-block cipher box refuses (it \
                 reads AES, Twofish and Camellia). The file is not corrupt; re-encrypt it \
                 with AES-256 and use the new file:\n    gpg -d {old} | {reencrypt}",
                cipher_name(cipher),
            ),
            Refusal::NoIntegrity { cipher } => write!(
                f,
                "{file} has no integrity check: it was encrypted{} without an MDC (an \
                 OpenPGP SED packet, as `gpg --rfc2440` and PGP 2-era tools write), so \
                 nobody can tell whether it was tampered with, and box refuses it. If you \
                 trust this file, re-encrypt it with an integrity check and use the new \
                 file:\n    gpg --ignore-mdc-error -d {old} | {reencrypt}",
                cipher
                    .map(|c| format!(" with {}", cipher_name(c)))
                    .unwrap_or_default(),
            ),
        }
    }
}

impl std::error::Error for Unsupported {}

/// Reads up to [`HEAD`] bytes (less only at EOF).
pub fn read_head(source: &mut impl Read) -> io::Result<Vec<u8>> {
    let mut head = Vec::with_capacity(HEAD);
    source.take(HEAD as u64).read_to_end(&mut head)?;
    Ok(head)
}

/// What the first packets of a file tell before any decryption.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Well-formed, in an envelope box refuses.
    Refuse(Refusal),
    /// The whole file is in the head and ends inside its packets: corrupt or truncated,
    /// not a wrong passphrase or another format (a file cut inside the encrypted packet's
    /// first bytes makes sequoia's session-key check fail, which reads as the passphrase).
    Truncated(String),
}

/// What is wrong with the file starting with `head`, if this can tell; `None` for
/// everything box reads and everything this does not recognise.
pub fn inspect(head: &[u8]) -> Option<Verdict> {
    // Less than HEAD bytes: the head is the whole file, and where it ends, the file ends.
    let whole = head.len() < HEAD;
    let binary = dearmor(head);
    walk(binary.as_deref().unwrap_or(head), whole)
}

/// The binary packets of an armored head (as far as the head goes); `None` if not armored.
fn dearmor(head: &[u8]) -> Option<Vec<u8>> {
    let start = head.iter().position(|b| !b.is_ascii_whitespace())?;
    if !head[start..].starts_with(b"-----BEGIN PGP") {
        return None;
    }
    let mut reader = openpgp::armor::Reader::from_bytes(
        head,
        openpgp::armor::ReaderMode::Tolerant(Some(openpgp::armor::Kind::Message)),
    );
    // The head ends mid-armor: keep what decoded before the reader notices.
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    while let Ok(n) = reader.read(&mut buf) {
        if n == 0 {
            break;
        }
        out.extend_from_slice(&buf[..n]);
    }
    Some(out)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Len {
    Full(usize),
    /// A partial body length: this many bytes, then another length.
    Partial(usize),
    /// An old-format packet running to the end of the input.
    Indeterminate,
}

/// A packet header at the start of `b`: tag, header length, body length.
fn header(b: &[u8]) -> Option<(u8, usize, Len)> {
    let ctb = *b.first()?;
    if ctb & 0x80 == 0 {
        return None;
    }
    let be = |range: std::ops::Range<usize>| -> Option<usize> {
        Some(
            b.get(range)?
                .iter()
                .fold(0usize, |n, &x| (n << 8) | usize::from(x)),
        )
    };
    if ctb & 0x40 != 0 {
        let tag = ctb & 0x3f;
        let a = usize::from(*b.get(1)?);
        Some(match a {
            0..=191 => (tag, 2, Len::Full(a)),
            192..=223 => (tag, 3, Len::Full(((a - 192) << 8) + be(2..3)? + 192)),
            255 => (tag, 6, Len::Full(be(2..6)?)),
            _ => (tag, 2, Len::Partial(1 << (a & 0x1f))),
        })
    } else {
        let tag = (ctb >> 2) & 0x0f;
        Some(match ctb & 3 {
            0 => (tag, 2, Len::Full(be(1..2)?)),
            1 => (tag, 3, Len::Full(be(1..3)?)),
            2 => (tag, 5, Len::Full(be(1..5)?)),
            _ => (tag, 1, Len::Indeterminate),
        })
    }
}

/// The message's cipher from a v4 key packet's body, when it names it: with no encrypted
/// session key, the S2K-derived key *is* the session key and its cipher the message's.
fn skesk4_cipher(body: &[u8]) -> Option<u8> {
    let cipher = *body.get(1)?;
    let s2k = match *body.get(2)? {
        0 => 2,  // simple: type, hash
        1 => 10, // salted: + 8 salt
        3 => 11, // iterated and salted: + count
        4 => 20, // Argon2: type, 16 salt, t, p, m
        _ => return None,
    };
    (body.len() == 2 + s2k).then_some(cipher)
}

const SKESK: u8 = 3;
const PKESK: u8 = 1;
const MARKER: u8 = 10;
const SED: u8 = 9;
const SEIP: u8 = 18;
const AED: u8 = 20;

/// Whether the packet at `at` (header `hlen` bytes, body `len`) runs past the end of `b`.
fn ends_early(b: &[u8], at: usize, hlen: usize, len: Len) -> bool {
    let mut pos = at + hlen;
    let mut len = len;
    loop {
        match len {
            Len::Full(n) => return pos + n > b.len(),
            Len::Indeterminate => return false,
            Len::Partial(n) => {
                pos += n;
                // A partial body is always followed by another length.
                let Some(&a) = b.get(pos) else { return true };
                let a = usize::from(a);
                let (octets, next) = match a {
                    0..=191 => (1, Len::Full(a)),
                    192..=223 => match b.get(pos + 1) {
                        Some(&c) => (2, Len::Full(((a - 192) << 8) + usize::from(c) + 192)),
                        None => return true,
                    },
                    255 => match b.get(pos + 1..pos + 5) {
                        Some(x) => (
                            5,
                            Len::Full(x.iter().fold(0, |n, &y| (n << 8) | usize::from(y))),
                        ),
                        None => return true,
                    },
                    _ => (1, Len::Partial(1 << (a & 0x1f))),
                };
                pos += octets;
                len = next;
            }
        }
    }
}

/// The key packet (header and body) of a file shaped as box writes it: binary, one SKESK4
/// directly followed by a SEIPDv1 packet. Such a file can go to the bulk reader
/// (`seipd::BulkReader`) once the key packet gives an AES-256 key; anything else, or a
/// head this cannot read, is sequoia's.
pub fn bulk_shape(head: &[u8]) -> Option<&[u8]> {
    let (tag, hlen, len) = header(head)?;
    let Len::Full(n) = len else { return None };
    if tag != SKESK || head.get(hlen) != Some(&4) {
        return None;
    }
    let key_packet = head.get(..hlen + n)?;
    let (next, next_hlen, _) = header(head.get(hlen + n..)?)?;
    (next == SEIP && head.get(hlen + n + next_hlen) == Some(&1)).then_some(key_packet)
}

/// Walks the key packets to the encrypted packet. `whole`: `b` is the entire file.
fn walk(b: &[u8], whole: bool) -> Option<Verdict> {
    let truncated = |what: &str| whole.then(|| Verdict::Truncated(what.to_string()));
    let mut at = 0;
    let mut cipher = None;
    let mut keys = 0;
    // A message starts with a few key packets; a long run of them is not a backup.
    for _ in 0..32 {
        let Some((tag, hlen, len)) = b.get(at..).and_then(header) else {
            return if keys > 0 {
                truncated("the file ends after its key packet, before the encrypted data")
            } else {
                None
            };
        };
        let body = &b[(at + hlen).min(b.len())..];
        match tag {
            SKESK | PKESK | MARKER => {
                let Len::Full(n) = len else { return None };
                let Some(body) = body.get(..n) else {
                    return truncated("the file ends inside its key packet");
                };
                if tag == SKESK && body.first() == Some(&4) {
                    cipher = skesk4_cipher(body);
                }
                keys += usize::from(tag != MARKER);
                at += hlen + n;
            }
            SED => return Some(Verdict::Refuse(Refusal::NoIntegrity { cipher })),
            SEIP => {
                let weak = match body.first() {
                    Some(1) => cipher,
                    Some(2) => body.get(1).copied(),
                    Some(_) => return None,
                    None => None,
                };
                if let Some(weak) = weak.filter(|c| is_weak(*c)) {
                    return Some(Verdict::Refuse(Refusal::WeakCipher(weak)));
                }
                if ends_early(b, at, hlen, len) {
                    return truncated("the file ends inside its encrypted packet");
                }
                return None;
            }
            AED => {
                return Some(Verdict::Refuse(Refusal::Aead {
                    cipher: *body.get(1)?,
                    aead: *body.get(2)?,
                }));
            }
            _ => return None,
        }
    }
    None
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    // Heads as gpg wrote them (`gpg --list-packets` of GnuPG 2.4.7 output), cut after the
    // encrypted packet's first bytes.
    const SKESK4_AES256: [u8; 15] = [
        0x8c, 0x0d, 0x04, 0x09, 0x03, 0x0a, 1, 2, 3, 4, 5, 6, 7, 8, 0xff,
    ];

    /// The refusal for a head cut out of a bigger file (so never "truncated").
    fn refusal(head: &[u8]) -> Option<Refusal> {
        let binary = dearmor(head);
        match walk(binary.as_deref().unwrap_or(head), false)? {
            Verdict::Refuse(r) => Some(r),
            Verdict::Truncated(what) => panic!("truncated: {what}"),
        }
    }

    fn with(mut head: Vec<u8>, tail: &[u8]) -> Vec<u8> {
        head.extend_from_slice(tail);
        head
    }

    #[test]
    fn only_one_key_packet_then_seipd_v1_is_the_bulk_readers() {
        let seipd1 = [0xd2, 0x3b, 0x01, 0xaa, 0xbb];
        let head = with(SKESK4_AES256.to_vec(), &seipd1);
        assert_eq!(bulk_shape(&head), Some(&SKESK4_AES256[..]));
        // SEIPD v2, a second key packet, a leading marker: sequoia's.
        assert_eq!(
            bulk_shape(&with(SKESK4_AES256.to_vec(), &[0xd2, 0x3b, 0x02, 9])),
            None
        );
        let two_keys = with(SKESK4_AES256.to_vec(), &SKESK4_AES256);
        assert_eq!(bulk_shape(&with(two_keys, &seipd1)), None);
        let marked = with(vec![0xca, 0x03, b'P', b'G', b'P'], &head);
        assert_eq!(bulk_shape(&marked), None);
        // Cut inside the key packet or before the encrypted packet's version.
        assert_eq!(bulk_shape(&head[..8]), None);
        assert_eq!(bulk_shape(&head[..SKESK4_AES256.len() + 2]), None);
    }

    #[test]
    fn gpgs_default_envelope_is_read() {
        let head = with(SKESK4_AES256.to_vec(), &[0xd2, 0x3b, 0x01, 0xaa, 0xbb]);
        assert_eq!(refusal(&head), None);
    }

    #[test]
    fn a_weak_cipher_named_by_the_key_packet_is_refused() {
        let mut skesk = SKESK4_AES256.to_vec();
        skesk[3] = 3; // CAST5
        let head = with(skesk, &[0xd2, 0x33, 0x01, 0xaa]);
        assert_eq!(refusal(&head), Some(Refusal::WeakCipher(3)));
    }

    #[test]
    fn an_encrypted_session_key_hides_the_cipher_from_the_header() {
        // SKESK4 with 24 bytes of ESK: the cipher is checked after decryption instead.
        let mut skesk = SKESK4_AES256.to_vec();
        skesk[1] = 0x0d + 24;
        skesk[3] = 2;
        skesk.extend([0u8; 24]);
        let head = with(skesk, &[0xd2, 0x33, 0x01, 0xaa]);
        assert_eq!(refusal(&head), None);
    }

    #[test]
    fn librepgp_aead_and_sed_are_named() {
        let skesk5 = [0x8c, 0x05, 0x05, 0x09, 0x02, 0x03, 0x0a];
        let head = with(skesk5.to_vec(), &[0xd4, 0x45, 0x01, 0x09, 0x02, 0x10]);
        assert_eq!(refusal(&head), Some(Refusal::Aead { cipher: 9, aead: 2 }));
        let head = with(SKESK4_AES256.to_vec(), &[0xc9, 0x24, 0xaa]);
        assert_eq!(
            refusal(&head),
            Some(Refusal::NoIntegrity { cipher: Some(9) })
        );
        // Old-format header of the SED packet (tag 9, one length byte).
        let head = with(SKESK4_AES256.to_vec(), &[0xa4, 0x24, 0xaa]);
        assert_eq!(
            refusal(&head),
            Some(Refusal::NoIntegrity { cipher: Some(9) })
        );
    }

    #[test]
    fn rfc9580_seipd_v2_is_read_unless_its_cipher_is_weak() {
        let skesk6 = [0xc3, 0x04, 0x06, 0x00, 0x09, 0x02];
        let head = with(skesk6.to_vec(), &[0xd2, 0xe0, 0x02, 0x09, 0x02, 0x06]);
        assert_eq!(refusal(&head), None);
        let head = with(skesk6.to_vec(), &[0xd2, 0xe0, 0x02, 0x03, 0x02, 0x06]);
        assert_eq!(refusal(&head), Some(Refusal::WeakCipher(3)));
    }

    #[test]
    fn armor_is_looked_through() {
        let head = with(
            SKESK4_AES256.to_vec(),
            &[0xd4, 0x45, 0x01, 0x09, 0x01, 0x10],
        );
        let mut armored = Vec::new();
        {
            let mut w =
                openpgp::armor::Writer::new(&mut armored, openpgp::armor::Kind::Message).unwrap();
            std::io::Write::write_all(&mut w, &head).unwrap();
            w.finalize().unwrap();
        }
        assert_eq!(
            refusal(&armored),
            Some(Refusal::Aead { cipher: 9, aead: 1 })
        );
        // Cut mid-armor, as a 64 KiB head of a big file is.
        let mut cut = armored.clone();
        cut.truncate(armored.len() - 30);
        assert_eq!(refusal(&cut), Some(Refusal::Aead { cipher: 9, aead: 1 }));
    }

    #[test]
    fn a_whole_file_that_ends_inside_its_packets_is_truncated() {
        let seip = [0xd2, 0x3b, 0x01, 0xaa, 0xbb];
        let full = with(SKESK4_AES256.to_vec(), &seip);
        for cut in [3, 10, 15, 16, 17, 18, full.len()] {
            assert!(
                matches!(inspect(&full[..cut]), Some(Verdict::Truncated(_))),
                "cut at {cut}"
            );
        }
        // Its framing complete (0x3b = 59 body bytes), it is left to sequoia.
        let mut complete = with(SKESK4_AES256.to_vec(), &[0xd2, 0x3b]);
        complete.extend([0u8; 59]);
        assert_eq!(inspect(&complete), None);
        // A partial body (512 bytes) then a final length of 3: complete, or cut anywhere.
        let mut partial = with(SKESK4_AES256.to_vec(), &[0xd2, 0xe9, 0x01]);
        partial.extend([0u8; 511]);
        partial.extend([0x03, 1, 2, 3]);
        assert_eq!(inspect(&partial), None);
        for cut in [17, 300, partial.len() - 4, partial.len() - 1] {
            assert!(
                matches!(inspect(&partial[..cut]), Some(Verdict::Truncated(_))),
                "cut at {cut}"
            );
        }
    }

    #[test]
    fn garbage_and_truncation_are_left_to_sequoia() {
        for head in [&b""[..], b"hello", &[0x8c], &[0xd2]] {
            assert_eq!(inspect(head), None, "{head:?}");
        }
    }

    #[test]
    fn the_message_names_the_cause_and_a_pasteable_way_out() {
        let u = Unsupported {
            file: "/b/it's.tar.gz.gpg".into(),
            refusal: Refusal::Aead { cipher: 9, aead: 2 },
        };
        let m = u.to_string();
        assert!(m.contains("AEAD (AES256-OCB"), "{m}");
        assert!(m.contains("not corrupt"), "{m}");
        assert!(
            m.contains(
                r"gpg -d '/b/it'\''s.tar.gz.gpg' | gpg --symmetric --rfc4880 --cipher-algo AES256 -o '/b/it'\''s.tar.gz.aes256.gpg'"
            ),
            "{m}"
        );
        let m = Unsupported {
            file: "x.gpg".into(),
            refusal: Refusal::WeakCipher(3),
        }
        .to_string();
        assert!(m.contains("encrypted with CAST5"), "{m}");
        let m = Unsupported {
            file: "x.gpg".into(),
            refusal: Refusal::NoIntegrity { cipher: None },
        }
        .to_string();
        assert!(m.contains("has no integrity check"), "{m}");
    }
}
