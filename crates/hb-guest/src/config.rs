//! The box configuration as `hb` sees it: `/etc/hermes-box.env` (missing file → defaults),
//! then environment variables of the same names, as in the seed.

use anyhow::{Context as _, Result};
use box_proto::BoxEnv;

use crate::context::Context;

/// Reads the configuration. A missing file is fine (defaults); a bad one is an error
/// naming the file, line and key.
pub fn load(ctx: &Context) -> Result<BoxEnv> {
    let mut env = match std::fs::read_to_string(&ctx.config) {
        Ok(text) => BoxEnv::parse(&text, &ctx.config)?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => BoxEnv::default(),
        Err(e) => {
            return Err(e).with_context(|| format!("cannot read {}", ctx.config.display()));
        }
    };
    env.apply_env(|k| std::env::var(k).ok())?;
    Ok(env)
}

/// The web port the host published for this box, from `HB_WEB_PORT` (set at create time
/// with `smolvm machine create -e HB_WEB_PORT=<port>`, because smolvm fixes a workload's
/// environment then). `None` when unset, empty or `0`.
pub fn web_port() -> Result<Option<u16>> {
    match std::env::var("HB_WEB_PORT") {
        Err(_) => Ok(None),
        Ok(v) if v.is_empty() || v == "0" => Ok(None),
        Ok(v) => v
            .parse::<u16>()
            .map(Some)
            .map_err(|_| anyhow::anyhow!("HB_WEB_PORT={v:?} is not a port number (1-65535)")),
    }
}
