//! `hb import`: parts (with `--follow`, as they arrive) → checked → validated → staged → owners, modes, pause marker →
//! swapped into the data root with rollback. With `--forget-executor-token` (box clone)
//! the imported Executor token is dropped afterwards: two boxes must never share one.

use std::process::ExitCode;

use anyhow::{Context as _, Result};

use crate::archive::follow::{Follow, PATIENCE};
use crate::archive::import::{import_chain, import_following};
use crate::context::Context;
use crate::paths::Paths;

pub fn run(ctx: &Context, args: &crate::cli::ImportArgs) -> Result<ExitCode> {
    let root = args.root.clone().unwrap_or_else(|| ctx.data.clone());
    let summary = if args.follow {
        let mut stdout = std::io::stdout();
        let follow = Follow {
            out: &mut stdout,
            patience: PATIENCE,
        };
        import_following(&root, &args.from, follow)?
    } else {
        import_chain(&root, &args.from)?
    };
    println!(
        "Imported {} members ({} files) into {}",
        summary.members,
        summary.files,
        root.display()
    );
    if args.forget_executor_token {
        forget_executor_token(&Paths::new(&root))?;
    }
    Ok(ExitCode::SUCCESS)
}

/// Removes both places a token lives (Executor's own auth.json, hb's minted one). The box
/// is paused (import re-armed the marker), so no Executor is reading them; the next start
/// makes a new one and `hb wire-mcp` hands it to the agents.
fn forget_executor_token(paths: &Paths) -> Result<()> {
    for file in [paths.executor_auth_json(), paths.minted_token()] {
        match std::fs::remove_file(&file) {
            Ok(()) => println!("dropped the imported Executor token {}", file.display()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                return Err(e).with_context(|| format!("cannot remove {}", file.display()));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forgets_both_tokens_and_nothing_else() {
        let d = tempfile::tempdir().unwrap();
        let paths = Paths::new(d.path());
        let auth = paths.executor_auth_json();
        let minted = paths.minted_token();
        for f in [&auth, &minted] {
            std::fs::create_dir_all(f.parent().unwrap()).unwrap();
            std::fs::write(f, "secret").unwrap();
        }
        let beside = minted.with_file_name("executor-mcp.env");
        std::fs::write(&beside, "kept").unwrap();
        forget_executor_token(&paths).unwrap();
        assert!(!auth.exists() && !minted.exists());
        assert!(beside.exists());
        // Nothing to forget is fine too.
        forget_executor_token(&paths).unwrap();
    }
}
