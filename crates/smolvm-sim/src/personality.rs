//! Which smolvm release the simulator impersonates (SMOLVM_SIM_VERSION).

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Personality {
    /// smolvm 1.0.4, the version hermes-box pins (default).
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
}

/// The values SMOLVM_SIM_VERSION takes.
pub const VERSIONS: [&str; 4] = ["1.0.4", "1.9.2", "1.9.3", "1.17.0"];

impl Personality {
    /// From SMOLVM_SIM_VERSION; anything but the known versions is an error.
    pub fn from_env() -> Result<Self, String> {
        match std::env::var("SMOLVM_SIM_VERSION") {
            Err(_) => Ok(Personality::V104),
            Ok(v) => match v.trim() {
                "" | "1.0.4" => Ok(Personality::V104),
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
        }
    }

    /// 1.9 or newer: the SHEAD behaviour of reference/smolvm.md (labels, `exec -d`,
    /// `cp --mode`, keep-alive exec container, data dir removed before the record, ...).
    pub fn is_head(self) -> bool {
        self != Personality::V104
    }

    /// `delete` without `--force` refuses a non-terminal stdin (exit 1) instead of
    /// reading an answer from it.
    pub fn delete_needs_tty(self) -> bool {
        self == Personality::V1170
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
    }
}
