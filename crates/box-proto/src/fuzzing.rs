//! The bodies of the fuzz targets in `fuzz/` (cargo-fuzz), kept here so the libFuzzer
//! binaries and the corpus-replay test (`tests/fuzz_corpus.rs`, run by CI on stable Rust)
//! execute the very same code. Every function takes raw bytes, must never panic on any
//! input, and panics only when a property the parsers promise is broken.
//!
//! Not an API: hidden from the docs, and nothing outside the fuzz harness calls it.
// Read in the source only (hidden from rustdoc): its docs name the private checks beside them.
#![allow(rustdoc::private_intra_doc_links)]

use std::io::BufReader;
use std::path::Path;

use crate::archive::chain_state::ChainState;
use crate::archive::parts::PartIndex;
use crate::archive::validate::{self, ArchiveError, Limits};
use crate::box_env::BoxEnv;
use crate::manifest::RuntimeManifest;
use crate::mcp::{sse, wire};

/// A fuzz target body.
pub type Target = fn(&[u8]);

/// Every target, by the name of its directory under `fuzz/corpus/` and its fuzz binary.
pub const TARGETS: &[(&str, Target)] = &[
    ("archive_validate", archive_validate),
    ("archive_tar", archive_tar),
    ("archive_chain", archive_chain),
    ("mcp_reply", mcp_reply),
    ("manifest", manifest),
    ("part_index", part_index),
    ("box_env", box_env),
    ("guest_output", guest_output),
    ("host_facts", host_facts),
    ("dumpdir", dumpdir),
];

/// Small caps, so one input can neither allocate much nor run long: a hang or an
/// out-of-memory report then means a real algorithmic problem, not a big archive.
pub fn limits() -> Limits {
    Limits {
        max_members: 1024,
        max_total_bytes: 4 << 20,
        max_manifest_bytes: 4 << 10,
    }
}

/// Checks what a validation promises about its result.
fn check_validation(result: Result<validate::Report, ArchiveError>, limits: &Limits) {
    match result {
        Ok(report) => {
            assert!(report.members >= 1, "a valid archive has members");
            assert!(report.members <= limits.max_members);
            assert!(report.files <= report.members);
            assert!(report.tar_bytes <= limits.max_total_bytes);
            if let Some(m) = &report.manifest {
                assert!(m.len() as u64 <= limits.max_manifest_bytes);
                // The manifest of a loaded backup is parsed next: it must not panic.
                let _ = RuntimeManifest::parse_bytes(m);
            }
        }
        Err(e) => {
            // Messages reach a terminal: they must not carry raw control characters.
            let text = e.to_string();
            assert!(
                !text.chars().any(|c| c.is_control()),
                "control character in {text:?}"
            );
            // No error quotes more than ~200 characters of a name (issue 13: a 1 MiB
            // name made a 1 MiB line); two names and the rule's words fit in 1000.
            assert!(
                text.chars().count() <= 1000,
                "a {}-character error message",
                text.chars().count()
            );
        }
    }
}

/// `archive_validate`: the input is the decrypted plaintext of a backup (zstd or gzip
/// around a tar, sniffed by magic bytes).
pub fn archive_validate(data: &[u8]) {
    let limits = limits();
    check_validation(validate::validate(data, &limits), &limits);
}

/// `archive_tar`: the input describes tar members, one per line, and is built into a real
/// tar and compressed, so mutations reach the tar rules instead of dying in the zstd
/// checksum. See [`build_tar`] for the line format.
pub fn archive_tar(data: &[u8]) {
    let Some(compressed) = build_tar(data) else {
        return;
    };
    let limits = limits();
    check_validation(validate::validate(compressed.as_slice(), &limits), &limits);
}

/// `archive_chain`: two links of a chain, each described as [`archive_tar`]'s input, the
/// second after a line `#link`: dumpdir members (type `D`, data `<code><name>\0…\0`) over
/// the tree the first built. What a chain's validation promises:
///
/// * it never panics, and its messages are what [`check_validation`] asks;
/// * a link the writer's strict check accepts, every restore accepts, with the same report
///   and the same tree after it (every path and its kind), keeping nothing it leaves out;
///   the tree kept between saves (hashed, [`ChainState::encode`]) gives the same verdict
///   as the plain one: the same error, or the same report and the same tree after it;
/// * a chain validation accepts unpacks: both links applied by the unpacker (as `box
///   extract` and `hb import` apply them) into a private directory without an error, and
///   nothing written outside it (every path made is under it, no link followed).
pub fn archive_chain(data: &[u8]) {
    use crate::archive::unpack::Unpacker;
    use crate::archive::validate::{WalkError, validate_link, walk_link};
    use std::rc::Rc;
    let Some(at) = find(data, b"\n#link\n") else {
        return;
    };
    let (first, second) = (&data[..at], &data[at + 7..]);
    let (Some(first), Some(second)) = (build_tar(first), build_tar(second)) else {
        return;
    };
    let limits = limits();
    let prior = match validate_link(first.as_slice(), &limits, None) {
        Ok((report, prior)) => {
            check_validation(Ok(report), &limits);
            prior
        }
        Err(e) => return check_validation(Err(e), &limits),
    };
    let lenient = validate_link(second.as_slice(), &limits, Some(Rc::new(prior.clone())));
    let strict = validate_link(
        second.as_slice(),
        &limits,
        Some(Rc::new(prior.clone().strict())),
    );
    let kept = ChainState::decode(&prior.encode([3; 16])).map(ChainState::strict);
    let Ok(kept) = kept else {
        panic!("a tree's encoding does not decode");
    };
    let hashed = validate_link(second.as_slice(), &limits, Some(Rc::new(kept)));
    // The whole verdict: the report and the tree the link leaves (every path and its kind),
    // which the next save checks its link against. A count of members would agree on a
    // tree whose kinds or names differ.
    assert_eq!(
        strict.as_ref().map_err(ToString::to_string),
        hashed.as_ref().map_err(ToString::to_string),
        "the kept (hashed) tree and the plain one disagree"
    );
    if let Ok(written) = &strict {
        let Ok(restored) = &lenient else {
            panic!("the writer's check accepted a link a restore refuses");
        };
        // A restore of what the writer accepted builds the very same tree, missing nothing.
        assert_eq!(restored, written, "a restore builds another tree");
        assert_eq!(written.0.kept_missing.count, 0);
    }
    match lenient {
        Ok((report, _)) => check_validation(Ok(report), &limits),
        Err(e) => return check_validation(Err(e), &limits),
    }
    // Both links through the unpacker, into a private directory.
    let Ok(dir) = tempfile_dir() else {
        return;
    };
    let root = dir.join("root");
    if std::fs::create_dir(&root).is_err() {
        return;
    }
    let mut unpacker = Unpacker::new(&root);
    let mut before: Option<Rc<ChainState>> = None;
    for (i, link) in [first, second].iter().enumerate() {
        if i > 0 {
            unpacker.next_link();
        }
        match walk_link(link.as_slice(), &limits, before.take(), |e, k| {
            unpacker.unpack(e, k)
        }) {
            Ok((_, state)) => before = Some(Rc::new(state)),
            Err(WalkError::Callback(e)) => {
                panic!("a chain validation accepted does not unpack: {e}")
            }
            Err(WalkError::Archive(e)) => panic!("the second pass refused it: {e}"),
        }
    }
    if let Err(e) = unpacker.finish() {
        panic!("a validated chain's directories cannot be finished: {e}");
    }
    // Nothing beside the root: no write went through a link out of it.
    let beside: Vec<_> = std::fs::read_dir(&dir)
        .map(|rd| rd.flatten().map(|e| e.file_name()).collect())
        .unwrap_or_default();
    assert_eq!(
        beside,
        [std::ffi::OsString::from("root")],
        "written outside the root"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// A fresh private directory for one input (removed by the caller).
fn tempfile_dir() -> std::io::Result<std::path::PathBuf> {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let dir = std::env::temp_dir().join(format!(
        "box-fuzz-chain-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir(&dir)?;
    Ok(dir)
}

/// Builds a compressed tar from a line description. Lines (split on `\n`):
///
/// * `#raw` as the first line: the rest is a raw tar stream, zstd'd as it is (so real
///   archives — the `../shared/ext-archives` corpus, see `scripts/fuzz.sh` — are seeds,
///   and mutations reach our tar reader's headers instead of the zstd checksum);
/// * `#gzip` as the first line: gzip instead of zstd;
/// * `<type><name>` or `<type><name> -> <rest>`, where `<type>` is `d` (directory),
///   `f` (file), `l` (symlink), `h` (hardlink), or any other byte, used as the raw tar
///   type flag (`x` pax, `L` GNU long name, `3` char device, …). `<rest>` is the link
///   target of `l`/`h` and the data of every other member.
///
/// Names and targets are written raw into the header (longer than 100 bytes: as a GNU
/// long-name record), so nothing the tar crate's builder would refuse is filtered out.
pub fn build_tar(data: &[u8]) -> Option<Vec<u8>> {
    if let Some(raw) = data.strip_prefix(b"#raw\n") {
        return zstd::encode_all(raw, 1).ok();
    }
    let mut lines = data.split(|b| *b == b'\n').peekable();
    let gzip = lines.next_if(|l| *l == b"#gzip").is_some();
    let mut builder = tar::Builder::new(Vec::new());
    for line in lines {
        let Some((&kind, rest)) = line.split_first() else {
            continue;
        };
        let (name, tail) = match find(rest, b" -> ") {
            Some(at) => (&rest[..at], &rest[at + 4..]),
            None => (rest, &[][..]),
        };
        let entry_type = match kind {
            b'd' => tar::EntryType::Directory,
            b'f' => tar::EntryType::Regular,
            b'l' => tar::EntryType::Symlink,
            b'h' => tar::EntryType::Link,
            other => tar::EntryType::new(other),
        };
        let is_link = matches!(kind, b'l' | b'h');
        let (link, body) = if is_link {
            (tail, &[][..])
        } else {
            (&[][..], tail)
        };
        if name.len() > 100 {
            long_record(&mut builder, tar::EntryType::GNULongName, name)?;
        }
        if link.len() > 100 {
            long_record(&mut builder, tar::EntryType::new(b'K'), link)?;
        }
        let mut header = tar::Header::new_gnu();
        header.set_entry_type(entry_type);
        header.set_mode(0o755);
        header.set_size(body.len() as u64);
        let gnu = header.as_gnu_mut()?;
        let n = name.len().min(gnu.name.len());
        gnu.name[..n].copy_from_slice(&name[..n]);
        let n = link.len().min(gnu.linkname.len());
        gnu.linkname[..n].copy_from_slice(&link[..n]);
        header.set_cksum();
        builder.append(&header, body).ok()?;
    }
    let tar = builder.into_inner().ok()?;
    if gzip {
        let mut out = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        std::io::Write::write_all(&mut out, &tar).ok()?;
        out.finish().ok()
    } else {
        zstd::encode_all(tar.as_slice(), 1).ok()
    }
}

/// A GNU `././@LongLink` record carrying a name or link target longer than 100 bytes.
fn long_record(
    builder: &mut tar::Builder<Vec<u8>>,
    entry_type: tar::EntryType,
    value: &[u8],
) -> Option<()> {
    let mut header = tar::Header::new_gnu();
    header.set_entry_type(entry_type);
    header.set_mode(0o644);
    let long_name = b"././@LongLink";
    header.as_gnu_mut()?.name[..long_name.len()].copy_from_slice(long_name);
    let mut body = value.to_vec();
    body.push(0);
    header.set_size(body.len() as u64);
    header.set_cksum();
    builder.append(&header, body.as_slice()).ok()
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// `mcp_reply`: the first byte picks the JSON-RPC id (0–3, so matches are likely) and the
/// reader's buffer size; the rest is an `initialize` reply, read both as a JSON body and as
/// an SSE stream (as the probe does, depending on the Content-Type).
pub fn mcp_reply(data: &[u8]) {
    let Some((&first, body)) = data.split_first() else {
        return;
    };
    let id = u64::from(first & 3);
    if let Ok(text) = std::str::from_utf8(body) {
        check_reply(wire::check_initialize_reply(text, id));
    }
    // Small buffers make lines straddle reads, as a slow server's stream does.
    let capacity = usize::from(first >> 2) + 1;
    let mut reader = BufReader::with_capacity(capacity, body);
    match sse::find_response(&mut reader, id) {
        Ok(event) => {
            // What the SSE reader hands back is the response to our request, by its own rule.
            let value: serde_json::Value = match serde_json::from_str(&event) {
                Ok(v) => v,
                Err(e) => panic!("find_response returned data that is not JSON ({e})"),
            };
            assert!(wire::is_response_to(&value, id));
            check_reply(wire::check_initialize_reply(&event, id));
        }
        Err(Err(e)) => check_reply(Err(e)),
        // Reading a byte slice cannot fail.
        Err(Ok(io)) => panic!("I/O error reading a slice: {io}"),
    }
    // printable() promises a single, bounded line nothing in acts on a terminal: at most
    // 40 characters of input, each escaped to at most 8 (`\u{202e}`), and an ellipsis.
    let lossy = String::from_utf8_lossy(body);
    let shown = wire::printable(&lossy, 40);
    assert!(shown.chars().count() <= 40 * 8 + 1);
    assert!(!shown.chars().any(crate::escape::acts_on_terminal));
}

fn check_reply(result: Result<wire::InitializeResult, crate::mcp::ProbeError>) {
    match result {
        Ok(reply) => {
            assert!(crate::mcp::KNOWN_VERSIONS.contains(&reply.protocol_version.as_str()));
            assert!(!reply.server_info.name.trim().is_empty());
        }
        Err(e) => {
            let text = e.to_string();
            assert!(
                !text.chars().any(|c| c.is_control()),
                "control character in {text:?}"
            );
        }
    }
}

/// `manifest`: parse; what parses renders to text that parses back to the same entries.
/// Also: whatever `set` is given, the result renders to a manifest that parses.
pub fn manifest(data: &[u8]) {
    if let Ok(m) = RuntimeManifest::parse_bytes(data) {
        let text = m.render();
        let again = match RuntimeManifest::parse(&text) {
            Ok(again) => again,
            Err(e) => panic!("rendered manifest does not parse ({e}): {text:?}"),
        };
        assert_eq!(again, m, "render/parse changed the entries");
        assert_eq!(again.render(), text);
        // box save and box load read what it says of the databases next.
        if let Some(value) = m.get(crate::manifest::SQLITE_CHECK_KEY) {
            let damaged = crate::manifest::SqliteCheck::damaged_in(value);
            assert!(damaged.named.len() <= crate::manifest::SqliteCheck::MAX_NAMED);
        }
    }
    if let Ok(value) = std::str::from_utf8(data) {
        let mut m = RuntimeManifest::new();
        m.set("hb", value);
        m.set("box", "x");
        let text = m.render();
        match RuntimeManifest::parse(&text) {
            Ok(again) => assert_eq!(again, m, "set/render/parse changed the entries"),
            Err(e) => panic!("manifest built with set() does not parse ({e}): {text:?}"),
        }
    }
}

/// `part_index`: parse; what parses renders to text that parses back to the same index.
pub fn part_index(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(index) = PartIndex::parse(text) {
        let rendered = index.render();
        match PartIndex::parse(&rendered) {
            Ok(again) => assert_eq!(again, index, "render/parse changed the index"),
            Err(e) => panic!("rendered part index does not parse ({e}): {rendered:?}"),
        }
    }
}

/// `dumpdir`: the two listings a chain link carries beside its files, read on their own
/// (the archive targets reach them only through a whole tar). The first byte picks one:
/// even, a GNU dumpdir (what parses renders back to the same bytes' entries, and a lookup
/// of each listed name finds its code); odd, a block directory's `index` (what parses
/// renders to exactly the bytes read: the format has one spelling). Block names parse
/// back to the number they were made from.
pub fn dumpdir(data: &[u8]) {
    use crate::archive::blocks::{self, BlockIndex};
    use crate::archive::incremental::Dumpdir;
    let Some((&pick, rest)) = data.split_first() else {
        return;
    };
    if pick % 2 == 0 {
        if let Ok(listing) = Dumpdir::parse(rest) {
            let rendered = listing.render();
            match Dumpdir::parse(&rendered) {
                Ok(again) => assert_eq!(
                    again.entries(),
                    listing.entries(),
                    "render/parse changed the dumpdir"
                ),
                Err(e) => panic!("rendered dumpdir does not parse ({e:?}): {rendered:?}"),
            }
            for (code, name) in listing.entries() {
                assert_eq!(
                    listing.lookup(name),
                    Some(*code),
                    "lookup lost a listed name"
                );
            }
        }
    } else if let Ok(index) = BlockIndex::parse(rest) {
        assert_eq!(
            index.render().as_bytes(),
            rest,
            "a block index has one spelling"
        );
        assert_eq!(
            index.blocks.len() as u64,
            blocks::block_count(index.size, index.block_size)
        );
        for i in 0..index.blocks.len() as u64 {
            assert_eq!(
                blocks::block_number(blocks::block_name(i).as_bytes()),
                Some(i)
            );
        }
    }
}

/// `box_env`: parse; what parses renders to text that parses back to the same values (the
/// host installs the rendered copy in every guest, where `hb` parses it), but for the
/// host-only keys, which a guest never gets and so reads at their defaults.
pub fn box_env(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let path = Path::new("/etc/hermes-box.env");
    match BoxEnv::parse(text, path) {
        Ok(env) => {
            let rendered = env.render();
            let mut in_a_guest = env.clone();
            let defaults = BoxEnv::default();
            for key in crate::box_env::HOST_ONLY_KEYS {
                let default = defaults.get(key).unwrap_or_default();
                if let Err(e) = in_a_guest.set(key, &default) {
                    panic!("{key}'s default does not parse back ({e})");
                }
            }
            match BoxEnv::parse(&rendered, path) {
                Ok(again) => assert_eq!(again, in_a_guest, "render/parse changed the values"),
                Err(e) => panic!("rendered box.env does not parse ({e}): {rendered:?}"),
            }
        }
        Err(e) => {
            let _ = e.to_string();
        }
    }
    // The same bytes as a user's file (expansion from a fixed environment): what it reads
    // renders to a file the guest's strict reader takes.
    let environment = |name: &str| (name == "HOME").then(|| "/home/u".to_string());
    if let Ok((env, _unused)) = BoxEnv::parse_user_file(text, path, environment) {
        let rendered = env.render();
        if let Err(e) = BoxEnv::parse(&rendered, path) {
            panic!(
                "a user file's values render to a box.env that does not parse ({e}): {rendered:?}"
            );
        }
    }
}

/// A message built from guest bytes by [`crate::guest_output::quoted`]: one line, no
/// control character, at most `max` characters of the guest's, each escaped to at most
/// 10 (`\u{10ffff}`), and an ellipsis.
fn check_quoted(text: &str, max: usize) {
    assert!(
        !text.chars().any(char::is_control),
        "control character in {text:?}"
    );
    assert!(
        text.chars().count() <= max * 10 + 1,
        "a {}-character quote",
        text.chars().count()
    );
}

/// The variables the `guest_output` target's key check asks about.
const ASKED: &[&str] = &["OPENAI_API_KEY", "NPM_TOKEN", "GITHUB_TOKEN"];

/// `guest_output`: the first byte picks a reader of [`crate::guest_output`] (what box
/// reads from `hb`'s output), the rest is what the guest printed, decoded as box's
/// process runner decodes it (lossy UTF-8). Each reader never panics and keeps its
/// promises: what it reads renders back to the very line it came from, what box renders
/// reads back as itself, messages are [`check_quoted`], and the key check fails closed.
pub fn guest_output(data: &[u8]) {
    let Some((&pick, rest)) = data.split_first() else {
        return;
    };
    let text = String::from_utf8_lossy(rest);
    match pick % 6 {
        0 => {
            // As the runner hands each stdout line to the export's reader.
            for line in text.split_inclusive('\n') {
                guest_export_line(line.trim_end_matches(['\n', '\r']));
                guest_import_line(line.trim_end_matches(['\n', '\r']));
            }
        }
        1 => rendered_export_lines(rest, &text),
        2 => guest_status(&text),
        3 => guest_doctor(&text),
        4 => guest_key_check(&text),
        _ => guest_token(&text),
    }
}

/// One line of `hb export`'s stdout: an announcement or chain line only in the one
/// spelling hb writes, a malformed one quoted, anything else left alone.
fn guest_export_line(line: &str) {
    use crate::archive::chain_line::{self, ChainSaid};
    use crate::archive::parts::READY;
    use crate::guest_output::{ExportLine, MAX_LINE_QUOTED, export_line};
    let trimmed = line.trim_end();
    let like_ready = trimmed == READY || trimmed.starts_with(&format!("{READY} "));
    match export_line(line) {
        ExportLine::Ready(part) => {
            assert_eq!(
                part.render_ready(),
                trimmed,
                "an announcement read as another"
            );
            assert!(part.size > 0);
        }
        ExportLine::Chain(ChainSaid::Link(n)) => {
            assert!(n >= 1);
            assert_eq!(chain_line::link(n), line, "a chain line read as another");
        }
        ExportLine::Chain(ChainSaid::Full) => assert!(
            line == "chain: full" || (line.starts_with("chain: full (") && line.ends_with(')')),
            "{line:?} read as a full backup's line"
        ),
        ExportLine::Malformed(quoted) => {
            check_quoted(&quoted, MAX_LINE_QUOTED);
            assert!(like_ready || line.starts_with(chain_line::PREFIX));
        }
        ExportLine::Other => assert!(
            !like_ready && !line.starts_with(chain_line::PREFIX),
            "{line:?} was not read"
        ),
    }
}

/// One line of `hb import --follow`'s stdout: a taken part only in the one spelling hb
/// writes, a malformed one quoted, anything else left alone.
fn guest_import_line(line: &str) {
    use crate::archive::follow::TAKEN;
    use crate::archive::parts::part_name;
    use crate::guest_output::{ImportLine, MAX_LINE_QUOTED, import_line};
    let like_taken = line == TAKEN || line.starts_with(&format!("{TAKEN} "));
    match import_line(line) {
        ImportLine::Taken(n) => assert_eq!(
            format!("{TAKEN} {}", part_name(n)),
            line,
            "a taken line read as another"
        ),
        ImportLine::Malformed(quoted) => {
            check_quoted(&quoted, MAX_LINE_QUOTED);
            assert!(like_taken);
        }
        ImportLine::Other => assert!(!like_taken, "{line:?} was not read"),
    }
}

/// What hb writes, built from the input, reads back as itself.
fn rendered_export_lines(rest: &[u8], text: &str) {
    use crate::archive::chain_line::{self, ChainSaid};
    use crate::archive::part_hash::PartHash;
    use crate::archive::parts::{Part, part_name};
    use crate::guest_output::{ExportLine, export_line};
    let mut bytes = [0u8; 48];
    let n = rest.len().min(bytes.len());
    bytes[..n].copy_from_slice(&rest[..n]);
    let word = |at: usize| {
        let mut w = [0u8; 8];
        w.copy_from_slice(&bytes[at..at + 8]);
        u64::from_le_bytes(w)
    };
    let mut digest = [0u8; 32];
    digest.copy_from_slice(&bytes[16..48]);
    let mut short = [0u8; 16];
    short.copy_from_slice(&bytes[16..32]);
    let part = Part {
        name: part_name((word(0) % 1_000_000) as usize),
        size: word(8).max(1),
        hash: if bytes[0] & 1 == 0 {
            PartHash::Sha256(digest)
        } else {
            PartHash::Xxh3_128(short)
        },
    };
    assert_eq!(
        export_line(&part.render_ready()),
        ExportLine::Ready(part.clone())
    );
    let n = u32::try_from(word(8) % u64::from(u32::MAX))
        .unwrap_or(u32::MAX)
        .max(1);
    assert_eq!(
        export_line(&chain_line::link(n)),
        ExportLine::Chain(ChainSaid::Link(n))
    );
    assert_eq!(
        export_line(&chain_line::full(text)),
        ExportLine::Chain(ChainSaid::Full),
        "full({text:?}) does not read back"
    );
}

/// `hb status --json`: only `executor.state` of `paused` is a pause.
fn guest_status(text: &str) {
    use crate::guest_output::{MAX_LINE_QUOTED, executor_paused};
    match executor_paused(text) {
        Ok(_) => {}
        Err(e) => check_quoted(&e, MAX_LINE_QUOTED),
    }
    let status = serde_json::json!({"executor": {"state": text, "pid": 7}}).to_string();
    assert_eq!(executor_paused(&status), Ok(text == "paused"));
    // The word elsewhere is no pause.
    let elsewhere = serde_json::json!({"state": text, "executor": {"note": text}}).to_string();
    assert_eq!(executor_paused(&elsewhere), Ok(false));
    // The enabled services: only known names, each once, whatever the guest listed.
    use crate::HermesService;
    use crate::guest_output::enabled_services;
    match enabled_services(text) {
        Ok(set) => assert!(
            set.windows(2).all(|w| w[0] < w[1]),
            "services out of order or twice: {set:?}"
        ),
        Err(e) => check_quoted(&e, MAX_LINE_QUOTED),
    }
    let listed = serde_json::json!({"services": [{"name": text, "enabled": true}]}).to_string();
    assert_eq!(
        enabled_services(&listed),
        Ok(HermesService::ALL
            .into_iter()
            .filter(|s| s.name() == text)
            .collect())
    );
}

/// `hb doctor`: each fact from the first line that starts with its prefix, quoted; the
/// interrupted save from its line.
fn guest_doctor(text: &str) {
    use crate::guest_output::{DoctorFact, INTERRUPTED_SAVE, MAX_FACT_QUOTED, doctor};
    let said = doctor(text);
    let positions: Vec<usize> = said
        .facts
        .iter()
        .filter_map(|(f, _)| DoctorFact::ALL.iter().position(|a| a == f))
        .collect();
    assert!(
        positions.windows(2).all(|w| w[0] < w[1]),
        "facts out of order or twice"
    );
    for fact in DoctorFact::ALL {
        let line = text.lines().find_map(|l| l.strip_prefix(fact.prefix()));
        let got = said.facts.iter().find(|(f, _)| *f == fact).map(|(_, s)| s);
        match (line, got) {
            (Some(line), Some(got)) => {
                check_quoted(got, MAX_FACT_QUOTED);
                if line.chars().count() <= MAX_FACT_QUOTED && line.chars().all(plain_char) {
                    assert_eq!(got, line, "a plain fact changed");
                }
            }
            (None, None) => {}
            (line, got) => panic!("{fact:?}: line {line:?}, read {got:?}"),
        }
    }
    assert_eq!(said.interrupted_save, text.contains(INTERRUPTED_SAVE));
    for s in &said.services {
        check_quoted(&s.detail, MAX_FACT_QUOTED);
    }
    assert!(
        said.services
            .windows(2)
            .all(|w| w[0].service < w[1].service),
        "services out of order or twice"
    );
    // A report hb writes: its facts read back as they were.
    let plain: String = text
        .chars()
        .filter(|c| plain_char(*c))
        .take(MAX_FACT_QUOTED)
        .collect();
    let report: String = DoctorFact::ALL
        .iter()
        .map(|f| format!("✓ layout: ok\n{}{plain}\n", f.prefix()))
        .collect();
    let said = doctor(&format!("{report}{INTERRUPTED_SAVE}: by save\n"));
    assert_eq!(
        said.facts,
        DoctorFact::ALL.map(|f| (f, plain.clone())),
        "a report's facts did not read back"
    );
    assert!(said.interrupted_save);
}

/// A character any quoting shows as it is: letters and digits of any script, ASCII
/// punctuation, the space (no control, and none of the format characters that reorder
/// text).
fn plain_char(c: char) -> bool {
    c.is_alphanumeric() || c.is_ascii_punctuation() || c == ' '
}

/// The API-key check: any output at all fails it, and only box's own names are quoted.
fn guest_key_check(text: &str) {
    use crate::guest_output::unbound_credentials;
    let unbound = unbound_credentials(text, ASKED);
    assert_eq!(
        unbound.is_empty(),
        text.chars().all(char::is_whitespace),
        "output that did not fail the check (or none that did)"
    );
    for (i, name) in unbound.named.iter().enumerate() {
        assert!(ASKED.contains(&name.as_str()));
        assert!(!unbound.named[..i].contains(name), "{name} named twice");
        assert!(text.split_whitespace().any(|w| w == name));
    }
}

/// Executor's token from `hb token` or its file: trimmed, never empty, bounded; the file's
/// form gives what `hb token` would.
fn guest_token(text: &str) {
    use crate::guest_output::{MAX_TOKEN_BYTES, token, token_from_auth_json};
    let check = |t: &crate::mcp::BearerToken| {
        let v = t.expose();
        assert!(!v.is_empty() && v.len() <= MAX_TOKEN_BYTES);
        assert_eq!(v, v.trim());
    };
    match token(text) {
        Some(t) => {
            check(&t);
            assert_eq!(t.expose(), text.trim());
        }
        None => assert!(text.trim().is_empty() || text.trim().len() > MAX_TOKEN_BYTES),
    }
    if let Some(t) = token_from_auth_json(text) {
        check(&t);
    }
    let file = serde_json::json!({"token": text}).to_string();
    assert!(
        token_from_auth_json(&file) == token(text),
        "the file's token differs"
    );
}

/// `host_facts`: the input as the first bytes of a backup's plaintext (a frame box wrote,
/// or the guest's own bytes in a backup made before), then as facts box seals.
///
/// * [`host_facts::parse`](crate::archive::host_facts::parse) never panics; it calls a
///   frame only what starts with the magic, asks for more only while what is there could
///   still be one, and reads a frame's tag and facts from exactly the bytes it spans;
/// * a frame box renders parses back to the same facts, tag and length, whatever follows
///   it, and every prefix of it reads as incomplete (with the frame's length once its
///   header is there), never as another frame;
/// * every message is [`check_validation`]'s kind: no control character, bounded.
pub fn host_facts(data: &[u8]) {
    use crate::archive::host_facts::{self, HEADER, Head, MAGIC, MAX_FACTS, TAG_LEN};
    check_head(data);
    let Ok(facts) = RuntimeManifest::parse_bytes(data) else {
        return;
    };
    let tag = [data.len() as u8; TAG_LEN];
    let Some(frame) = host_facts::render(&facts, |signed| {
        assert_eq!(
            signed,
            facts.render().as_bytes(),
            "the tag covers other bytes"
        );
        tag
    }) else {
        assert!(
            facts.render().len() > MAX_FACTS,
            "facts that fit were not rendered"
        );
        return;
    };
    assert!(frame.starts_with(&MAGIC));
    let mut stream = frame.clone();
    stream.extend_from_slice(data);
    match host_facts::parse(&stream) {
        Head::Frame { frame: read, len } => {
            assert_eq!(len, frame.len());
            assert_eq!(read.facts, facts);
            assert_eq!(read.signed, facts.render().into_bytes());
            assert_eq!(read.tag, tag);
        }
        other => panic!("a rendered frame reads as {other:?}"),
    }
    for cut in 1..frame.len() {
        let want = if cut < 8 { 8 } else { frame.len() };
        match host_facts::parse(&frame[..cut]) {
            Head::Incomplete { len } if len == want => {}
            other => panic!("{cut} bytes of a frame read as {other:?}"),
        }
    }
    assert!(frame.len() >= HEADER);
}

/// What [`crate::archive::host_facts::parse`] promises of any bytes.
fn check_head(data: &[u8]) {
    use crate::archive::host_facts::{self, HEADER, Head, MAGIC, MAX_FACTS, TAG_LEN};
    let could_be = data.starts_with(&MAGIC) || (!data.is_empty() && MAGIC.starts_with(data));
    match host_facts::parse(data) {
        Head::NotAFrame => assert!(!could_be, "the frame's start read as no frame"),
        Head::Incomplete { len } => {
            assert!(could_be, "no frame's start asks for more");
            assert!(len > data.len() && len <= HEADER + MAX_FACTS);
        }
        Head::Frame { frame, len } => {
            assert!(data.starts_with(&MAGIC));
            assert!(len <= data.len() && len <= HEADER + MAX_FACTS);
            assert_eq!(frame.tag[..], data[9..9 + TAG_LEN]);
            assert_eq!(frame.signed, &data[HEADER..len]);
            assert_eq!(
                RuntimeManifest::parse_bytes(&frame.signed).as_ref(),
                Ok(&frame.facts)
            );
            // The frame alone reads the same, and no prefix of it as a frame.
            let alone = host_facts::parse(&data[..len]);
            assert!(matches!(&alone, Head::Frame { frame: f, len: l } if *f == frame && *l == len));
            for cut in 1..len {
                assert!(
                    matches!(host_facts::parse(&data[..cut]), Head::Incomplete { .. }),
                    "{cut} bytes of a {len}-byte frame"
                );
            }
        }
        Head::Malformed { why, len } => {
            assert!(data.starts_with(&MAGIC));
            assert!(len.is_none_or(|l| l >= 8));
            assert!(
                !why.chars().any(char::is_control),
                "control character in {why:?}"
            );
            assert!(
                why.chars().count() <= 1000,
                "a {}-character message",
                why.len()
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout;

    #[test]
    fn build_tar_makes_a_valid_archive_from_a_plain_description() {
        let desc = b"d./\nd./home/\nd./home/agent/\nd./home/agent/.config/\nd./home/agent/.config/hermes-box/\nf./home/agent/.config/hermes-box/runtime-manifest -> box=0.1.0\n\nl./home/agent/x -> .config\n";
        let bytes = build_tar(desc).unwrap();
        let report = validate::validate(bytes.as_slice(), &limits()).unwrap();
        assert_eq!(report.members, 7);
        assert_eq!(report.manifest.as_deref(), Some(&b"box=0.1.0"[..]));
        assert!(layout::RUNTIME_MANIFEST.starts_with(layout::HOME));
    }

    #[test]
    fn the_chain_seeds_reach_the_unpacker() {
        use crate::archive::validate::validate_link;
        use std::rc::Rc;
        let seed = std::fs::read(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../../fuzz/corpus/archive_chain/kept-links-and-hardlink-to-kept"),
        )
        .unwrap();
        let at = find(&seed, b"\n#link\n").unwrap();
        let first = build_tar(&seed[..at]).unwrap();
        let second = build_tar(&seed[at + 7..]).unwrap();
        let (_, prior) = validate_link(first.as_slice(), &limits(), None).unwrap();
        let (report, after) =
            validate_link(second.as_slice(), &limits(), Some(Rc::new(prior.strict()))).unwrap();
        assert_eq!(report.members, 5);
        assert!(after.get(b"home/agent/py").is_some());
        // And the whole body, unpack included, holds for it.
        archive_chain(&seed);
    }

    #[test]
    fn build_tar_writes_long_names_as_gnu_records() {
        let long = format!("d./home/agent/{}/", "n".repeat(150));
        let desc = format!("#gzip\nd./\nd./home/\nd./home/agent/\n{long}\n");
        let bytes = build_tar(desc.as_bytes()).unwrap();
        let report = validate::validate(bytes.as_slice(), &limits()).unwrap();
        assert_eq!(report.members, 4);
    }
}
