//! Containment end to end (issue 33), through the simulator's 1.33 personality with its
//! network room: a box made with `CREDENTIALS=anthropic` and `EGRESS=allowlist` calls
//! `api.anthropic.com` (an HTTPS server in a network namespace this test makes, which the
//! simulator's resolver answers for that name) from the agent's login shell; the server sees
//! the real key; the key is nowhere in the guest, in box's output and logs, in the registry or
//! the simulator's records, and on no argv (only in the environment of `machine start`); a
//! name outside the list does not resolve and shows in `box egress`; a host on a private
//! address is unreachable, and reachable from a box made with `EGRESS_ALLOW_PRIVATE` naming it.
//!
//! Fast-test shortcut (named): the lifecycle harness's host-userland guest with local tools.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod lifecycle_support;
#[path = "../../smolvm-sim/tests/contract_egress/testnet.rs"]
mod testnet;

use lifecycle_support::World;
use testnet::{Https, Netns, pair};

const KEY: &str = "sk-ant-egress-test-4f1c9e07";

/// A shell command run as the agent in a login shell (what `box enter` gives).
fn as_agent(w: &World, machine: &str, script: &str) -> std::process::Output {
    w.sim(&[
        "machine", "exec", "--name", machine, "--", "runuser", "-l", "agent", "-c", script,
    ])
}

fn stdout(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// `box egress NAME --json`'s policy.
fn egress_json(w: &mut World, name: &str) -> serde_json::Value {
    let out = w.run(&["egress", name, "--json"]);
    assert!(out.ok(), "{out}");
    let v: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    v["containment"].clone()
}

#[test]
fn an_allowlisted_box_uses_a_bound_key_it_never_holds() {
    if !lifecycle_support::prerequisites() {
        return;
    }
    let mut w = World::new("1.33.0");
    let api = Netns::new(pair("198.18"));
    let https = Https::start(&api, "api.anthropic.com", w.dir.path());
    let lan = Netns::new(pair("172.29"));
    lan.hello(8080);
    w.extra_env.extend([
        (
            "SMOLVM_SIM_DNS_HOSTS".to_string(),
            format!("api.anthropic.com={0},elsewhere.example={0}", api.addr),
        ),
        // The interceptor's upstream roots, as on a host that trusts this server's CA.
        ("SSL_CERT_FILE".to_string(), https.ca.display().to_string()),
    ]);
    let mut config = std::fs::read_to_string(&w.config).unwrap();
    config.push_str("EGRESS=allowlist\nCREDENTIALS=anthropic\n");
    std::fs::write(&w.config, config).unwrap();

    // Without the key in the shell, nothing is created.
    let refused = w.run(&["new", "alpha"]);
    assert_eq!(refused.code, Some(1), "{refused}");
    assert!(
        refused
            .stderr
            .contains("ANTHROPIC_API_KEY is not set in this shell"),
        "{refused}"
    );
    assert!(w.machines().is_empty());

    let new = w.run_env(&["new", "alpha"], &[("ANTHROPIC_API_KEY", KEY)]);
    assert!(new.ok(), "{new}");
    assert!(
        new.stdout
            .contains("credential: ANTHROPIC_API_KEY for api.anthropic.com")
            && new.stdout.contains("LAN: closed"),
        "{new}"
    );
    let call = as_agent(
        &w,
        "alpha",
        "curl -sS --max-time 20 https://api.anthropic.com/v1/messages -H \"x-api-key: $ANTHROPIC_API_KEY\" -d '{}'",
    );
    assert_eq!(stdout(&call), "{\"ok\":true}", "{call:?}");
    let seen = https.seen();
    assert!(seen.contains(&format!("x-api-key: {KEY}")), "{seen}");

    // A name outside the list: a DNS failure in the box, a denial in box egress.
    let other = as_agent(
        &w,
        "alpha",
        "curl -sS --max-time 10 https://elsewhere.example/",
    );
    assert_eq!(other.status.code(), Some(6), "{other:?}");
    let egress = w.run(&["egress", "alpha"]);
    assert!(egress.ok(), "{egress}");
    assert!(
        egress.stdout.contains("resolve  elsewhere.example")
            && egress.stdout.contains("egress: allowlist: anthropic.com"),
        "{egress}"
    );
    // The LAN is closed.
    let lan_try = format!(
        "timeout 5 bash -c 'read -r l </dev/tcp/{}/8080 && echo \"$l\"' 2>/dev/null || echo refused",
        lan.addr
    );
    assert_eq!(stdout(&as_agent(&w, "alpha", &lan_try)).trim(), "refused");

    // The key is nowhere in the guest (the pattern is put together in the guest: the key
    // itself must ride on no argv) ...
    let (head, tail) = KEY.split_at(7);
    let grep = format!(
        "grep -rlsF \"$(printf %s {head} {tail})\" /proc/[0-9]*/environ /etc /data /root /tmp /run /home 2>/dev/null; true"
    );
    let found = w.sim(&[
        "machine", "exec", "--name", "alpha", "--", "sh", "-c", &grep,
    ]);
    assert_eq!(stdout(&found).trim(), "", "the key is in the guest");
    // ... nor in anything box printed or wrote, nor in the simulator's records; the raw
    // call log has it only in the environment of `machine start`, never on an argv.
    lifecycle_support::assert_only_in_start_env(&w.sim_home, KEY);
    assert!(!w.logs().contains(KEY), "the key is in box's logs");
    let surfaces: Vec<(String, String)> =
        lifecycle_support::secret_surfaces_but_raw_calls(&w.home, &w.sim_home);
    for (what, text) in surfaces {
        assert!(!text.contains(KEY), "the key leaked into {what}");
    }
    assert!(!w.transcript.contains(KEY), "box printed the key");

    // EGRESS_ALLOW_PRIVATE re-opens exactly the named range. Beta is also made from a
    // shell with a proxy (PROPAGATE_PROXY, one nothing answers on): a bound host never
    // goes through it, or smolvm would see a flow to the proxy and never put the key in.
    let reopened = w.run_env(
        &["new", "beta"],
        &[
            ("ANTHROPIC_API_KEY", KEY),
            ("EGRESS_ALLOW_PRIVATE", &format!("{}/32", lan.addr)),
            ("HTTPS_PROXY", "http://198.51.100.9:3128"),
        ],
    );
    assert!(reopened.ok(), "{reopened}");
    assert_eq!(stdout(&as_agent(&w, "beta", &lan_try)).trim(), "hello");
    let through = as_agent(
        &w,
        "beta",
        "echo \"$HTTPS_PROXY\"; curl -sS --max-time 20 https://api.anthropic.com/v1/messages -H \"x-api-key: $ANTHROPIC_API_KEY\" -d '{}'",
    );
    assert_eq!(
        stdout(&through),
        "http://198.51.100.9:3128\n{\"ok\":true}",
        "{through:?}"
    );
    for name in ["alpha", "beta"] {
        assert!(w.run(&["rm", name, "--force"]).ok());
    }
}

/// The policy goes with the box (issues 33, 39): `box save` seals it (names, never a key)
/// into the backup; `box load` makes the restored box with the sealed policy although box.env
/// has changed since, and although the box's agent rewrote its runtime manifest (the policy
/// words of older backups) in a loop while the save ran: the restored box's policy equals
/// the original's, its LAN is closed, and it has no binding the original did not have,
/// with `OPENAI_API_KEY` in the shell. Placeholders of its own work; `box repair` keeps the
/// policy; `box egress --allow-host` refuses with the exact commands that make the box again
/// with the change, and refuses a change that would fail; `box doctor` shows the policy and
/// the denials. The keyed `machine start` gets no `RUST_LOG`.
#[test]
fn a_policy_goes_with_its_box_through_save_load_and_repair() {
    if !lifecycle_support::prerequisites() {
        return;
    }
    let mut w = World::new("1.33.0");
    let api = Netns::new(pair("198.18"));
    let https = Https::start(&api, "api.anthropic.com", w.dir.path());
    let lan = Netns::new(pair("172.29"));
    lan.hello(8080);
    let pass = w.dir.path().join("passphrase");
    std::fs::write(&pass, "egress-carry-pp-31\n").unwrap();
    w.extra_env.extend([
        (
            "SMOLVM_SIM_DNS_HOSTS".to_string(),
            format!("api.anthropic.com={0},elsewhere.example={0}", api.addr),
        ),
        ("SSL_CERT_FILE".to_string(), https.ca.display().to_string()),
        (
            "BOX_PASSPHRASE_FILE".to_string(),
            pass.display().to_string(),
        ),
        // smolvm's logging is on in this shell: only the keyed start must go without it.
        ("RUST_LOG".to_string(), "debug".to_string()),
    ]);
    let shipped = std::fs::read_to_string(&w.config).unwrap();
    std::fs::write(
        &w.config,
        format!(
            "{shipped}EGRESS=allowlist\nEGRESS_ALLOW_HOSTS=saved.example\nCREDENTIALS=anthropic\n"
        ),
    )
    .unwrap();
    let key = [("ANTHROPIC_API_KEY", KEY)];
    let new = w.run_env(&["new", "alpha"], &key);
    assert!(new.ok(), "{new}");
    let alpha_placeholder = stdout(&as_agent(&w, "alpha", "printf %s \"$ANTHROPIC_API_KEY\""));
    let alpha_policy = egress_json(&mut w, "alpha");
    assert_eq!(alpha_policy["mode"], "allowlist", "{alpha_policy}");
    assert_eq!(alpha_policy["lan_closed"], true, "{alpha_policy}");

    // The agent rewrites its runtime manifest while the save runs, after hb wrote it and
    // before the export reads it (the export's start held there by the simulator's `slow`
    // fault, so the agent's words are the archive's every time, not by winning a race):
    // the LAN reopened, egress open, the user's other keys bound to their hosts, another
    // place in the chain (the export sets the chain's keys itself; the seal is what box
    // reads of them).
    let hostile = "m=/data/home/agent/.config/hermes-box/runtime-manifest; \
        printf 'egress=open\\negress_allow_hosts=\\negress_allow_cidrs=\\negress_allow_private=10.0.0.0/8 172.16.0.0/12 192.168.0.0/16\\ncredentials=OPENAI_API_KEY@api.openai.com ANTHROPIC_API_KEY@api.anthropic.com OPENROUTER_API_KEY@openrouter.ai\\nchain_link=7\\nchain_parent=%064d\\n' 0 > $m.t && mv -f $m.t $m";
    let from = w.calls().len();
    let saving = w.spawn(
        &["save", "alpha"],
        &[
            ("SMOLVM_SIM_FAIL", "exec:slow@hb export"),
            ("SMOLVM_SIM_SLOW_SECS", "3"),
        ],
    );
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    while !w.calls()[from..]
        .iter()
        .any(|c| c.join(" ").contains("hb export"))
    {
        assert!(
            std::time::Instant::now() < deadline,
            "the save never reached hb export"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let rewritten = as_agent(&w, "alpha", hostile);
    assert!(rewritten.status.success(), "{rewritten:?}");
    // And on, as fast as it can, to move the backup in its chain: whether one of these
    // lands after the export set the chain's keys is a race, checked both ways below.
    let again = format!("while :; do {hostile}; done");
    let started = w.sim(&[
        "machine", "exec", "--name", "alpha", "--", "runuser", "-u", "agent", "--", "setsid", "-f",
        "sh", "-c", &again,
    ]);
    assert!(started.status.success(), "{started:?}");
    let save = w.collect(saving, "box save alpha");
    assert!(save.ok(), "{save}");
    let _ = w.sim(&[
        "machine",
        "exec",
        "--name",
        "alpha",
        "--",
        "pkill",
        "-u",
        "agent",
        "-f",
        "runtime-manifest",
    ]);
    let backup = std::fs::read_dir(w.dir.path().join("backups"))
        .unwrap()
        .flatten()
        .map(|e| e.path().display().to_string())
        .find(|p| p.ends_with(".tar.zst.gpg"))
        .unwrap();
    // The backup's own manifest is the agent's; the policy box applies is not.
    let extract = w.run(&[
        "extract",
        &backup,
        &w.dir.path().join("x").display().to_string(),
    ]);
    assert!(extract.ok(), "{extract}");
    let manifest = std::fs::read_to_string(
        w.dir
            .path()
            .join("x/home/agent/.config/hermes-box/runtime-manifest"),
    )
    .unwrap();
    assert!(!manifest.contains(KEY));
    // The agent's words are what the archive holds (else this test would prove nothing):
    // the save said so, and went by what it sealed.
    assert!(
        manifest.contains("egress=open\n") && manifest.contains("OPENAI_API_KEY@api.openai.com"),
        "{manifest}"
    );
    // A place in the chain the agent wrote is said, and never taken; none is not said.
    assert_eq!(
        manifest.contains("chain_link=7\n"),
        save.all().contains("box goes by what it sealed"),
        "{manifest}\n{save}"
    );

    // box.env changed since: open, but still binding ANTHROPIC_API_KEY to its host; the
    // user's OpenAI key is in the shell. The restored box gets the sealed policy.
    std::fs::write(
        &w.config,
        format!("{shipped}EGRESS=open\nCREDENTIALS=anthropic\n"),
    )
    .unwrap();
    let load = w.run_env(
        &["load", &backup, "gamma"],
        &[
            ("ANTHROPIC_API_KEY", KEY),
            ("OPENAI_API_KEY", "sk-openai-not-for-the-box"),
        ],
    );
    assert!(load.ok(), "{load}");
    assert!(
        load.stdout
            .contains("network policy: the backup's (sealed by box when it was saved)"),
        "{load}"
    );
    assert_eq!(egress_json(&mut w, "gamma"), alpha_policy);
    let lan_try = format!(
        "timeout 5 bash -c 'read -r l </dev/tcp/{}/8080 && echo \"$l\"' 2>/dev/null || echo refused",
        lan.addr
    );
    assert_eq!(stdout(&as_agent(&w, "gamma", &lan_try)).trim(), "refused");
    assert_eq!(
        stdout(&as_agent(
            &w,
            "gamma",
            "printf %s \"${OPENAI_API_KEY:-none}${OPENROUTER_API_KEY:-}\""
        )),
        "none",
        "the restored box has a binding its original did not"
    );
    let egress = w.run(&["egress", "gamma"]);
    assert!(
        egress.stdout.contains("egress: allowlist")
            && egress.stdout.contains("saved.example")
            && egress
                .stdout
                .contains("credential: ANTHROPIC_API_KEY for api.anthropic.com"),
        "{egress}"
    );
    // The keyed start had no RUST_LOG; the other calls of this shell had it.
    lifecycle_support::assert_start_env_lacks(&w.sim_home, KEY, "RUST_LOG");
    let curl = "curl -sS --max-time 20 https://api.anthropic.com/v1/messages -H \"x-api-key: $ANTHROPIC_API_KEY\" -d '{}'";
    let gamma_placeholder = stdout(&as_agent(&w, "gamma", "printf %s \"$ANTHROPIC_API_KEY\""));
    assert!(gamma_placeholder.starts_with("SMOL_PLACEHOLDER_"));
    assert_ne!(gamma_placeholder, alpha_placeholder);
    let before = https.seen().matches(&format!("x-api-key: {KEY}")).count();
    assert_eq!(stdout(&as_agent(&w, "gamma", curl)), "{\"ok\":true}");
    assert_eq!(
        https.seen().matches(&format!("x-api-key: {KEY}")).count(),
        before + 1
    );

    // repair keeps the policy and the binding working.
    let repair = w.run_env(&["repair", "gamma"], &key);
    assert!(repair.ok(), "{repair}");
    assert_eq!(w.run(&["egress", "gamma"]).stdout, egress.stdout);
    assert_eq!(stdout(&as_agent(&w, "gamma", curl)), "{\"ok\":true}");

    // A change to the list of a running box: refused until it is stopped (or --restart);
    // on a smolvm that cannot change a machine's list, the commands that make it happen.
    let refused = w.run(&["egress", "gamma", "--allow-host", "new.example"]);
    assert_eq!(refused.code, Some(1), "{refused}");
    assert!(
        refused.stderr.contains("box stop gamma") && refused.stderr.contains("--restart"),
        "{refused}"
    );
    let refused = w.run_env(
        &["egress", "gamma", "--allow-host", "new.example"],
        &[("SMOLVM_SIM_VERSION", "1.17.0")],
    );
    assert_eq!(refused.code, Some(1), "{refused}");
    for want in [
        "smolvm 1.17.0 cannot change the list of an existing machine",
        "box clone gamma gamma-2 --allow-host new.example",
        "box rm gamma",
        "box load <the backup box save wrote> gamma --allow-host new.example",
    ] {
        assert!(refused.stderr.contains(want), "{want}: {refused}");
    }
    let refused = w.run(&["egress", "gamma", "--deny-host", "npmjs.org"]);
    assert_eq!(refused.code, Some(1), "{refused}");
    assert!(
        refused.stderr.contains("on the shipped agents list")
            && !refused.stderr.contains("box clone"),
        "{refused}"
    );
    // Refused means unchanged: the policy in force is the one before.
    assert_eq!(w.run(&["egress", "gamma"]).stdout, egress.stdout);

    // doctor: the policy and what was denied.
    assert_eq!(
        as_agent(
            &w,
            "gamma",
            "curl -sS --max-time 10 https://elsewhere.example/"
        )
        .status
        .code(),
        Some(6)
    );
    let doctor = w.run(&["doctor", "gamma"]);
    for want in [
        "egress: allowlist:",
        "credential: ANTHROPIC_API_KEY",
        "resolve  elsewhere.example",
    ] {
        assert!(doctor.stdout.contains(want), "{want}: {doctor}");
    }
    assert!(!w.transcript.contains(KEY), "box printed the key");
    // load and repair passed the key to smolvm: only in machine start's environment, and
    // nowhere box or the simulator keeps things.
    lifecycle_support::assert_only_in_start_env(&w.sim_home, KEY);
    for (what, text) in lifecycle_support::secret_surfaces_but_raw_calls(&w.home, &w.sim_home) {
        assert!(!text.contains(KEY), "the key leaked into {what}");
    }
    for name in ["alpha", "gamma"] {
        assert!(w.run(&["rm", name, "--force"]).ok());
    }
}

/// An allow list learned from use (issue 43, item 2): a box made with `--egress learn` whose
/// agent tries names outside its list (`w.sh`: three subdomains of one domain, another name,
/// an address); `box egress --propose` groups them as a person would (`*.example.org` for
/// the three, with their count), lists the address apart, and prints the command that
/// allows them. That command is refused on the running box and, on a smolvm without
/// `machine update --allow-host`, answered with the commands that make the box again;
/// on the stopped box with the smolvm that can, it changes the box itself: the guest then
/// resolves the name, the registry row and `box egress --json` show the list, and the next
/// proposal leaves them out. `--deny-host --restart` takes one off a running box.
#[test]
fn an_allow_list_learned_from_what_the_agent_was_refused() {
    if !lifecycle_support::prerequisites() {
        return;
    }
    let mut w = World::new("1.33.0");
    // The names smolvm's resolver answers once they are allowed (nothing needs to listen).
    w.extra_env.push((
        "SMOLVM_SIM_DNS_HOSTS".to_string(),
        "a.example.org=198.51.100.10,example.org=198.51.100.10".to_string(),
    ));
    let new = w.run(&["new", "alpha", "--egress", "learn"]);
    assert!(new.ok(), "{new}");
    assert!(
        new.stdout
            .contains("Learning: 'alpha' reaches only the agents' names")
            && new.stdout.contains("box egress alpha --learn"),
        "{new}"
    );
    assert_eq!(w.row("alpha")["containment"]["mode"], "allowlist");

    // The agent's work: names outside the list, and an address.
    let work = "cat > /tmp/w.sh <<'EOF'\n\
        getent hosts a.example.org b.example.org c.example.org other.net\n\
        timeout 3 bash -c 'exec 3<>/dev/tcp/203.0.113.7/443' 2>/dev/null\n\
        exit 0\n\
        EOF\n\
        sh /tmp/w.sh";
    let ran = as_agent(&w, "alpha", work);
    assert!(ran.status.success(), "{ran:?}");
    assert_eq!(stdout(&ran), "", "a name outside the list resolved");

    let command = "box egress alpha --allow-host '*.example.org' --allow-host other.net";
    let propose = w.run(&["egress", "alpha", "--propose"]);
    assert!(propose.ok(), "{propose}");
    for want in [
        "3 names: a.example.org b.example.org c.example.org",
        "other.net",
        command,
        "203.0.113.7:443",
        "EGRESS_ALLOW_CIDRS",
    ] {
        assert!(propose.stdout.contains(want), "{want}: {propose}");
    }
    let learn = w.run(&["egress", "alpha", "--learn"]);
    assert!(
        learn.ok()
            && learn.stdout.contains("learned from denials")
            && learn.stdout.contains(command),
        "{learn}"
    );
    let json = w.run(&["egress", "alpha", "--propose", "--json", "--since", "1h"]);
    assert!(json.ok(), "{json}");
    let v: serde_json::Value = serde_json::from_str(&json.stdout).unwrap();
    assert_eq!(v["hosts"][0]["entry"], "*.example.org", "{v}");
    assert_eq!(
        v["hosts"][0]["names"],
        serde_json::json!(["a.example.org", "b.example.org", "c.example.org"])
    );
    assert!(v["hosts"][0]["denials"].as_u64().unwrap() >= 3, "{v}");
    assert_eq!(v["hosts"][1]["entry"], "other.net", "{v}");
    assert_eq!(v["addresses"][0]["ip"], "203.0.113.7", "{v}");
    assert_eq!(v["addresses"][0]["port"], 443, "{v}");
    assert_eq!(v["command"], command);
    let bad = w.run(&["egress", "alpha", "--propose", "--since", "forever"]);
    assert_eq!(bad.code, Some(1), "{bad}");
    assert!(bad.stderr.contains("--since 'forever'"), "{bad}");

    let allow = [
        "egress",
        "alpha",
        "--allow-host",
        "*.example.org",
        "--allow-host",
        "other.net",
    ];
    // Running: refused, nothing changed.
    let running = w.run(&allow);
    assert_eq!(running.code, Some(1), "{running}");
    assert!(
        running.stderr.contains("stop it first (box stop alpha)")
            && running.stderr.contains("Nothing was changed"),
        "{running}"
    );
    // A smolvm without machine update --allow-host: the commands that make the box again.
    let older = w.run_env(&allow, &[("SMOLVM_SIM_VERSION", "1.17.0")]);
    assert_eq!(older.code, Some(1), "{older}");
    for want in [
        "smolvm 1.17.0 cannot change the list of an existing machine",
        "box clone alpha alpha-2 --allow-host *.example.org --allow-host other.net",
        "box load <the backup box save wrote> alpha --allow-host *.example.org --allow-host other.net",
    ] {
        assert!(older.stderr.contains(want), "{want}: {older}");
    }
    let updates = |w: &World| {
        w.calls()
            .into_iter()
            .filter(|c| c.len() > 1 && c[0] == "machine" && c[1] == "update")
            .map(|c| c.join(" "))
            .collect::<Vec<_>>()
    };
    assert_eq!(
        updates(&w),
        Vec::<String>::new(),
        "a refusal changed smolvm"
    );
    assert_eq!(
        w.row("alpha")["containment"]["hosts"],
        serde_json::json!([])
    );

    // Stopped, on the smolvm that can: the box itself changes, smolvm first, then the row.
    assert!(w.run(&["stop", "alpha"]).ok());
    let applied = w.run(&allow);
    assert!(applied.ok(), "{applied}");
    assert!(
        applied.stdout.contains("smolvm's and box's record agree")
            && applied.stdout.contains("box start alpha"),
        "{applied}"
    );
    assert_eq!(
        updates(&w),
        ["machine update --name alpha --allow-host-pattern *.example.org --allow-host other.net"]
    );
    let hosts = serde_json::json!(["*.example.org", "other.net"]);
    assert_eq!(w.row("alpha")["containment"]["hosts"], hosts);
    assert_eq!(egress_json(&mut w, "alpha")["hosts"], hosts);
    let start = w.run(&["start", "alpha"]);
    assert!(start.ok(), "{start}");
    let resolved = as_agent(&w, "alpha", "getent hosts a.example.org");
    assert!(stdout(&resolved).contains("198.51.100.10"), "{resolved:?}");
    // `*.example.org` is the subdomains only: the domain itself stays refused.
    let apex = as_agent(&w, "alpha", "getent hosts example.org");
    assert_eq!(apex.status.code(), Some(2), "{apex:?}");
    // What is allowed now is no longer proposed; the domain just refused is.
    let after = w.run(&["egress", "alpha", "--propose"]);
    assert!(after.ok(), "{after}");
    assert!(
        !after.stdout.contains("--allow-host '*.example.org'")
            && after.stdout.contains("on the list now")
            && after
                .stdout
                .contains("box egress alpha --allow-host example.org"),
        "{after}"
    );
    // An entry the list has changes nothing, running or not.
    let again = w.run(&["egress", "alpha", "--allow-host", "other.net"]);
    assert!(
        again.ok() && again.stdout.contains("nothing to change"),
        "{again}"
    );

    // --deny-host --restart on the running box: stopped, changed, started again.
    let deny = w.run(&["egress", "alpha", "--deny-host", "other.net", "--restart"]);
    assert!(deny.ok(), "{deny}");
    assert!(
        deny.stdout.contains("Stopped 'alpha'") && deny.stdout.contains("is running and healthy"),
        "{deny}"
    );
    assert_eq!(
        w.row("alpha")["containment"]["hosts"],
        serde_json::json!(["*.example.org"])
    );
    assert!(
        updates(&w)
            .contains(&"machine update --name alpha --remove-allow-host other.net".to_string()),
        "{:?}",
        updates(&w)
    );
    assert!(w.run(&["rm", "alpha", "--force"]).ok());
}
