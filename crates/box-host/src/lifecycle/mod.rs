//! Shared pieces of the box lifecycle verbs (new, enter, ls, open, doctor, repair, stop,
//! start, rm), one concern per module: `boxes` (looking up a managed box), `containment`
//! (egress policy and API key bindings: the only renderer of smolvm's policy flags), `ports` (the web
//! port picker), `signals` (deferred HUP/INT/TERM), `cleanup` (a failed new's rollback),
//! `guest_assets` (which hb and provision/ to copy), `guest_network` (proxies and CA
//! certificates for the guest), `provisioning` (copy, provision, init, wire, health),
//! `transcript` (each operation's log file), `readiness` (bounded waits after a start),
//! `guest` (hb calls, the token, the host MCP handshake), `setup` (one box being set up,
//! below `provisioning` and `guest_network`), `test_guest_env` (the tests' extra guest
//! environment).
//!
//! Environment knobs (besides `SMOLVM`, `BOX_HOME`, `BOX_CONFIG`):
//! * `BOX_HB_BINARY`: the `hb` to install in guests (default: beside `box`);
//! * `BOX_PROVISION_DIR`: the provision/ directory (default: beside `box`, then the checkout);
//! * `BOX_KEEP_ON_FAILURE=1`: a failed `box new` keeps its VM for inspection;
//! * `BOX_SMOLVM_TIMEOUT=<secs>`: caps every smolvm call's deadline (tests, impatient hosts);
//! * tests only: `BOX_TEST_GUEST_ENV="K=V,…"` adds persisted guest environment at create
//!   (the simulator tests point provisioning at npm tools the host already has, so
//!   provisioning runs for real in every lifecycle test and takes seconds).

pub mod boxes;
pub mod cleanup;
pub mod containment;
pub mod guest;
pub mod guest_assets;
pub mod guest_network;
pub mod ports;
pub mod provisioning;
pub mod readiness;
pub mod setup;
pub mod signals;
pub mod test_guest_env;
pub mod transcript;
