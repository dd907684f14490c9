//! Hermes Agent's long-running processes that `hb`'s workload can supervise in a box, by
//! the names both sides use: box.env's `HERMES_SERVICES` words (`gateway`, `cron`), the
//! service names of `hb service`, `hb logs` and `box logs` (`hermes-gateway`,
//! `hermes-cron`), and the check names of `hb doctor` that `box doctor` reads.

use std::fmt;

/// One supervised Hermes process.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum HermesService {
    /// `hermes gateway run`: the messaging gateway (Telegram, Discord, Slack…), which also
    /// ticks the cron scheduler while it runs.
    Gateway,
    /// Hermes's cron scheduler without a messaging gateway: `hermes cron tick` once a
    /// minute.
    Cron,
}

impl HermesService {
    /// Every service, in the order they are listed and started.
    pub const ALL: [HermesService; 2] = [HermesService::Gateway, HermesService::Cron];

    /// The word box.env's `HERMES_SERVICES` uses.
    pub fn word(self) -> &'static str {
        match self {
            HermesService::Gateway => "gateway",
            HermesService::Cron => "cron",
        }
    }

    /// The service's name: in `hb service`, its log file (`/data/logs/<name>.log`), `hb
    /// status` and `hb doctor`.
    pub fn name(self) -> &'static str {
        match self {
            HermesService::Gateway => "hermes-gateway",
            HermesService::Cron => "hermes-cron",
        }
    }

    /// A service by its name or its box.env word (exactly; no other spelling).
    pub fn parse(text: &str) -> Option<HermesService> {
        Self::ALL
            .into_iter()
            .find(|s| text == s.name() || text == s.word())
    }

    /// A set of services from a list of words separated by commas or spaces
    /// (`gateway,cron`): each one known, repeats dropped, in [`Self::ALL`]'s order.
    pub fn parse_list(text: &str) -> Result<Vec<HermesService>, String> {
        let mut set = Vec::new();
        for word in text.split([',', ' ', '\t']).filter(|w| !w.is_empty()) {
            match Self::parse(word) {
                Some(s) => set.push(s),
                None => {
                    return Err(format!(
                        "'{}' is not a Hermes service (use {})",
                        word.escape_debug(),
                        Self::ALL.map(|s| s.word()).join(", ")
                    ));
                }
            }
        }
        set.sort();
        set.dedup();
        Ok(set)
    }

    /// The list form [`Self::parse_list`] reads back: `gateway,cron`.
    pub fn render_list(set: &[HermesService]) -> String {
        set.iter().map(|s| s.word()).collect::<Vec<_>>().join(",")
    }
}

impl fmt::Display for HermesService {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_words_parse_nothing_else_does() {
        for s in HermesService::ALL {
            assert_eq!(HermesService::parse(s.name()), Some(s));
            assert_eq!(HermesService::parse(s.word()), Some(s));
        }
        for bad in ["", "Gateway", "hermes", "gateway ", "hermes-dashboard"] {
            assert_eq!(HermesService::parse(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn lists_are_sets_in_a_fixed_order() {
        use HermesService::*;
        assert_eq!(HermesService::parse_list(""), Ok(vec![]));
        assert_eq!(
            HermesService::parse_list("cron, gateway,cron"),
            Ok(vec![Gateway, Cron])
        );
        assert_eq!(
            HermesService::parse_list("hermes-gateway"),
            Ok(vec![Gateway])
        );
        let err = HermesService::parse_list("gateway,dashboard").unwrap_err();
        assert!(
            err.contains("'dashboard'") && err.contains("gateway, cron"),
            "{err}"
        );
        assert_eq!(HermesService::render_list(&[Gateway, Cron]), "gateway,cron");
        assert_eq!(HermesService::render_list(&[]), "");
    }
}
