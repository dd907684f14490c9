//! `smolvm --version` and what differs between the versions box supports
//! (docs/smolvm.md). [`CHECKED`] says which releases were checked and how; box warns
//! only about a version outside it.

use std::fmt;

/// A parsed `smolvm X.Y.Z` line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct SmolvmVersion {
    pub major: u64,
    pub minor: u64,
    pub patch: u64,
}

/// One run of smolvm releases whose contract with box was checked: from `from` through
/// every patch of `through` (major, minor).
#[derive(Debug, Clone, Copy)]
pub struct Checked {
    pub from: SmolvmVersion,
    pub through: (u64, u64),
    /// What the check was.
    pub how: &'static str,
}

/// What was checked, oldest first, each row with what was read (smol-machines/smolvm
/// commits and PRs). Extend it only after checking a release against the flags, texts and
/// JSON keys box depends on (docs/smolvm.md lists them, each with where it was read).
pub const CHECKED: [Checked; 4] = [
    Checked {
        from: SmolvmVersion::new(1, 0, 4),
        through: (1, 9),
        how: "1.0.4 (hermes-box's pin) and 1.9.2/1.9.3 read in source (tags v1.0.4, v1.9.3, \
              main a5df5001: src/cli/machine.rs, src/cli/vm_common.rs, src/config.rs, \
              src/data/resources.rs, src/network/launch.rs) and simulated; 1.9.2 run on a \
              host that cannot boot: its create refusals (registry image without network \
              since 1.7.3, PR #807 57e77e5e; --cpus 0, --mem < 64, tsi with -p) and ls --json \
              matched; box always passes --net",
    },
    Checked {
        from: SmolvmVersion::new(1, 10, 0),
        through: (1, 16),
        how: "the create/start/stop/delete/ls/exec/cp flags, texts and ls --json keys box \
              uses, read in the 1.16-line source (src/cli/machine.rs, vm_common.rs): unchanged",
    },
    Checked {
        from: SmolvmVersion::new(1, 17, 0),
        through: (1, 17),
        how: "src/cli/vm_common.rs at 5240fda5 (after PRs #1333, #1340): delete without \
              --force on a non-terminal stdin exits 1 (box always passes -f); ls --json adds \
              branchable, block_io, disks, detached, parent_machine; start/stop refuse \
              paused machines ('machine has saved execution'); simulated as 1.17.0",
    },
    Checked {
        from: SmolvmVersion::new(1, 18, 0),
        through: (1, 33),
        how: "read, not run: src/config.rs at 090d4512 (states created/running/stopped/\
              paused/pausing/failed/unreachable/frozen, labels, machines listed in name \
              order, a registry image without network fetched on the host), \
              docs/pause-resume.md 7f630384, docs/install/SKILL.md f7b2b064 (verified on \
              v1.23.0: seed VM of 8192 MiB on first pulls from 1.22, no darwin-x86_64 build), \
              docs/dev-env/scripts/create-dev-machine.sh f7b2b064 (create/start/exec \
              spellings); simulated as 1.33.0. box labels machines (1.8+), stops at paused \
              ones, never calls machine status (#1194/#1197)",
    },
];

/// `1.0.4-1.33.x`, for messages.
pub fn checked_range() -> String {
    let (first, last) = (CHECKED[0], CHECKED[CHECKED.len() - 1]);
    format!("{}-{}.{}.x", first.from, last.through.0, last.through.1)
}

impl SmolvmVersion {
    pub const fn new(major: u64, minor: u64, patch: u64) -> Self {
        Self {
            major,
            minor,
            patch,
        }
    }

    /// Parses the output of `smolvm --version`: `smolvm 1.9.2` (pre-release and build
    /// suffixes such as `1.9.2-rc1+abc` are accepted and ignored).
    pub fn parse(output: &str) -> Result<Self, String> {
        let line = output.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
        let mut words = line.split_whitespace();
        let (Some(prog), Some(ver)) = (words.next(), words.next()) else {
            return Err(format!("expected 'smolvm X.Y.Z', got {:?}", line));
        };
        if !prog.ends_with("smolvm") {
            return Err(format!("expected 'smolvm X.Y.Z', got {:?}", line));
        }
        let ver = ver.strip_prefix('v').unwrap_or(ver);
        let core = ver.split(['-', '+']).next().unwrap_or("");
        let parts: Vec<&str> = core.split('.').collect();
        let num = |s: &str| {
            s.parse::<u64>()
                .map_err(|_| format!("bad version {ver:?} in {line:?}"))
        };
        match parts.as_slice() {
            [a, b, c] => Ok(Self::new(num(a)?, num(b)?, num(c)?)),
            _ => Err(format!("bad version {ver:?} in {line:?}")),
        }
    }

    /// Inside a row of [`CHECKED`] (1.0.4 up to any 1.33.x).
    pub fn is_tested(&self) -> bool {
        CHECKED
            .iter()
            .any(|c| *self >= c.from && (self.major, self.minor) <= c.through)
    }

    /// 1.0.x can record `network=true` at create while booting without a NIC; HB runs
    /// `machine update --name N --net` after create and before the first start.
    pub fn needs_nic_workaround(&self) -> bool {
        (self.major, self.minor) < (1, 1)
    }

    /// `machine create --label KEY=VALUE`, reported by `ls --json`: from 1.8.0 (smolvm PR
    /// #899, commit 8aed1aca, first tag v1.8.0).
    pub fn has_labels(&self) -> bool {
        (self.major, self.minor) >= (1, 8)
    }

    /// From 1.22.0 the first run of each registry image starts a seed helper VM of 8192 MiB
    /// whatever `--mem` says; when it cannot start, smolvm waits 30 s, logs `WARN no image
    /// seed; pulling in the guest` and goes on (docs/install/SKILL.md at f7b2b064, step 3).
    pub fn seeds_images_in_a_helper_vm(&self) -> bool {
        (self.major, self.minor) >= (1, 22)
    }

    /// `machine create --from` extracts a pack once into a node-shared store and points
    /// machines at it (Linux, from 1.3; `SMOLVM_DISABLE_SHARED_EXTRACT` turns it off).
    pub fn shares_extracted_packs(&self) -> bool {
        (self.major, self.minor) >= (1, 3)
    }

    /// `machine cp --mode` exists from 1.9.0; before it a `chmod` through exec is needed.
    /// box always uses the chmod, which works everywhere; this is informational.
    pub fn cp_has_mode(&self) -> bool {
        (self.major, self.minor) >= (1, 9)
    }

    /// `machine create --block-private`/`--allow-private`: in smolvm 1.33.0's released
    /// crates (smolfile `block_private`, smolvm-network `with_private_floor`); the release
    /// that introduced them was not found, so older ones are treated as lacking them.
    pub fn has_block_private(&self) -> bool {
        (self.major, self.minor) >= (1, 33)
    }

    /// `--allow-host-pattern` (`*.domain` subdomains only): by 1.33.0 (smolvm-protocol
    /// `host_pattern.rs`); the exact release was not found.
    pub fn has_host_patterns(&self) -> bool {
        (self.major, self.minor) >= (1, 33)
    }

    /// `machine update --allow-host/--allow-host-pattern/--remove-allow-host` on a stopped
    /// machine: smolvm's `EgressUpdate` (src/config.rs at 090d4512, the code the 1.33 row of
    /// [`CHECKED`] was read from; smol-machines/smolvm#1304 proposed the flags). The first
    /// release that has it is not confirmed (reference/peers-and-backups-2026-12.md §1.3):
    /// box gates on 1.33, and a smolvm that rejects the flags anyway gets the clone commands.
    pub fn updates_allow_lists(&self) -> bool {
        (self.major, self.minor) >= (1, 33)
    }

    /// Allow lists enforced on every backend (policy machines moved off TSI, #427, and
    /// `machine egress-events`, #937, in 1.8.1): box asks for 1.9.
    pub fn enforces_allow_lists(&self) -> bool {
        (self.major, self.minor) >= (1, 9)
    }

    /// `machine egress-events --name N --json` (smolvm PR #937, first in 1.8.1).
    pub fn has_egress_events(&self) -> bool {
        *self >= Self::new(1, 8, 1)
    }

    /// `machine create --credential NAME=VAR@HOST` (the API field arrived in 1.18.x;
    /// docs/credentials/SKILL.md verified it on 1.18.2).
    pub fn has_credentials(&self) -> bool {
        (self.major, self.minor) >= (1, 18)
    }

    /// A machine created from a pack honours `--credential` from 1.22.2 (1.18.2 silently
    /// ignored it: docs/credentials/SKILL.md "Traps").
    pub fn honours_credentials_from_packs(&self) -> bool {
        *self >= Self::new(1, 22, 2)
    }

    /// From 1.4 a keep-alive container keeps backgrounded exec children alive; before it
    /// they die with the exec unless a workload container runs (box always has one).
    pub fn exec_keepalive(&self) -> bool {
        (self.major, self.minor) >= (1, 4)
    }
}

impl fmt::Display for SmolvmVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_real_outputs() {
        assert_eq!(
            SmolvmVersion::parse("smolvm 1.0.4\n").unwrap(),
            SmolvmVersion::new(1, 0, 4)
        );
        assert_eq!(
            SmolvmVersion::parse("smolvm 1.9.2").unwrap().to_string(),
            "1.9.2"
        );
        assert_eq!(
            SmolvmVersion::parse("smolvm 1.9.3-rc1+g1234").unwrap(),
            SmolvmVersion::new(1, 9, 3)
        );
    }

    #[test]
    fn refuses_garbage() {
        for bad in [
            "",
            "smolvm",
            "smolvm x.y.z",
            "docker 1.0.4",
            "smolvm 1.0",
            "smolvm 1.0.4.5",
        ] {
            assert!(SmolvmVersion::parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn quirks_follow_the_version() {
        let v104 = SmolvmVersion::new(1, 0, 4);
        let v192 = SmolvmVersion::new(1, 9, 2);
        assert!(v104.needs_nic_workaround() && !v192.needs_nic_workaround());
        assert!(!v104.cp_has_mode() && v192.cp_has_mode());
        assert!(!v104.exec_keepalive() && v192.exec_keepalive());
        assert!(v104.is_tested() && v192.is_tested());
        assert!(SmolvmVersion::new(1, 9, 99).is_tested());
        assert!(!SmolvmVersion::new(1, 0, 3).is_tested());
        assert!(!SmolvmVersion::new(2, 0, 0).is_tested());
    }

    /// 1.9.3 has the 1.9.2 contract; the flags box uses are valid through the 1.16 line;
    /// 1.17 and the ~1.33 line were read (see the rows). Nothing read beyond 1.33 yet: warn.
    #[test]
    fn the_checked_table_covers_what_was_read_through_1_33() {
        for (v, checked) in [
            ((1, 0, 4), true),
            ((1, 9, 2), true),
            ((1, 9, 3), true),
            ((1, 10, 0), true),
            ((1, 14, 5), true),
            ((1, 16, 2), true),
            ((1, 17, 0), true),
            ((1, 18, 2), true),
            ((1, 23, 0), true),
            ((1, 33, 0), true),
            ((1, 34, 0), false),
            ((2, 0, 0), false),
            ((0, 9, 0), false),
        ] {
            let ver = SmolvmVersion::new(v.0, v.1, v.2);
            assert_eq!(ver.is_tested(), checked, "{ver}");
        }
        assert_eq!(checked_range(), "1.0.4-1.33.x");
        let rows: Vec<_> = CHECKED.iter().map(|c| (c.from, c.through)).collect();
        for w in rows.windows(2) {
            assert!(
                w[0].1 < (w[1].0.major, w[1].0.minor),
                "rows overlap: {rows:?}"
            );
        }
        assert!(
            CHECKED.iter().all(|c| c.how.contains(' ')),
            "every row says what was read"
        );
    }

    #[test]
    fn labels_and_the_seed_vm_follow_the_version() {
        let v = SmolvmVersion::new;
        assert!(!v(1, 7, 3).has_labels() && v(1, 8, 0).has_labels() && v(1, 33, 0).has_labels());
        assert!(!v(1, 21, 9).seeds_images_in_a_helper_vm());
        assert!(v(1, 22, 0).seeds_images_in_a_helper_vm());
    }
}
