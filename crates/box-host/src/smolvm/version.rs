//! `smolvm --version` and what differs between the versions box supports
//! (reference/smolvm.md §7). box is tested against 1.0.4 and 1.9.x.

use std::fmt;

/// A parsed `smolvm X.Y.Z` line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct SmolvmVersion {
    pub major: u64,
    pub minor: u64,
    pub patch: u64,
}

/// The oldest and newest versions box was tested with (inclusive, any 1.9 patch).
pub const TESTED_LOW: SmolvmVersion = SmolvmVersion::new(1, 0, 4);
pub const TESTED_HIGH_MINOR: (u64, u64) = (1, 9);

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

    /// Inside the range box is tested against: 1.0.4 up to any 1.9.x.
    pub fn is_tested(&self) -> bool {
        *self >= TESTED_LOW && (self.major, self.minor) <= TESTED_HIGH_MINOR
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
        assert!(!SmolvmVersion::new(1, 10, 0).is_tested());
        assert!(!SmolvmVersion::new(2, 0, 0).is_tested());
    }
}
