//! The labels box puts on the machines it creates, and what they prove.
//!
//! smolvm has `machine create --label KEY=VALUE` from 1.8.0 (PR #899, commit 8aed1aca,
//! "so orchestrators can attribute and reclaim their own machines"), and `ls --json`
//! reports them as `labels`. box labels every machine `hermes-box=<box>` and
//! `hermes-box-id=<id>`, where the id is random and kept in this state dir only. A box's
//! machine is then its own only while name *and* labels agree: a same-named machine made by
//! someone else (or by box under another state dir) is never stopped or deleted as ours.
//! Machines created without labels (older smolvm, older boxes) keep the name rule.

use std::collections::BTreeMap;

use anyhow::{Context, Result};

use super::SmolvmVersion;
use crate::state::StateDir;

/// The box's name.
pub const BOX_KEY: &str = "hermes-box";
/// This state dir's id.
pub const ID_KEY: &str = "hermes-box-id";

/// One `--label KEY=VALUE`.
pub type Label = (String, String);

/// The file under the state dir that holds its id.
const ID_FILE: &str = "machine-label-id";

/// This state dir's id, made (random, 128 bits) on first use.
pub fn state_id(state: &StateDir) -> Result<String> {
    let path = state.root().join(ID_FILE);
    match std::fs::read_to_string(&path) {
        Ok(s) if is_id(s.trim()) => return Ok(s.trim().to_string()),
        Ok(_) => anyhow::bail!(
            "{} does not hold a box label id; remove it only if no box of this state dir \
             runs (box ls), then retry",
            path.display()
        ),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e).with_context(|| format!("cannot read {}", path.display())),
    }
    StateDir::ensure_private_dir(state.root())?;
    let id = hex::encode(rand::random::<[u8; 16]>());
    write_new(&path, id.as_bytes())?;
    // Two runs may race to make it: whoever linked first wins, both use the file's id.
    let stored = std::fs::read_to_string(&path)
        .with_context(|| format!("cannot read {}", path.display()))?;
    Ok(stored.trim().to_string())
}

/// Writes a whole 0600 file and links it into place only if nothing is there yet.
fn write_new(path: &std::path::Path, bytes: &[u8]) -> Result<()> {
    let tmp = path.with_extension(format!("tmp.{}", std::process::id()));
    let result =
        crate::state::registry::write_atomically(&tmp, bytes).and_then(
            |()| match std::fs::hard_link(&tmp, path) {
                Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => {
                    Err(e).with_context(|| format!("cannot create {}", path.display()))
                }
                _ => Ok(()),
            },
        );
    let _ = std::fs::remove_file(&tmp);
    result
}

fn is_id(s: &str) -> bool {
    s.len() == 32 && s.bytes().all(|b| b.is_ascii_hexdigit())
}

/// The `--label` pairs for a new machine of `box_name`, and the id to record with the box;
/// none where this smolvm has no labels (before 1.8.0).
pub fn for_new_machine(
    state: &StateDir,
    version: SmolvmVersion,
    box_name: &str,
) -> Result<(Vec<Label>, Option<String>)> {
    if !version.has_labels() {
        return Ok((Vec::new(), None));
    }
    let id = state_id(state)?;
    let labels = vec![
        (BOX_KEY.to_string(), box_name.to_string()),
        (ID_KEY.to_string(), id.clone()),
    ];
    Ok((labels, Some(id)))
}

/// Whether a listed machine is the one box created for `box_name`: with `expected_id` (the
/// row was created with labels) its labels must name the box and the id; without, any.
pub fn is_ours(
    labels: Option<&BTreeMap<String, String>>,
    box_name: &str,
    expected_id: Option<&str>,
) -> bool {
    let Some(id) = expected_id else {
        return true;
    };
    labels.is_some_and(|l| {
        l.get(BOX_KEY).map(String::as_str) == Some(box_name)
            && l.get(ID_KEY).map(String::as_str) == Some(id)
    })
}

/// Whether a listed machine carries this state dir's id: box made it under this state dir
/// (for a box, or as a base builder), whatever its name. Reads the id, never makes it.
pub fn made_here(labels: Option<&BTreeMap<String, String>>, state: &StateDir) -> bool {
    let Ok(id) = std::fs::read_to_string(state.root().join(ID_FILE)) else {
        return false;
    };
    is_id(id.trim()) && labels.is_some_and(|l| l.get(ID_KEY).map(String::as_str) == Some(id.trim()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn name_and_labels_must_agree_when_the_row_was_labelled() {
        let ours = labels(&[(BOX_KEY, "alpha"), (ID_KEY, "abc")]);
        assert!(is_ours(Some(&ours), "alpha", Some("abc")));
        assert!(!is_ours(Some(&ours), "alpha", Some("other-state")));
        assert!(!is_ours(Some(&ours), "beta", Some("abc")));
        assert!(!is_ours(Some(&labels(&[])), "alpha", Some("abc")));
        assert!(
            !is_ours(None, "alpha", Some("abc")),
            "smolvm lost the labels"
        );
        // Rows from before labels: the name decides, as it always did.
        assert!(is_ours(None, "alpha", None));
        assert!(is_ours(Some(&labels(&[(ID_KEY, "x")])), "alpha", None));
    }

    #[test]
    fn the_state_id_is_made_once_and_kept() {
        let tmp = tempfile::tempdir().unwrap();
        let state = StateDir::at(tmp.path().join("state"));
        let a = state_id(&state).unwrap();
        assert!(is_id(&a), "{a}");
        assert_eq!(state_id(&state).unwrap(), a);
        std::fs::write(tmp.path().join("state").join(ID_FILE), "garbage").unwrap();
        assert!(state_id(&state).is_err(), "never silently replaced");
    }

    #[test]
    fn made_here_reads_the_id_and_never_makes_one() {
        let tmp = tempfile::tempdir().unwrap();
        let state = StateDir::at(tmp.path().join("state"));
        let any = labels(&[
            (BOX_KEY, "alpha"),
            (ID_KEY, "0123456789abcdef0123456789abcdef"),
        ]);
        assert!(!made_here(Some(&any), &state));
        assert!(!tmp.path().join("state").join(ID_FILE).exists());
        let id = state_id(&state).unwrap();
        let here = labels(&[(BOX_KEY, "box-base-1"), (ID_KEY, id.as_str())]);
        assert!(made_here(Some(&here), &state));
        assert!(
            !made_here(Some(&any), &state),
            "another state dir's machine"
        );
        assert!(!made_here(Some(&labels(&[])), &state));
        assert!(!made_here(None, &state));
    }
}
