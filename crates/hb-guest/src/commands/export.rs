//! `hb export`: the data root → tar → zstd → parts with an index, in a new 0700 directory.

use std::process::ExitCode;

use anyhow::Result;

use super::Context;
use crate::archive::export::{ExportOptions, export_announcing};
use crate::archive::parts::Announce;

/// How long a streaming export waits for box to take a part before giving up: box copies
/// one in seconds, and a box that died takes its exec (and so this export) with it.
const PATIENCE: std::time::Duration = std::time::Duration::from_secs(30 * 60);

pub fn run(ctx: &Context, args: &crate::cli::ExportArgs) -> Result<ExitCode> {
    let root = args.root.clone().unwrap_or_else(|| ctx.data.clone());
    let opts = ExportOptions::new(&root, &args.out, args.part_size);
    let out_existed = args.out.exists();
    let announce = args.stream_parts.map(|n| Announce {
        out: Box::new(std::io::stdout()),
        max_pending: usize::from(n),
        patience: PATIENCE,
    });
    match export_announcing(
        &opts,
        Box::new(|msg| eprintln!("hb: warning: {msg}")),
        announce,
    ) {
        Ok(summary) => {
            println!(
                "Exported {} members ({} bytes compressed) in {} part(s) -> {}",
                summary.members,
                summary.index.total_size,
                summary.index.parts.len(),
                args.out.display()
            );
            Ok(ExitCode::SUCCESS)
        }
        Err(e) => {
            // Never leave a partial export behind (it is plaintext).
            if !out_existed {
                let _ = std::fs::remove_dir_all(&args.out);
            }
            Err(e)
        }
    }
}
