//! The facts `box` seals into every backup it writes: the box's network policy and key
//! bindings, the box and smolvm versions, and where the backup sits in its chain. The
//! layout is box_proto::archive::host_facts (a zstd skippable frame before the guest's
//! stream, which stock `zstd -d` skips; docs/backup-format.md, "Host facts").
//!
//! Why: everything after those bytes was written in the guest, where an agent runs with
//! sudo and its permissions off. A restore that took its policy from the runtime manifest
//! inside the archive would let that agent reopen the LAN or bind the user's API keys to
//! hosts of its choosing. The host writes these facts itself, inside the encryption, and
//! tags them with a key only the backup's session key yields ([`SealKey`]), so no guest
//! can write bytes that read as them.
//!
//! Written by [`super::save::Pipeline`] before the first part; read back by
//! [`super::crypto::DecryptReader`] as it opens a backup, which hands its readers only the
//! guest's stream after them.

use anyhow::{Context as _, Result, anyhow, bail};
use box_proto::RuntimeManifest;
use box_proto::archive::host_facts::{self, Frame, TAG_LEN};
use box_proto::manifest::{CHAIN_LINK_KEY, CHAIN_PARENT_KEY};
use hmac::{Hmac, Mac as _};
use sha2::Sha256;
use zeroize::Zeroizing;

use super::chain::Place;
use crate::policy::{Containment, carried};

type HmacSha256 = Hmac<Sha256>;

/// What the session key is mixed with to make the seal's key (a key of its own, so a tag
/// never is a value computed with the encryption key itself).
const KEY_LABEL: &[u8] = b"hermes-box host facts v1";

const BOX_NAME: &str = "box_name";
const BOX_VERSION: &str = "box_version";
const SMOLVM: &str = "smolvm";
const SAVED_AT: &str = "saved_at";
const LAN_CLOSED: &str = "lan_closed";

/// The key that tags a backup's host facts: HMAC-SHA-256 of `KEY_LABEL` under the
/// backup's session key. Only whoever opened the backup's key packet (the passphrase's
/// holder) can make it; a guest never sees the session key.
pub struct SealKey(Zeroizing<[u8; 32]>);

impl std::fmt::Debug for SealKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SealKey(..)")
    }
}

fn hmac(key: &[u8]) -> HmacSha256 {
    // HMAC takes a key of any length: this cannot fail.
    match <HmacSha256 as hmac::digest::KeyInit>::new_from_slice(key) {
        Ok(mac) => mac,
        Err(_) => unreachable!("HMAC accepts keys of any length"),
    }
}

impl SealKey {
    pub fn from_session_key(session_key: &[u8]) -> Self {
        let mut mac = hmac(session_key);
        mac.update(KEY_LABEL);
        SealKey(Zeroizing::new(mac.finalize().into_bytes().into()))
    }

    fn tag(&self, signed: &[u8]) -> [u8; TAG_LEN] {
        let mut mac = hmac(self.0.as_slice());
        mac.update(signed);
        mac.finalize().into_bytes().into()
    }

    /// Whether `tag` is this key's over `signed` (compared in constant time).
    fn opens(&self, signed: &[u8], tag: &[u8; TAG_LEN]) -> bool {
        let mut mac = hmac(self.0.as_slice());
        mac.update(signed);
        mac.verify_slice(tag).is_ok()
    }
}

/// What box knows and vouches for about one backup.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostFacts {
    pub box_name: String,
    /// The `box` that wrote it.
    pub box_version: String,
    /// The smolvm the box ran on, when box could ask it.
    pub smolvm: Option<String>,
    /// When box wrote it (UTC, RFC 3339).
    pub saved_at: String,
    /// The box's policy as its registry row kept it; `None` for a box made before box kept
    /// policies (its LAN open, its egress unrestricted). `lan_closed` is whether smolvm
    /// closed the LAN of the box that was saved.
    pub policy: Option<Containment>,
    /// Where it sits in its chain; `None` outside chains (an `hb` without them).
    pub place: Option<Place>,
}

impl HostFacts {
    /// The facts as `key=value` entries.
    pub fn to_manifest(&self) -> RuntimeManifest {
        let mut m = RuntimeManifest::new();
        m.set(BOX_NAME, &self.box_name);
        m.set(BOX_VERSION, &self.box_version);
        if let Some(v) = &self.smolvm {
            m.set(SMOLVM, v);
        }
        m.set(SAVED_AT, &self.saved_at);
        if let Some(policy) = &self.policy {
            for entry in carried::manifest_entries(policy) {
                if let Some((k, v)) = entry.split_once('=') {
                    m.set(k, v);
                }
            }
            m.set(LAN_CLOSED, if policy.lan_closed { "yes" } else { "no" });
        }
        if let Some(place) = &self.place {
            m.set(CHAIN_LINK_KEY, &place.link.to_string());
            m.set(
                CHAIN_PARENT_KEY,
                &place.parent.map(hex::encode).unwrap_or_default(),
            );
        }
        m
    }

    /// Facts read back, every word checked (they were tagged by box, but a box of another
    /// version may have written them).
    pub fn from_manifest(m: &RuntimeManifest) -> Result<Self> {
        let required = |key: &str| -> Result<String> {
            m.get(key)
                .map(String::from)
                .ok_or_else(|| anyhow!("the host facts have no {key}"))
        };
        let mut policy = carried::from_manifest(m).context("the host facts' policy")?;
        if let Some(p) = policy.as_mut() {
            p.lan_closed = match m.get(LAN_CLOSED) {
                Some("yes") => true,
                Some("no") => false,
                other => bail!("the host facts' {LAN_CLOSED} is {other:?}, not yes or no"),
            };
        }
        let place = match m.get(CHAIN_LINK_KEY) {
            None => None,
            Some(link) => {
                let link: u32 = link
                    .parse()
                    .map_err(|_| anyhow!("the host facts' {CHAIN_LINK_KEY} is {link:?}"))?;
                let parent = match m.get(CHAIN_PARENT_KEY).unwrap_or("") {
                    "" => None,
                    hex_digest => {
                        let mut d = [0u8; 32];
                        hex::decode_to_slice(hex_digest, &mut d).map_err(|_| {
                            anyhow!("the host facts' {CHAIN_PARENT_KEY} is not a SHA-256")
                        })?;
                        Some(d)
                    }
                };
                if (link == 0) != parent.is_none() {
                    bail!("the host facts put link {link} on parent {parent:?}");
                }
                Some(Place { link, parent })
            }
        };
        Ok(HostFacts {
            box_name: required(BOX_NAME)?,
            box_version: required(BOX_VERSION)?,
            smolvm: m.get(SMOLVM).map(String::from),
            saved_at: required(SAVED_AT)?,
            policy,
            place,
        })
    }

    /// The frame that goes before the guest's stream, tagged with `key`.
    pub fn seal(&self, key: &SealKey) -> Result<Vec<u8>> {
        host_facts::render(&self.to_manifest(), |signed| key.tag(signed))
            .ok_or_else(|| anyhow!("the box's policy is too long to record in a backup"))
    }
}

/// What a backup's first bytes say of its host facts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Sealing {
    /// Facts box sealed into it.
    Sealed(Box<HostFacts>),
    /// None: a backup box made before it sealed its facts, or one from other tools.
    Unsealed,
    /// Bytes shaped as host facts that box did not write (their tag does not open with
    /// this backup's key, or they do not read): said, and never taken.
    NotBoxs(String),
}

impl Sealing {
    /// The sealed facts, if any.
    pub fn facts(&self) -> Option<&HostFacts> {
        match self {
            Sealing::Sealed(f) => Some(f),
            _ => None,
        }
    }
}

/// The facts of a frame read from a backup opened with `key`.
pub fn open(frame: &Frame, key: &SealKey) -> Sealing {
    if !key.opens(&frame.signed, &frame.tag) {
        return Sealing::NotBoxs(
            "its host facts are not box's (their tag does not open with this backup's key)".into(),
        );
    }
    match HostFacts::from_manifest(&frame.facts) {
        Ok(facts) => Sealing::Sealed(Box::new(facts)),
        Err(e) => Sealing::NotBoxs(format!("{e:#}")),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::policy::{Overrides, tests::env};
    use box_proto::archive::host_facts::{Head, parse};

    fn facts() -> HostFacts {
        let mut policy = Containment::from_config(
            &env(&[
                ("EGRESS", "allowlist"),
                ("EGRESS_ALLOW_HOSTS", "example.com"),
                ("CREDENTIALS", "anthropic"),
            ]),
            &Overrides::default(),
        )
        .unwrap();
        policy.lan_closed = true;
        HostFacts {
            box_name: "alpha".into(),
            box_version: "0.1.0".into(),
            smolvm: Some("1.33.0".into()),
            saved_at: "2026-12-07T05:00:00Z".into(),
            policy: Some(policy),
            place: Some(Place {
                link: 2,
                parent: Some([0xab; 32]),
            }),
        }
    }

    fn frame_of(bytes: &[u8]) -> Frame {
        match parse(bytes) {
            Head::Frame { frame, .. } => frame,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn sealed_facts_open_with_their_backups_key_only() {
        let key = SealKey::from_session_key(&[1; 32]);
        let bytes = facts().seal(&key).unwrap();
        assert_eq!(
            open(&frame_of(&bytes), &key),
            Sealing::Sealed(Box::new(facts()))
        );
        // Another backup's key (another session key): not box's facts for this backup.
        let other = SealKey::from_session_key(&[2; 32]);
        assert!(matches!(
            open(&frame_of(&bytes), &other),
            Sealing::NotBoxs(_)
        ));
    }

    #[test]
    fn a_changed_word_no_longer_opens() {
        let key = SealKey::from_session_key(&[1; 32]);
        let bytes = facts().seal(&key).unwrap();
        let word = b"egress=allowlist";
        let at = bytes.windows(word.len()).position(|w| w == word).unwrap();
        let mut forged = bytes.clone();
        forged[at..at + "egress=allowlist".len()].copy_from_slice(b"egress=open\n\n\n\n\n");
        assert!(matches!(
            open(&frame_of(&forged), &key),
            Sealing::NotBoxs(why) if why.contains("tag does not open")
        ));
    }

    #[test]
    fn no_policy_and_no_place_read_back_as_none() {
        let key = SealKey::from_session_key(&[3; 32]);
        let bare = HostFacts {
            policy: None,
            place: None,
            ..facts()
        };
        assert_eq!(
            open(&frame_of(&bare.seal(&key).unwrap()), &key),
            Sealing::Sealed(Box::new(bare))
        );
    }

    #[test]
    fn facts_box_would_not_write_are_refused_word_by_word() {
        for (key, value, want) in [
            ("lan_closed", "maybe", "not yes or no"),
            ("chain_link", "x", "chain_link"),
            ("chain_parent", "zz", "not a SHA-256"),
            ("egress", "everything", "neither open nor allowlist"),
        ] {
            let mut m = facts().to_manifest();
            m.set(key, value);
            let err = HostFacts::from_manifest(&m).unwrap_err();
            assert!(format!("{err:#}").contains(want), "{key}={value}: {err:#}");
        }
        let mut m = facts().to_manifest();
        m.set("chain_link", "0");
        assert!(HostFacts::from_manifest(&m).is_err());
    }
}
