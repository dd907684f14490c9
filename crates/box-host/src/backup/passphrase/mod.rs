//! The backup passphrase, from the first of these that is set:
//!
//! 1. `BOX_PASSPHRASE_FILE`: the first line of that file (set but empty counts as unset);
//! 2. `BOX_PASSPHRASE`: its value (set but empty is an error);
//! 3. `BOX_PASSPHRASE_COMMAND`: the first line a command prints ([`command`]; set but empty
//!    counts as unset);
//! 4. the OS keychain's entry, put there by `box passphrase store` ([`keychain`]);
//! 5. a no-echo prompt on the terminal (`Passphrase:`, and `Confirm passphrase:` when
//!    encrypting).
//!
//! The first two are in the seed's order, which box kept; the newer sources come after
//! them. When several are set the first wins and the others are not read (`box passphrase
//! status` lists them all). A keychain that cannot be reached (no Secret Service on an SSH
//! session or a headless server, or a locked one) is said in one line before the prompt.
//! [`PRECEDENCE`] is the one text every verb's `--help` gives.
//!
//! The value lives in a [`SecretString`] (zeroed on drop, redacted in Debug) and never
//! appears in an error, a log line or a child's argv. Error messages name the source (the
//! variable, file or command), never the value.

pub mod command;
pub mod keychain;

use std::ffi::OsString;
use std::io::{Read, Write};
use std::path::PathBuf;

use anyhow::{Result, anyhow, bail};
use secrecy::{ExposeSecret, SecretString};
use zeroize::Zeroizing;

use keychain::{Keychain, OsKeychain, Unavailable};

pub const FILE_VAR: &str = "BOX_PASSPHRASE_FILE";
pub const VALUE_VAR: &str = "BOX_PASSPHRASE";
pub const COMMAND_VAR: &str = "BOX_PASSPHRASE_COMMAND";

/// The order of the sources, as every verb that asks for the passphrase says it at the
/// end of its `--help`, after "Passphrase" (a macro, so `concat!` can put it into clap's
/// help text).
#[macro_export]
macro_rules! passphrase_precedence {
    () => {
        ":\n  $BOX_PASSPHRASE_FILE, then $BOX_PASSPHRASE, then $BOX_PASSPHRASE_COMMAND, then the\n  \
         keychain (box passphrase store), then a prompt; the first set wins (box passphrase\n  \
         status says which)."
    };
}
pub const PRECEDENCE: &str = passphrase_precedence!();

/// Why a passphrase is needed: encrypting asks twice on a terminal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Purpose {
    Encrypt,
    Decrypt,
}

/// Something that can ask the user. `Ok(None)` means there is no terminal.
pub trait Prompt {
    fn ask(&mut self, prompt: &str) -> Result<Option<SecretString>>;
    /// A line to show before the next question, if there is a terminal to ask on.
    fn note(&mut self, _line: &str) {}
}

/// The process's environment, as [`resolve_with`] reads it.
pub type Env<'a> = &'a dyn Fn(&str) -> Option<OsString>;

/// [`Env`] of this process.
pub fn process_env(key: &str) -> Option<OsString> {
    std::env::var_os(key)
}

/// A source of the passphrase named in the environment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EnvSource {
    /// `BOX_PASSPHRASE_FILE`: the path.
    File(PathBuf),
    /// `BOX_PASSPHRASE` (its value is read only when used).
    Value,
    /// `BOX_PASSPHRASE_COMMAND`: the command as written.
    Command(OsString),
}

impl EnvSource {
    /// Every source set in `env`, the one used first.
    pub fn all_set(env: Env<'_>) -> Vec<EnvSource> {
        let non_empty = |key: &str| env(key).filter(|v| !v.is_empty());
        let mut set = Vec::new();
        if let Some(path) = non_empty(FILE_VAR) {
            set.push(EnvSource::File(PathBuf::from(path)));
        }
        if env(VALUE_VAR).is_some() {
            set.push(EnvSource::Value);
        }
        if let Some(text) = non_empty(COMMAND_VAR) {
            set.push(EnvSource::Command(text));
        }
        set
    }

    /// The source as a person would name it: the variable and its file or command.
    pub fn describe(&self) -> String {
        match self {
            EnvSource::File(path) => format!("{FILE_VAR} ({})", path.display()),
            EnvSource::Value => VALUE_VAR.to_string(),
            EnvSource::Command(text) => {
                format!("{COMMAND_VAR} ({})", text.to_string_lossy().trim())
            }
        }
    }

    fn read(&self, env: Env<'_>) -> Result<SecretString> {
        match self {
            EnvSource::File(path) => read_file(path),
            EnvSource::Value => {
                let value = Zeroizing::new(env(VALUE_VAR).unwrap_or_default().into_encoded_bytes());
                if value.is_empty() {
                    bail!("{VALUE_VAR} is set but empty");
                }
                let text = std::str::from_utf8(&value)
                    .map_err(|_| anyhow!("{VALUE_VAR} is not UTF-8 text"))?;
                Ok(SecretString::from(text))
            }
            EnvSource::Command(text) => {
                let text = text
                    .to_str()
                    .ok_or_else(|| anyhow!("{COMMAND_VAR} is not UTF-8 text"))?;
                command::passphrase_from(text, command::DEADLINE)
            }
        }
    }
}

fn read_file(path: &std::path::Path) -> Result<SecretString> {
    let mut bytes = Zeroizing::new(Vec::new());
    std::fs::File::open(path)
        .and_then(|mut f| f.read_to_end(&mut bytes))
        .map_err(|e| {
            anyhow!(
                "passphrase file {} ({FILE_VAR}) is not readable: {e}",
                path.display()
            )
        })?;
    first_line(&bytes).map_err(|problem| match problem {
        LineProblem::Empty => anyhow!("passphrase file {} ({FILE_VAR}) is empty", path.display()),
        LineProblem::NotUtf8 => anyhow!(
            "passphrase file {} ({FILE_VAR}) is not UTF-8 text",
            path.display()
        ),
    })
}

/// What is wrong with the first line of a file or a command's output.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LineProblem {
    Empty,
    NotUtf8,
}

/// The passphrase in `bytes`: its first line, without its `\n` or `\r\n` (the rest is
/// ignored: `pass show` prints notes after it).
pub(crate) fn first_line(bytes: &[u8]) -> Result<SecretString, LineProblem> {
    let first = bytes.split(|b| *b == b'\n').next().unwrap_or_default();
    let first = first.strip_suffix(b"\r").unwrap_or(first);
    if first.is_empty() {
        return Err(LineProblem::Empty);
    }
    let text = std::str::from_utf8(first).map_err(|_| LineProblem::NotUtf8)?;
    Ok(SecretString::from(text))
}

/// Resolves the passphrase from the process environment, the keychain and the terminal.
pub fn resolve(purpose: Purpose) -> Result<SecretString> {
    resolve_with(
        purpose,
        &process_env,
        &mut TtyPrompt::default(),
        Some(&OsKeychain),
    )
}

/// The passphrase from a source that needs no answer (the environment's, else the
/// keychain's), never a prompt; `None` when none has one: for work that must not stop to
/// ask (`box rm --force`).
pub fn from_environment() -> Option<Result<SecretString>> {
    match unattended(&process_env, Some(&OsKeychain)) {
        Unattended::Found(pass) => Some(pass),
        Unattended::Nothing { .. } => None,
    }
}

/// What the sources that ask nothing gave.
enum Unattended {
    Found(Result<SecretString>),
    /// Nothing set; why the keychain could not be asked, when it could not.
    Nothing {
        keychain: Option<Unavailable>,
    },
}

fn unattended(env: Env<'_>, keychain: Option<&dyn Keychain>) -> Unattended {
    if let Some(source) = EnvSource::all_set(env).into_iter().next() {
        return Unattended::Found(source.read(env));
    }
    match keychain.map(|k| k.get()) {
        Some(Ok(Some(pass))) => Unattended::Found(Ok(pass)),
        Some(Ok(None)) | None => Unattended::Nothing { keychain: None },
        Some(Err(why)) => Unattended::Nothing {
            keychain: Some(why),
        },
    }
}

/// [`resolve`] with the environment, the prompt and the keychain supplied (`None`: not
/// asked, as `box passphrase store` reads the passphrase it stores).
pub fn resolve_with(
    purpose: Purpose,
    env: Env<'_>,
    prompt: &mut dyn Prompt,
    keychain: Option<&dyn Keychain>,
) -> Result<SecretString> {
    let unreachable = match unattended(env, keychain) {
        Unattended::Found(pass) => return pass,
        Unattended::Nothing { keychain } => keychain,
    };
    if let Some(why) = &unreachable {
        prompt.note(&format!(
            "The keychain is not available ({why}); asking instead."
        ));
    }
    let no_tty = || {
        let keychain = unreachable.as_ref().map_or_else(
            || ", or keep it in the keychain with box passphrase store".to_string(),
            |why| format!("; the keychain is not available: {why}"),
        );
        anyhow!(
            "no passphrase set and no terminal to prompt on (set {FILE_VAR} to a file \
             holding it, {COMMAND_VAR} to a command printing it, or {VALUE_VAR}{keychain})"
        )
    };
    let first = prompt.ask("Passphrase: ")?.ok_or_else(no_tty)?;
    if first.expose_secret().is_empty() {
        bail!("empty passphrase");
    }
    if purpose == Purpose::Encrypt {
        let second = prompt.ask("Confirm passphrase: ")?.ok_or_else(no_tty)?;
        if second.expose_secret() != first.expose_secret() {
            bail!("passphrases do not match");
        }
    }
    Ok(first)
}

/// Prompts on `/dev/tty` with echo off; restores the terminal even if a signal arrives.
/// A note is shown before the next prompt, once per process (`box rm` may ask again).
#[derive(Default)]
pub struct TtyPrompt {
    note: Option<String>,
}

/// Whether this process showed its note already.
static NOTE_SHOWN: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

impl Prompt for TtyPrompt {
    fn note(&mut self, line: &str) {
        self.note = Some(line.to_string());
    }

    fn ask(&mut self, prompt: &str) -> Result<Option<SecretString>> {
        use nix::sys::termios::{LocalFlags, SetArg, tcgetattr, tcsetattr};
        use std::os::fd::AsRawFd;
        let Ok(mut tty) = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open("/dev/tty")
        else {
            return Ok(None);
        };
        let Ok(original) = tcgetattr(&tty) else {
            return Ok(None);
        };
        let mut silent = original.clone();
        silent.local_flags.remove(LocalFlags::ECHO);
        silent.local_flags.insert(LocalFlags::ICANON);
        let reg = super::cleanup::register_terminal(tty.as_raw_fd(), original.clone());
        let result = (|| -> Result<Zeroizing<Vec<u8>>> {
            tcsetattr(&tty, SetArg::TCSAFLUSH, &silent)?;
            if let Some(note) = self.note.take()
                && !NOTE_SHOWN.swap(true, std::sync::atomic::Ordering::SeqCst)
            {
                tty.write_all(format!("{note}\n").as_bytes())?;
            }
            tty.write_all(prompt.as_bytes())?;
            tty.flush()?;
            let mut line = Zeroizing::new(Vec::new());
            let mut byte = [0u8; 1];
            loop {
                match tty.read(&mut byte)? {
                    0 => break,
                    _ if byte[0] == b'\n' => break,
                    _ => line.push(byte[0]),
                }
            }
            Ok(line)
        })();
        let _ = tcsetattr(&tty, SetArg::TCSANOW, &original);
        super::cleanup::forget_terminal(reg);
        let _ = tty.write_all(b"\n");
        let mut line = result?;
        if line.last() == Some(&b'\r') {
            line.pop();
        }
        let text =
            std::str::from_utf8(&line).map_err(|_| anyhow!("the passphrase is not UTF-8 text"))?;
        Ok(Some(SecretString::from(text)))
    }
}

#[cfg(test)]
mod tests {
    use super::keychain::Memory;
    use super::*;

    /// Answers in turn; records the notes and the prompts it was shown.
    struct Fake {
        answers: Vec<Option<&'static str>>,
        shown: Vec<String>,
    }

    fn fake(answers: Vec<Option<&'static str>>) -> Fake {
        Fake {
            answers,
            shown: Vec::new(),
        }
    }

    impl Prompt for Fake {
        fn ask(&mut self, prompt: &str) -> Result<Option<SecretString>> {
            self.shown.push(prompt.to_string());
            Ok(self.answers.remove(0).map(SecretString::from))
        }
        fn note(&mut self, line: &str) {
            self.shown.push(line.to_string());
        }
    }

    fn env_of(pairs: Vec<(&'static str, String)>) -> impl Fn(&str) -> Option<OsString> {
        move |k| {
            pairs
                .iter()
                .find(|(key, _)| *key == k)
                .map(|(_, v)| OsString::from(v))
        }
    }

    fn resolve_in(
        purpose: Purpose,
        env: Vec<(&'static str, String)>,
        prompt: &mut Fake,
        keychain: &dyn Keychain,
    ) -> Result<SecretString> {
        resolve_with(purpose, &env_of(env), prompt, Some(keychain))
    }

    fn got(result: Result<SecretString>) -> String {
        result.unwrap().expose_secret().to_string()
    }

    /// A script printing `text` (`BOX_PASSPHRASE_COMMAND`'s value).
    fn printing(dir: &std::path::Path, text: &str) -> String {
        let path = dir.join(format!("print-{}", text.len()));
        std::fs::write(&path, format!("#!/bin/sh\necho '{text}'\n")).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        path.display().to_string()
    }

    #[test]
    fn the_first_source_set_wins_in_the_documented_order() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("pw");
        std::fs::write(&file, "from-file\nsecond line\n").unwrap();
        let file = file.display().to_string();
        let command = printing(dir.path(), "from-command");
        let keychain = Memory::holding("from-keychain");
        let all = [
            (FILE_VAR, file.clone()),
            (VALUE_VAR, "from-env".to_string()),
            (COMMAND_VAR, command.clone()),
        ];
        let mut none = fake(vec![]);
        for (skip, want) in [
            (0, "from-file"),
            (1, "from-env"),
            (2, "from-command"),
            (3, "from-keychain"),
        ] {
            let env = all[skip..].to_vec();
            let pass = resolve_in(Purpose::Encrypt, env, &mut none, &keychain);
            assert_eq!(got(pass), want);
        }
        // An empty FILE or COMMAND counts as unset.
        let env = vec![(FILE_VAR, String::new()), (COMMAND_VAR, String::new())];
        let pass = resolve_in(Purpose::Decrypt, env, &mut none, &keychain);
        assert_eq!(got(pass), "from-keychain");
        assert!(none.shown.is_empty(), "{:?}", none.shown);
        // Nothing set and no entry: the prompt, silently (no note about the keychain).
        let mut prompt = fake(vec![Some("a"), Some("a")]);
        let pass = resolve_in(Purpose::Encrypt, vec![], &mut prompt, &Memory::empty());
        assert_eq!(got(pass), "a");
        assert_eq!(prompt.shown, ["Passphrase: ", "Confirm passphrase: "]);
        // A source that fails is an error, never a fall-through to the next one.
        let missing = vec![
            (FILE_VAR, "/nonexistent/pw".to_string()),
            (VALUE_VAR, "x".to_string()),
        ];
        let e = resolve_in(Purpose::Decrypt, missing, &mut none, &keychain).unwrap_err();
        assert!(e.to_string().contains("not readable"), "{e}");
        let failing = vec![(COMMAND_VAR, "false".to_string())];
        let e = resolve_in(Purpose::Decrypt, failing, &mut none, &keychain).unwrap_err();
        assert!(e.to_string().contains("`false`"), "{e}");
    }

    #[test]
    fn an_unreachable_keychain_is_said_before_the_prompt() {
        let absent = Memory::absent("no Secret Service on the session bus");
        let mut prompt = fake(vec![Some("typed")]);
        let pass = resolve_in(Purpose::Decrypt, vec![], &mut prompt, &absent);
        assert_eq!(got(pass), "typed");
        assert_eq!(
            prompt.shown,
            [
                "The keychain is not available (no Secret Service on the session bus); \
                 asking instead.",
                "Passphrase: "
            ]
        );
        // With no terminal either, the error says both.
        let mut no_tty = fake(vec![None]);
        let e = resolve_in(Purpose::Decrypt, vec![], &mut no_tty, &absent).unwrap_err();
        let e = e.to_string();
        assert!(
            e.contains("no terminal") && e.contains("no Secret Service"),
            "{e}"
        );
        assert!(e.contains("BOX_PASSPHRASE_COMMAND"), "{e}");
    }

    #[test]
    fn bad_values_and_answers_are_refused_without_showing_them() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("pw");
        let keychain = Memory::empty();
        let err = |purpose, env, answers| {
            let mut prompt = fake(answers);
            resolve_in(purpose, env, &mut prompt, &keychain)
                .unwrap_err()
                .to_string()
        };
        assert!(err(Purpose::Encrypt, vec![], vec![Some("a"), Some("b")]).contains("do not match"));
        assert!(err(Purpose::Decrypt, vec![], vec![Some("")]).contains("empty passphrase"));
        assert!(err(Purpose::Decrypt, vec![], vec![None]).contains("no terminal"));
        let empty_value = vec![(VALUE_VAR, String::new())];
        assert!(err(Purpose::Decrypt, empty_value, vec![]).contains("empty"));
        std::fs::write(&file, "\nfrom-file-second\n").unwrap();
        let env = vec![
            (FILE_VAR, file.display().to_string()),
            (VALUE_VAR, "from-env".to_string()),
        ];
        let e = err(Purpose::Decrypt, env, vec![]);
        assert!(e.contains("is empty") && !e.contains("from-"), "{e}");
        // Decrypting asks once; Debug never shows the secret.
        let mut once = fake(vec![Some("z")]);
        let pass = resolve_in(Purpose::Decrypt, vec![], &mut once, &keychain).unwrap();
        assert!(!format!("{pass:?}").contains('z'));
        assert_eq!(once.shown, ["Passphrase: "]);
    }

    #[test]
    fn first_line_is_read_as_the_file_is() {
        let line = |b: &[u8]| first_line(b).map(|s| s.expose_secret().to_string());
        assert_eq!(line(b"pw\r\nnotes\n"), Ok("pw".to_string()));
        assert_eq!(line(b"pw"), Ok("pw".to_string()));
        assert_eq!(line(b" pw \n"), Ok(" pw ".to_string()));
        assert_eq!(line(b"\npw\n"), Err(LineProblem::Empty));
        assert_eq!(line(b""), Err(LineProblem::Empty));
        assert_eq!(line(b"\xff\n"), Err(LineProblem::NotUtf8));
    }
}
