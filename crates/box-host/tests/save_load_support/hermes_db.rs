//! A Hermes-shaped `state.db` in a guest (sessions, messages, a full-text index; WAL mode,
//! as Hermes keeps it) and one chat turn on it, for the large-database test and bench.

/// A shell script that grows `~/.hermes/state.db` to `sessions` × 100 messages of 3 KB
/// (about 0.42 MiB per session, the index included: 900 make 360 MiB), checkpoints it, gives it to the agent and
/// prints its size in bytes.
pub fn grow(sessions: u64) -> String {
    format!(
        r#"set -e
mkdir -p /data/home/agent/.hermes
python3 - <<'PY'
import os, random, sqlite3
db = sqlite3.connect("/data/home/agent/.hermes/state.db", isolation_level=None)
db.execute("PRAGMA journal_mode=WAL")
db.executescript("""
CREATE TABLE sessions (id INTEGER PRIMARY KEY, title TEXT, started REAL);
CREATE TABLE messages (id INTEGER PRIMARY KEY, session_id INTEGER, role TEXT, content TEXT);
CREATE VIRTUAL TABLE messages_fts USING fts5(content);
""")
words = ["alpha", "build", "cargo", "deploy", "error", "fix", "git", "hermes", "index", "json"]
rnd = random.Random(41)
db.execute("BEGIN")
for s in range({sessions}):
    db.execute("INSERT INTO sessions VALUES (?, ?, ?)", (s, "session %d" % s, s * 60.0))
    for m in range(100):
        mid = s * 100 + m
        db.execute("INSERT INTO messages VALUES (?, ?, ?, ?)",
                   (mid, s, "user" if m % 2 else "assistant", os.urandom(1500).hex()))
        db.execute("INSERT INTO messages_fts (rowid, content) VALUES (?, ?)",
                   (mid, " ".join(rnd.choice(words) for _ in range(8))))
db.execute("COMMIT")
db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
PY
chown -R agent:agent /data/home/agent/.hermes
stat -c %s /data/home/agent/.hermes/state.db
"#
    )
}

/// One chat turn, as Hermes writes it: a session row, four messages and their index rows,
/// committed to the WAL and left there (no checkpoint). Prints the WAL's size in bytes.
pub const CHAT_TURN: &str = r#"python3 - <<'PY'
import os, sqlite3
db = sqlite3.connect("/data/home/agent/.hermes/state.db", isolation_level=None)
db.execute("PRAGMA wal_autocheckpoint=0")
db.execute("BEGIN")
s = db.execute("SELECT max(id) + 1 FROM sessions").fetchone()[0]
db.execute("INSERT INTO sessions VALUES (?, 'a chat turn', 0)", (s,))
first = db.execute("SELECT max(id) + 1 FROM messages").fetchone()[0]
for mid in range(first, first + 4):
    db.execute("INSERT INTO messages VALUES (?, ?, 'user', ?)", (mid, s, os.urandom(1000).hex()))
    db.execute("INSERT INTO messages_fts (rowid, content) VALUES (?, 'deploy fix hermes')", (mid,))
db.execute("COMMIT")
print(os.path.getsize("/data/home/agent/.hermes/state.db-wal"))
PY"#;
