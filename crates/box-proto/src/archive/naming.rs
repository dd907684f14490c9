//! Backup file names: `<box>-<YYYYmmdd-HHMMSS>.tar.zst.gpg`, the stamp in UTC
//! (docs/backup-format.md, "Names and publishing"). The seed wrote `.tar.gz.gpg` (its stamp
//! in local time); both are recognised when looking for a box's newest backup.

use std::io;
use std::path::{Path, PathBuf};

/// The extension this project writes.
pub const EXTENSION: &str = ".tar.zst.gpg";
/// Extensions recognised when reading: ours first, then the seed's.
pub const KNOWN_EXTENSIONS: &[&str] = &[".tar.zst.gpg", ".tar.gz.gpg"];

/// Whether `stamp` has the shape `YYYYmmdd-HHMMSS` (digits only; no calendar check).
pub fn is_stamp(stamp: &str) -> bool {
    let b = stamp.as_bytes();
    b.len() == 15
        && b[8] == b'-'
        && b.iter()
            .enumerate()
            .all(|(i, c)| i == 8 || c.is_ascii_digit())
}

/// `<box>-<stamp>.tar.zst.gpg`. `stamp` must be `YYYYmmdd-HHMMSS` (the caller formats the
/// time, in UTC; this crate has no clock).
pub fn backup_file_name(box_name: &str, stamp: &str) -> Option<String> {
    is_stamp(stamp).then(|| format!("{box_name}-{stamp}{EXTENSION}"))
}

/// The file name without a known backup extension (`alpha-20261129-120000`), or the whole
/// name with a trailing `.gpg` removed, or the name itself.
pub fn strip_backup_extension(file_name: &str) -> &str {
    for ext in KNOWN_EXTENSIONS {
        if let Some(stem) = file_name.strip_suffix(ext)
            && !stem.is_empty()
        {
            return stem;
        }
    }
    match file_name.strip_suffix(".gpg") {
        Some(stem) if !stem.is_empty() => stem,
        _ => file_name,
    }
}

/// If `file_name` is a backup of `box_name`, its stamp.
pub fn stamp_of<'a>(file_name: &'a str, box_name: &str) -> Option<&'a str> {
    let rest = file_name.strip_prefix(box_name)?.strip_prefix('-')?;
    KNOWN_EXTENSIONS.iter().find_map(|ext| {
        let stamp = rest.strip_suffix(ext)?;
        is_stamp(stamp).then_some(stamp)
    })
}

/// The newest backup of `box_name` directly in `dir`: the greatest stamp, ours before the
/// seed's on a tie. Unlike the seed's `<name>-*` glob, `alpha` never matches `alpha-2`'s
/// backups. A missing directory means no backup.
pub fn newest_backup(dir: &Path, box_name: &str) -> io::Result<Option<PathBuf>> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    let mut best: Option<(String, bool, PathBuf)> = None;
    for entry in entries {
        let entry = entry?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        let Some(stamp) = stamp_of(name, box_name) else {
            continue;
        };
        if !entry.file_type()?.is_file() {
            continue;
        }
        let ours = name.ends_with(EXTENSION);
        let key = (stamp.to_string(), ours);
        if best
            .as_ref()
            .is_none_or(|(s, o, _)| (s.as_str(), *o) < (key.0.as_str(), key.1))
        {
            best = Some((key.0, key.1, entry.path()));
        }
    }
    Ok(best.map(|(_, _, path)| path))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert_eq!(
            backup_file_name("alpha", "20261129-120000").as_deref(),
            Some("alpha-20261129-120000.tar.zst.gpg")
        );
        assert_eq!(backup_file_name("alpha", "2026-11-29"), None);
        assert_eq!(
            strip_backup_extension("alpha-20261129-120000.tar.gz.gpg"),
            "alpha-20261129-120000"
        );
        assert_eq!(strip_backup_extension("x.gpg"), "x");
        assert_eq!(strip_backup_extension("x.bin"), "x.bin");
        assert_eq!(
            stamp_of("a-2-20261129-120000.tar.zst.gpg", "a"),
            None,
            "box a must not claim box a-2's backups"
        );
    }

    #[test]
    fn newest() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(newest_backup(dir.path(), "a").unwrap(), None);
        for n in [
            "a-20250101-000000.tar.gz.gpg",
            "a-20260101-000000.tar.gz.gpg",
            "a-20260101-000000.tar.zst.gpg",
            "a-2-20270101-000000.tar.zst.gpg",
            "a-20990101-000000.tar.zst.gpg.tmp.x",
            "b-20300101-000000.tar.zst.gpg",
        ] {
            std::fs::write(dir.path().join(n), b"x").unwrap();
        }
        assert_eq!(
            newest_backup(dir.path(), "a").unwrap(),
            Some(dir.path().join("a-20260101-000000.tar.zst.gpg"))
        );
        assert_eq!(
            newest_backup(dir.path(), "a-2").unwrap(),
            Some(dir.path().join("a-2-20270101-000000.tar.zst.gpg"))
        );
        assert_eq!(newest_backup(&dir.path().join("none"), "a").unwrap(), None);
    }
}
