//! Credential bindings (`machine create --credential NAME=ENV_VAR@HOST[,HOST...]`, smolvm
//! 1.18+): the guest gets a placeholder in ENV_VAR, and the host puts the real value, read
//! from ENV_VAR in the environment of `machine start`, in place of it on HTTPS requests to
//! the listed hosts, in request headers only. Sources: smolvm's
//! `docs/credential-substitution.md` (18095d76), `docs/credentials/SKILL.md` (f7b2b064, the
//! measured refusal texts), `smolvm-protocol` 1.33.0 `src/credentials.rs` (rules, guest
//! paths and trust variables).
//!
//! The binding itself, its rules and placeholders are plain data in `policy::credential`.
//! What lives where: the bindings and placeholders in the machine record (never a value);
//! the machine's CA key and certificate in `<data dir>/credentials/` (0600/0644), the
//! certificate also read-only in the guest at `/run/smol/credentials/ca.pem`.

pub mod ca;
pub mod http;
pub mod intercept;
