//! Egress policy and credential bindings (smolvm 1.33's virtio-net gateway; sources in
//! `src/egress/` and `src/credentials/`). Servers live in network namespaces these tests
//! make (`testnet`), and the simulator's `SMOLVM_SIM_DNS_HOSTS` stands them in for public
//! names; no test sends a packet anywhere else.

use super::*;

mod testnet;

use testnet::{Https, Netns, pair};

/// Guests, plus `ip` for the test namespaces; simulator only (the name stand-ins).
macro_rules! egress_ready {
    () => {{
        let ok = guests_available!() && !sim_only!();
        if ok && Command::new("ip").arg("-V").output().is_err() {
            panic!("iproute2's ip is needed for the egress tests");
        }
        ok
    }};
}

/// `exec`'s stdout, asserting success.
fn sh_ok(s: &Smol, n: &str, script: &str) -> String {
    let o = s.sh(n, script);
    assert_eq!(o.code, 0, "{script}: {o:?}");
    o.stdout
}

/// One TCP line from `ip:port` inside the guest, or `refused`.
fn tcp_line(ip: &str, port: u16) -> String {
    format!(
        "timeout 5 bash -c 'read -r l </dev/tcp/{ip}/{port} && echo \"$l\"' 2>/dev/null || echo refused"
    )
}

fn events(s: &Smol, n: &str) -> Vec<serde_json::Value> {
    let o = s.ok(&["machine", "egress-events", "--name", n, "--json"]);
    serde_json::from_str::<serde_json::Value>(&o.stdout)
        .unwrap()
        .as_array()
        .unwrap()
        .clone()
}

fn has_event(events: &[serde_json::Value], op: &str, dest: &str) -> bool {
    events
        .iter()
        .any(|e| e["operation"] == op && e["dest"] == dest && e["timestamp"].is_string())
}

#[test]
fn egress_allow_host_answers_nxdomain_outside_the_list_and_learns_what_it_forwards() {
    if !egress_ready!() {
        return;
    }
    let ns = Netns::new(pair("198.18"));
    ns.hello(8080);
    let s = Smol::new().with_env(
        "SMOLVM_SIM_DNS_HOSTS",
        &format!("allowed.test={0},other.test={0}", ns.addr),
    );
    let n = s.name("allowhost");
    s.create(
        &n,
        &["--allow-host", "allowed.test", "--", "sleep", "infinity"],
    );
    s.start(&n);
    // Nothing learned yet: the address itself is closed.
    assert_eq!(sh_ok(&s, &n, &tcp_line(&ns.addr, 8080)).trim(), "refused");
    let other = s.sh(&n, "getent ahostsv4 other.test");
    assert_eq!(
        other.code, 2,
        "a name outside the list must not resolve: {other:?}"
    );
    let allowed = sh_ok(&s, &n, "getent ahostsv4 allowed.test | head -1");
    assert!(allowed.starts_with(&ns.addr), "{allowed}");
    // Its answer was learned: now the address is open.
    assert_eq!(sh_ok(&s, &n, &tcp_line(&ns.addr, 8080)).trim(), "hello");
    let ev = events(&s, &n);
    assert!(has_event(&ev, "resolve", "other.test"), "{ev:?}");
    assert!(
        has_event(&ev, "connect", &format!("{}:8080", ns.addr)),
        "{ev:?}"
    );
    assert!(!has_event(&ev, "resolve", "allowed.test"), "{ev:?}");
    let text = s.ok(&["machine", "egress-events", "--name", &n]).stdout;
    assert!(
        text.starts_with("TIMESTAMP") && text.contains("resolve   other.test"),
        "{text}"
    );
    let none = s
        .ok(&["machine", "egress-events", "--name", "never-made"])
        .stdout;
    assert_eq!(none, "No egress denials recorded for 'never-made'.\n");
}

#[test]
fn egress_block_private_closes_private_ranges_and_allow_private_reopens_one() {
    if !egress_ready!() {
        return;
    }
    let lan = Netns::new(pair("172.29"));
    lan.hello(8080);
    let public = Netns::new(pair("198.18"));
    public.hello(8080);
    let s = Smol::new();
    let closed = s.name("blockpriv");
    s.create(&closed, &["--block-private", "--", "sleep", "infinity"]);
    let reopened = s.name("allowpriv");
    let cidr = format!("{}/32", lan.addr);
    s.create(
        &reopened,
        &[
            "--allow-private",
            &cidr,
            "--allow-private",
            "169.254.0.0/16",
            "--",
            "sleep",
            "infinity",
        ],
    );
    let open = s.name("nopolicy");
    s.create(&open, &["--net", "--", "sleep", "infinity"]);
    for n in [&closed, &reopened, &open] {
        s.start(n);
    }
    assert_eq!(
        sh_ok(&s, &closed, &tcp_line(&lan.addr, 8080)).trim(),
        "refused"
    );
    assert_eq!(
        sh_ok(&s, &closed, &tcp_line(&public.addr, 8080)).trim(),
        "hello"
    );
    assert_eq!(
        sh_ok(&s, &reopened, &tcp_line(&lan.addr, 8080)).trim(),
        "hello"
    );
    // Cloud metadata stays closed whatever --allow-private says.
    assert_eq!(
        sh_ok(&s, &reopened, &tcp_line("169.254.169.254", 80)).trim(),
        "refused"
    );
    // Without a policy the LAN is reachable, as smolvm's local default leaves it.
    assert_eq!(sh_ok(&s, &open, &tcp_line(&lan.addr, 8080)).trim(), "hello");
    assert!(has_event(
        &events(&s, &closed),
        "connect",
        &format!("{}:8080", lan.addr)
    ));
    assert!(has_event(
        &events(&s, &reopened),
        "connect",
        "169.254.169.254:80"
    ));
    assert!(events(&s, &open).is_empty());
}

#[test]
fn egress_and_credential_flags_are_checked_at_create_with_smolvms_texts() {
    if sim_only!() {
        return;
    }
    let s = Smol::new();
    let n = s.name("tsi");
    let o = s.run(&[
        "machine",
        "create",
        "--name",
        &n,
        "--net-backend",
        "tsi",
        "--block-private",
    ]);
    assert_eq!(o.code, 1, "{o:?}");
    assert!(
        o.stderr.contains("requires the virtio-net backend"),
        "{o:?}"
    );
    for (args, want) in [
        (
            vec![
                "--allow-host",
                "github.com",
                "--credential",
                "a=KEY@api.example.com",
            ],
            "credential \"a\" host \"api.example.com\" is not reachable under the machine's network allow_hosts",
        ),
        (
            vec!["--credential", "a=KEY@10.0.0.1"],
            "must be a lowercase DNS name",
        ),
        (
            vec!["--credential", "nonsense"],
            "expected NAME=ENV_VAR@HOST",
        ),
        (
            vec!["--allow-private", "10.0.0.0/33"],
            "--allow-private: invalid CIDR '10.0.0.0/33'",
        ),
    ] {
        let name = s.name("bad");
        let mut a = vec!["machine", "create", "--name", &name];
        a.extend(args.iter().copied());
        let o = s.run(&a);
        assert_eq!(o.code, 1, "{a:?}: {o:?}");
        assert!(
            o.stderr.starts_with("Error: config operation failed: "),
            "{o:?}"
        );
        assert!(o.stderr.contains(want), "{a:?}: {o:?}");
        assert!(s.state(&name).is_none(), "a refused create records nothing");
    }
    // Releases before these flags refuse them as clap does.
    for (version, flag) in [("1.17.0", "--credential"), ("1.17.0", "--block-private")] {
        let name = s.name("old");
        let o = s.run_env(
            &[("SMOLVM_SIM_VERSION", version)],
            &["machine", "create", "--name", &name, flag, "a=K@x.com"],
        );
        assert_eq!(o.code, 2, "{o:?}");
        assert!(
            o.stderr
                .contains(&format!("unexpected argument '{flag}' found")),
            "{o:?}"
        );
    }
    let o = s.run_env(
        &[("SMOLVM_SIM_VERSION", "1.0.4")],
        &["machine", "egress-events", "--name", "x"],
    );
    assert_eq!(o.code, 2, "{o:?}");
    assert!(
        o.stderr.contains("unrecognized subcommand 'egress-events'"),
        "{o:?}"
    );
}

#[test]
fn credentials_are_substituted_in_headers_only_for_the_bound_host() {
    if !egress_ready!() {
        return;
    }
    const KEY: &str = "sk-contract-7f3a9c21";
    let ns = Netns::new(pair("198.18"));
    let dir = tempfile::tempdir().unwrap();
    let server = Https::start(&ns, "api.cred.test", dir.path());
    let ca = server.ca.to_string_lossy().into_owned();
    let s = Smol::new()
        .with_env(
            "SMOLVM_SIM_DNS_HOSTS",
            &format!("api.cred.test={0},other.cred.test={0}", ns.addr),
        )
        // The upstream roots of the interceptor, as a host with this CA installed has them.
        .with_env("SSL_CERT_FILE", &ca);
    let n = s.name("cred");
    s.create(
        &n,
        &[
            "--allow-host",
            "cred.test",
            "--block-private",
            "--credential",
            "api=API_KEY@api.cred.test",
            "--",
            "sleep",
            "infinity",
        ],
    );
    let started = s.run_env(&[("API_KEY", KEY)], &["machine", "start", "--name", &n]);
    assert_eq!(started.code, 0, "{started:?}");
    let placeholder = sh_ok(&s, &n, "printf %s \"$API_KEY\"");
    assert!(
        placeholder.starts_with("SMOL_PLACEHOLDER_API_") && placeholder.len() == 21 + 32,
        "{placeholder}"
    );
    let env = sh_ok(&s, &n, "env | sort");
    for want in [
        "SSL_CERT_FILE=/run/smolvm/ca-bundle.pem",
        "CURL_CA_BUNDLE=/run/smolvm/ca-bundle.pem",
        "NODE_EXTRA_CA_CERTS=/run/smol/credentials/ca.pem",
    ] {
        assert!(env.contains(want), "{want}: {env}");
    }
    let ca_text = sh_ok(
        &s,
        &n,
        "ls /run/smol/credentials; openssl x509 -in /run/smol/credentials/ca.pem -noout -subject -ext nameConstraints",
    );
    assert!(
        ca_text.starts_with("ca.pem\n")
            && ca_text.contains(&format!("smolvm {n} credential CA"))
            && ca_text.contains("DNS:api.cred.test"),
        "{ca_text}"
    );
    let ok = sh_ok(
        &s,
        &n,
        "curl -sS -m 10 https://api.cred.test/v1/messages -H \"Authorization: Bearer $API_KEY\" -d '{}'",
    );
    assert_eq!(ok, "{\"ok\":true}");
    let seen = server.seen();
    assert!(
        seen.contains(&format!("Authorization: Bearer {KEY}")),
        "{seen}"
    );
    assert!(!seen.contains("SMOL_PLACEHOLDER_"), "{seen}");
    for (curl, want) in [
        (
            "\"https://api.cred.test/x?k=$API_KEY\"",
            "403 placeholders are substituted in request headers only",
        ),
        (
            "https://api.cred.test/x -d \"k=$API_KEY\"",
            "403 placeholders are substituted in request headers only",
        ),
        (
            "https://api.cred.test/x -H \"a: $API_KEY\" -H \"b: $API_KEY\"",
            "403 a request may carry one placeholder",
        ),
        (
            "https://api.cred.test/x -H \"Cookie: a=$API_KEY\"",
            "403 placeholders are not substituted in routing or framing headers",
        ),
        (
            "https://api.cred.test/x -H \"a: SMOL_PLACEHOLDER_API_00\"",
            "403 unknown placeholder",
        ),
        (
            "-X TRACE https://api.cred.test/x -H \"a: $API_KEY\"",
            "405 this credential is not allowed for this method",
        ),
        (
            "https://api.cred.test/ws -H 'Upgrade: websocket' -H 'Connection: Upgrade'",
            "403 WebSocket upgrades are refused on credential hosts",
        ),
    ] {
        let script = format!(
            "curl -sS -m 10 -w ' %{{http_code}}' -o /tmp/body {curl}; printf ' '; cat /tmp/body"
        );
        let got = sh_ok(&s, &n, &script);
        let (code, reason) = want.split_once(' ').unwrap();
        assert!(
            got.starts_with(&format!(" {code} smolvm credentials: {reason}")),
            "{curl}: {got}"
        );
    }
    // Another name on the same address is relayed untouched: the real certificate, and a
    // placeholder there is only a string.
    let other = s.sh(
        &n,
        "curl -sS -m 10 -k -v https://other.cred.test/p -H \"x-api-key: $API_KEY\" 2>&1",
    );
    assert!(
        other.stdout.contains("smolvm-sim contract test CA")
            && !other.stdout.contains("credential CA"),
        "{other:?}"
    );
    assert!(server.seen().contains(&format!("x-api-key: {placeholder}")));
    // The value is nowhere in the guest nor in what the simulator keeps.
    // (The pattern is built in the guest: the key itself must not ride on exec's argv.)
    let (head, tail) = KEY.split_at(6);
    let found = s.sh(
        &n,
        &format!("grep -rlF \"$(printf %s {head} {tail})\" /proc/[0-9]*/environ /tmp /root /run 2>/dev/null"),
    );
    assert!(found.stdout.trim().is_empty(), "{found:?}");
    let on_disk = Command::new("grep")
        .args(["-rl", KEY])
        .arg(s.home())
        .output()
        .unwrap();
    assert!(
        on_disk.stdout.is_empty(),
        "{}",
        String::from_utf8_lossy(&on_disk.stdout)
    );
    // A start without the variable: substitution fails closed with smolvm's 502.
    s.ok(&["machine", "stop", "--name", &n]);
    s.start(&n);
    let again = sh_ok(&s, &n, "printf %s \"$API_KEY\"");
    assert_eq!(
        again, placeholder,
        "placeholders are stable for the machine's life"
    );
    let unavailable = sh_ok(
        &s,
        &n,
        "curl -sS -m 10 -w ' %{http_code}' https://api.cred.test/v1 -H \"x-api-key: $API_KEY\"",
    );
    assert_eq!(
        unavailable,
        "smolvm credentials: credential unavailable\n 502"
    );
}
