//! The one line `hb export` prints on its standard output, before any part, to say what
//! kind of backup a chain-mode export makes: `chain: incremental, link N` (N ≥ 1: its
//! position after the full backup, 0) or `chain: full (why)`. `box save` seals where the
//! backup sits in its chain into the backup's host facts before the first part arrives, so
//! it reads this line; and it checks later that the archive's own manifest says the same.
//! The line comes from the guest: read as data, every shape but these two refused.

/// The start of the line.
pub const PREFIX: &str = "chain: ";

/// What an export said it makes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChainSaid {
    /// A full backup, which starts a chain.
    Full,
    /// Link `n` (≥ 1) of a chain, on the parent box asked for.
    Link(u32),
}

/// The line for a link at position `n`.
pub fn link(n: u32) -> String {
    format!("{PREFIX}incremental, link {n}")
}

/// The line for a full backup, with why it is one.
pub fn full(why: &str) -> String {
    let why: String = why.chars().filter(|c| !c.is_control()).collect();
    format!("{PREFIX}full ({why})")
}

/// `None` for a line that is not this line; `Some(Err)` for one that starts like it and is
/// not one of its two shapes.
pub fn parse(line: &str) -> Option<Result<ChainSaid, String>> {
    let rest = line.strip_prefix(PREFIX)?;
    let bad = || {
        Err(format!(
            "hb export said {:?}",
            line.chars().take(120).collect::<String>()
        ))
    };
    if let Some(n) = rest.strip_prefix("incremental, link ") {
        // Digits only, no sign or leading zero: the one spelling `link` writes.
        return Some(match n.parse::<u32>() {
            Ok(v) if v >= 1 && v.to_string() == n => Ok(ChainSaid::Link(v)),
            _ => bad(),
        });
    }
    if rest == "full" || (rest.starts_with("full (") && rest.ends_with(')')) {
        return Some(Ok(ChainSaid::Full));
    }
    Some(bad())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_two_shapes_read_back_and_nothing_else_does() {
        assert_eq!(parse(&link(3)), Some(Ok(ChainSaid::Link(3))));
        assert_eq!(
            parse(&full("no parent backup given")),
            Some(Ok(ChainSaid::Full))
        );
        assert_eq!(parse("part-ready part-000000 1 abc"), None);
        for bad in [
            "chain: incremental, link 0",
            "chain: incremental, link +3",
            "chain: incremental, link 03",
            "chain: incremental, link 3 ",
            "chain: incremental, link 99999999999",
            "chain: full",
            "chain: full (x",
            "chain: anything",
        ] {
            let got = parse(bad);
            if bad == "chain: full" {
                assert_eq!(got, Some(Ok(ChainSaid::Full)));
                continue;
            }
            assert!(matches!(got, Some(Err(_))), "{bad}: {got:?}");
        }
    }
}
