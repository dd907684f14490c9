//! Which smolvm release the simulator impersonates (SMOLVM_SIM_VERSION).

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Personality {
    /// smolvm 1.0.4, the version hermes-box pins.
    V104,
    /// smolvm 1.9.2 (main at the time of the reference).
    V192,
    /// smolvm 1.9.3: 1.9.2 plus a version bump (`git diff v1.9.2 v1.9.3` touches only
    /// manifests), so the same contract under another `--version`.
    V193,
    /// smolvm 1.17.0: the 1.9 contract box uses, plus the first change that matters to it:
    /// `delete` without `--force` on a stdin that is not a terminal fails (exit 1) instead
    /// of printing `Cancelled` (smolvm PR #1333, after 1.16.2; observed on 1.17/1.18).
    /// Nothing else of the newer CLI (paused states, new `ls` keys, `-u`) is modelled.
    V1170,
    /// smolvm ~1.33, what people install today (the default). Read, not run: `src/config.rs`
    /// at smolvm 090d4512 and `src/cli/vm_common.rs` at 5240fda5, `docs/pause-resume.md`
    /// (7f630384). On top of 1.17.0: a registry image without network is fetched on the host
    /// instead of refused (`validate_image_fetchable` is a no-op, `image_needs_host_fetch`),
    /// `ls --json` carries the newer keys (`branchable`, `block_io`, `labels`, ...), and a
    /// machine can be `paused` (`machine pause`/`resume`), which plain `start`/`stop` refuse.
    V1330,
}

/// The values SMOLVM_SIM_VERSION takes.
pub const VERSIONS: [&str; 5] = ["1.0.4", "1.9.2", "1.9.3", "1.17.0", "1.33.0"];

impl Personality {
    /// From SMOLVM_SIM_VERSION; anything but the known versions is an error. Unset or
    /// empty: the newest modelled release, as a user installing smolvm today gets it.
    pub fn from_env() -> Result<Self, String> {
        match std::env::var("SMOLVM_SIM_VERSION") {
            Err(_) => Ok(Personality::V1330),
            Ok(v) => match v.trim() {
                "" | "1.33.0" => Ok(Personality::V1330),
                "1.0.4" => Ok(Personality::V104),
                "1.9.2" => Ok(Personality::V192),
                "1.9.3" => Ok(Personality::V193),
                "1.17.0" => Ok(Personality::V1170),
                other => Err(format!(
                    "SMOLVM_SIM_VERSION must be one of {} (got {other:?})",
                    VERSIONS.join(", ")
                )),
            },
        }
    }

    pub fn version(self) -> &'static str {
        match self {
            Personality::V104 => "1.0.4",
            Personality::V192 => "1.9.2",
            Personality::V193 => "1.9.3",
            Personality::V1170 => "1.17.0",
            Personality::V1330 => "1.33.0",
        }
    }

    /// 1.9 or newer: smolvm main at a5df5001 and later (docs/smolvm.md: labels, `exec -d`,
    /// `cp --mode`, keep-alive exec container, data dir removed before the record, ...).
    pub fn is_head(self) -> bool {
        self != Personality::V104
    }

    /// `delete` without `--force` refuses a non-terminal stdin (exit 1) instead of
    /// reading an answer from it.
    pub fn delete_needs_tty(self) -> bool {
        matches!(self, Personality::V1170 | Personality::V1330)
    }

    /// `create` refuses a registry image on a machine without network, because the guest
    /// pulls it: from 1.7.3 (smolvm PR #807, commit 57e77e5e, `src/config.rs`
    /// `validate_image_fetchable`) until the host learned to fetch it (config.rs at 090d4512:
    /// the check is a no-op). 1.17.0's vm_common.rs (5240fda5) has no host fetch yet.
    pub fn refuses_offline_registry_image(self) -> bool {
        matches!(
            self,
            Personality::V192 | Personality::V193 | Personality::V1170
        )
    }

    /// The ~1.33 CLI: `pause`/`resume`, the `paused` state, the newer `ls --json` keys.
    pub fn is_current(self) -> bool {
        self == Personality::V1330
    }

    /// `machine update --allow-host/--allow-host-pattern/--remove-allow-host` on a stopped
    /// machine: smolvm's `EgressUpdate` and `VmRecord::updated_egress` in src/config.rs at
    /// 090d4512, the code this personality models. The first release that has them is not
    /// confirmed (smol-machines/smolvm#1304 proposed the flags; no 1.30-1.34 release notes
    /// were found, reference/peers-and-backups-2026-12.md §1.3), so only the ~1.33
    /// personality has them; older ones reject the flags as clap does.
    pub fn updates_allow_lists(self) -> bool {
        self == Personality::V1330
    }

    /// The guest hostname: `container` before 1.9.0; then the machine name when it is a
    /// lowercase DNS label of at most 63 characters.
    pub fn hostname(self, name: &str) -> String {
        let dns_label = !name.is_empty()
            && name.len() <= 63
            && name
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
        if self.is_head() && dns_label {
            name.to_string()
        } else {
            "container".to_string()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hostname_by_version() {
        assert_eq!(Personality::V104.hostname("box-a"), "container");
        assert_eq!(Personality::V192.hostname("box-a"), "box-a");
        assert_eq!(Personality::V192.hostname("Box_A"), "container");
        assert_eq!(Personality::V192.hostname(&"a".repeat(64)), "container");
        assert_eq!(Personality::V193.hostname("box-a"), "box-a");
        assert_eq!(Personality::V1170.hostname("box-a"), "box-a");
        assert_eq!(Personality::V1330.hostname("box-a"), "box-a");
    }
}
