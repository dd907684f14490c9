//! Backups live in one known place (issue 31): `box save` from two directories makes one
//! chain in the user's data directory, `box rm`, `box backups` and `box extract` from a
//! third find it; backups an older box wrote into `./backups` of where it ran are found
//! from there and said once, and the box's record remembers them from then on. A relative
//! `BACKUP_DIR` in a box.env is taken beside that file; one in the environment is refused.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod backup_support;
mod save_load_support;

use std::fs;
use std::path::{Path, PathBuf};

use box_host::state::Registry;
use box_proto::BoxName;
use save_load_support::{Run, World, prerequisites, serial};

const PROJ: &str = "/data/home/agent/workspace/proj";

/// The backup files of `alpha` in `dir`, sorted (none when `dir` does not exist).
fn backups_in(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = fs::read_dir(dir)
        .map(|rd| rd.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    v.retain(|p| {
        let n = p.file_name().unwrap().to_string_lossy();
        n.starts_with("alpha-") && n.ends_with(".tar.zst.gpg")
    });
    v.sort();
    v
}

/// `box save alpha` from `cwd`: must succeed and say `words`; waits past the second
/// (backups are named by it).
fn save_from(w: &World, cwd: &Path, words: &str) -> Run {
    let r = w.run_in(cwd, &["save", "alpha"], &[("BOX_PART_SIZE", "1048576")]);
    assert!(r.ok(), "box save from {}: {}", cwd.display(), r.all());
    assert!(r.stdout.contains(words), "{words:?} in {}", r.all());
    std::thread::sleep(std::time::Duration::from_millis(1100));
    r
}

fn remembered(w: &World) -> Option<PathBuf> {
    Registry::new(&w.state())
        .get(&BoxName::parse("alpha").unwrap())
        .unwrap()
        .unwrap()
        .backup_dir
}

/// The whole path: a pristine-config user (no BACKUP_DIR) who `cd`s around.
#[test]
fn one_chain_from_any_directory_and_the_old_backups_dir_still_found() {
    if !prerequisites() {
        return;
    }
    let _serial = serial();
    let w = World::new();
    // The user's config says nothing of BACKUP_DIR: backups go to the data dir.
    let config = fs::read_to_string(w.config()).unwrap();
    let config: String = config
        .lines()
        .filter(|l| !l.starts_with("BACKUP_DIR="))
        .map(|l| format!("{l}\n"))
        .collect();
    fs::write(w.config(), config).unwrap();
    let data_dir = w.data_home().join("hermes-box/backups");
    let dirs: Vec<PathBuf> = ["a", "b", "c", "d", "e"]
        .iter()
        .map(|d| w.dir.path().join(d))
        .collect();
    for d in &dirs {
        fs::create_dir(d).unwrap();
    }
    let [a, b, c, d, e] = [&dirs[0], &dirs[1], &dirs[2], &dirs[3], &dirs[4]];

    let new = w.run_in(a, &["new", "alpha"], &[]);
    assert!(new.ok(), "box new alpha: {}", new.all());
    w.sh(
        "alpha",
        &format!(
            "mkdir -p {PROJ} && printf 'v1\\n' > {PROJ}/notes.txt && chown -R agent:agent /data/home/agent/workspace"
        ),
    );

    // Two directories, one chain, in the one known place.
    save_from(&w, a, "(full: starts a chain)");
    w.sh("alpha", &format!("printf 'v2\\n' > {PROJ}/notes.txt"));
    let second = save_from(&w, b, "(incremental: link 2 of its chain)");
    let chain = backups_in(&data_dir);
    assert_eq!(
        chain.len(),
        2,
        "both saves in {}: {chain:?}",
        data_dir.display()
    );
    assert!(
        second.stdout.contains(&chain[1].display().to_string()),
        "{}",
        second.all()
    );
    for cwd in [a, b] {
        assert!(
            !cwd.join("backups").exists(),
            "a backups/ in {}",
            cwd.display()
        );
    }
    assert_eq!(remembered(&w).as_deref(), Some(data_dir.as_path()));

    // A third directory lists them, as one chain, saying where they are.
    let listed = w.run_in(c, &["backups", "alpha"], &[]);
    assert!(listed.ok(), "{}", listed.all());
    assert!(
        listed
            .stdout
            .contains(&format!("Backups in {}", data_dir.display()))
            && listed.stdout.contains("2 backup(s)"),
        "{}",
        listed.all()
    );

    // Backups an older box wrote into ./backups of where it ran, with a record from before
    // records remembered: found from there, said once, and the chain goes on there.
    let old_dir = d.join("backups");
    fs::create_dir(&old_dir).unwrap();
    for f in &chain {
        fs::rename(f, old_dir.join(f.file_name().unwrap())).unwrap();
    }
    let reg = Registry::new(&w.state());
    let mut record = reg.get(&BoxName::parse("alpha").unwrap()).unwrap().unwrap();
    record.backup_dir = None;
    reg.update(&record).unwrap();
    w.sh("alpha", &format!("printf 'v3\\n' > {PROJ}/notes.txt"));
    let third = save_from(&w, d, "(incremental: link 3 of its chain)");
    let said = format!("found backups of 'alpha' in {}", old_dir.display());
    assert_eq!(third.all().matches(&said).count(), 1, "{}", third.all());
    assert!(
        third
            .all()
            .contains(&format!("mv -n {}/alpha-*.gpg", old_dir.display())),
        "how to move them: {}",
        third.all()
    );
    let old_chain = backups_in(&old_dir);
    assert_eq!(old_chain.len(), 3, "{old_chain:?}");
    assert!(backups_in(&data_dir).is_empty());
    assert_eq!(remembered(&w).as_deref(), Some(old_dir.as_path()));

    // From a third directory: extract finds the newest by its bare name, with its chain,
    // into the current directory.
    let newest = old_chain[2].file_name().unwrap().to_str().unwrap();
    let ex = w.run_in(c, &["extract", newest], &[]);
    assert!(ex.ok(), "box extract {newest}: {}", ex.all());
    assert!(ex.all().contains("link 3 of a chain"), "{}", ex.all());
    let extracted = c.join(newest.replace(".tar.zst.gpg", "-extracted"));
    assert_eq!(
        fs::read_to_string(extracted.join("home/agent/workspace/proj/notes.txt")).unwrap(),
        "v3\n"
    );

    // box rm from yet another directory checks that newest backup and its chain.
    let rm = w.run_in(e, &["rm", "alpha", "--force"], &[]);
    assert!(rm.ok(), "{}", rm.all());
    for words in [
        format!("latest backup: {}", old_chain[2].display()),
        "link 3 of a chain; every link is there".to_string(),
    ] {
        assert!(rm.all().contains(&words), "{words:?} in {}", rm.all());
    }
    assert!(!rm.all().contains("no backup found"), "{}", rm.all());
    for cwd in [c, e] {
        assert!(
            !cwd.join("backups").exists(),
            "a backups/ in {}",
            cwd.display()
        );
    }
    w.assert_no_plaintext(&[]);
    w.scan_secrets();
}

/// `box` in a clean environment from `cwd`, no VM: `box backups` says where it looks.
fn backups_cmd(home: &Path, cwd: &Path, env: &[(&str, &str)]) -> std::process::Output {
    let mut cmd = backup_support::box_cmd(home);
    cmd.current_dir(cwd)
        .env("XDG_DATA_HOME", home.join("data"))
        .env("BOX_PASSPHRASE", "unused")
        .arg("backups");
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().unwrap()
}

/// BACKUP_DIR's rules, as `box backups` shows them from a directory elsewhere: unset is
/// the data dir; relative in a box.env is beside the file; relative in the environment,
/// or with a `~`, is refused saying what to write instead.
#[test]
fn backup_dir_is_resolved_the_same_from_anywhere() {
    let t = tempfile::tempdir().unwrap();
    let (home, cfg_dir, elsewhere) = (t.path(), t.path().join("cfg"), t.path().join("elsewhere"));
    fs::create_dir_all(&cfg_dir).unwrap();
    fs::create_dir_all(&elsewhere).unwrap();
    let stdout = |o: &std::process::Output| String::from_utf8_lossy(&o.stdout).into_owned();
    let stderr = |o: &std::process::Output| String::from_utf8_lossy(&o.stderr).into_owned();

    let out = backups_cmd(home, &elsewhere, &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    let data = home.join("data/hermes-box/backups");
    assert_eq!(
        stdout(&out).trim(),
        format!("No backups in {}", data.display())
    );

    let config = cfg_dir.join("box.env");
    fs::write(&config, "BACKUP_DIR=bk\n").unwrap();
    let with_config = [("BOX_CONFIG", config.to_str().unwrap())];
    let out = backups_cmd(home, &elsewhere, &with_config);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        stdout(&out).trim(),
        format!("No backups in {}", cfg_dir.join("bk").display())
    );

    let out = backups_cmd(home, &elsewhere, &[("BACKUP_DIR", "bk")]);
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    for words in ["BACKUP_DIR=bk", "in the environment", "relative", "$PWD/bk"] {
        assert!(err.contains(words), "{words:?} in {err}");
    }
    assert!(!elsewhere.join("bk").exists());

    fs::write(&config, "BACKUP_DIR=~/bk\n").unwrap();
    let out = backups_cmd(home, &elsewhere, &with_config);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("does not expand ~") && stderr(&out).contains("box.env"),
        "{}",
        stderr(&out)
    );
}
