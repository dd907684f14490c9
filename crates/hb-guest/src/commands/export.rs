//! `hb export`: the data root → tar → zstd → parts with an index, in a new 0700 directory.

use std::process::ExitCode;

use anyhow::Result;
use box_proto::archive::chain_line;

use crate::archive::export::{ChainOptions, ExportOptions, export_announcing};
use crate::archive::incremental;
use crate::archive::parts::Announce;
use crate::context::Context;
use crate::paths::Paths;

/// How long a streaming export waits for box to take a part before giving up: box copies
/// one in seconds, and a box that died takes its exec (and so this export) with it.
const PATIENCE: std::time::Duration = std::time::Duration::from_secs(30 * 60);

pub fn run(ctx: &Context, args: &crate::cli::ExportArgs) -> Result<ExitCode> {
    let root = args.root.clone().unwrap_or_else(|| ctx.data.clone());
    let mut opts = ExportOptions::new(&root, &args.out, args.part_size);
    opts.part_hash = args.part_hash;
    opts.block_files_above = args.block_files_above;
    if args.listed_incremental {
        let current = Paths::new(&root).backup_snapshot();
        let (parent, why) = match &args.parent {
            Some(digest) => incremental::parent_for(&current, digest, args.chain_max)?,
            None => (None, "no parent backup given".to_string()),
        };
        // One line box reads, before any part: what kind of link this export is (box
        // seals it into the backup's host facts).
        match &parent {
            Some(p) => println!("{}", chain_line::link(p.link + 1)),
            None => println!("{}", chain_line::full(&why)),
        }
        opts.chain = Some(ChainOptions {
            parent,
            record: incremental::next_path(&current),
        });
    }
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
            if summary.link.is_some() {
                println!("{} unchanged file(s) left out", summary.unchanged);
            }
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

/// `hb commit-snapshot --digest <sha256>`: the last chain-mode export's snapshot becomes
/// the one the next save compares with.
pub fn commit(ctx: &Context, args: &crate::cli::CommitSnapshotArgs) -> Result<ExitCode> {
    let current = Paths::new(&ctx.data).backup_snapshot();
    incremental::commit(&current, &args.digest)?;
    println!("snapshot committed for backup {}", args.digest);
    Ok(ExitCode::SUCCESS)
}
