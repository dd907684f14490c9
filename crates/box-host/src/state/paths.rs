//! The state directory: `BOX_HOME`, else `$XDG_STATE_HOME/hermes-box`
//! (`~/.local/state/hermes-box`), or `~/Library/Application Support/hermes-box` on macOS.

use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result, bail};

#[derive(Debug, Clone)]
pub struct StateDir {
    root: PathBuf,
}

impl StateDir {
    /// Resolves the state directory without creating anything.
    pub fn resolve() -> Result<Self> {
        if let Some(home) = std::env::var_os("BOX_HOME").filter(|v| !v.is_empty()) {
            return Ok(Self::at(PathBuf::from(home)));
        }
        let base = if cfg!(target_os = "macos") {
            dirs::data_dir()
        } else {
            dirs::state_dir()
        };
        match base {
            Some(base) => Ok(Self::at(base.join("hermes-box"))),
            None => bail!("cannot find a home directory for box state; set BOX_HOME"),
        }
    }

    pub fn at(root: PathBuf) -> Self {
        Self { root }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    pub fn boxes_dir(&self) -> PathBuf {
        self.root.join("boxes")
    }

    pub fn locks_dir(&self) -> PathBuf {
        self.root.join("locks")
    }

    pub fn logs_dir(&self) -> PathBuf {
        self.root.join("logs")
    }

    /// Creates `dir` (and parents) private to the user.
    pub fn ensure_private_dir(dir: &Path) -> Result<()> {
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .with_context(|| format!("cannot create state directory {}", dir.display()))
    }
}
