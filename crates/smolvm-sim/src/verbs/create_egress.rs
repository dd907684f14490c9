//! A new machine's egress policy and credential bindings, from `create`'s flags (with or
//! without `--from`: smolvm 1.22.2+ honours `--credential` on a pack-created machine; 1.18.2
//! silently ignored it, docs/credentials/SKILL.md "Traps"). Checked before anything is
//! recorded, with smolvm's texts; the CA is minted once the record exists.

use std::collections::BTreeMap;
use std::path::Path;

use crate::cli::CreateCmd;
use crate::context::Ctx;
use crate::credentials::ca;
use crate::output::{SimError, config};
use crate::policy::addresses::{Cidr, encode_pattern};
use crate::policy::credential::{self, Binding};

/// The policy fields of a machine record.
pub struct Egress {
    pub allowed_cidrs: Vec<String>,
    pub allowed_hosts: Option<Vec<String>>,
    pub block_private: bool,
    pub allow_private: Vec<String>,
    pub credentials: Vec<Binding>,
    pub placeholders: BTreeMap<String, String>,
}

impl Egress {
    /// Whether these flags ask for the network (each implies `--net`).
    pub fn implies_net(&self) -> bool {
        !self.allowed_cidrs.is_empty()
            || self.allowed_hosts.is_some()
            || self.block_private
            || !self.credentials.is_empty()
    }
}

/// Read and check the flags.
pub fn from_flags(ctx: &Ctx, c: &CreateCmd) -> Result<Egress, SimError> {
    let x = &ctx.extras;
    let mut cidrs = c.allow_cidr.clone();
    if c.outbound_localhost_only {
        cidrs.push("127.0.0.0/8".to_string());
    }
    for spec in x.allow_private.iter() {
        if Cidr::parse(spec).is_none() {
            return Err(config(
                "egress",
                format!("--allow-private: invalid CIDR '{spec}'"),
            ));
        }
    }
    let mut hosts: Option<Vec<String>> = (!c.allow_host.is_empty()).then(|| {
        c.allow_host
            .iter()
            .map(|h| h.to_ascii_lowercase())
            .collect()
    });
    for p in &x.allow_host_patterns {
        let encoded = encode_pattern(p).map_err(|e| config("--allow-host-pattern", e))?;
        hosts.get_or_insert_with(Vec::new).push(encoded);
    }
    let bindings = x
        .credentials
        .iter()
        .map(|s| credential::parse(s))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| config("credentials", e))?;
    credential::validate(&bindings, hosts.as_deref()).map_err(|e| config("credentials", e))?;
    Ok(Egress {
        allowed_cidrs: cidrs,
        allowed_hosts: hosts,
        block_private: x.block_private || !x.allow_private.is_empty(),
        allow_private: x.allow_private.clone(),
        placeholders: credential::mint_all(&bindings),
        credentials: bindings,
    })
}

/// Mint the machine's credential CA in its data dir (a machine without bindings has none).
pub fn mint_ca(data: &Path, name: &str, bindings: &[Binding]) -> Result<(), SimError> {
    if bindings.is_empty() {
        return Ok(());
    }
    ca::create(data, name, bindings).map_err(|e| config("credentials", e))
}
