//! Finding and loading `box.env`: `--config`, then `BOX_CONFIG`, then the user config dir
//! (`$XDG_CONFIG_HOME/hermes-box/box.env`, macOS `~/Library/Application Support/hermes-box/box.env`),
//! else the built-in defaults. Environment variables of the same names override the file.
//! The file is read as the original tool's `source` read it (`BoxEnv::parse_user_file`):
//! a key box does not read is named in a warning, not refused.
//!
//! `BACKUP_DIR` is resolved here, once, to an absolute path, so that every directory `box`
//! runs from finds the same backups: unset, the user's data directory
//! (`$XDG_DATA_HOME/hermes-box/backups`, i.e. `~/.local/share/hermes-box/backups`; macOS
//! `~/Library/Application Support/hermes-box/backups`); a relative one in a box.env is
//! taken from that file's directory; a relative one in the environment is refused (it
//! could only mean the current directory, which is what made one box's backups scatter).

use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result, bail};
use box_proto::BoxEnv;

/// The loaded configuration and where it came from.
#[derive(Debug, Clone)]
pub struct Config {
    pub env: BoxEnv,
    /// The file read, or `None` when the built-in defaults were used.
    pub source: Option<PathBuf>,
    /// Where backups go, absolute ([`Config::backup_dir`]); `None`: BACKUP_DIR is unset and
    /// there is no home directory to find the data directory in.
    backup_dir: Option<PathBuf>,
    /// Where `box` put backups before they had one known place ([`Config::legacy_backup_dir`]).
    legacy_backup_dir: Option<PathBuf>,
    /// Keys the file sets that box does not read (a box.env of the original tool, say):
    /// `main` names them in a warning.
    pub unused: Vec<box_proto::box_env::UnusedKey>,
}

/// Where a user's own box.env lives when neither `--config` nor `BOX_CONFIG` is given.
pub fn user_config_file() -> Option<PathBuf> {
    dirs::config_dir().map(|d| d.join("hermes-box").join("box.env"))
}

/// The backup dir when `BACKUP_DIR` is unset: beside the user's other data, not in the
/// state dir (`BOX_HOME`), which holds what box can rebuild.
pub fn default_backup_dir() -> Option<PathBuf> {
    dirs::data_dir().map(|d| d.join("hermes-box").join("backups"))
}

fn read_file(path: &Path) -> Result<String> {
    std::fs::read_to_string(path)
        .with_context(|| format!("cannot read config file {}", path.display()))
}

/// Loads the configuration. An explicitly named file must exist; the user config file is
/// optional.
pub fn load(explicit: Option<&Path>) -> Result<Config> {
    let from_env = std::env::var_os("BOX_CONFIG")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from);
    let (path, required) = match (explicit, from_env) {
        (Some(p), _) => (Some(p.to_path_buf()), true),
        (None, Some(p)) => (Some(p), true),
        (None, None) => (user_config_file().filter(|p| p.exists()), false),
    };
    let mut env = BoxEnv::default();
    let mut unused = Vec::new();
    let source = match path {
        Some(path) if required || path.exists() => {
            let text = read_file(&path)?;
            (env, unused) = BoxEnv::parse_user_file(&text, &path, |name| std::env::var(name).ok())?;
            Some(path)
        }
        _ => None,
    };
    env.apply_env(|key| std::env::var(key).ok())?;
    let set_in = match (std::env::var_os("BACKUP_DIR"), &source) {
        (Some(_), _) => SetIn::Environment,
        (None, Some(file)) => SetIn::File(file),
        (None, None) => SetIn::Environment, // the default: nothing relative to resolve
    };
    let cwd = std::env::current_dir().ok();
    let backup_dir = resolve_backup_dir(
        env.backup_dir.as_deref(),
        set_in,
        cwd.as_deref(),
        default_backup_dir(),
    )?;
    let legacy_backup_dir = legacy_backup_dir(env.backup_dir.as_deref(), cwd.as_deref());
    Ok(Config {
        env,
        source,
        backup_dir,
        legacy_backup_dir,
        unused,
    })
}

/// Where a `BACKUP_DIR` value came from.
#[derive(Debug, Clone, Copy)]
enum SetIn<'a> {
    Environment,
    File(&'a Path),
}

/// The absolute backup dir `value` names ([`load`]'s rules); `default` when unset.
fn resolve_backup_dir(
    value: Option<&Path>,
    set_in: SetIn<'_>,
    cwd: Option<&Path>,
    default: Option<PathBuf>,
) -> Result<Option<PathBuf>> {
    let Some(dir) = value else {
        return Ok(default);
    };
    let where_set = match set_in {
        SetIn::Environment => "in the environment".to_string(),
        SetIn::File(file) => format!("in {}", file.display()),
    };
    if dir.to_string_lossy().starts_with('~') {
        bail!(
            "BACKUP_DIR={} ({where_set}): box does not expand ~; write the whole path (e.g. {})",
            dir.display(),
            dirs::home_dir()
                .map(|h| h.join(dir.strip_prefix("~").unwrap_or(Path::new("backups"))))
                .unwrap_or_else(|| PathBuf::from("/home/you/backups"))
                .display()
        );
    }
    if dir.is_absolute() {
        return Ok(Some(dir.to_path_buf()));
    }
    match set_in {
        SetIn::Environment => bail!(
            "BACKUP_DIR={} ({where_set}) is a relative path, and box finds a box's backups from any \
             directory: set an absolute one (export BACKUP_DIR=\"$PWD/{}\"), or set it in box.env, \
             where a relative path is taken from the file's directory",
            dir.display(),
            dir.display()
        ),
        SetIn::File(file) => {
            let file = match cwd {
                Some(cwd) => cwd.join(file),
                None => file.to_path_buf(),
            };
            let beside = file.parent().unwrap_or(Path::new("/"));
            Ok(Some(beside.join(dir)))
        }
    }
}

/// `./backups` of the current directory, or a relative `BACKUP_DIR` taken from there:
/// where box wrote backups before they had one known place.
fn legacy_backup_dir(value: Option<&Path>, cwd: Option<&Path>) -> Option<PathBuf> {
    let relative = match value {
        None => Path::new("backups"),
        Some(dir) if dir.is_relative() => dir,
        Some(_) => return None,
    };
    cwd.map(|cwd| cwd.join(relative))
}

impl Config {
    /// The backup directory (absolute): where `box save` writes a box's first backup, and
    /// every backup of a new chain.
    pub fn backup_dir(&self) -> Result<PathBuf> {
        self.backup_dir.clone().context(
            "cannot find your data directory for backups (no home directory); set BACKUP_DIR to an absolute path in box.env",
        )
    }

    /// Where box wrote backups before they had one known place, when that is somewhere
    /// else than [`Config::backup_dir`]: still looked in, so they are found.
    pub fn legacy_backup_dir(&self) -> Option<&Path> {
        self.legacy_backup_dir
            .as_deref()
            .filter(|l| self.backup_dir.as_deref() != Some(*l))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resolve(value: Option<&str>, set_in: SetIn<'_>) -> Result<Option<PathBuf>> {
        resolve_backup_dir(
            value.map(Path::new),
            set_in,
            Some(Path::new("/work/here")),
            Some(PathBuf::from("/home/u/.local/share/hermes-box/backups")),
        )
    }

    #[test]
    fn unset_is_the_data_dir_wherever_box_runs() {
        let file = SetIn::File(Path::new("/etc/box.env"));
        for set_in in [SetIn::Environment, file] {
            assert_eq!(
                resolve(None, set_in).unwrap(),
                Some(PathBuf::from("/home/u/.local/share/hermes-box/backups"))
            );
        }
    }

    #[test]
    fn a_relative_one_in_a_file_is_beside_the_file() {
        let at = |file: &str, value: &str| {
            resolve(Some(value), SetIn::File(Path::new(file)))
                .unwrap()
                .unwrap()
        };
        assert_eq!(
            at("/home/u/proj/box.env", "backups"),
            Path::new("/home/u/proj/backups")
        );
        // A config named relatively (--config box.env) is the current directory's.
        assert_eq!(at("box.env", "bk"), Path::new("/work/here/bk"));
        assert_eq!(
            at("cfg/box.env", "../bk"),
            Path::new("/work/here/cfg/../bk")
        );
        assert_eq!(at("/etc/box.env", "/srv/bk"), Path::new("/srv/bk"));
    }

    #[test]
    fn a_relative_one_in_the_environment_is_refused_saying_what_to_do() {
        let err = resolve(Some("backups"), SetIn::Environment)
            .unwrap_err()
            .to_string();
        for words in [
            "BACKUP_DIR=backups",
            "environment",
            "relative",
            "$PWD/backups",
        ] {
            assert!(err.contains(words), "{words:?} in {err}");
        }
        assert_eq!(
            resolve(Some("/srv/bk"), SetIn::Environment).unwrap(),
            Some(PathBuf::from("/srv/bk"))
        );
    }

    #[test]
    fn a_tilde_is_refused_not_made_a_directory_named_tilde() {
        for set_in in [SetIn::Environment, SetIn::File(Path::new("/etc/box.env"))] {
            let err = resolve(Some("~/backups"), set_in).unwrap_err().to_string();
            assert!(err.contains("does not expand ~"), "{err}");
        }
    }

    #[test]
    fn the_old_place_is_the_current_directorys() {
        let cwd = Some(Path::new("/work/here"));
        assert_eq!(
            legacy_backup_dir(None, cwd),
            Some(PathBuf::from("/work/here/backups"))
        );
        assert_eq!(
            legacy_backup_dir(Some(Path::new("bk")), cwd),
            Some(PathBuf::from("/work/here/bk"))
        );
        assert_eq!(legacy_backup_dir(Some(Path::new("/srv/bk")), cwd), None);
    }
}
