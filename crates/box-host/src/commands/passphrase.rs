//! `box passphrase store|forget|status`: the backup passphrase in the OS keychain, the
//! fourth of its sources (see [`crate::backup::passphrase`]).
//!
//! Each verb works on a [`Keychain`]; `box` passes the OS one, the unit tests an in-memory
//! one (`keychain::Memory`, built for tests only). Nothing here prints the secret.

use std::process::ExitCode;

use anyhow::{Result, anyhow};

use crate::backup::passphrase::keychain::{ACCOUNT, Keychain, OsKeychain, SERVICE};
use crate::backup::passphrase::{self, Env, EnvSource, Prompt, Purpose, TtyPrompt};
use crate::cli::PassphraseCmd;
use crate::ui;

pub fn run(cmd: &PassphraseCmd) -> Result<ExitCode> {
    let env = passphrase::process_env;
    let said = match cmd {
        PassphraseCmd::Store => store(&OsKeychain, &env, &mut TtyPrompt::default())?,
        PassphraseCmd::Forget => forget(&OsKeychain)?,
        PassphraseCmd::Status => {
            println!("{}", status(&OsKeychain, &env));
            return Ok(ExitCode::SUCCESS);
        }
    };
    ui::say(said);
    Ok(ExitCode::SUCCESS)
}

/// Reads the passphrase as a save would, but never from the keychain (asked twice on a
/// terminal), and stores it there.
fn store(keychain: &dyn Keychain, env: Env<'_>, prompt: &mut dyn Prompt) -> Result<String> {
    let from = EnvSource::all_set(env).into_iter().next();
    let pass = passphrase::resolve_with(Purpose::Encrypt, env, prompt, None)?;
    let replaced = keychain.get().ok().flatten().is_some();
    keychain.set(&pass).map_err(|why| {
        anyhow!(
            "cannot store the passphrase in {}: {why} (for unattended use, set BOX_PASSPHRASE_FILE or BOX_PASSPHRASE_COMMAND instead)",
            keychain.name()
        )
    })?;
    let from = from
        .map(|s| format!(" from {}", s.describe()))
        .unwrap_or_default();
    Ok(format!(
        "{} the backup passphrase{from} in {} ({SERVICE} / {ACCOUNT}); box uses it when \
         none of BOX_PASSPHRASE_FILE, BOX_PASSPHRASE, BOX_PASSPHRASE_COMMAND is set",
        if replaced { "Replaced" } else { "Stored" },
        keychain.name()
    ))
}

fn forget(keychain: &dyn Keychain) -> Result<String> {
    let removed = keychain.delete().map_err(|why| {
        anyhow!(
            "cannot reach {} to delete the passphrase: {why}",
            keychain.name()
        )
    })?;
    Ok(if removed {
        format!("Deleted the backup passphrase from {}", keychain.name())
    } else {
        format!(
            "{} holds no backup passphrase of box: nothing to delete",
            keychain.name()
        )
    })
}

/// Which source a command would read now, every source that is set, and the keychain's
/// state; never a value.
fn status(keychain: &dyn Keychain, env: Env<'_>) -> String {
    let set = EnvSource::all_set(env);
    let stored = keychain.get().map(|entry| entry.is_some());
    let used = match (set.first(), &stored) {
        (Some(source), _) => source.describe(),
        (None, Ok(true)) => format!("the keychain ({})", keychain.name()),
        (None, _) => "the prompt (on a terminal; without one, commands that need it fail)".into(),
    };
    let mut lines = vec![format!("Passphrase source now: {used}")];
    for (i, source) in set.iter().enumerate() {
        let note = if i == 0 {
            ""
        } else {
            " (ignored: an earlier one is set)"
        };
        lines.push(format!("  set: {}{note}", source.describe()));
    }
    lines.push(format!(
        "  keychain: {}",
        match stored {
            Ok(true) => format!("{} holds it ({SERVICE} / {ACCOUNT})", keychain.name()),
            Ok(false) => format!("{} has no entry (box passphrase store)", keychain.name()),
            Err(why) => format!("not available ({why})"),
        }
    ));
    lines.push(format!("Order{}", passphrase::PRECEDENCE));
    lines.join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backup::passphrase::keychain::Memory;
    use secrecy::SecretString;
    use std::ffi::OsString;

    struct Answers(Vec<&'static str>);

    impl Prompt for Answers {
        fn ask(&mut self, _prompt: &str) -> Result<Option<SecretString>> {
            Ok((!self.0.is_empty()).then(|| SecretString::from(self.0.remove(0))))
        }
    }

    fn env_of(pairs: Vec<(&'static str, String)>) -> impl Fn(&str) -> Option<OsString> {
        move |k| {
            pairs
                .iter()
                .find(|(key, _)| *key == k)
                .map(|(_, v)| v.into())
        }
    }

    #[test]
    fn store_then_status_then_forget() {
        let keychain = Memory::empty();
        let no_env = env_of(vec![]);
        let before = status(&keychain, &no_env);
        assert!(
            before.starts_with("Passphrase source now: the prompt"),
            "{before}"
        );
        assert!(before.contains("has no entry"), "{before}");

        let said = store(&keychain, &no_env, &mut Answers(vec!["s3cret", "s3cret"])).unwrap();
        assert!(
            said.starts_with("Stored the backup passphrase in"),
            "{said}"
        );
        assert_eq!(keychain.stored().as_deref(), Some("s3cret"));
        let now = status(&keychain, &no_env);
        assert!(
            now.starts_with("Passphrase source now: the keychain"),
            "{now}"
        );
        assert!(now.contains("holds it"), "{now}");
        // A save would now read it from there, asking nothing.
        let pass = passphrase::resolve_with(
            Purpose::Encrypt,
            &no_env,
            &mut Answers(vec![]),
            Some(&keychain),
        )
        .unwrap();
        assert_eq!(secrecy::ExposeSecret::expose_secret(&pass), "s3cret");

        // A variable set wins over the keychain, and status says which is ignored.
        let env = env_of(vec![
            ("BOX_PASSPHRASE", "v".into()),
            ("BOX_PASSPHRASE_COMMAND", "pass show box".into()),
        ]);
        let now = status(&keychain, &env);
        assert!(
            now.starts_with("Passphrase source now: BOX_PASSPHRASE\n"),
            "{now}"
        );
        assert!(
            now.contains("set: BOX_PASSPHRASE_COMMAND (pass show box) (ignored"),
            "{now}"
        );
        for text in [&before, &now] {
            assert!(!text.contains("s3cret") && !text.contains("=v"), "{text}");
        }

        assert!(forget(&keychain).unwrap().starts_with("Deleted"));
        assert_eq!(keychain.stored(), None);
        assert!(forget(&keychain).unwrap().contains("nothing to delete"));
    }

    #[test]
    fn store_reads_the_usual_sources_and_refuses_a_mismatch() {
        let keychain = Memory::holding("old");
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("pw");
        std::fs::write(&file, "from-file\n").unwrap();
        let env = env_of(vec![("BOX_PASSPHRASE_FILE", file.display().to_string())]);
        let said = store(&keychain, &env, &mut Answers(vec![])).unwrap();
        assert!(said.starts_with("Replaced the backup passphrase from BOX_PASSPHRASE_FILE"));
        assert_eq!(keychain.stored().as_deref(), Some("from-file"));

        let keychain = Memory::empty();
        let e = store(&keychain, &env_of(vec![]), &mut Answers(vec!["a", "b"])).unwrap_err();
        assert!(e.to_string().contains("do not match"), "{e}");
        assert_eq!(keychain.stored(), None);
    }

    /// No keychain (a headless server): store and forget fail saying why; status says it
    /// and names the prompt as the source.
    #[test]
    fn an_absent_keychain_is_said_by_every_verb() {
        let absent = Memory::absent("no D-Bus session bus");
        let no_env = env_of(vec![]);
        let e = store(&absent, &no_env, &mut Answers(vec!["a", "a"])).unwrap_err();
        let e = e.to_string();
        assert!(
            e.contains("no D-Bus session bus") && e.contains("BOX_PASSPHRASE_FILE"),
            "{e}"
        );
        assert!(!e.contains("\"a\""), "{e}");
        let e = forget(&absent).unwrap_err().to_string();
        assert!(e.contains("no D-Bus session bus"), "{e}");
        let now = status(&absent, &no_env);
        assert!(
            now.starts_with("Passphrase source now: the prompt"),
            "{now}"
        );
        assert!(
            now.contains("not available (no D-Bus session bus)"),
            "{now}"
        );
    }
}
