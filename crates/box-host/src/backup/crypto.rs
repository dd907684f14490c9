//! OpenPGP, as stock `gpg -d` (2.2) reads it: SKESK v4 + SEIPD v1 (MDC), AES-256, iterated
//! and salted S2K, default RFC 4880 profile, never AEAD: GnuPG 2.2 reads no SKESK v6 or
//! SEIPD v2 (docs/backup-format.md, "The envelope").
//!
//! Reading is wider, for backups other tools wrote: SEIPD v1 under AES, Twofish or
//! Camellia (any S2K, compression, armor) and RFC 9580's SEIPD v2 (AEAD). What box refuses
//! (LibrePGP's AEAD packet, 64-bit-block ciphers, no MDC) is told by [`super::envelope`].
//!
//! Decryption uses a 1 MiB buffer (the default costs 180 MB of RSS) and every byte it
//! returns is unauthenticated until EOF, where the MDC is checked: callers act on plaintext
//! only inside a staging area until [`DecryptReader`] has reported EOF.

use std::fs::File;
use std::io::{self, BufWriter, Read, Write};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use anyhow::{Context as _, Result};
use secrecy::{ExposeSecret, SecretString};
use sequoia_openpgp as openpgp;

use openpgp::Packet;
use openpgp::crypto::{Password, SessionKey};
use openpgp::packet::{PKESK, SKESK};
use openpgp::parse::Parse;
use openpgp::parse::stream::{
    DecryptionHelper, DecryptorBuilder, MessageLayer, MessageStructure, VerificationHelper,
};
use openpgp::policy::StandardPolicy;
use openpgp::serialize::stream::{Encryptor, LiteralWriter, Message};
use openpgp::types::SymmetricAlgorithm;

use super::host_facts::{SealKey, Sealing};
use super::parser_panic::contain_parser_panic;
use super::{BackupError, envelope, seipd};
use box_proto::archive::host_facts::{self, Head};

/// The decrypt buffer: ≥ the largest read we do. A buffer smaller than a read makes memory
/// grow with the input (1 GiB read 1 MiB at a time through a 64 KiB buffer peaked at 3.7 GB
/// of RSS); 1 MiB for 1 MiB reads peaked at ~19 MB.
pub const DECRYPT_BUFFER: usize = 1 << 20;

static POLICY: StandardPolicy<'static> = StandardPolicy::new();

/// sequoia's own encrypting writer: write plaintext, then [`EncryptWriter::finish`].
/// `box save` writes with the faster [`super::seipd::SeipdWriter`]; this one stays as the
/// reference its output is tested against, and for tests that need a backup box did not
/// write itself.
pub struct EncryptWriter {
    inner: Option<Message<'static>>,
    file: File,
}

impl EncryptWriter {
    /// Encrypts into `file` (which must be positioned at its start).
    pub fn new(file: File, passphrase: &SecretString) -> Result<Self> {
        let sink = BufWriter::with_capacity(256 << 10, file.try_clone()?);
        let message = Message::new(sink);
        let password = Password::from(passphrase.expose_secret());
        let message = Encryptor::with_passwords(message, Some(password))
            .symmetric_algo(SymmetricAlgorithm::AES256)
            .build()
            .context("cannot start OpenPGP encryption")?;
        let literal = LiteralWriter::new(message)
            .build()
            .context("cannot start OpenPGP literal data")?;
        Ok(EncryptWriter {
            inner: Some(literal),
            file,
        })
    }

    /// Ends the message (MDC, packet trailers), flushes and fsyncs the file.
    pub fn finish(mut self) -> Result<File> {
        if let Some(w) = self.inner.take() {
            w.finalize().context("cannot finish the OpenPGP message")?;
        }
        self.file
            .sync_all()
            .context("cannot fsync the encrypted backup")?;
        Ok(self.file)
    }
}

impl Write for EncryptWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self.inner.as_mut() {
            Some(w) => w.write(buf),
            None => Err(io::Error::other("encryption already finished")),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self.inner.as_mut() {
            Some(w) => w.flush(),
            None => Ok(()),
        }
    }
}

/// The passphrase did not open any session key.
#[derive(Debug)]
struct WrongPassphrase;

impl std::fmt::Display for WrongPassphrase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("no session key matched the passphrase")
    }
}

impl std::error::Error for WrongPassphrase {}

/// The session key opened, but its cipher is one box refuses: sequoia's policy would
/// stop it only after the key was accepted, which reads as corruption.
#[derive(Debug)]
struct WeakCipher(u8);

impl std::fmt::Display for WeakCipher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the message is encrypted with {}",
            envelope::cipher_name(self.0)
        )
    }
}

impl std::error::Error for WeakCipher {}

struct Helper {
    password: Password,
    /// The key of the host facts, from the session key that opened the message.
    seal_key: Arc<Mutex<Option<SealKey>>>,
    /// A session key was accepted: from here on, failures are integrity failures.
    decrypted: Arc<AtomicBool>,
    /// The weak cipher an encrypted session key turned out to use.
    weak: Arc<Mutex<Option<u8>>>,
}

impl VerificationHelper for Helper {
    fn get_certs(&mut self, _ids: &[openpgp::KeyHandle]) -> openpgp::Result<Vec<openpgp::Cert>> {
        Ok(Vec::new())
    }

    fn check(&mut self, structure: MessageStructure) -> openpgp::Result<()> {
        // The message must be encrypted: plain literal data has no MDC and no secrecy.
        match structure.iter().next() {
            Some(MessageLayer::Encryption { .. }) => Ok(()),
            _ => Err(anyhow::anyhow!("the message is not encrypted")),
        }
    }
}

impl DecryptionHelper for Helper {
    fn decrypt(
        &mut self,
        _pkesks: &[PKESK],
        skesks: &[SKESK],
        _sym_algo: Option<SymmetricAlgorithm>,
        decrypt: &mut dyn FnMut(Option<SymmetricAlgorithm>, &SessionKey) -> bool,
    ) -> openpgp::Result<Option<openpgp::Cert>> {
        for skesk in skesks {
            let cached = session_keys::lookup(skesk, &self.password);
            let derived = match cached {
                Some(hit) => Ok(hit),
                None => skesk.decrypt(&self.password),
            };
            if let Ok((algo, key)) = derived
                && decrypt(algo, &key)
            {
                session_keys::remember(skesk, &self.password, algo, &key);
                // Checked only once the key proved right: a wrong passphrase decrypts an
                // encrypted session key to a random cipher id. (A cipher the key packet
                // names openly was refused before, by envelope::inspect.)
                if let Some(weak) = algo.map(u8::from).filter(|a| envelope::is_weak(*a)) {
                    *self.weak.lock().unwrap_or_else(|e| e.into_inner()) = Some(weak);
                    return Err(WeakCipher(weak).into());
                }
                *self.seal_key.lock().unwrap_or_else(|e| e.into_inner()) =
                    Some(SealKey::from_session_key(&key));
                self.decrypted.store(true, Ordering::SeqCst);
                return Ok(None);
            }
        }
        Err(WrongPassphrase.into())
    }
}

/// Session keys this process already derived from the passphrase, by key packet.
///
/// The S2K derivation is deliberately slow (GnuPG's default iterates SHA-256 over tens of
/// MiB), and one `box extract` or `box load` of a chain opens each link up to three times
/// (find its place, validate, extract): a 10-link chain cost 30 derivations against a full
/// backup's 3. A key is remembered only after it opened its message, keyed by a digest of
/// the key packet *and* the passphrase (another passphrase never finds it), in memory for
/// this process only.
mod session_keys {
    use std::sync::Mutex;

    use openpgp::crypto::{Password, SessionKey};
    use openpgp::packet::SKESK;
    use openpgp::serialize::MarshalInto;
    use openpgp::types::SymmetricAlgorithm;
    use sequoia_openpgp as openpgp;
    use sha2::{Digest, Sha256};

    /// Enough for the longest chain (`BACKUP_CHAIN_MAX` ≤ 1000 is allowed, 24 by default);
    /// the oldest entry goes first beyond it.
    const KEEP: usize = 1024;

    type Entry = ([u8; 32], Option<SymmetricAlgorithm>, SessionKey);

    static KEYS: Mutex<Vec<Entry>> = Mutex::new(Vec::new());

    fn id(skesk: &SKESK, password: &Password) -> Option<[u8; 32]> {
        let packet = skesk.to_vec().ok()?;
        let mut h = Sha256::new();
        h.update((packet.len() as u64).to_be_bytes());
        h.update(&packet);
        password.map(|p| h.update(p));
        Some(h.finalize().into())
    }

    pub(super) fn lookup(
        skesk: &SKESK,
        password: &Password,
    ) -> Option<(Option<SymmetricAlgorithm>, SessionKey)> {
        let id = id(skesk, password)?;
        let keys = KEYS.lock().unwrap_or_else(|e| e.into_inner());
        keys.iter()
            .find(|(k, _, _)| *k == id)
            .map(|(_, algo, key)| (*algo, key.clone()))
    }

    pub(super) fn remember(
        skesk: &SKESK,
        password: &Password,
        algo: Option<SymmetricAlgorithm>,
        key: &SessionKey,
    ) {
        let Some(id) = id(skesk, password) else {
            return;
        };
        let mut keys = KEYS.lock().unwrap_or_else(|e| e.into_inner());
        if keys.iter().any(|(k, _, _)| *k == id) {
            return;
        }
        if keys.len() >= KEEP {
            keys.remove(0);
        }
        keys.push((id, algo, key.clone()));
    }
}

/// What went wrong inside a [`DecryptReader`], kept for classifying a later error.
#[derive(Debug, Clone, Default)]
pub struct DecryptStatus(Arc<Mutex<Option<String>>>);

impl DecryptStatus {
    /// The decryption/integrity failure seen, if any.
    pub fn failure(&self) -> Option<String> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    fn set(&self, what: String) {
        let mut g = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if g.is_none() {
            *g = Some(what);
        }
    }
}

/// Plaintext of an encrypted backup. EOF is reported only after the MDC checked out and
/// the message was fully processed; any failure is also recorded in [`DecryptStatus`].
pub struct DecryptReader {
    inner: Inner,
    status: DecryptStatus,
    done: bool,
    bytes: u64,
    /// What the plaintext's first bytes said of the host facts (read at open).
    sealing: Sealing,
    /// Plaintext read at open that is the archive's own: handed out first.
    pending: Vec<u8>,
    pending_at: usize,
}

/// Who decrypts: the bulk reader for files of the shape box writes whose key packet gives
/// an AES-256 key (twice sequoia's speed: its SHA-1 for the MDC has no SHA-NI), sequoia
/// for everything else.
enum Inner {
    Sequoia(Box<openpgp::parse::stream::Decryptor<'static, Helper>>),
    Bulk(Box<seipd::BulkReader>),
}

/// The session key of a file shaped as box writes it ([`envelope::bulk_shape`]) when its
/// key packet gives an AES-256 key for `password`; `None` leaves the file to sequoia
/// (which then tells a wrong passphrase, another cipher or damage in its words).
fn bulk_key(head: &[u8], password: &Password) -> Option<(SKESK, SessionKey)> {
    let packet = envelope::bulk_shape(head)?;
    let skesk = match contain_parser_panic(|| Packet::from_bytes(packet))
        .ok()?
        .ok()?
    {
        Packet::SKESK(skesk @ SKESK::V4(_)) => skesk,
        _ => return None,
    };
    let (algo, key) = match session_keys::lookup(&skesk, password) {
        Some(hit) => hit,
        None => skesk.decrypt(password).ok()?,
    };
    (algo == Some(SymmetricAlgorithm::AES256)).then_some((skesk, key))
}

/// Whether a file that `passphrase` did not open is damaged rather than made under another
/// passphrase, as far as the file alone can tell. Only a file of box's shape whose key
/// packet gives an AES-256 key (box's cipher: another passphrase gives one once in 256)
/// can tell: when that key also decrypts the end of the encrypted packet to its MDC header
/// ([`seipd::key_decrypts_the_end`]: once in 65 536 for another key), the key is the file's
/// and so is the passphrase, and the quick check failed on damage in the first blocks.
/// Damage to the salt, the S2K count or the encrypted session key derives another key, as
/// another passphrase does: the file cannot tell those apart (`box rm` asks the digest box
/// recorded when it saved the file).
fn first_bytes_damaged(path: &Path, passphrase: &SecretString) -> bool {
    let Ok(mut file) = File::open(path) else {
        return false;
    };
    let Ok(head) = envelope::read_head(&mut file) else {
        return false;
    };
    let password = Password::from(passphrase.expose_secret());
    let Some((_, key)) = bulk_key(&head, &password) else {
        return false;
    };
    File::open(path)
        .map_err(anyhow::Error::from)
        .and_then(|file| seipd::key_decrypts_the_end(file, &key))
        .unwrap_or(false)
}

impl DecryptReader {
    /// Opens `path` and checks the passphrase. Errors are [`BackupError`]s: a file of
    /// box's shape damaged in its first blocks is [`BackupError::Corrupt`], not
    /// [`BackupError::WrongPassphrase`] (`first_bytes_damaged`).
    pub fn open(path: &Path, passphrase: &SecretString) -> Result<Self, BackupError> {
        let file = File::open(path)
            .map_err(|e| BackupError::Io(format!("cannot open {}: {e}", path.display())))?;
        let len = file.metadata().map(|m| m.len()).unwrap_or(0);
        if len == 0 {
            return Err(BackupError::NotOpenPgp(format!(
                "{} is empty",
                path.display()
            )));
        }
        let what = path.display().to_string();
        let opened = match Self::from_source(file, &what, passphrase, true) {
            Err(BackupError::WrongPassphrase) if first_bytes_damaged(path, passphrase) => {
                return Err(BackupError::Corrupt(format!(
                    "{what}: its first bytes are damaged: the passphrase opens its key packet, \
                     and that key decrypts its end but not its start"
                )));
            }
            opened => opened?,
        };
        if let Some(reader) = opened {
            return Ok(reader);
        }
        // Opened, but not of the bulk reader's shape inside: sequoia reads it again from
        // the start (with the key the first try derived remembered).
        let file = File::open(path)
            .map_err(|e| BackupError::Io(format!("cannot open {}: {e}", path.display())))?;
        Self::from_source(file, &what, passphrase, false)?
            .ok_or_else(|| BackupError::Io(format!("cannot decrypt {what}")))
    }

    /// [`Self::open`] always through sequoia: for tests that compare the two readers.
    #[cfg(test)]
    pub(crate) fn open_via_sequoia(
        path: &Path,
        passphrase: &SecretString,
    ) -> Result<Self, BackupError> {
        let file = File::open(path).map_err(|e| BackupError::Io(e.to_string()))?;
        Self::from_source(file, &path.display().to_string(), passphrase, false)?
            .ok_or_else(|| BackupError::Io("cannot decrypt".into()))
    }

    /// Decrypts what `source` yields; `what` names it in errors. Blocks until `source` has
    /// given enough to check the passphrase. An envelope box refuses (AEAD packet 20, a
    /// weak cipher, no MDC) is [`BackupError::Unsupported`], a file that ends inside its
    /// first packets [`BackupError::Corrupt`], both before any key is derived.
    ///
    /// With `bulk`, a file of the bulk reader's shape goes to it; `None` then means it
    /// opened the file and found no literal packet directly inside (gpg's compression):
    /// the caller reads it again with `bulk` off.
    fn from_source(
        mut source: impl Read + Send + Sync + 'static,
        what: &str,
        passphrase: &SecretString,
        bulk: bool,
    ) -> Result<Option<Self>, BackupError> {
        let head = envelope::read_head(&mut source)
            .map_err(|e| BackupError::Io(format!("cannot read {what}: {e}")))?;
        let unsupported = |refusal| {
            BackupError::Unsupported(envelope::Unsupported {
                file: what.to_string(),
                refusal,
            })
        };
        match envelope::inspect(&head) {
            Some(envelope::Verdict::Refuse(refusal)) => return Err(unsupported(refusal)),
            Some(envelope::Verdict::Truncated(what)) => return Err(BackupError::Corrupt(what)),
            None => {}
        }
        let password = Password::from(passphrase.expose_secret());
        if let Some((skesk, key)) = bulk.then(|| bulk_key(&head, &password)).flatten() {
            let source = io::Cursor::new(head).chain(source);
            let remembered = key.clone();
            let seal_key = SealKey::from_session_key(&key);
            let opened = seipd::BulkReader::open_with(source, what, move |_| Ok(key))?;
            // It opened: the first block decrypted, so the key is the file's.
            session_keys::remember(
                &skesk,
                &password,
                Some(SymmetricAlgorithm::AES256),
                &remembered,
            );
            return match opened {
                Some(reader) => Self::peeled(Inner::Bulk(Box::new(reader)), &seal_key).map(Some),
                None => Ok(None),
            };
        }
        let source = io::Cursor::new(head).chain(source);
        let decrypted = Arc::new(AtomicBool::new(false));
        let weak = Arc::new(Mutex::new(None));
        let seal_key = Arc::new(Mutex::new(None));
        let helper = Helper {
            password,
            seal_key: seal_key.clone(),
            decrypted: decrypted.clone(),
            weak: weak.clone(),
        };
        let builder = DecryptorBuilder::from_reader(source)
            .map_err(|e| BackupError::NotOpenPgp(format!("{what}: {e}")))?;
        let inner = contain_parser_panic(|| {
            builder
                .buffer_size(DECRYPT_BUFFER)
                .with_policy(&POLICY, None, helper)
        })
        .map_err(|why| {
            tracing::debug!("OpenPGP parser panicked on {what}: {why}");
            BackupError::Corrupt("the encrypted data ends early or is malformed".into())
        })?
        .map_err(|e| {
            if let Some(cipher) = *weak.lock().unwrap_or_else(|e| e.into_inner()) {
                unsupported(envelope::Refusal::WeakCipher(cipher))
            } else if e.downcast_ref::<WrongPassphrase>().is_some() {
                BackupError::WrongPassphrase
            } else if decrypted.load(Ordering::SeqCst) {
                BackupError::Corrupt(format!("{e}"))
            } else {
                BackupError::NotOpenPgp(format!("{what}: {e}"))
            }
        })?;
        let seal_key = seal_key
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
            .ok_or_else(|| BackupError::Corrupt(format!("{what}: no session key opened it")))?;
        Self::peeled(Inner::Sequoia(Box::new(inner)), &seal_key).map(Some)
    }

    /// A reader of `inner` that has read the host facts at the plaintext's start (if it
    /// begins with them) and hands out only what follows them.
    fn peeled(inner: Inner, seal_key: &SealKey) -> Result<Self, BackupError> {
        let mut reader = DecryptReader {
            inner,
            status: DecryptStatus::default(),
            done: false,
            bytes: 0,
            sealing: Sealing::Unsealed,
            pending: Vec::new(),
            pending_at: 0,
        };
        let mut head = Vec::new();
        let mut want = 8;
        loop {
            while head.len() < want {
                let at = head.len();
                head.resize(want, 0);
                let n = reader.read_plaintext(&mut head[at..]).map_err(|e| {
                    BackupError::Corrupt(reader.status.failure().unwrap_or_else(|| e.to_string()))
                })?;
                head.truncate(at + n);
                if n == 0 {
                    break;
                }
            }
            match host_facts::parse(&head) {
                Head::Incomplete { len } if len > head.len() && !reader.done => want = len,
                Head::Frame { frame, len } => {
                    reader.sealing = super::host_facts::open(&frame, seal_key);
                    head.drain(..len);
                    break;
                }
                Head::Malformed { why, .. } => {
                    // Left in the stream: the archive's readers refuse what they cannot read.
                    reader.sealing = Sealing::NotBoxs(why);
                    break;
                }
                Head::NotAFrame | Head::Incomplete { .. } => break,
            }
        }
        // The bytes counted are the archive's own, as every reader sees them.
        reader.bytes = head.len() as u64;
        reader.pending = head;
        Ok(reader)
    }

    /// What the backup's first bytes said of its host facts.
    pub fn sealing(&self) -> &Sealing {
        &self.sealing
    }

    pub fn status(&self) -> DecryptStatus {
        self.status.clone()
    }

    /// Whether the bulk reader decrypts (not sequoia).
    #[cfg(test)]
    pub(crate) fn is_bulk(&self) -> bool {
        matches!(self.inner, Inner::Bulk(_))
    }

    /// Whether EOF was reached with the MDC checked.
    pub fn authenticated(&self) -> bool {
        self.done
    }

    pub fn bytes(&self) -> u64 {
        self.bytes
    }
}

impl Read for DecryptReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.pending_at < self.pending.len() {
            let n = buf.len().min(self.pending.len() - self.pending_at);
            buf[..n].copy_from_slice(&self.pending[self.pending_at..self.pending_at + n]);
            self.pending_at += n;
            if self.pending_at == self.pending.len() {
                self.pending = Vec::new();
                self.pending_at = 0;
            }
            return Ok(n);
        }
        self.read_plaintext(buf)
    }
}

impl DecryptReader {
    /// The decrypted plaintext, host facts included.
    fn read_plaintext(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let buf_len = buf.len().min(DECRYPT_BUFFER);
        // What was read, or the error and what the status says of it.
        let read = match &mut self.inner {
            // It returns 0 only after the MDC matched and nothing followed.
            Inner::Bulk(bulk) => bulk.read(&mut buf[..buf_len]).map_err(|e| {
                let why = bulk.failure().unwrap_or_else(|| e.to_string());
                (e, why)
            }),
            Inner::Sequoia(inner) => {
                let read = contain_parser_panic(|| inner.read(&mut buf[..buf_len])).unwrap_or_else(
                    |why| Err(io::Error::other(format!("malformed OpenPGP data ({why})"))),
                );
                match read {
                    Ok(0) if !buf.is_empty() && !inner.message_processed() => {
                        let what = "the OpenPGP message ended early".to_string();
                        Err((io::Error::other(what.clone()), what))
                    }
                    other => other.map_err(|e| {
                        let why = e.to_string();
                        (e, why)
                    }),
                }
            }
        };
        match read {
            Ok(0) if !buf.is_empty() => {
                self.done = true;
                Ok(0)
            }
            Ok(n) => {
                self.bytes += n as u64;
                Ok(n)
            }
            Err((e, why)) => {
                self.status.set(why);
                Err(e)
            }
        }
    }
}
