//! Which smolvm release the simulator impersonates (SMOLVM_SIM_VERSION).

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Personality {
    /// smolvm 1.0.4, the version hermes-box pins (default).
    V104,
    /// smolvm 1.9.2 (main at the time of the reference).
    V192,
}

impl Personality {
    /// From SMOLVM_SIM_VERSION; anything but the two known versions is an error.
    pub fn from_env() -> Result<Self, String> {
        match std::env::var("SMOLVM_SIM_VERSION") {
            Err(_) => Ok(Personality::V104),
            Ok(v) => match v.trim() {
                "" | "1.0.4" => Ok(Personality::V104),
                "1.9.2" => Ok(Personality::V192),
                other => Err(format!(
                    "SMOLVM_SIM_VERSION must be 1.0.4 or 1.9.2 (got {other:?})"
                )),
            },
        }
    }

    pub fn version(self) -> &'static str {
        match self {
            Personality::V104 => "1.0.4",
            Personality::V192 => "1.9.2",
        }
    }

    pub fn is_head(self) -> bool {
        self == Personality::V192
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
    }
}
