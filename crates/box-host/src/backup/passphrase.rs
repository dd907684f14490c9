//! The backup passphrase: `BOX_PASSPHRASE_FILE` (its first line), then `BOX_PASSPHRASE`,
//! then a no-echo prompt on the terminal (`Passphrase:`, and `Confirm passphrase:` when
//! encrypting), in the seed's order.
//!
//! The value lives in a [`SecretString`] (zeroed on drop, redacted in Debug) and never
//! appears in an error, a log line or a child's argv. Error messages name the source (the
//! variable or file), never the value.

use std::ffi::OsString;
use std::io::{Read, Write};
use std::path::PathBuf;

use anyhow::{Result, anyhow, bail};
use secrecy::{ExposeSecret, SecretString};
use zeroize::Zeroizing;

/// Why a passphrase is needed: encrypting asks twice on a terminal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Purpose {
    Encrypt,
    Decrypt,
}

/// Something that can ask the user. `Ok(None)` means there is no terminal.
pub trait Prompt {
    fn ask(&mut self, prompt: &str) -> Result<Option<SecretString>>;
}

/// Resolves the passphrase from the process environment and the controlling terminal.
pub fn resolve(purpose: Purpose) -> Result<SecretString> {
    resolve_with(purpose, &|key| std::env::var_os(key), &mut TtyPrompt)
}

/// The passphrase from `BOX_PASSPHRASE_FILE` or `BOX_PASSPHRASE` only, never a prompt
/// (`None` when neither is set): for work that must not stop to ask (`box rm --force`).
pub fn from_environment(purpose: Purpose) -> Option<Result<SecretString>> {
    let env = |key: &str| std::env::var_os(key);
    if env("BOX_PASSPHRASE_FILE").is_none_or(|v| v.is_empty()) && env("BOX_PASSPHRASE").is_none() {
        return None;
    }
    Some(resolve_with(purpose, &env, &mut NoPrompt))
}

/// A prompt with no terminal behind it.
struct NoPrompt;

impl Prompt for NoPrompt {
    fn ask(&mut self, _prompt: &str) -> Result<Option<SecretString>> {
        Ok(None)
    }
}

/// [`resolve`] with the environment and the prompt supplied (for tests).
pub fn resolve_with(
    purpose: Purpose,
    env: &dyn Fn(&str) -> Option<OsString>,
    prompt: &mut dyn Prompt,
) -> Result<SecretString> {
    if let Some(path) = env("BOX_PASSPHRASE_FILE").filter(|p| !p.is_empty()) {
        let path = PathBuf::from(path);
        let mut bytes = Zeroizing::new(Vec::new());
        std::fs::File::open(&path)
            .and_then(|mut f| f.read_to_end(&mut bytes))
            .map_err(|e| {
                anyhow!(
                    "passphrase file {} (BOX_PASSPHRASE_FILE) is not readable: {e}",
                    path.display()
                )
            })?;
        let first = bytes.split(|b| *b == b'\n').next().unwrap_or_default();
        let first = first.strip_suffix(b"\r").unwrap_or(first);
        if first.is_empty() {
            bail!(
                "passphrase file {} (BOX_PASSPHRASE_FILE) is empty",
                path.display()
            );
        }
        let text = std::str::from_utf8(first).map_err(|_| {
            anyhow!(
                "passphrase file {} (BOX_PASSPHRASE_FILE) is not UTF-8 text",
                path.display()
            )
        })?;
        return Ok(SecretString::from(text));
    }
    if let Some(value) = env("BOX_PASSPHRASE") {
        let value = Zeroizing::new(value.into_encoded_bytes());
        if value.is_empty() {
            bail!("BOX_PASSPHRASE is set but empty");
        }
        let text =
            std::str::from_utf8(&value).map_err(|_| anyhow!("BOX_PASSPHRASE is not UTF-8 text"))?;
        return Ok(SecretString::from(text));
    }
    let no_tty = || {
        anyhow!(
            "no BOX_PASSPHRASE set and no terminal to prompt on \
             (set BOX_PASSPHRASE_FILE to a file holding it, or BOX_PASSPHRASE)"
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
pub struct TtyPrompt;

impl Prompt for TtyPrompt {
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
    use super::*;

    struct Fake(Vec<Option<&'static str>>);

    impl Prompt for Fake {
        fn ask(&mut self, _prompt: &str) -> Result<Option<SecretString>> {
            Ok(self.0.remove(0).map(SecretString::from))
        }
    }

    fn env_of(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<OsString> {
        move |k| {
            pairs
                .iter()
                .find(|(key, _)| *key == k)
                .map(|(_, v)| OsString::from(v))
        }
    }

    #[test]
    fn order_and_errors() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("pw");
        std::fs::write(&file, "from-file\nsecond line\n").unwrap();
        let leaked: &'static str = Box::leak(file.display().to_string().into_boxed_str());
        let pairs: &'static [(&str, &str)] = Box::leak(Box::new([
            ("BOX_PASSPHRASE_FILE", leaked),
            ("BOX_PASSPHRASE", "from-env"),
        ]));
        let got = resolve_with(Purpose::Encrypt, &env_of(pairs), &mut Fake(vec![])).unwrap();
        assert_eq!(got.expose_secret(), "from-file");

        let got = resolve_with(
            Purpose::Encrypt,
            &env_of(&[("BOX_PASSPHRASE", "from-env")]),
            &mut Fake(vec![]),
        )
        .unwrap();
        assert_eq!(got.expose_secret(), "from-env");

        let got = resolve_with(
            Purpose::Encrypt,
            &env_of(&[]),
            &mut Fake(vec![Some("a"), Some("a")]),
        )
        .unwrap();
        assert_eq!(got.expose_secret(), "a");

        let err = |purpose, env: &'static [(&'static str, &'static str)], answers| {
            resolve_with(purpose, &env_of(env), &mut Fake(answers))
                .unwrap_err()
                .to_string()
        };
        assert!(err(Purpose::Encrypt, &[], vec![Some("a"), Some("b")]).contains("do not match"));
        assert!(err(Purpose::Decrypt, &[], vec![Some("")]).contains("empty passphrase"));
        assert!(err(Purpose::Decrypt, &[], vec![None]).contains("no terminal"));
        assert!(err(Purpose::Decrypt, &[("BOX_PASSPHRASE", "")], vec![]).contains("empty"));
        let missing: &'static [(&str, &str)] = &[
            ("BOX_PASSPHRASE_FILE", "/nonexistent/pw"),
            ("BOX_PASSPHRASE", "x"),
        ];
        let e = err(Purpose::Decrypt, missing, vec![]);
        assert!(e.contains("not readable"), "{e}");
        std::fs::write(&file, "\nx\n").unwrap();
        let e = err(Purpose::Decrypt, pairs, vec![]);
        assert!(e.contains("is empty") && !e.contains("from-env"), "{e}");
        // Decrypting asks once.
        let got = resolve_with(Purpose::Decrypt, &env_of(&[]), &mut Fake(vec![Some("z")])).unwrap();
        assert!(
            !format!("{got:?}").contains('z'),
            "Debug must not show the secret"
        );
    }
}
