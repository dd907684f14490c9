//! `hb export`: the data root → tar → zstd → parts with an index, in a new 0700 directory.

use std::process::ExitCode;

use anyhow::Result;

use super::Context;
use crate::archive::export::{ExportOptions, export};

pub fn run(ctx: &Context, args: &crate::cli::ExportArgs) -> Result<ExitCode> {
    let root = args.root.clone().unwrap_or_else(|| ctx.data.clone());
    let opts = ExportOptions::new(&root, &args.out, args.part_size);
    let out_existed = args.out.exists();
    match export(&opts, Box::new(|msg| eprintln!("hb: warning: {msg}"))) {
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
