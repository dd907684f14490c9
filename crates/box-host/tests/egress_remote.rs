//! An API key bound to a box on a remote host (issue 33), with the remote of
//! tests/remote_support (a namespace reached only by OpenSSH, smolvm-sim as its smolvm). The
//! key is set the way users set it (`ANTHROPIC_API_KEY` in box's environment, box.env
//! `CREDENTIALS=anthropic`); a test HTTPS server in a network namespace this test makes plays
//! `api.anthropic.com` for the remote's simulator (`SMOLVM_SIM_DNS_HOSTS`, its CA in
//! `SSL_CERT_FILE` there).
//!
//! `box new` on the remote, then `box stop` and `box start`: after each start a request from
//! the agent's login shell carries the real key to the server. The remote's process table
//! and the laptop's ssh clients are sampled all along: the key is on no argv there or here,
//! in no laptop ssh environment, and on the remote only in the environment of `smolvm
//! machine start` and the machine process it leaves (the simulator's `_boot-vm`); no file of the remote holds it but the
//! simulator's own unredacted call log, and that only as `machine start`'s environment.
//! ~1 min here (host-userland guests).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod remote_support;
#[allow(dead_code)]
#[path = "../../smolvm-sim/tests/contract_egress/testnet.rs"]
mod testnet;

use remote_support::{Remote, serial};
use testnet::{Https, Netns, pair};

const KEY: &str = "sk-ant-remote-box-90f3c1a4";

/// A request from the agent's login shell in the remote machine `machine` to the bound host.
fn call_api(r: &Remote, machine: &str) -> String {
    let out = r.sim(&[
        "machine",
        "exec",
        "--name",
        machine,
        "--",
        "runuser",
        "-l",
        "agent",
        "-c",
        "curl -sS --max-time 20 https://api.anthropic.com/v1/messages -H \"x-api-key: $ANTHROPIC_API_KEY\" -d '{}'",
    ]);
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn a_remote_box_gets_its_key_over_ssh_into_machine_start_only() {
    if !remote_support::prerequisites() {
        return;
    }
    let _serial = serial();
    let mut r = Remote::new();
    r.use_passphrase_env();
    let api = Netns::new(pair("198.18"));
    let https = Https::start(&api, "api.anthropic.com", r.dir.path());
    r.set_remote_sim_env(&[
        (
            "SMOLVM_SIM_DNS_HOSTS",
            &format!("api.anthropic.com={}", api.addr),
        ),
        ("SSL_CERT_FILE", &https.ca.display().to_string()),
    ]);
    let config = std::fs::read_to_string(r.world.config()).unwrap();
    std::fs::write(r.world.config(), format!("{config}CREDENTIALS=anthropic\n")).unwrap();
    let remote_sampler = r.sample_processes();
    let laptop_sampler = r.sample_laptop_ssh();
    let key = [("ANTHROPIC_API_KEY", KEY)];

    let new = r.world.run(&["new", "alpha"], &key);
    assert!(new.ok(), "box new alpha on the remote: {new}");
    assert!(
        new.stdout
            .contains("credential: ANTHROPIC_API_KEY for api.anthropic.com"),
        "{new}"
    );
    let machine = r
        .machines()
        .into_iter()
        .map(|(m, _)| m)
        .find(|m| m.ends_with("-alpha"))
        .expect("alpha on the remote");
    let seen_key = || https.seen().matches(&format!("x-api-key: {KEY}")).count();
    assert_eq!(call_api(&r, &machine), "{\"ok\":true}");
    assert_eq!(seen_key(), 1, "{}", https.seen());
    // Each start hands the key again (smolvm reads it at start).
    assert!(r.world.run(&["stop", "alpha"], &[]).ok());
    let start = r.world.run(&["start", "alpha"], &key);
    assert!(start.ok(), "box start alpha: {start}");
    assert_eq!(call_api(&r, &machine), "{\"ok\":true}");
    assert_eq!(seen_key(), 2, "{}", https.seen());

    let (remote_seen, remote_rounds) = remote_sampler.finish();
    let (laptop_seen, laptop_rounds) = laptop_sampler.finish();
    let secret = [KEY.to_string()];
    let remote_found = remote_support::processes_holding(&remote_seen, remote_rounds, &secret);
    // `machine start` (the harness's smolvm is a script that execs the simulator) and the
    // machine it leaves running may hold it in their environment; nothing else, no argv.
    let allowed = |f: &String| {
        f.starts_with("secret #0 in the environment of ")
            && (f.contains("smolvm machine start --name")
                || f.contains("smolvm-sim machine start --name")
                || f.contains("smolvm-sim _boot-vm"))
    };
    let stray: Vec<&String> = remote_found.iter().filter(|f| !allowed(f)).collect();
    assert!(
        stray.is_empty(),
        "the key reached remote processes: {stray:#?}"
    );
    assert!(
        remote_found
            .iter()
            .any(|f| f.contains("smolvm-sim _boot-vm")),
        "the sample never saw smolvm's machine with the key: it proves nothing"
    );
    let laptop_found = remote_support::processes_holding(&laptop_seen, laptop_rounds, &secret);
    assert!(
        laptop_found.is_empty(),
        "the key reached the laptop's ssh processes: {laptop_found:#?}"
    );
    // The simulator's unredacted log has it as machine start's environment, nowhere else;
    // no other file of the remote has it.
    remote_support::sim_support::assert_only_in_start_env(&r.raw_call_log(), KEY);
    let files: Vec<String> = r
        .files_holding(&[KEY.to_string()])
        .into_iter()
        .filter(|f| !f.ends_with(&r.raw_call_log().display().to_string()))
        .collect();
    assert!(files.is_empty(), "the key is in remote files: {files:?}");
    // Nor is it in anything box printed or keeps on the laptop.
    r.world.secrets.borrow_mut().push(KEY.to_string());
    r.world.scan_secrets();
    assert!(r.world.run(&["rm", "alpha", "--force"], &[]).ok());
}
