//! The tools a box provides and their versions, as the runtime manifest records them.

use std::io::Read;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::executor::find_tool;

/// (manifest key, command, version args)
pub const TOOLS: &[(&str, &str, &[&str])] = &[
    ("node", "node", &["--version"]),
    ("claude", "claude", &["--version"]),
    ("codex", "codex", &["--version"]),
    ("hermes", "hermes", &["--version"]),
    ("executor", "executor", &["--version"]),
];

/// Runs `bin args` with a timeout and returns the first non-empty line of its output.
/// Tool output is not trusted: control characters are dropped and the line is cut short.
pub fn first_line(bin: &Path, args: &[&str], timeout: Duration) -> Option<String> {
    let mut child = Command::new(bin)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .ok()?;
    let mut out = child.stdout.take()?;
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = out.by_ref().take(64 * 1024).read_to_string(&mut s);
        s
    });
    let start = Instant::now();
    loop {
        match child.try_wait() {
            Ok(Some(_)) => break,
            Ok(None) if start.elapsed() < timeout => std::thread::sleep(Duration::from_millis(20)),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return None;
            }
        }
    }
    let text = reader.join().ok()?;
    text.lines()
        .map(|l| {
            l.chars()
                .filter(|c| !c.is_control())
                .take(120)
                .collect::<String>()
        })
        .map(|l| l.trim().to_string())
        .find(|l| !l.is_empty())
}

/// Where the tools' answers are kept between calls (root's, outside /data: a cache of
/// this guest's own binaries, never backed up). A `box save` writes the manifest twice
/// (quiesce, then with the host's versions): asking five runtimes each time was 0.7 s of
/// every save (issue 32). `HB_TOOL_VERSIONS_CACHE` puts it elsewhere (tests that run hb on
/// a host).
const VERSIONS_CACHE: &str = "/var/cache/hermes-box/tool-versions";

/// Every tool's version: `Some(line)` when installed and answering, `None` when missing.
/// The tools are asked at once: each `--version` starts a runtime (node, python, a 400 MB
/// binary) and one after another took ~2 s of every `box new`. An answer is reused while
/// the tool is the same file (`ToolStamp`): an upgrade replaces it, and asks again.
pub fn versions() -> Vec<(&'static str, Option<String>)> {
    let cache = std::env::var_os("HB_TOOL_VERSIONS_CACHE")
        .map_or_else(|| std::path::PathBuf::from(VERSIONS_CACHE), Into::into);
    versions_cached(&cache, &find_tool)
}

fn versions_cached(
    cache: &Path,
    find: &dyn Fn(&str) -> Option<std::path::PathBuf>,
) -> Vec<(&'static str, Option<String>)> {
    let kept = read_cache(cache);
    let asked: Vec<_> = TOOLS
        .iter()
        .map(|(key, cmd, args)| {
            let bin = find(cmd);
            let present = bin.is_some();
            let stamp = bin.as_deref().and_then(ToolStamp::of);
            let known = stamp
                .as_ref()
                .and_then(|s| kept.iter().find(|(k, st, _)| k == key && st == s))
                .map(|(_, _, line)| line.clone());
            let answer = std::thread::spawn(move || {
                if known.is_some() {
                    return known;
                }
                bin.map(|bin| {
                    first_line(&bin, args, Duration::from_secs(15))
                        .unwrap_or_else(|| "installed".into())
                })
            });
            (*key, present, stamp, answer)
        })
        .collect();
    let mut keep = Vec::new();
    let found: Vec<_> = asked
        .into_iter()
        .map(|(key, present, stamp, answer)| {
            let fallback = present.then(|| "installed".to_string());
            let line = answer.join().unwrap_or(fallback);
            // Only real answers are kept: "installed" (no answer) is asked again next time.
            if let (Some(stamp), Some(line)) = (stamp, &line)
                && line != "installed"
            {
                keep.push((key.to_string(), stamp, line.clone()));
            }
            (key, line)
        })
        .collect();
    if keep != kept {
        write_cache(cache, &keep);
    }
    found
}

/// Which file a tool is and which version of it: the file its command resolves to (a
/// `claude` link to its package's script), that file's size and mtime, and its
/// directory's mtime (a package upgraded in place rewrites files there). No inode and no
/// ctime: a box made from a base gets its files by extraction (the base's pack), which
/// keeps sizes and mtimes but gives every file a new inode and ctime, so with them a
/// base's answers never matched in a box from it and each `box new`/`load` asked the
/// five runtimes again (1.0 s on a pristine image).
#[derive(Debug, Clone, PartialEq, Eq)]
struct ToolStamp(String);

impl ToolStamp {
    fn of(bin: &Path) -> Option<Self> {
        use std::os::unix::fs::MetadataExt;
        let real = std::fs::canonicalize(bin).ok()?;
        let file = std::fs::metadata(&real).ok()?;
        let dir = std::fs::metadata(real.parent()?).ok()?;
        let mtime = |m: &std::fs::Metadata| format!("{}.{}", m.mtime(), m.mtime_nsec());
        let path = real.to_str()?;
        if path.contains(['\t', '\n']) {
            return None;
        }
        // No device number: every box's root is its own mount (an overlay of its base's
        // layers), so the same file of the same base has another device in each box.
        Some(ToolStamp(format!(
            "{path} {} {} {}",
            file.len(),
            mtime(&file),
            mtime(&dir)
        )))
    }
}

/// `key \t stamp \t line` rows; anything else is ignored (the tools are asked again).
fn read_cache(cache: &Path) -> Vec<(String, ToolStamp, String)> {
    let Ok(text) = std::fs::read_to_string(cache) else {
        return Vec::new();
    };
    text.lines()
        .filter_map(|l| {
            let mut f = l.split('\t');
            let (key, stamp, line) = (f.next()?, f.next()?, f.next()?);
            Some((
                key.to_string(),
                ToolStamp(stamp.to_string()),
                line.to_string(),
            ))
        })
        .collect()
}

/// Best effort (as root, the guest's helper; anyone else just asks every time).
fn write_cache(cache: &Path, rows: &[(String, ToolStamp, String)]) {
    let text: String = rows
        .iter()
        .map(|(key, stamp, line)| format!("{key}\t{}\t{line}\n", stamp.0))
        .collect();
    let Some(dir) = cache.parent() else { return };
    if std::fs::create_dir_all(dir).is_err() {
        return;
    }
    let temp = dir.join(format!(".tool-versions.{}", std::process::id()));
    if std::fs::write(&temp, text).is_err() || std::fs::rename(&temp, cache).is_err() {
        let _ = std::fs::remove_file(&temp);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    /// A `node` in `dir/bin` that counts in `dir` how often it was asked.
    fn fake_node(dir: &Path, version: &str) -> std::path::PathBuf {
        std::fs::create_dir_all(dir.join("bin")).unwrap();
        let bin = dir.join("bin").join(format!("node-{version}"));
        let script = format!(
            "#!/bin/sh\necho asked >> {}/asked\necho {version}\n",
            dir.display()
        );
        std::fs::write(&bin, script).unwrap();
        std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
        bin
    }

    fn asked(dir: &Path) -> usize {
        std::fs::read_to_string(dir.join("asked")).map_or(0, |t| t.lines().count())
    }

    #[test]
    fn an_answer_is_reused_until_the_tool_is_another_file() {
        let dir = tempfile::tempdir().unwrap();
        let cache = dir.path().join("cache/tool-versions");
        let node = std::sync::Mutex::new(fake_node(dir.path(), "v20.1.0"));
        let find = |cmd: &str| (cmd == "node").then(|| node.lock().unwrap().clone());
        let first = versions_cached(&cache, &find);
        assert_eq!(first[0], ("node", Some("v20.1.0".to_string())));
        assert_eq!(first[1], ("claude", None));
        assert_eq!(asked(dir.path()), 1);
        assert_eq!(versions_cached(&cache, &find), first);
        assert_eq!(asked(dir.path()), 1, "the same file: not asked again");
        // An upgrade: another file where the command resolves.
        *node.lock().unwrap() = fake_node(dir.path(), "v22.0.0");
        let upgraded = versions_cached(&cache, &find);
        assert_eq!(upgraded[0], ("node", Some("v22.0.0".to_string())));
        assert_eq!(asked(dir.path()), 2);
        // The same path rewritten in place (new size and times): asked again.
        let path = node.lock().unwrap().clone();
        std::fs::write(&path, "#!/bin/sh\necho v22.0.1-patched\n").unwrap();
        let patched = versions_cached(&cache, &find);
        assert_eq!(patched[0], ("node", Some("v22.0.1-patched".to_string())));
        // A damaged cache is only a slower call.
        std::fs::write(&cache, "garbage\n").unwrap();
        assert_eq!(versions_cached(&cache, &find), patched);
    }

    /// A box from a base has the base's files extracted: the same paths, sizes and mtimes,
    /// new inodes and ctimes. The base's answers hold there.
    #[test]
    fn an_answer_survives_the_extraction_a_box_from_a_base_is() {
        let dir = tempfile::tempdir().unwrap();
        let cache = dir.path().join("cache/tool-versions");
        let node = fake_node(dir.path(), "v20.1.0");
        let find = |cmd: &str| (cmd == "node").then(|| node.clone());
        let first = versions_cached(&cache, &find);
        assert_eq!(asked(dir.path()), 1);
        let bin_dir = node.parent().unwrap();
        let (file_mtime, dir_mtime) = (
            std::fs::metadata(&node).unwrap().modified().unwrap(),
            std::fs::metadata(bin_dir).unwrap().modified().unwrap(),
        );
        let ino = |p: &Path| std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(p).unwrap());
        let before = ino(&node);
        // Extracted anew: another inode, times set back as tar and a pack do.
        let bytes = std::fs::read(&node).unwrap();
        std::fs::remove_file(&node).unwrap();
        let _hold = tempfile::tempfile_in(bin_dir).unwrap(); // the old inode is not reused
        std::fs::write(&node, bytes).unwrap();
        std::fs::set_permissions(&node, std::fs::Permissions::from_mode(0o755)).unwrap();
        let set = |p: &Path, t| {
            std::fs::File::open(p)
                .unwrap()
                .set_times(std::fs::FileTimes::new().set_modified(t))
                .unwrap()
        };
        set(&node, file_mtime);
        set(bin_dir, dir_mtime);
        assert_ne!(ino(&node), before);
        assert_eq!(versions_cached(&cache, &find), first);
        assert_eq!(asked(dir.path()), 1, "the base's answer is used");
    }
}
