//! Finding and loading `box.env`: `--config`, then `BOX_CONFIG`, then the user config dir
//! (`$XDG_CONFIG_HOME/hermes-box/box.env`, macOS `~/Library/Application Support/hermes-box/box.env`),
//! else the built-in defaults. Environment variables of the same names override the file.

use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result};
use box_proto::BoxEnv;

/// The loaded configuration and where it came from.
#[derive(Debug, Clone)]
pub struct Config {
    pub env: BoxEnv,
    /// The file read, or `None` when the built-in defaults were used.
    pub source: Option<PathBuf>,
}

/// Where a user's own box.env lives when neither `--config` nor `BOX_CONFIG` is given.
pub fn user_config_file() -> Option<PathBuf> {
    dirs::config_dir().map(|d| d.join("hermes-box").join("box.env"))
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
    let source = match path {
        Some(path) if required || path.exists() => {
            let text = read_file(&path)?;
            env = BoxEnv::parse(&text, &path)?;
            Some(path)
        }
        _ => None,
    };
    env.apply_env(|key| std::env::var(key).ok())?;
    Ok(Config { env, source })
}

impl Config {
    /// The backup directory; a relative `BACKUP_DIR` is taken from the current directory,
    /// as the seed's `backups/` beside the checkout was.
    pub fn backup_dir(&self) -> PathBuf {
        let dir = &self.env.backup_dir;
        if dir.is_absolute() {
            dir.clone()
        } else {
            std::env::current_dir()
                .map(|cwd| cwd.join(dir))
                .unwrap_or_else(|_| dir.clone())
        }
    }
}
