//! The passphrase in the OS keychain (`box passphrase store`): the macOS Keychain, or the
//! Secret Service on Linux (GNOME Keyring, KWallet) reached over D-Bus by the `keyring`
//! crate (zbus: no libdbus needed to build or run).
//!
//! A keychain may be absent (an SSH session or a headless server has no Secret Service on
//! its session bus) or locked (its unlock asked for and refused): both are
//! [`Unavailable`], with the one line that says why, and box then asks on the terminal.
//!
//! [`Keychain`] is the seam between box's logic and the OS store. **Fast-test hook:**
//! `Memory` is an in-memory keychain for unit tests, since CI has no Secret Service to
//! store into; `box` itself only ever uses [`OsKeychain`].

use std::sync::mpsc;
use std::time::Duration;

use secrecy::{ExposeSecret, SecretString};
use zeroize::Zeroizing;

/// The keychain entry box keeps: one backup passphrase per user account.
pub const SERVICE: &str = "hermes-box";
pub const ACCOUNT: &str = "backup-passphrase";

/// How long a keychain may take to answer: an unlock dialog waits for the person.
const DEADLINE: Duration = Duration::from_secs(60);

/// Why the keychain cannot be used now (one line, never a secret).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unavailable(pub String);

impl std::fmt::Display for Unavailable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// Where the passphrase may be kept between runs.
pub trait Keychain {
    /// The stored passphrase; `None` when there is no entry.
    fn get(&self) -> Result<Option<SecretString>, Unavailable>;
    /// Stores `pass`, replacing an entry that is there.
    fn set(&self, pass: &SecretString) -> Result<(), Unavailable>;
    /// Deletes the entry; `false` when there was none.
    fn delete(&self) -> Result<bool, Unavailable>;
    /// What this keychain is, for messages ("the Secret Service").
    fn name(&self) -> &'static str;
}

/// The OS keychain, through the `keyring` crate.
pub struct OsKeychain;

impl Keychain for OsKeychain {
    fn get(&self) -> Result<Option<SecretString>, Unavailable> {
        with_entry(|entry| match entry.get_secret() {
            Ok(bytes) => {
                let bytes = Zeroizing::new(bytes);
                let text = std::str::from_utf8(&bytes)
                    .map_err(|_| Unavailable("its entry is not UTF-8 text".into()))?;
                Ok(Some(SecretString::from(text)))
            }
            Err(keyring::Error::NoEntry) => Ok(None),
            Err(e) => Err(unavailable(&e)),
        })
    }

    fn set(&self, pass: &SecretString) -> Result<(), Unavailable> {
        let pass = Zeroizing::new(pass.expose_secret().to_string());
        with_entry(move |entry| entry.set_password(&pass).map_err(|e| unavailable(&e)))
    }

    fn delete(&self) -> Result<bool, Unavailable> {
        with_entry(|entry| match entry.delete_credential() {
            Ok(()) => Ok(true),
            Err(keyring::Error::NoEntry) => Ok(false),
            Err(e) => Err(unavailable(&e)),
        })
    }

    fn name(&self) -> &'static str {
        OS_KEYCHAIN
    }
}

const OS_KEYCHAIN: &str = if cfg!(target_os = "macos") {
    "the macOS Keychain"
} else {
    "the Secret Service"
};

/// Runs `op` on box's entry on a thread of its own, within [`DEADLINE`]: a keychain that
/// never answers (a dialog nobody sees) must not hang box. The thread is left behind then.
fn with_entry<T: Send + 'static>(
    op: impl FnOnce(&keyring::Entry) -> Result<T, Unavailable> + Send + 'static,
) -> Result<T, Unavailable> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let result = match keyring::Entry::new(SERVICE, ACCOUNT) {
            Ok(entry) => op(&entry),
            Err(keyring::Error::NoDefaultStore) => Err(match keyring::Entry::store_status() {
                Err(e) => unavailable(e),
                Ok(()) => Unavailable("no keychain on this system".into()),
            }),
            Err(e) => Err(unavailable(&e)),
        };
        let _ = tx.send(result);
    });
    rx.recv_timeout(DEADLINE).unwrap_or_else(|_| {
        Err(Unavailable(format!(
            "it did not answer within {} s",
            DEADLINE.as_secs()
        )))
    })
}

/// One line of why. The crate's errors carry no secret (their `BadEncoding`, which holds
/// the bytes, comes only from `get_password`, which box never calls).
fn unavailable(e: &keyring::Error) -> Unavailable {
    let why = match e {
        keyring::Error::NoStorageAccess(inner) => format!("it is locked ({inner})"),
        keyring::Error::PlatformFailure(inner) => format!(
            "{} cannot be reached: {}",
            OS_KEYCHAIN,
            inner.to_string().trim_start_matches("zbus error: ")
        ),
        keyring::Error::Ambiguous(items) => format!("{} entries match {SERVICE}", items.len()),
        other => other.to_string(),
    };
    Unavailable(why.split_whitespace().collect::<Vec<_>>().join(" "))
}

/// Fast-test hook: a keychain in memory, or an absent one ([`Memory::absent`]).
#[cfg(test)]
pub struct Memory {
    entry: std::cell::RefCell<Option<String>>,
    absent: Option<&'static str>,
}

#[cfg(test)]
impl Memory {
    pub fn empty() -> Self {
        Self {
            entry: std::cell::RefCell::new(None),
            absent: None,
        }
    }

    pub fn holding(pass: &str) -> Self {
        let m = Self::empty();
        *m.entry.borrow_mut() = Some(pass.to_string());
        m
    }

    /// A keychain that cannot be reached, for `why`.
    pub fn absent(why: &'static str) -> Self {
        Self {
            entry: std::cell::RefCell::new(None),
            absent: Some(why),
        }
    }

    pub fn stored(&self) -> Option<String> {
        self.entry.borrow().clone()
    }

    fn reachable(&self) -> Result<(), Unavailable> {
        self.absent
            .map_or(Ok(()), |why| Err(Unavailable(why.into())))
    }
}

#[cfg(test)]
impl Keychain for Memory {
    fn get(&self) -> Result<Option<SecretString>, Unavailable> {
        self.reachable()?;
        Ok(self.entry.borrow().as_deref().map(SecretString::from))
    }

    fn set(&self, pass: &SecretString) -> Result<(), Unavailable> {
        self.reachable()?;
        *self.entry.borrow_mut() = Some(pass.expose_secret().to_string());
        Ok(())
    }

    fn delete(&self) -> Result<bool, Unavailable> {
        self.reachable()?;
        Ok(self.entry.borrow_mut().take().is_some())
    }

    fn name(&self) -> &'static str {
        "the test keychain"
    }
}
