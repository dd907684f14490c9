//! `box backups check [BOX] [--all] [--read-data] [--json]` and what `box save --check`
//! runs after a save: whether each backup still restores, reported per backup (the engine
//! is `backup::check`). Only reads: the backup directory is never written.
//!
//! Exit status: 0 when everything checked is sound, [`NOT_SOUND`] when something is
//! damaged or missing, 1 when the check itself could not run.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Result, bail};
use box_proto::BoxName;
use secrecy::SecretString;

use super::Context;
use crate::backup::check::{self, BoxCheck, Depth, Input, Passphrase, Verdict};
use crate::backup::location::files_by_box;
use crate::backup::tree_cache::Known;
use crate::backup::{chain, location, passphrase};
use crate::cli::CheckArgs;
use crate::state::{LockKey, locks};
use crate::ui;

/// The exit status of a check that found damage or a missing link: a script tells it from
/// a check that could not run (1).
pub const NOT_SOUND: u8 = 3;

pub fn run(ctx: &Context, args: &CheckArgs) -> Result<ExitCode> {
    let only = if args.all { None } else { args.name.as_deref() };
    let places = location::places_of(&ctx.config, &ctx.state, only)?;
    let boxes = files_by_box(&places, only)?;
    if boxes.is_empty() {
        let dirs: Vec<String> = places.iter().map(|p| p.dir.display().to_string()).collect();
        match only {
            Some(name) => bail!(
                "no backups of '{name}' in {}: nothing to check",
                dirs.join(", ")
            ),
            None => {
                println!("No backups in {}", dirs.join(", "));
                return Ok(ExitCode::SUCCESS);
            }
        }
    }
    let depth = if args.read_data {
        Depth::ReadData
    } else {
        Depth::Metadata
    };
    let ask = || passphrase::resolve(passphrase::Purpose::Decrypt);
    let pass = Passphrase::asking(&ask);
    let mut checks = Vec::new();
    for (name, paths) in boxes {
        // No save or prune of this box may change its files or its record while they are
        // read (a file pruned mid-check would read as lost).
        let box_name = BoxName::parse(&name).ok();
        let _lock = match &box_name {
            Some(b) => Some(locks::try_acquire(
                &ctx.state,
                LockKey::Box(b.clone()),
                &format!("box backups check {name}"),
            )?),
            None => None,
        };
        let recorded = box_name
            .as_ref()
            .map(|b| Known::recorded(&ctx.state, b))
            .unwrap_or_default();
        for (dir, files) in by_dir(paths) {
            if !args.json {
                ui::say(format!(
                    "Checking {} backup(s) of {name} in {}{}",
                    files.len(),
                    dir.display(),
                    if args.read_data {
                        ", reading every byte"
                    } else {
                        ""
                    }
                ));
            }
            let input = Input {
                name: &name,
                dir,
                files,
                recorded: recorded.clone(),
            };
            checks.push(check::check_box(input, depth, &pass)?);
        }
    }
    report(&checks, args.json)
}

/// `box save --check`: the chain the save of `name` just extended to `published`, as
/// `box backups check` checks it without `--read-data` (the files the save recorded).
pub fn after_save(
    ctx: &Context,
    name: &BoxName,
    published: &Path,
    pass: &SecretString,
) -> Result<ExitCode> {
    let dir = chain::dir_of(published);
    let recorded = Known::recorded(&ctx.state, name);
    let mut files: Vec<PathBuf> = recorded
        .iter()
        .map(|r| r.path.clone())
        .filter(|p| chain::dir_of(p) == dir && p.exists())
        .collect();
    if !files.iter().any(|p| p == published) {
        files.push(published.to_path_buf());
    }
    ui::say(format!(
        "Checking the chain of {} ({} file(s), against what the saves recorded)",
        file_name(published),
        files.len()
    ));
    let input = Input {
        name: name.as_str(),
        dir,
        files,
        recorded,
    };
    let checked = check::check_box(input, Depth::Metadata, &Passphrase::given(pass))?;
    let code = report(std::slice::from_ref(&checked), false)?;
    if !checked.sound() {
        ui::error(format!(
            "box save --check: the chain of {} is not sound (above); the new backup is saved and stays",
            published.display()
        ));
    }
    Ok(code)
}

/// Prints the report of `checks` and gives the exit status it calls for.
fn report(checks: &[BoxCheck], json: bool) -> Result<ExitCode> {
    if json {
        println!("{}", serde_json::to_string_pretty(&json_report(checks))?);
    } else {
        print!("{}", human_report(checks));
    }
    Ok(if checks.iter().all(BoxCheck::sound) {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(NOT_SOUND)
    })
}

/// A box's files by the directory they are in, each directory's in name order.
fn by_dir(paths: Vec<PathBuf>) -> Vec<(PathBuf, Vec<PathBuf>)> {
    let mut out: Vec<(PathBuf, Vec<PathBuf>)> = Vec::new();
    for path in paths {
        let dir = chain::dir_of(&path);
        match out.iter_mut().find(|(d, _)| *d == dir) {
            Some((_, files)) => files.push(path),
            None => out.push((dir, vec![path])),
        }
    }
    for (_, files) in &mut out {
        files.sort();
    }
    out
}

fn file_name(p: &Path) -> String {
    p.file_name().map_or_else(
        || p.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    )
}

/// `link 2 of its chain` (1 is the full backup), from a 0-based place; `whose` is `its`,
/// `the` or `a`.
fn link_words(link: Option<u32>, whose: &str) -> String {
    match link {
        Some(0) => format!("the full backup of {whose} chain"),
        Some(n) => format!("link {} of {whose} chain", u64::from(n) + 1),
        None => "a backup outside chains".into(),
    }
}

/// What is wrong with a backup, in a sentence.
fn verdict_words(c: &BoxCheck, i: usize) -> String {
    match &c.verdicts[i] {
        Verdict::Sound => String::new(),
        Verdict::Damaged { file, what } if *file == c.files[i].path => what.clone(),
        // What is wrong with that file is said on its own line (and in --json's `what`).
        Verdict::Damaged { file, .. } => {
            format!("stands on {}, which is damaged", file_name(file))
        }
        Verdict::Incomplete { missing } => {
            let m = &c.missing[*missing];
            format!(
                "stands on {}, which is missing ({})",
                link_words(m.link, "the"),
                missing_name(m)
            )
        }
    }
}

/// A missing link's file name when a save recorded it, and its digest.
fn missing_name(m: &check::MissingLink) -> String {
    match &m.was {
        Some(was) => format!(
            "{}, SHA-256 {}",
            file_name(was),
            check::short_sha(&m.digest)
        ),
        None => format!("SHA-256 {}", check::short_sha(&m.digest)),
    }
}

fn status(v: &Verdict) -> &'static str {
    match v {
        Verdict::Sound => "sound",
        Verdict::Damaged { .. } => "damaged",
        Verdict::Incomplete { .. } => "incomplete",
    }
}

/// (sound, damaged, incomplete) backups, and missing links.
fn counts(checks: &[BoxCheck]) -> (usize, usize, usize, usize) {
    let count = |s: &str| {
        checks
            .iter()
            .flat_map(|c| &c.verdicts)
            .filter(|v| status(v) == s)
            .count()
    };
    let missing = checks.iter().map(|c| c.missing.len()).sum();
    (
        count("sound"),
        count("damaged"),
        count("incomplete"),
        missing,
    )
}

/// The report for a person: per box and directory, a line per backup (oldest first) with
/// what was found, then each missing link and what it takes down, then the totals.
pub fn human_report(checks: &[BoxCheck]) -> String {
    let mut out = String::new();
    for c in checks {
        out.push_str(&format!(
            "{} in {} ({}):\n",
            c.name,
            c.dir.display(),
            match c.depth {
                Depth::Metadata => "each file hashed and compared with what its save recorded",
                Depth::ReadData => "every file decrypted, every chain validated as box load would",
            }
        ));
        for (i, f) in c.files.iter().enumerate() {
            let place = link_words(f.place.map(|p| p.link), "its");
            let why = verdict_words(c, i);
            out.push_str(&format!(
                "  {:<10}  {}  {place}{}\n",
                status(&c.verdicts[i]),
                file_name(&f.path),
                if why.is_empty() {
                    String::new()
                } else {
                    format!(": {why}")
                }
            ));
            for note in &f.notes {
                out.push_str(&format!("              note: {note}\n"));
            }
        }
        for m in &c.missing {
            let what = link_words(m.link, "a");
            out.push_str(&format!("  missing     {what} ({})", missing_name(m)));
            match (&m.named_by, m.takes_down.as_slice()) {
                (Some(by), down) => out.push_str(&format!(
                    ": {} names it as its parent; it takes down {}\n",
                    file_name(by),
                    down.iter()
                        .map(|p| file_name(p))
                        .collect::<Vec<_>>()
                        .join(", ")
                )),
                (None, _) => out.push_str(": the last save recorded it; it is gone\n"),
            }
        }
    }
    let (sound, damaged, incomplete, missing) = counts(checks);
    out.push_str(&format!(
        "{sound} sound, {damaged} damaged, {incomplete} incomplete, {missing} missing link(s): {}\n",
        if damaged + incomplete + missing == 0 {
            "all sound"
        } else {
            "NOT all sound"
        }
    ));
    out
}

/// The report for a script (`--json`): the same findings, links numbered as people see
/// them (1 is a chain's full backup), digests in full.
pub fn json_report(checks: &[BoxCheck]) -> serde_json::Value {
    let (sound, damaged, incomplete, missing) = counts(checks);
    let link = |l: Option<u32>| l.map(|n| u64::from(n) + 1);
    let boxes: Vec<serde_json::Value> = checks
        .iter()
        .map(|c| {
            let backups: Vec<serde_json::Value> = c
                .files
                .iter()
                .zip(&c.verdicts)
                .map(|(f, v)| {
                    let mut row = serde_json::json!({
                        "file": f.path.display().to_string(),
                        "link": link(f.place.map(|p| p.link)),
                        "status": status(v),
                        "size": f.size,
                        "sha256": f.digest.as_ref().map(crate::backup::hex_sha),
                        "recorded_sha256": f.recorded.as_ref().map(|r| crate::backup::hex_sha(&r.digest)),
                        "notes": f.notes,
                    });
                    match v {
                        Verdict::Sound => {}
                        Verdict::Damaged { file, what } => {
                            row["damaged_file"] = file.display().to_string().into();
                            row["what"] = what.clone().into();
                        }
                        Verdict::Incomplete { missing } => {
                            row["missing_sha256"] =
                                crate::backup::hex_sha(&c.missing[*missing].digest).into();
                        }
                    }
                    row
                })
                .collect();
            let missing: Vec<serde_json::Value> = c
                .missing
                .iter()
                .map(|m| {
                    serde_json::json!({
                        "link": link(m.link),
                        "sha256": crate::backup::hex_sha(&m.digest),
                        "was": m.was.as_ref().map(|p| p.display().to_string()),
                        "named_by": m.named_by.as_ref().map(|p| p.display().to_string()),
                        "takes_down": m.takes_down.iter().map(|p| p.display().to_string()).collect::<Vec<_>>(),
                    })
                })
                .collect();
            serde_json::json!({
                "box": c.name,
                "dir": c.dir.display().to_string(),
                "read_data": c.depth == Depth::ReadData,
                "sound": c.sound(),
                "backups": backups,
                "missing": missing,
            })
        })
        .collect();
    serde_json::json!({
        "sound": checks.iter().all(BoxCheck::sound),
        "counts": {
            "sound": sound,
            "damaged": damaged,
            "incomplete": incomplete,
            "missing": missing,
        },
        "boxes": boxes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backup::check::MissingLink;
    use crate::backup::check::test_files::file;

    /// A full backup, a damaged link 2, and link 3 on it.
    fn damaged() -> BoxCheck {
        let files = vec![file(1, None), file(2, Some(1)), file(3, Some(2))];
        let bad = Verdict::Damaged {
            file: files[1].path.clone(),
            what: "its SHA-256 differs from the one its save recorded".into(),
        };
        BoxCheck {
            name: "alpha".into(),
            dir: PathBuf::from("/b"),
            depth: Depth::Metadata,
            verdicts: vec![Verdict::Sound, bad.clone(), bad],
            files,
            missing: Vec::new(),
        }
    }

    /// A full backup and link 3, link 2 gone.
    fn incomplete() -> BoxCheck {
        let files = vec![file(1, None), file(3, Some(2))];
        BoxCheck {
            name: "alpha".into(),
            dir: PathBuf::from("/b"),
            depth: Depth::ReadData,
            missing: vec![MissingLink {
                digest: [2; 32],
                link: Some(1),
                was: Some(PathBuf::from("/b/alpha-20261201-100002.tar.zst.gpg")),
                named_by: Some(files[1].path.clone()),
                takes_down: vec![files[1].path.clone()],
            }],
            verdicts: vec![Verdict::Sound, Verdict::Incomplete { missing: 0 }],
            files,
        }
    }

    #[test]
    fn the_report_names_the_damaged_file_and_what_stands_on_it() {
        let text = human_report(&[damaged()]);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines[0],
            "alpha in /b (each file hashed and compared with what its save recorded):"
        );
        assert_eq!(
            lines[1],
            "  sound       alpha-20261201-100001.tar.zst.gpg  the full backup of its chain"
        );
        assert_eq!(
            lines[2],
            "  damaged     alpha-20261201-100002.tar.zst.gpg  link 2 of its chain: its SHA-256 differs from the one its save recorded"
        );
        assert_eq!(
            lines[3],
            "  damaged     alpha-20261201-100003.tar.zst.gpg  link 3 of its chain: stands on alpha-20261201-100002.tar.zst.gpg, which is damaged"
        );
        assert_eq!(
            lines[4],
            "1 sound, 2 damaged, 0 incomplete, 0 missing link(s): NOT all sound"
        );
    }

    #[test]
    fn the_report_names_a_missing_link_and_what_it_takes_down() {
        let text = human_report(&[incomplete()]);
        assert!(
            text.contains(
                "  incomplete  alpha-20261201-100003.tar.zst.gpg  link 3 of its chain: stands on link 2 of the chain, which is missing (alpha-20261201-100002.tar.zst.gpg, SHA-256 020202020202)\n"
            ),
            "{text}"
        );
        assert!(
            text.contains(
                "  missing     link 2 of a chain (alpha-20261201-100002.tar.zst.gpg, SHA-256 020202020202): alpha-20261201-100003.tar.zst.gpg names it as its parent; it takes down alpha-20261201-100003.tar.zst.gpg\n"
            ),
            "{text}"
        );
        assert!(
            text.starts_with("alpha in /b (every file decrypted"),
            "{text}"
        );
        assert!(
            text.ends_with("1 sound, 0 damaged, 1 incomplete, 1 missing link(s): NOT all sound\n")
        );
        // Gone, and nothing stands on it.
        let mut gone = incomplete();
        gone.missing[0].named_by = None;
        assert!(human_report(&[gone]).contains("the last save recorded it; it is gone"),);
    }

    #[test]
    fn all_sound_says_so() {
        let mut c = damaged();
        c.verdicts = vec![Verdict::Sound; 3];
        assert!(c.sound());
        assert!(
            human_report(&[c])
                .ends_with("3 sound, 0 damaged, 0 incomplete, 0 missing link(s): all sound\n")
        );
    }

    #[test]
    fn the_json_report_carries_the_same_findings() {
        let j = json_report(&[damaged(), incomplete()]);
        assert_eq!(j["sound"], false);
        assert_eq!(
            j["counts"],
            serde_json::json!({"sound": 2, "damaged": 2, "incomplete": 1, "missing": 1})
        );
        let b = &j["boxes"][0];
        assert_eq!(b["box"], "alpha");
        assert_eq!(b["read_data"], false);
        assert_eq!(b["backups"][0]["status"], "sound");
        assert_eq!(b["backups"][0]["link"], 1, "links as people count them");
        assert!(b["backups"][0].get("what").is_none());
        assert_eq!(b["backups"][2]["status"], "damaged");
        assert_eq!(
            b["backups"][2]["damaged_file"],
            "/b/alpha-20261201-100002.tar.zst.gpg"
        );
        assert_eq!(
            b["backups"][2]["what"],
            "its SHA-256 differs from the one its save recorded"
        );
        assert_eq!(b["backups"][1]["sha256"], hex::encode([2u8; 32]));
        assert_eq!(b["backups"][1]["recorded_sha256"], serde_json::Value::Null);
        let i = &j["boxes"][1];
        assert_eq!(i["read_data"], true);
        assert_eq!(i["backups"][1]["status"], "incomplete");
        assert_eq!(i["backups"][1]["missing_sha256"], hex::encode([2u8; 32]));
        assert_eq!(
            i["missing"][0],
            serde_json::json!({
                "link": 2,
                "sha256": hex::encode([2u8; 32]),
                "was": "/b/alpha-20261201-100002.tar.zst.gpg",
                "named_by": "/b/alpha-20261201-100003.tar.zst.gpg",
                "takes_down": ["/b/alpha-20261201-100003.tar.zst.gpg"],
            })
        );
    }

    #[test]
    fn a_boxs_files_are_checked_directory_by_directory() {
        let grouped = by_dir(vec![
            PathBuf::from("/b/alpha-2.tar.zst.gpg"),
            PathBuf::from("/old/alpha-1.tar.zst.gpg"),
            PathBuf::from("/b/alpha-1.tar.zst.gpg"),
        ]);
        assert_eq!(grouped.len(), 2);
        assert_eq!(grouped[0].0, PathBuf::from("/b"));
        assert_eq!(
            grouped[0].1,
            vec![
                PathBuf::from("/b/alpha-1.tar.zst.gpg"),
                PathBuf::from("/b/alpha-2.tar.zst.gpg")
            ]
        );
    }
}
