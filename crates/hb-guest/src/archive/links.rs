//! Which symlinks a restore would accept.
//!
//! The archive validator (box_proto::archive, the seed's V4 rules) refuses a whole backup
//! for one symlink that is absolute, climbs out of the data root, dangles, loops, or points
//! at something the backup leaves out. A live `/data` easily holds such a link (a venv's
//! `python -> /usr/bin/python3`, a link to a deleted file), and failing every save for it
//! would leave the user with no backup at all. So export keeps the links a restore accepts
//! and skips the others with a warning naming each one and why, as it does for sockets.

use std::io;
use std::path::{Component, Path};

use box_proto::archive::excludes::is_excluded;

/// Why a symlink is left out of a backup, or `None` when it is kept.
///
/// `root` is the canonical data root, `link` the link's absolute path inside it, `key`
/// its root-relative path (`home/agent/x`), `target` what the link says.
pub fn rejection(root: &Path, link: &Path, key: &str, target: &Path) -> Option<String> {
    if target.as_os_str().is_empty() {
        return Some("its target is empty".into());
    }
    if target.is_absolute() {
        return Some(format!(
            "its target {} is absolute (a restore only accepts links inside the data root)",
            target.display()
        ));
    }
    // Lexically, from the link's own directory: the validator's rule 6.
    let mut depth = key.split('/').filter(|p| !p.is_empty()).count() as i64 - 1;
    for part in target.components() {
        match part {
            Component::ParentDir => depth -= 1,
            Component::Normal(_) => depth += 1,
            _ => {}
        }
        if depth < 0 {
            return Some(format!(
                "its target {} climbs out of the data root",
                target.display()
            ));
        }
    }
    // Physically, through every link on the way: where it really ends up (rule 9).
    let resolved = match std::fs::canonicalize(link) {
        Ok(p) => p,
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
            return Some("it is part of a link cycle".into());
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Some(format!("it dangles ({} does not exist)", target.display()));
        }
        Err(e) => return Some(format!("its target cannot be resolved ({e})")),
    };
    let Ok(rel) = resolved.strip_prefix(root) else {
        return Some(format!(
            "it resolves outside the data root, to {}",
            resolved.display()
        ));
    };
    let rel = rel.to_string_lossy();
    let mut prefix = String::new();
    for part in rel.split('/').filter(|p| !p.is_empty()) {
        if !prefix.is_empty() {
            prefix.push('/');
        }
        prefix.push_str(part);
        if is_excluded(&prefix) {
            return Some(format!("it points into {prefix}, which backups leave out"));
        }
    }
    match std::fs::metadata(&resolved) {
        Ok(m) if m.is_file() || m.is_dir() => None,
        Ok(_) => Some("it points at a special file, which backups leave out".into()),
        Err(e) => Some(format!("its target cannot be read ({e})")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    #[test]
    fn keeps_links_a_restore_accepts_and_says_why_it_skips_the_rest() {
        let t = tempfile::tempdir().unwrap();
        let root = t.path().canonicalize().unwrap();
        let home = root.join("home/agent");
        std::fs::create_dir_all(home.join("work/node_modules")).unwrap();
        std::fs::write(home.join("file"), "x").unwrap();
        let cases: &[(&str, &str, Option<&str>)] = &[
            ("ok-file", "file", None),
            ("ok-dir", "work", None),
            ("ok-up", "../agent/file", None),
            ("abs", "/usr/bin/python3", Some("is absolute")),
            ("climb", "../../../etc/passwd", Some("climbs out")),
            ("dangling", "gone", Some("dangles")),
            ("excluded", "work/node_modules", Some("backups leave out")),
            ("loop-a", "loop-b", Some("link cycle")),
            ("loop-b", "loop-a", Some("link cycle")),
        ];
        for (name, target, _) in cases {
            symlink(target, home.join(name)).unwrap();
        }
        // Lexically inside, physically outside: through a link that climbs out.
        symlink("../../..", home.join("up")).unwrap();
        for (name, target, want) in cases {
            let key = format!("home/agent/{name}");
            let got = rejection(&root, &home.join(name), &key, Path::new(target));
            match (want, got) {
                (None, None) => {}
                (Some(w), Some(g)) => assert!(g.contains(w), "{name}: {g}"),
                (w, g) => panic!("{name}: wanted {w:?}, got {g:?}"),
            }
        }
        let got = rejection(
            &root,
            &home.join("up"),
            "home/agent/up",
            Path::new("../../.."),
        );
        assert!(got.unwrap().contains("climbs out"));
    }
}
