//! Every host plaintext temporary and every unpublished temp file is registered here, and
//! removed on exit (drop guards and an `atexit` hook), on a panic, and on HUP, INT and TERM.
//!
//! A signal is handled on a dedicated thread (signal-hook): it takes the registry lock,
//! removes everything registered, restores a terminal whose echo we turned off, and exits
//! with 128+signal **while still holding the lock**. Work that mutates the file system in a
//! registered place (unpacking an entry into a staging dir, publishing a backup, promoting
//! an extraction) runs under the same lock via [`with_lock`], so a signal lands either
//! before it (and the place is removed) or after it (and the step is complete): never in
//! the middle, never recreating a staging dir the handler just removed. Plain writes into
//! an open temp file need no lock: once the handler unlinks it, the bytes go nowhere.
//!
//! Flows that must do their own rollback on a signal (`box load` creating a VM, which uses
//! deferred signals) call [`set_deferred`]`(true)`: the handler then removes the registered
//! temporaries and records the signal without exiting, and every loop of the engine returns
//! an "interrupted" error at its next [`check`], so the caller can roll back and exit.

use std::fs;
use std::io;
use std::os::fd::RawFd;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::{Mutex, MutexGuard, Once};

use nix::sys::termios::Termios;

enum Item {
    File(PathBuf),
    Dir(PathBuf),
    Terminal(RawFd, Termios),
}

/// The set of things to undo. Only reachable through [`with_lock`].
pub struct Registry {
    next: u64,
    items: Vec<(u64, Item)>,
}

static SIGNALLED: AtomicI32 = AtomicI32::new(0);
static DEFERRED: AtomicBool = AtomicBool::new(false);

/// Deferred mode: on a signal, clean up but do not exit (see the module docs).
pub fn set_deferred(deferred: bool) {
    DEFERRED.store(deferred, Ordering::SeqCst);
}

/// The signal received, if any.
pub fn signalled() -> Option<i32> {
    match SIGNALLED.load(Ordering::SeqCst) {
        0 => None,
        s => Some(s),
    }
}

/// Fails once a signal has arrived (deferred mode); engine loops call it per chunk/member.
pub fn check() -> io::Result<()> {
    match signalled() {
        None => Ok(()),
        Some(sig) => Err(io::Error::new(
            io::ErrorKind::Interrupted,
            format!("interrupted by signal {sig}"),
        )),
    }
}

static REGISTRY: Mutex<Registry> = Mutex::new(Registry {
    next: 1,
    items: Vec::new(),
});

fn lock() -> MutexGuard<'static, Registry> {
    REGISTRY.lock().unwrap_or_else(|e| e.into_inner())
}

impl Registry {
    fn add(&mut self, item: Item) -> u64 {
        let id = self.next;
        self.next += 1;
        self.items.push((id, item));
        id
    }

    /// Stops tracking `id` without undoing it (it was published or promoted).
    pub fn forget(&mut self, id: u64) {
        self.items.retain(|(i, _)| *i != id);
    }

    fn undo(&mut self, id: u64) {
        if let Some(pos) = self.items.iter().position(|(i, _)| *i == id) {
            let (_, item) = self.items.remove(pos);
            undo_item(&item);
        }
    }

    fn undo_all(&mut self) {
        while let Some((_, item)) = self.items.pop() {
            undo_item(&item);
        }
    }
}

fn undo_item(item: &Item) {
    match item {
        Item::File(p) => {
            let _ = fs::remove_file(p);
        }
        Item::Dir(p) => {
            // Make read-only directories removable first; never follow links.
            let _ = make_owner_writable(p);
            let _ = fs::remove_dir_all(p);
        }
        Item::Terminal(fd, termios) => {
            // SAFETY: the fd was registered by the prompt while open and is deregistered
            // before it is closed.
            let fd = unsafe { std::os::fd::BorrowedFd::borrow_raw(*fd) };
            let _ = nix::sys::termios::tcsetattr(fd, nix::sys::termios::SetArg::TCSANOW, termios);
        }
    }
}

fn make_owner_writable(dir: &Path) -> io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let meta = fs::symlink_metadata(dir)?;
    if !meta.is_dir() {
        return Ok(());
    }
    let mode = meta.permissions().mode();
    if mode & 0o700 != 0o700 {
        fs::set_permissions(dir, fs::Permissions::from_mode(mode | 0o700))?;
    }
    for entry in fs::read_dir(dir)? {
        let entry = entry?;
        if entry.file_type()?.is_dir() {
            let _ = make_owner_writable(&entry.path());
        }
    }
    Ok(())
}

/// Runs `f` with the registry locked: a signal cannot clean up (or exit) while it runs.
pub fn with_lock<T>(f: impl FnOnce(&mut Registry) -> T) -> T {
    let mut guard = lock();
    f(&mut guard)
}

extern "C" fn at_exit() {
    if let Ok(mut guard) = REGISTRY.try_lock() {
        guard.undo_all();
    }
}

/// Installs the signal thread, the panic hook and the exit hook (once per process).
pub fn install() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
        match signal_hook::iterator::Signals::new([SIGHUP, SIGINT, SIGTERM]) {
            Ok(mut signals) => {
                let spawned = std::thread::Builder::new()
                    .name("box-cleanup".into())
                    .spawn(move || {
                        for sig in signals.forever() {
                            SIGNALLED.store(sig, Ordering::SeqCst);
                            let mut guard = lock();
                            guard.undo_all();
                            if !DEFERRED.load(Ordering::SeqCst) {
                                // Exit while holding the lock: nothing can recreate a temp.
                                // SAFETY: _exit ends the process at once, no unwinding.
                                unsafe { libc::_exit(128 + sig) };
                            }
                        }
                    });
                if let Err(e) = spawned {
                    tracing::warn!("cannot start the signal cleanup thread: {e}");
                }
            }
            Err(e) => tracing::warn!("cannot install signal handlers: {e}"),
        }
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            // A parser panic that crypto turns into an error is no reason to remove the
            // temps of everything else this process is doing (its caller cleans up its own
            // when it reports the error). Which hook wraps which depends on which was set
            // first, so the check is here too.
            if !super::parser_panic::containing_panic() {
                at_exit();
            }
            previous(info);
        }));
        // SAFETY: registering a plain extern "C" fn with no captured state.
        unsafe {
            libc::atexit(at_exit);
        }
    });
}

/// A registered temporary file or directory, removed when dropped unless
/// [`Registry::forget`] under the lock followed by [`Temp::disarm`] says otherwise.
#[derive(Debug)]
pub struct Temp {
    id: u64,
    path: PathBuf,
    armed: bool,
}

fn random_suffix() -> String {
    use rand::Rng;
    let mut rng = rand::rng();
    (0..10)
        .map(|_| char::from(b"abcdefghijklmnopqrstuvwxyz0123456789"[rng.random_range(0..36)]))
        .collect()
}

impl Temp {
    /// Creates `<dir>/<prefix><random>` as a new 0600 file (O_EXCL) and registers it.
    pub fn create_file(dir: &Path, prefix: &str) -> io::Result<(Temp, fs::File)> {
        install();
        for _ in 0..16 {
            let path = dir.join(format!("{prefix}{}", random_suffix()));
            let made = with_lock(|reg| {
                check()?;
                fs::OpenOptions::new()
                    .read(true)
                    .write(true)
                    .create_new(true)
                    .mode(0o600)
                    .custom_flags(libc::O_CLOEXEC)
                    .open(&path)
                    .map(|f| (reg.add(Item::File(path.clone())), f))
            });
            match made {
                Ok((id, file)) => {
                    return Ok((
                        Temp {
                            id,
                            path,
                            armed: true,
                        },
                        file,
                    ));
                }
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(e),
            }
        }
        Err(io::Error::other("cannot find a free temporary file name"))
    }

    /// Creates `<parent>/<prefix><random>` as a new 0700 directory and registers it.
    pub fn create_dir(parent: &Path, prefix: &str) -> io::Result<Temp> {
        install();
        for _ in 0..16 {
            let path = parent.join(format!("{prefix}{}", random_suffix()));
            let made = with_lock(|reg| {
                check()?;
                fs::DirBuilder::new()
                    .mode(0o700)
                    .create(&path)
                    .map(|()| reg.add(Item::Dir(path.clone())))
            });
            match made {
                Ok(id) => {
                    return Ok(Temp {
                        id,
                        path,
                        armed: true,
                    });
                }
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(e),
            }
        }
        Err(io::Error::other(
            "cannot find a free temporary directory name",
        ))
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn id(&self) -> u64 {
        self.id
    }

    /// After [`Registry::forget`] under the lock: the drop no longer removes anything.
    pub fn disarm(mut self) {
        self.armed = false;
    }
}

impl Drop for Temp {
    fn drop(&mut self) {
        if self.armed {
            with_lock(|reg| reg.undo(self.id));
        }
    }
}

/// Registers a terminal whose settings must be restored if we die while it is changed.
/// Returns an id for [`forget_terminal`].
pub fn register_terminal(fd: RawFd, original: Termios) -> u64 {
    install();
    with_lock(|reg| reg.add(Item::Terminal(fd, original)))
}

/// The terminal was restored normally.
pub fn forget_terminal(id: u64) {
    with_lock(|reg| reg.forget(id));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn temps_go_away_on_drop_and_stay_when_kept() {
        let dir = tempfile::tempdir().unwrap();
        let (t, _f) = Temp::create_file(dir.path(), ".x.tmp-").unwrap();
        let p = t.path().to_path_buf();
        assert!(p.exists());
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(
            fs::metadata(&p).unwrap().permissions().mode() & 0o777,
            0o600
        );
        drop(t);
        assert!(!p.exists());

        let d = Temp::create_dir(dir.path(), ".stage-").unwrap();
        let dp = d.path().to_path_buf();
        fs::create_dir(dp.join("ro")).unwrap();
        fs::write(dp.join("ro/f"), b"x").unwrap();
        fs::set_permissions(dp.join("ro"), fs::Permissions::from_mode(0o500)).unwrap();
        drop(d);
        assert!(!dp.exists());

        let (t, _f) = Temp::create_file(dir.path(), ".y.tmp-").unwrap();
        let p = t.path().to_path_buf();
        with_lock(|reg| reg.forget(t.id()));
        t.disarm();
        assert!(p.exists());
    }
}
