//! `smolvm --version` and what differs between the versions box supports
//! (reference/smolvm.md §7). [`CHECKED`] says which releases were checked and how; box warns
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

/// What was checked, oldest first. Extend it only after checking a release against the
/// flags, texts and JSON keys box depends on (reference/smolvm-drift.md).
pub const CHECKED: [Checked; 2] = [
    Checked {
        from: SmolvmVersion::new(1, 0, 4),
        through: (1, 9),
        how: "1.0.4 (hermes-box's pin) and 1.9.2/1.9.3 read in source and simulated \
              (1.9.3 is 1.9.2 plus a version bump)",
    },
    Checked {
        from: SmolvmVersion::new(1, 10, 0),
        through: (1, 16),
        how: "the create/start/stop/delete/ls/exec/cp flags, texts and ls --json keys box \
              uses, read in the 1.16-line source: unchanged",
    },
];

/// `1.0.4-1.16.x`, for messages.
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

    /// Inside a row of [`CHECKED`] (1.0.4 up to any 1.16.x).
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

    /// `machine cp --mode` exists from 1.9.0; before it a `chmod` through exec is needed.
    /// box always uses the chmod, which works everywhere; this is informational.
    pub fn cp_has_mode(&self) -> bool {
        (self.major, self.minor) >= (1, 9)
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

    /// 1.9.3 has the 1.9.2 contract and the flags box uses are valid through the 1.16
    /// line: none of them may warn. 1.17 changed `delete` (box passes -f regardless) and was
    /// not checked as a whole: it warns.
    #[test]
    fn the_checked_table_covers_1_9_3_and_the_1_16_line_only() {
        for (v, checked) in [
            ((1, 0, 4), true),
            ((1, 9, 2), true),
            ((1, 9, 3), true),
            ((1, 10, 0), true),
            ((1, 14, 5), true),
            ((1, 16, 2), true),
            ((1, 16, 9), true),
            ((1, 17, 0), false),
            ((1, 18, 2), false),
            ((0, 9, 0), false),
        ] {
            let ver = SmolvmVersion::new(v.0, v.1, v.2);
            assert_eq!(ver.is_tested(), checked, "{ver}");
        }
        assert_eq!(checked_range(), "1.0.4-1.16.x");
    }
}
