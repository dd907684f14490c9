//! Issue 41, a chat turn costs what it changed: through the simulator with the real `hb`, a
//! Hermes-shaped `state.db` (sessions, messages, a full-text index; WAL mode) grown past
//! 256 MiB is saved whole, then one chat turn is added (a session, its messages and their
//! index rows, left in the WAL as Hermes leaves them) and the next save's link holds only
//! the blocks that changed: a few MiB, asserted on the file's bytes. `box load` of the link
//! gives the database byte for byte as it was at the save (the live page image, WAL
//! included), `integrity_check` ok; `box extract` and the README's stock loop plus the one
//! documented `cat` give the same bytes.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod backup_support;
mod save_load_support;

use std::path::Path;
use std::process::Command;

use save_load_support::hermes_db::{self, CHAT_TURN};
use save_load_support::{World, prerequisites, serial};

const DB: &str = "/data/home/agent/.hermes/state.db";
const DB_IN_DATA: &str = "home/agent/.hermes/state.db";

/// The database as a restore must give it: its pages as SQLite reads them (the WAL's
/// frames over the main file), which a checkpoint writes into the file. Run after the save
/// and before anything else writes.
const PAGE_IMAGE_SHA: &str = r#"
import hashlib, sqlite3
db = sqlite3.connect("/data/home/agent/.hermes/state.db", isolation_level=None)
busy, log, done = db.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
assert busy == 0 and log == done, (busy, log, done)
db.close()
print(hashlib.sha256(open("/data/home/agent/.hermes/state.db", "rb").read()).hexdigest())
"#;

fn sha256_file(path: &Path) -> String {
    let out = Command::new("sha256sum").arg(path).output().unwrap();
    assert!(out.status.success());
    String::from_utf8(out.stdout).unwrap()[..64].to_string()
}

fn integrity(db: &Path) -> String {
    let out = Command::new("sqlite3")
        .arg(db)
        .arg(
            "PRAGMA integrity_check; SELECT count(*) FROM messages; SELECT count(*) FROM sessions;",
        )
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn a_chat_turn_on_a_large_database_saves_its_changed_blocks() {
    if !prerequisites() || !backup_support::trees::gnu_tar() {
        return;
    }
    let _serial = serial();
    let w = World::with_box("alpha");
    let size: u64 = w.sh("alpha", &hermes_db::grow(900)).trim().parse().unwrap();
    assert!(size >= 256 << 20, "state.db grew to {size} bytes");

    let full = w.save_alpha("(full: starts a chain)");
    let wal: u64 = w.sh("alpha", CHAT_TURN).trim().parse().unwrap();
    assert!(wal > 0, "the chat turn is in the WAL");
    let link = w.save_alpha("(incremental: link 2 of its chain)");
    let image = w
        .sh("alpha", &format!("python3 - <<'EOF'\n{PAGE_IMAGE_SHA}EOF"))
        .trim()
        .to_string();

    let (full_bytes, link_bytes) = (
        std::fs::metadata(&full).unwrap().len(),
        std::fs::metadata(&link).unwrap().len(),
    );
    eprintln!(
        "state.db {size} bytes: full backup {full_bytes} bytes, the chat turn's link {link_bytes} bytes"
    );
    assert!(
        full_bytes > 100 << 20,
        "the full backup holds the database: {full_bytes} bytes"
    );
    assert!(
        link_bytes <= 16 << 20,
        "the link holds the changed blocks only: {link_bytes} bytes (full: {full_bytes})"
    );

    // box load of the link: the database of that moment, byte for byte.
    let load = w.run(&["load", link.to_str().unwrap(), "beta"], &[]);
    assert!(load.ok(), "box load: {}", load.all());
    let loaded = w.sh(
        "beta",
        &format!("sha256sum {DB} | cut -c1-64; ls -a /data/home/agent/.hermes"),
    );
    let mut lines = loaded.lines();
    assert_eq!(lines.next(), Some(image.as_str()), "box load: {loaded}");
    assert!(
        !loaded.contains(".box-blocks"),
        "the restored box holds the file, not its blocks: {loaded}"
    );
    w.assert_running_unpaused("beta");

    // box extract, and the stock loop plus the documented cat: the same bytes.
    let extracted = w.dir.path().join("extracted");
    let ex = w.run(
        &[
            "extract",
            link.to_str().unwrap(),
            extracted.to_str().unwrap(),
        ],
        &[],
    );
    assert!(ex.ok(), "box extract: {}", ex.all());
    let by_box = extracted.join(DB_IN_DATA);
    assert_eq!(sha256_file(&by_box), image, "box extract");
    assert_eq!(
        integrity(&by_box),
        "ok\n90004\n901\n",
        "integrity_check, then the messages and sessions the chat turn left"
    );

    let by_stock = w.dir.path().join("by-stock");
    backup_support::stock_loop(w.dir.path(), &w.passphrase, &[&full, &link], &by_stock);
    let hermes = by_stock.join("home/agent/.hermes");
    let cat = Command::new("sh")
        .arg("-c")
        .arg("cat state.db.box-blocks/b* > state.db")
        .current_dir(&hermes)
        .status()
        .unwrap();
    assert!(cat.success());
    assert_eq!(
        sha256_file(&hermes.join("state.db")),
        image,
        "the stock loop plus `cat state.db.box-blocks/b* > state.db`"
    );
    w.assert_no_plaintext(&["alpha", "beta"]);
    w.scan_secrets();
}
