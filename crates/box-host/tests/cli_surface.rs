//! The `box` command line as a user meets it: help, completions, man page, config errors.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::{Command, Output};

fn box_cmd(home: &Path) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_box"));
    cmd.env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", home)
        .env("XDG_CONFIG_HOME", home.join("config"))
        .env("BOX_HOME", home.join("state"))
        // No smolvm may be reached from these tests: a config problem must be reported
        // before anything is spawned.
        .env("SMOLVM", home.join("no-such-smolvm"));
    cmd
}

/// Every visible verb of `box`.
const VERBS: [&str; 16] = [
    "new",
    "enter",
    "ls",
    "open",
    "doctor",
    "repair",
    "stop",
    "start",
    "save",
    "load",
    "clone",
    "backups",
    "extract",
    "rm",
    "completions",
    "man",
];

fn text(out: &[u8]) -> String {
    String::from_utf8_lossy(out).into_owned()
}

fn run(cmd: &mut Command) -> Output {
    cmd.output().expect("box runs")
}

#[test]
fn help_lists_every_verb_with_a_one_line_summary() {
    let tmp = tempfile::tempdir().unwrap();
    let out = run(box_cmd(tmp.path()).arg("--help"));
    assert!(out.status.success());
    let help = text(&out.stdout);
    for verb in VERBS {
        let line = help
            .lines()
            .find(|l| l.trim_start().starts_with(&format!("{verb} ")))
            .unwrap_or_else(|| panic!("{verb} not listed in:\n{help}"));
        assert!(line.split_whitespace().count() > 2, "no summary: {line}");
    }
    for flag in ["--verbose", "--quiet", "--config"] {
        assert!(help.contains(flag), "{flag} missing");
    }
}

#[test]
fn every_verb_has_an_example_in_its_long_help() {
    let tmp = tempfile::tempdir().unwrap();
    for verb in VERBS {
        let out = run(box_cmd(tmp.path()).args([verb, "--help"]));
        assert!(out.status.success(), "{verb}");
        let help = text(&out.stdout);
        assert!(
            help.contains("Example") && help.contains(&format!("box {verb}")),
            "{verb} help has no example:\n{help}"
        );
    }
}

#[test]
fn usage_errors_exit_2() {
    let tmp = tempfile::tempdir().unwrap();
    for argv in [&["new"][..], &["ls", "--bogus"], &["frobnicate"], &["rm"]] {
        let out = run(box_cmd(tmp.path()).args(argv));
        assert_eq!(
            out.status.code(),
            Some(2),
            "{argv:?}: {}",
            text(&out.stderr)
        );
    }
}

#[test]
fn version_names_the_commit() {
    let tmp = tempfile::tempdir().unwrap();
    let out = run(box_cmd(tmp.path()).arg("--version"));
    let v = text(&out.stdout);
    assert!(
        v.starts_with(&format!("box {} (", env!("CARGO_PKG_VERSION"))),
        "{v}"
    );
}

#[test]
fn completions_for_each_shell_mention_the_verbs() {
    let tmp = tempfile::tempdir().unwrap();
    for shell in ["bash", "zsh", "fish", "elvish", "powershell"] {
        let out = run(box_cmd(tmp.path()).args(["completions", shell]));
        assert!(out.status.success(), "{shell}");
        let script = text(&out.stdout);
        for verb in ["extract", "doctor", "keep-on-failure"] {
            assert!(script.contains(verb), "{shell} completion lacks {verb}");
        }
    }
}

#[test]
fn man_page_is_roff_covering_every_verb() {
    let tmp = tempfile::tempdir().unwrap();
    let out = run(box_cmd(tmp.path()).arg("man"));
    assert!(out.status.success());
    let page = text(&out.stdout);
    assert!(
        page.starts_with(".ie") || page.starts_with(".TH"),
        "{}",
        &page[..40.min(page.len())]
    );
    assert!(page.contains(".TH box 1"), "no box(1) title");
    for verb in ["new", "save", "load", "rm"] {
        assert!(
            page.contains(&format!(".TH box-{verb} 1")),
            "no box-{verb}(1)"
        );
    }
}

fn write(path: &Path, body: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, body).unwrap();
}

/// A config error names the file, the line and the key, exits 1, and nothing is spawned
/// (SMOLVM points at a file that does not exist, so any later step would fail differently).
#[test]
fn config_errors_name_file_line_and_key() {
    let tmp = tempfile::tempdir().unwrap();
    let cases = [
        (
            "EXECUTOR_PORT=4788\nEGRES=allowlist\n",
            2,
            "EGRES: unknown key; did you mean EGRESS?",
        ),
        (
            "INSTALL_HERMES=perhaps\n",
            1,
            "INSTALL_HERMES: 'perhaps' is not a boolean",
        ),
        (
            "\n\nEXECUTOR_PORT=65536\n",
            3,
            "EXECUTOR_PORT: port 65536 is outside 1-65535",
        ),
        (
            "EXECUTOR_PORT_LO=4999\nEXECUTOR_PORT_HI=4790\n",
            0,
            "EXECUTOR_PORT_LO: the web port range 4999-4790 is empty",
        ),
    ];
    for (body, line, problem) in cases {
        let file = tmp.path().join("bad.env");
        write(&file, body);
        let out = run(box_cmd(tmp.path()).args(["--config"]).arg(&file).arg("ls"));
        assert_eq!(out.status.code(), Some(1));
        let err = text(&out.stderr);
        let expected = format!("{}:{line}: {problem}", file.display());
        assert!(err.contains(&expected), "want {expected:?} in {err:?}");
    }
}

#[test]
fn config_is_found_via_flag_then_box_config_then_user_dir() {
    let tmp = tempfile::tempdir().unwrap();
    let flag_file = tmp.path().join("flag.env");
    let env_file = tmp.path().join("env.env");
    let user_file = tmp.path().join("config/hermes-box/box.env");
    write(&flag_file, "FLAG_BAD=1\n");
    write(&env_file, "ENV_BAD=1\n");
    write(&user_file, "USER_BAD=1\n");

    let err = |cmd: &mut Command| text(&run(cmd).stderr);
    let e = err(box_cmd(tmp.path())
        .env("BOX_CONFIG", &env_file)
        .arg("--config")
        .arg(&flag_file)
        .arg("ls"));
    assert!(e.contains("FLAG_BAD"), "{e}");
    let e = err(box_cmd(tmp.path()).env("BOX_CONFIG", &env_file).arg("ls"));
    assert!(e.contains("ENV_BAD"), "{e}");
    let e = err(box_cmd(tmp.path()).arg("ls"));
    assert!(
        e.contains("USER_BAD") && e.contains(&user_file.display().to_string()),
        "{e}"
    );

    // A named file must exist; the user config file is optional.
    let missing = tmp.path().join("missing.env");
    let e = err(box_cmd(tmp.path()).arg("--config").arg(&missing).arg("ls"));
    assert!(
        e.contains("cannot read config file") && e.contains("missing.env"),
        "{e}"
    );
    std::fs::remove_file(&user_file).unwrap();
    let e = err(box_cmd(tmp.path()).arg("ls"));
    assert!(!e.contains("config"), "defaults must load silently: {e}");
}

#[test]
fn environment_overrides_the_file_and_is_validated_too() {
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("box.env");
    write(&file, "EXECUTOR_PORT=4000\n");
    let out = run(box_cmd(tmp.path())
        .env("EXECUTOR_PORT", "0")
        .arg("--config")
        .arg(&file)
        .arg("ls"));
    let e = text(&out.stderr);
    assert!(
        e.contains("environment: EXECUTOR_PORT: port 0 is outside 1-65535"),
        "{e}"
    );
}

/// A box.env written for the original tool (which `source`d it) works with `--config`:
/// quoted values with comments after them, `""` for "the default", `$HOME` expanded, and
/// the keys box does not read named in one warning, not refused.
#[test]
fn an_original_tool_box_env_works_with_a_warning() {
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("tx9.env");
    write(
        &file,
        "# Sourced by ./box.\nBASE_IMAGE=\"ubuntu:24.04\"\nBOX_CPUS=\"4\"\nBOX_OVERLAY_GIB=\"64\"\n\
         CODEX_VERSION=\"\"         # empty = latest\n\
         \x20                         # a continued comment\n\
         EXECUTOR_PORT=\"4788\"          # inside the box\nEXPOSE_HERMES_API=0\n\
         BACKUP_DIR=\"${HOME}/old box backups\"\n",
    );
    let out = run(box_cmd(tmp.path())
        .env("HOME", tmp.path())
        .arg("--config")
        .arg(&file)
        .arg("backups"));
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{stdout}{stderr}");
    assert!(
        stderr.contains(&format!(
            "{}: box does not read BOX_OVERLAY_GIB (line 4), EXPOSE_HERMES_API (line 8); ignored",
            file.display()
        )),
        "{stderr}"
    );
    assert_eq!(stderr.matches("does not read").count(), 1, "{stderr}");
    assert!(
        stdout.contains(&format!("{}/old box backups", tmp.path().display())),
        "BACKUP_DIR's ${{HOME}} was not expanded: {stdout}"
    );
}
