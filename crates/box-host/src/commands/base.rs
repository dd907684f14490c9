//! `box base build|ls|rm`: the bases `box new` and `box load` start from (see `crate::base`).

use std::process::ExitCode;

use anyhow::{Result, bail};

use super::Context;
use crate::base::build::{self, Built};
use crate::base::store::{BaseMeta, Store, human_age, size};
use crate::cli::BaseCmd;
use crate::ui;

pub fn run(ctx: &Context, cmd: &BaseCmd) -> Result<ExitCode> {
    match cmd {
        BaseCmd::Build(a) => {
            let t0 = std::time::Instant::now();
            match build::build(ctx, a.refresh)? {
                Built::Existing(m) => ui::say(format!(
                    "Base {} is current (built {} ago, {}); --refresh rebuilds it",
                    m.digest,
                    human_age(m.age()),
                    size(m.size_bytes)
                )),
                Built::New(m) => ui::say(format!(
                    "Built base {} in {:.1} s ({}): box new and box load now start from it{}",
                    m.digest,
                    t0.elapsed().as_secs_f64(),
                    size(m.size_bytes),
                    if m.warm {
                        ", the first one as fast as the rest (smolvm's shared store is warm)"
                    } else {
                        ""
                    }
                )),
            }
            Ok(ExitCode::SUCCESS)
        }
        BaseCmd::Ls(a) => {
            let bases = host_store(ctx)?.list()?;
            if a.json {
                println!("{}", serde_json::to_string_pretty(&json(&bases, ctx))?);
                return Ok(ExitCode::SUCCESS);
            }
            if bases.is_empty() {
                println!("No bases. Make one with: box base build");
                return Ok(ExitCode::SUCCESS);
            }
            let max = ctx.config.env.base_max_age_days;
            println!(
                "{:<16}  {:<9}  {:>9}  {:<24}  TOOLS",
                "KEY", "AGE", "SIZE", "IMAGE"
            );
            for m in &bases {
                println!(
                    "{:<16}  {:<9}  {:>9}  {:<24}  {}{}",
                    m.digest,
                    human_age(m.age()),
                    size(m.size_bytes),
                    format!("{} {}", m.key.base_image, m.key.arch),
                    m.tools.join(" "),
                    match (m.is_stale(max), m.warm) {
                        (true, _) => "  (stale)",
                        (false, true) => "  (warm)",
                        (false, false) => "",
                    }
                );
            }
            if bases.iter().any(|m| m.warm) {
                println!(
                    "warm: extracted into smolvm's shared store when it was built, so the first \
                     box from it starts as fast as the rest"
                );
            }
            Ok(ExitCode::SUCCESS)
        }
        BaseCmd::Rm(a) => {
            let store = host_store(ctx)?;
            let _lock = build::wait_for_lock(ctx, "box base rm")?;
            let digests: Vec<String> = if a.all {
                store.list()?.into_iter().map(|m| m.digest).collect()
            } else {
                let d = a.digest.clone().unwrap_or_default();
                if d.len() != 16 || !d.bytes().all(|b| b.is_ascii_hexdigit()) {
                    bail!("'{d}' is not a base key (16 hex digits, as box base ls shows)");
                }
                vec![d]
            };
            for d in digests {
                if store.remove(&d)? {
                    ui::say(format!("Removed base {d}"));
                } else {
                    bail!("no base {d} (see box base ls)");
                }
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// The store on the selected host (`--host`, `BOX_HOST`): bases live where smolvm runs.
fn host_store(ctx: &Context) -> Result<Store> {
    let smolvm = ctx.selected_smolvm();
    Store::for_smolvm(&ctx.state, &smolvm)
}

fn json(bases: &[BaseMeta], ctx: &Context) -> serde_json::Value {
    let max = ctx.config.env.base_max_age_days;
    serde_json::Value::Array(
        bases
            .iter()
            .map(|m| {
                serde_json::json!({
                    "key": m.digest,
                    "key_fields": m.key,
                    "age_secs": m.age().as_secs(),
                    "stale": m.is_stale(max),
                    "size_bytes": m.size_bytes,
                    "tools": m.tools,
                    "smolvm_version": m.smolvm_version,
                    "build_secs": m.build_secs,
                    "warm": m.warm,
                })
            })
            .collect(),
    )
}
