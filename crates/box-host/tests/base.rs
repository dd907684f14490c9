//! Bases end to end (issue 15): `box base build|ls|rm`, `box new`/`box load` from a base,
//! nothing secret in a base, a pack that fails to extract, concurrent builds. The real
//! `box`, `hb` and smolvm simulator (real `pack create --from-vm` / `create --from`), on both
//! personalities.
//!
//! Fast-test shortcut, named: these guests run on the host's userland with the local tool
//! prefix (lifecycle_support's World). `base_pristine.rs` takes the user's path.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod lifecycle_support;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use lifecycle_support::World;

const PASSPHRASE: &str = "base-test passphrase 7f3e9c1d";
/// The builder runs behind a proxy with credentials (PROPAGATE_PROXY's default): they are
/// the builder's, never the base's.
const PROXY_PASSWORD: &str = "proxy-pw-4b1d9e";

/// The one base in the world's store: (digest, pack path).
fn only_base(w: &mut World) -> (String, PathBuf) {
    let ls = w.run(&["base", "ls", "--json"]);
    assert!(ls.ok(), "{ls}");
    let v: serde_json::Value = serde_json::from_str(&ls.stdout).unwrap();
    let bases = v.as_array().unwrap();
    assert_eq!(bases.len(), 1, "{ls}");
    let digest = bases[0]["key"].as_str().unwrap().to_string();
    assert!(bases[0]["size_bytes"].as_u64().unwrap() > 0, "{ls}");
    assert!(
        bases[0]["tools"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t.as_str().unwrap().starts_with("node=")),
        "tool versions recorded: {ls}"
    );
    let pack = w.home.join("bases").join(format!("{digest}.smolmachine"));
    assert!(pack.is_file());
    (digest, pack)
}

/// The box's Executor token, as `hb token` prints it in the guest.
fn executor_secrets(w: &World, machine: &str) -> Vec<String> {
    let out = w.hb(machine, &["token"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let token = String::from_utf8_lossy(&out.stdout).trim().to_string();
    assert!(
        token.len() >= 16,
        "implausible token length {}",
        token.len()
    );
    vec![token]
}

/// Unpacks a pack (smolvm-sim's format, as smolvm's: zstd-compressed tar assets, the
/// manifest, a footer naming the assets' size) and scans every file for the secrets and
/// for agent credential and per-box files; the manifest and footer are scanned as bytes.
fn assert_nothing_secret_in(pack: &Path, secrets: &[String]) {
    let raw = std::fs::read(pack).unwrap();
    let footer = String::from_utf8_lossy(&raw[raw.len() - 512..]).to_string();
    let assets: usize = footer
        .split_whitespace()
        .find_map(|w| w.strip_prefix("assets_size="))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no assets_size in the footer {footer:?}"));
    for s in secrets {
        assert!(
            !raw[assets..].windows(s.len()).any(|w| w == s.as_bytes()),
            "a secret is in the pack's manifest or footer"
        );
    }
    let dir = tempfile::tempdir().unwrap();
    let st = std::process::Command::new("sh")
        .args([
            "-c",
            "head -c \"$1\" \"$2\" | zstd -dqc | tar -xf - -C \"$3\"",
            "sh",
        ])
        .arg(assets.to_string())
        .arg(pack)
        .arg(dir.path())
        .status()
        .unwrap();
    assert!(st.success(), "the pack unpacks");
    let mut files = 0;
    let mut stack = vec![dir.path().to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            let t = e.file_type().unwrap();
            if t.is_dir() {
                stack.push(p);
                continue;
            }
            let name = p.file_name().unwrap().to_string_lossy().to_string();
            for bad in [
                "auth.json",
                ".credentials.json",
                ".claude.json",
                "runtime-manifest",
                "proxy.env",
                ".executor",
            ] {
                assert_ne!(name, bad, "{} is in the base", p.display());
            }
            let rel = p
                .strip_prefix(dir.path())
                .unwrap()
                .to_string_lossy()
                .to_string();
            if rel.contains("data/home/agent/") {
                let skel = Path::new("/etc/skel").join(&name);
                assert!(
                    skel.is_file() && std::fs::read(&skel).ok() == std::fs::read(&p).ok(),
                    "agent file {rel} in the base (only /etc/skel copies may be)"
                );
            }
            if t.is_file() {
                files += 1;
                let bytes = std::fs::read(&p).unwrap();
                for s in secrets {
                    assert!(
                        !bytes.windows(s.len()).any(|w| w == s.as_bytes()),
                        "a secret is in {rel}"
                    );
                }
            }
        }
    }
    assert!(files > 10, "the scan saw the pack's files ({files})");
}

fn seconds_in(out: &str, prefix: &str) -> f64 {
    let at = out
        .find(prefix)
        .unwrap_or_else(|| panic!("no {prefix:?} in {out}"));
    out[at + prefix.len()..]
        .split_whitespace()
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap()
}

fn base_flow(version: &str) {
    if !lifecycle_support::prerequisites() {
        return;
    }
    let mut w = World::new(version);
    let pass = w.dir.path().join("passphrase");
    std::fs::write(&pass, format!("{PASSPHRASE}\n")).unwrap();
    let pass = pass.to_str().unwrap().to_string();
    w.extra_env.push(("BOX_PASSPHRASE_FILE".into(), pass));

    // A user's box with state (a token) and a saved backup exist before the base is built.
    let alpha = w.run(&["new", "alpha"]);
    assert!(alpha.ok(), "{alpha}");
    assert!(
        alpha.stdout.contains("No base for this configuration"),
        "{alpha}"
    );
    let marker = w.write_marker("alpha");
    let save = w.run(&["save", "alpha"]);
    assert!(save.ok(), "{save}");
    let backup = std::fs::read_dir(w.dir.path().join("backups"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| p.to_string_lossy().ends_with(".tar.zst.gpg"))
        .unwrap();

    let t0 = Instant::now();
    let proxy = format!("http://builder:{PROXY_PASSWORD}@proxy.corp.example:3128");
    let build = w.run_env(
        &["base", "build"],
        &[
            ("https_proxy", proxy.as_str()),
            ("NO_PROXY", "localhost,.corp.example"),
        ],
    );
    let build_secs = t0.elapsed().as_secs_f64();
    assert!(build.ok(), "{build}");
    for step in [
        "[1/4] Starting",
        "[2/4] Provisioning",
        "[3/4] Checking",
        "[4/4] Packing",
    ] {
        assert!(build.stdout.contains(step), "progress {step:?}: {build}");
    }
    assert!(
        build.stdout.contains("npm-tools"),
        "provisioning shown: {build}"
    );
    assert!(w.called(&["pack", "create", "--from-vm"]));
    // The builder's LAN is closed where smolvm can close it (1.33), as every box's is.
    let builder_create = w
        .calls()
        .into_iter()
        .find(|c| {
            c.get(0..2) == Some(&["machine".to_string(), "create".to_string()][..])
                && !c.iter().any(|a| a == "alpha")
        })
        .expect("the builder's machine create");
    let closes = builder_create.iter().any(|a| a == "--block-private");
    assert_eq!(
        closes,
        version == "1.33.0",
        "the builder's create: {builder_create:?}"
    );
    assert_eq!(
        w.machines()
            .iter()
            .map(|(n, _)| n.as_str())
            .collect::<Vec<_>>(),
        ["alpha"],
        "the builder is gone"
    );
    let (digest, pack) = only_base(&mut w);
    let size = std::fs::metadata(&pack).unwrap().len();
    // smolvm 1.3+ extracts a pack once into its shared store at the first create --from:
    // the build pays it, so the first box from the base is as fast as the rest.
    let shared = version != "1.0.4";
    assert_eq!(
        build.stdout.contains("Warming smolvm's shared store"),
        shared,
        "{build}"
    );
    assert_eq!(
        build.stdout.contains("the first one as fast as the rest"),
        shared,
        "{build}"
    );
    let extracted = std::fs::read_dir(w.sim_home.join("vms").join("_shared"))
        .map(|d| {
            d.flatten()
                .filter(|e| e.path().join(".smolvm-extracted").exists())
                .count()
        })
        .unwrap_or(0);
    assert_eq!(
        extracted,
        usize::from(shared),
        "the store holds the base before any box"
    );
    let ls = w.run(&["base", "ls"]);
    assert_eq!(ls.stdout.contains("(warm)"), shared, "{ls}");

    let mut secrets = executor_secrets(&w, "alpha");
    secrets.push(PASSPHRASE.to_string());
    secrets.push(PROXY_PASSWORD.to_string());
    assert_nothing_secret_in(&pack, &secrets);

    // A second build finds it current.
    let again = w.run(&["base", "build"]);
    assert!(again.ok() && again.stdout.contains("is current"), "{again}");

    let t0 = Instant::now();
    let beta = w.run(&["new", "beta"]);
    let new_secs = t0.elapsed().as_secs_f64();
    assert!(beta.ok(), "{beta}");
    assert!(
        beta.stdout
            .contains(&format!("Using base {digest} (built ")),
        "{beta}"
    );
    assert!(
        beta.stdout.contains(&format!("from base {digest} (built ")),
        "{beta}"
    );
    let reported = seconds_in(&beta.stdout, "Box 'beta' built in ");
    assert!(
        !beta.stdout.contains("npm-tools") && !beta.stdout.contains("apt-packages"),
        "only per-box provisioning: {beta}"
    );
    assert!(w.called(&["machine", "create", "--name", "beta", "--from"]));
    assert_eq!(
        beta.stdout
            .contains("repaired ownership: the pack returned root's files as 501:20"),
        version == "1.0.4",
        "1.0.4 gives root's files back as the host user, box repairs them: {beta}"
    );
    assert_eq!(
        beta.stdout
            .contains("plain files under /usr and /opt stay 501:20"),
        version == "1.0.4",
        "uid 501 and gid 20 are no account's in the box: the plain tools' files stay: {beta}"
    );
    let check = w.sim(&[
        "machine",
        "exec",
        "--name",
        "beta",
        "--",
        "stat",
        "-c",
        "%U:%G %a",
        "/usr/local/bin/hb",
        "/data/home/agent",
        "/usr/bin/sudo",
        "/etc/passwd",
        "/etc/shadow",
    ]);
    // /etc/passwd and /etc/shadow changed in the builder (useradd agent), so they are in
    // the pack's layer: the files 1.0.4 re-owns.
    assert_eq!(
        String::from_utf8_lossy(&check.stdout),
        "root:root 755\nagent:agent 700\nroot:root 4755\nroot:root 644\nroot:shadow 640\n",
        "owners and set-id bits as a provisioned box has them"
    );
    // The box's own token, not the base's (a base has none) or alpha's.
    let beta_secrets = executor_secrets(&w, "beta");
    assert!(beta_secrets.iter().all(|s| !secrets.contains(s)));
    let doctor = w.run(&["doctor", "beta"]);
    assert!(doctor.ok(), "{doctor}");
    assert!(
        doctor.stdout.contains(&format!("base {digest} built")),
        "{doctor}"
    );

    // The world has two host ports: free one for each of the next boxes.
    let rm = w.run(&["rm", "alpha", "--force"]);
    assert!(rm.ok(), "{rm}");
    let t0 = Instant::now();
    let load = w.run(&["load", backup.to_str().unwrap(), "gamma"]);
    let load_secs = t0.elapsed().as_secs_f64();
    assert!(load.ok(), "{load}");
    assert!(
        load.stdout.contains(&format!("Using base {digest}")),
        "{load}"
    );
    w.assert_marker("gamma", &marker);

    let rm = w.run(&["rm", "gamma", "--force"]);
    assert!(rm.ok(), "{rm}");
    if version == "1.0.4" {
        // A host uid:gid that is an account in the box (a Linux host's 1000:1000 is the
        // agent's): every file is root's again, the plain tools' files too.
        let id = |flag: &str| {
            let o = w.sim(&[
                "machine", "exec", "--name", "beta", "--", "id", flag, "agent",
            ]);
            String::from_utf8_lossy(&o.stdout).trim().to_string()
        };
        let (uid, gid) = (id("-u"), id("-g"));
        w.extra_env
            .push(("SMOLVM_SIM_HOST_UID".into(), uid.clone()));
        w.extra_env
            .push(("SMOLVM_SIM_HOST_GID".into(), gid.clone()));
        let eps = w.run(&["new", "epsilon"]);
        w.extra_env.truncate(w.extra_env.len() - 2);
        assert!(eps.ok(), "{eps}");
        assert!(
            eps.stdout.contains(&format!(
                "repaired ownership: the pack returned root's files as {uid}:{gid} ("
            )) && !eps.stdout.contains(" stay "),
            "the agent's uid: a full repair: {eps}"
        );
        let rm = w.run(&["rm", "epsilon", "--force"]);
        assert!(rm.ok(), "{rm}");
    }

    // --fresh ignores the base.
    let fresh = w.run(&["new", "delta", "--fresh"]);
    assert!(
        fresh.ok() && fresh.stdout.contains("--fresh: provisioning from scratch"),
        "{fresh}"
    );
    assert!(!w.called(&["machine", "create", "--name", "delta", "--from"]));

    eprintln!(
        "BENCH base ({version}, host-userland shortcut): build {build_secs:.1} s, size {:.1} MiB, \
         new from base {new_secs:.1} s (box says {reported:.1} s), load from base {load_secs:.1} s",
        size as f64 / 1048576.0
    );
    let rm = w.run(&["base", "rm", &digest]);
    assert!(rm.ok(), "{rm}");
    let ls = w.run(&["base", "ls"]);
    assert!(ls.stdout.contains("No bases"), "{ls}");
    assert!(!pack.exists());
    assert!(!w.transcript.contains(PASSPHRASE));
    for s in &secrets {
        assert!(
            !w.transcript.contains(s.as_str()),
            "a secret in box's output"
        );
    }
}

#[test]
fn base_build_new_and_load_from_base_1_0_4() {
    base_flow("1.0.4");
}

#[test]
fn base_build_new_and_load_from_base_1_9_2() {
    base_flow("1.9.2");
}

/// smolvm 1.33 closes the LAN: the builder's and each box's from the base.
#[test]
fn base_build_new_and_load_from_base_1_33() {
    base_flow("1.33.0");
}

#[test]
fn a_base_that_fails_to_extract_leaves_no_box() {
    if !lifecycle_support::prerequisites() {
        return;
    }
    let mut w = World::new("1.0.4");
    let build = w.run(&["base", "build"]);
    assert!(build.ok(), "{build}");
    let (digest, pack) = only_base(&mut w);
    // Damage the middle of the pack: its manifest still reads, its extraction fails.
    let mut bytes = std::fs::read(&pack).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid..mid + 4096].fill(0x5a);
    std::fs::write(&pack, &bytes).unwrap();
    let new = w.run(&["new", "beta"]);
    assert!(!new.ok(), "{new}");
    let all = new.all();
    assert!(
        all.contains("extract sidecar"),
        "smolvm's own reason: {all}"
    );
    assert!(
        all.contains(&format!("box base rm {digest}")),
        "the way out: {all}"
    );
    assert!(
        w.machines().is_empty(),
        "no machine left: {:?}",
        w.machines()
    );
    assert!(!w.row_exists("beta"));
    w.assert_no_locks("beta");
}

#[test]
fn concurrent_builds_build_one_base_and_new_never_uses_one_being_built() {
    if !lifecycle_support::prerequisites() {
        return;
    }
    let mut w = World::new("1.9.2");
    let a = w.spawn(&["base", "build"], &[]);
    let b = w.spawn(&["base", "build"], &[]);
    // While the builder provisions, a `box new` sees no base yet.
    w.wait_for_call("create --name box-base-", Duration::from_secs(60));
    let early = w.run(&["new", "early"]);
    let a = w.collect(a, "box base build (a)");
    let b = w.collect(b, "box base build (b)");
    assert!(a.ok(), "{a}");
    assert!(b.ok(), "{b}");
    let packs = w
        .calls()
        .iter()
        .filter(|c| c.first().is_some_and(|v| v == "pack"))
        .count();
    assert_eq!(packs, 1, "two builds at once pack one base");
    assert!(
        a.stdout.contains("is current") != b.stdout.contains("is current"),
        "one built, the other waited and reused it:\n{a}\n{b}"
    );
    assert!(early.ok(), "{early}");
    if !w.called(&["machine", "create", "--name", "early", "--from"]) {
        assert!(early.stdout.contains("No base"), "{early}");
    }
    only_base(&mut w);
}
