//! Box names kept for box's own use: `box drill`'s throwaway boxes are `drill-<name>-<stamp>`,
//! and no other verb gives a box such a name, so `box doctor --fix` can remove an unfinished
//! one as a killed drill's leftover without touching a box of the user's.

use anyhow::{Result, bail};
use box_proto::BoxName;

/// The prefix of every throwaway box's name.
pub const DRILL_PREFIX: &str = "drill-";

/// Refuses a name a user asked `box new`, `box load` or `box clone` for that is kept for
/// drills.
pub fn refuse_reserved(name: &BoxName) -> Result<()> {
    if name.as_str().starts_with(DRILL_PREFIX) {
        bail!(
            "box names starting with '{DRILL_PREFIX}' are kept for box drill's throwaway boxes; choose another name"
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drill_names_are_kept_from_the_other_verbs() {
        let err = refuse_reserved(&BoxName::parse("drill-alpha").unwrap()).unwrap_err();
        assert!(err.to_string().contains("kept for box drill"), "{err}");
        assert!(refuse_reserved(&BoxName::parse("drills").unwrap()).is_ok());
    }
}
