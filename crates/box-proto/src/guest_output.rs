//! What `box` reads from the output of the commands it runs in a guest: `hb export`'s
//! and `hb import --follow`'s stdout lines, `hb status --json`, `hb doctor`'s lines, the API-key check's words and
//! Executor's token. An agent runs in the guest with passwordless sudo, and `hb` and
//! everything else there are within its reach: every byte read here is hostile input,
//! data and never an instruction.
//!
//! So each reader here:
//! * never panics, whatever the bytes (the `guest_output` fuzz target runs every one, see
//!   [`crate::fuzzing::guest_output`]);
//! * takes the few shapes box asks for and nothing else, with a size cap where a shape
//!   could be large ([`MAX_STATUS_BYTES`], [`MAX_TOKEN_BYTES`]);
//! * hands back text meant for a message only as [`quoted`] makes it: at most a fixed
//!   number of characters, on one line, control characters escaped (`\x1b`), so a guest
//!   cannot write to the user's terminal through an error or a report.
//!
//! The other formats the guest hands box have readers of their own, fuzzed too: the part
//! index ([`crate::archive::parts::PartIndex`]), the runtime manifest
//! ([`crate::RuntimeManifest`]), the archives themselves ([`crate::archive::validate`]).

use crate::HermesService;
use crate::archive::chain_line::{self, ChainSaid};
use crate::archive::follow;
use crate::archive::parts::Part;
use crate::escape::shown;
use crate::mcp::BearerToken;

/// The most of an `hb export` line a message quotes.
pub const MAX_LINE_QUOTED: usize = 120;
/// The most of an `hb doctor` line a report quotes (a guest network line names every
/// proxy variable; they fit many times).
pub const MAX_FACT_QUOTED: usize = 1000;
/// The most `hb status --json` box reads: its status is a few hundred bytes, plus the
/// runtime manifest's entries.
pub const MAX_STATUS_BYTES: usize = 1 << 20;
/// The longest Executor token box takes (they are tens of characters).
pub const MAX_TOKEN_BYTES: usize = 4096;

/// `text` for a message: its first `max` characters, control characters escaped, and an
/// ellipsis when cut. Never holds a control character (so never a line break), and never
/// more than `max` × 10 + 1 characters (an escape is at most `\u{10ffff}`).
pub fn quoted(text: &str, max: usize) -> String {
    let mut chars = text.chars();
    let head: String = chars.by_ref().take(max).collect();
    let mut out = shown(head.as_bytes());
    if chars.next().is_some() {
        out.push('…');
    }
    out
}

/// One line of `hb export`'s standard output, as box reads it while the export runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExportLine {
    /// A part announcement ([`crate::archive::parts::READY`]), its fields checked for form.
    Ready(Part),
    /// The chain line ([`chain_line`]).
    Chain(ChainSaid),
    /// A line that starts like one of the two and is neither: the line, [`quoted`].
    Malformed(String),
    /// Anything else the export prints: not box's to read.
    Other,
}

/// Reads one line of `hb export`'s stdout (without its line break).
pub fn export_line(line: &str) -> ExportLine {
    match (Part::parse_ready(line), chain_line::parse(line)) {
        (Some(Ok(part)), _) => ExportLine::Ready(part),
        (_, Some(Ok(said))) => ExportLine::Chain(said),
        (Some(Err(_)), _) | (_, Some(Err(_))) => {
            ExportLine::Malformed(quoted(line, MAX_LINE_QUOTED))
        }
        (None, None) => ExportLine::Other,
    }
}

/// One line of `hb import --follow`'s standard output, as box reads it while the import
/// runs (crate::archive::follow).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ImportLine {
    /// The import read, checked and removed part number `n`.
    Taken(usize),
    /// A line that starts like a [`crate::archive::follow::TAKEN`] line and names no
    /// part: the line, [`quoted`].
    Malformed(String),
    /// Anything else (the keepalive, the summary): not box's to read.
    Other,
}

/// Reads one line of `hb import --follow`'s stdout (without its line break).
pub fn import_line(line: &str) -> ImportLine {
    match follow::parse_taken(line) {
        Some(Ok(n)) => ImportLine::Taken(n),
        Some(Err(())) => ImportLine::Malformed(quoted(line, MAX_LINE_QUOTED)),
        None => ImportLine::Other,
    }
}

/// `hb status --json` as a JSON value: anything that is not JSON of at most
/// [`MAX_STATUS_BYTES`] is an error, its message box's own words (a position, never the
/// guest's bytes).
fn status_value(status_json: &str) -> Result<serde_json::Value, String> {
    if status_json.len() > MAX_STATUS_BYTES {
        return Err(format!(
            "{} bytes, more than the {MAX_STATUS_BYTES} box reads",
            status_json.len()
        ));
    }
    serde_json::from_str(status_json).map_err(|e| {
        // serde_json names a position and a kind of error; quoted all the same.
        quoted(&e.to_string(), MAX_LINE_QUOTED)
    })
}

/// Whether `hb status --json` says Executor is durably paused (`executor.state` is
/// `paused`).
pub fn executor_paused(status_json: &str) -> Result<bool, String> {
    Ok(status_value(status_json)?["executor"]["state"] == "paused")
}

/// The Hermes services `hb status --json` says are enabled (`services[].enabled`), each
/// once, in [`HermesService::ALL`]'s order; an entry of another shape or name is not read.
pub fn enabled_services(status_json: &str) -> Result<Vec<HermesService>, String> {
    let status = status_value(status_json)?;
    let listed = status["services"].as_array().map_or(&[][..], Vec::as_slice);
    Ok(HermesService::ALL
        .into_iter()
        .filter(|s| {
            listed
                .iter()
                .any(|e| e["name"] == s.name() && e["enabled"] == true)
        })
        .collect())
}

/// A line of `hb doctor` that says what is in effect, which `box doctor` shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DoctorFact {
    /// The proxies and CA certificates the guest uses.
    Network,
    /// A durable pause and who made it.
    Paused,
    /// Which way Executor gets its token (auth.json, or argv on 1.5.9).
    Token,
}

impl DoctorFact {
    /// In the order `box doctor` shows them.
    pub const ALL: [DoctorFact; 3] = [DoctorFact::Network, DoctorFact::Paused, DoctorFact::Token];

    /// How `hb doctor` starts the line of the passed check.
    pub fn prefix(self) -> &'static str {
        match self {
            DoctorFact::Network => "✓ guest network: ",
            DoctorFact::Paused => "✓ executor durably paused: ",
            DoctorFact::Token => "✓ executor token: ",
        }
    }
}

/// The failed check of `hb doctor` that reports a save or load that paused Executor and
/// never resumed it.
pub const INTERRUPTED_SAVE: &str = "✗ executor paused by an interrupted save";

/// What `hb doctor` said of one enabled Hermes service: its check, `✓ hermes-gateway: …`
/// or `✗ hermes-gateway: …` (see [`service_check_line`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceSaid {
    pub service: HermesService,
    /// The check passed (the service runs, or is paused on purpose).
    pub ok: bool,
    /// The rest of the line, [`quoted`] to [`MAX_FACT_QUOTED`].
    pub detail: String,
}

/// The start of `hb doctor`'s line for `service`'s check, passed or failed; the detail
/// follows.
pub fn service_check_line(service: HermesService, ok: bool) -> String {
    format!("{} {}: ", if ok { '✓' } else { '✗' }, service.name())
}

/// What box takes from `hb doctor`'s standard output.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DoctorSaid {
    /// Each fact the output has, in [`DoctorFact::ALL`]'s order, from its first line:
    /// the rest of that line, [`quoted`] to [`MAX_FACT_QUOTED`].
    pub facts: Vec<(DoctorFact, String)>,
    /// It reports an interrupted save ([`INTERRUPTED_SAVE`]).
    pub interrupted_save: bool,
    /// The check of each Hermes service it has, in [`HermesService::ALL`]'s order, from
    /// the first line of it.
    pub services: Vec<ServiceSaid>,
}

/// Reads `hb doctor`'s standard output.
pub fn doctor(stdout: &str) -> DoctorSaid {
    let facts = DoctorFact::ALL
        .into_iter()
        .filter_map(|fact| {
            let said = stdout.lines().find_map(|l| l.strip_prefix(fact.prefix()))?;
            Some((fact, quoted(said, MAX_FACT_QUOTED)))
        })
        .collect();
    let services = HermesService::ALL
        .into_iter()
        .filter_map(|service| {
            let (passed, failed) = (
                service_check_line(service, true),
                service_check_line(service, false),
            );
            stdout.lines().find_map(|l| {
                let (ok, detail) = match (l.strip_prefix(&passed), l.strip_prefix(&failed)) {
                    (Some(d), _) => (true, d),
                    (_, Some(d)) => (false, d),
                    _ => return None,
                };
                Some(ServiceSaid {
                    service,
                    ok,
                    detail: quoted(detail, MAX_FACT_QUOTED),
                })
            })
        })
        .collect();
    DoctorSaid {
        facts,
        interrupted_save: stdout.contains(INTERRUPTED_SAVE),
        services,
    }
}

/// What the check that every API key is bound printed: it prints the name of each
/// variable (of those box asked about) that holds no smolvm placeholder.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Unbound {
    /// The variables it named, of those asked about, each once, in the order printed.
    pub named: Vec<String>,
    /// It printed something besides those names.
    pub other: bool,
}

impl Unbound {
    /// Every key took: the check printed nothing at all. Any output fails closed.
    pub fn is_empty(&self) -> bool {
        self.named.is_empty() && !self.other
    }
}

/// Reads the API-key check's output: words separated by whitespace, each the name of a
/// variable in `asked` or something else (never quoted: only box's own names are).
pub fn unbound_credentials(stdout: &str, asked: &[&str]) -> Unbound {
    let mut unbound = Unbound::default();
    for word in stdout.split_whitespace() {
        match asked.iter().find(|a| **a == word) {
            Some(name) if !unbound.named.iter().any(|n| n == name) => {
                unbound.named.push((*name).to_string());
            }
            Some(_) => {}
            None => unbound.other = true,
        }
    }
    unbound
}

/// Executor's token as `hb token` prints it: trimmed, not empty, at most
/// [`MAX_TOKEN_BYTES`].
pub fn token(stdout: &str) -> Option<BearerToken> {
    (stdout.trim().len() <= MAX_TOKEN_BYTES)
        .then(|| BearerToken::new(stdout))
        .flatten()
}

/// Executor's token from its token file (`{"token": "…"}`), for an `hb` without a token
/// verb: as [`token`] reads `hb token`'s output.
pub fn token_from_auth_json(text: &str) -> Option<BearerToken> {
    if text.len() > MAX_STATUS_BYTES {
        return None;
    }
    let value: serde_json::Value = serde_json::from_str(text).ok()?;
    token(value.get("token")?.as_str()?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::archive::part_hash::PartHash;
    use crate::archive::parts;

    fn part() -> Part {
        Part {
            name: parts::part_name(2),
            size: 1 << 20,
            hash: PartHash::Xxh3_128([0xab; 16]),
        }
    }

    #[test]
    fn quoted_text_is_one_bounded_line() {
        assert_eq!(quoted("plain", 10), "plain");
        assert_eq!(
            quoted("a\x1b]52;c;eA==\x07b", 100),
            "a\\x1b]52;c;eA==\\x07b"
        );
        assert_eq!(quoted("line\nbreak\r", 100), "line\\x0abreak\\x0d");
        assert_eq!(quoted("abcdef", 3), "abc…");
        assert_eq!(quoted("é\u{85}", 5), "é\\x85");
    }

    #[test]
    fn export_lines_are_announcements_chain_lines_or_not_read() {
        let p = part();
        assert_eq!(export_line(&p.render_ready()), ExportLine::Ready(p.clone()));
        assert_eq!(
            export_line(&chain_line::link(4)),
            ExportLine::Chain(ChainSaid::Link(4))
        );
        assert_eq!(
            export_line(&chain_line::full("no parent")),
            ExportLine::Chain(ChainSaid::Full)
        );
        for other in ["Exported 3 members", "", "part-readyx", "chain:x"] {
            assert_eq!(export_line(other), ExportLine::Other, "{other}");
        }
        // Malformed, and quoted without the guest's escape sequences or its length.
        let hostile = format!("part-ready \x1b[2J{}", "x".repeat(10_000));
        let ExportLine::Malformed(q) = export_line(&hostile) else {
            panic!("read as something else");
        };
        assert!(q.starts_with("part-ready \\x1b[2J"), "{q}");
        assert!(q.chars().count() <= MAX_LINE_QUOTED + 4, "{}", q.len());
        assert!(matches!(
            export_line("chain: incremental, link 0"),
            ExportLine::Malformed(_)
        ));
        // A size in another spelling is not the announcement hb writes.
        let plus = p.render_ready().replace(" 1048576 ", " +1048576 ");
        assert!(matches!(export_line(&plus), ExportLine::Malformed(_)));
    }

    #[test]
    fn import_lines_are_taken_parts_or_not_read() {
        assert_eq!(
            import_line(&follow::render_taken(&part())),
            ImportLine::Taken(2)
        );
        for other in [
            "part-wait part-000003",
            "Imported 3 members",
            "",
            "part-takenx",
        ] {
            assert_eq!(import_line(other), ImportLine::Other, "{other}");
        }
        // A hostile line that starts like one: malformed, quoted, bounded.
        let hostile = format!("part-taken \x1b]52;c;{}", "y".repeat(10_000));
        let ImportLine::Malformed(q) = import_line(&hostile) else {
            panic!("read as something else");
        };
        assert!(q.starts_with("part-taken \\x1b]52"), "{q}");
        assert!(q.chars().count() <= MAX_LINE_QUOTED + 4, "{}", q.len());
        for bad in [
            "part-taken part-1",
            "part-taken part-000001 x",
            "part-taken /etc",
        ] {
            assert!(
                matches!(import_line(bad), ImportLine::Malformed(_)),
                "{bad}"
            );
        }
    }

    #[test]
    fn only_a_paused_executor_reads_as_paused() {
        let status = |state: &str| format!(r#"{{"executor":{{"state":"{state}","pid":null}}}}"#);
        assert_eq!(executor_paused(&status("paused")), Ok(true));
        assert_eq!(executor_paused(&status("running")), Ok(false));
        assert_eq!(executor_paused(r#"{"executor":"paused"}"#), Ok(false));
        assert_eq!(executor_paused("[1,2]"), Ok(false));
        let err = executor_paused("Executor: paused\x1b[31m").unwrap_err();
        assert!(!err.chars().any(char::is_control), "{err}");
        let huge = format!("{}{}", status("paused"), " ".repeat(MAX_STATUS_BYTES));
        assert!(executor_paused(&huge).is_err());
        let deep = "[".repeat(100_000);
        assert!(
            executor_paused(&deep).is_err(),
            "nesting is capped, not a crash"
        );
    }

    #[test]
    fn doctor_facts_come_from_their_lines_bounded_and_escaped() {
        let out = "✓ layout: ok\n✓ executor token: auth.json\n✓ guest network: proxies: none\n\
                   ✗ executor paused by an interrupted save: by save at 3\n\
                   ✓ guest network: second line not read\n";
        let said = doctor(out);
        assert_eq!(
            said.facts,
            [
                (DoctorFact::Network, "proxies: none".to_string()),
                (DoctorFact::Token, "auth.json".to_string()),
            ]
        );
        assert!(said.interrupted_save);
        assert_eq!(doctor("✓ all fine\n"), DoctorSaid::default());
        let hostile = format!("✓ executor token: \x1b]0;owned\x07{}", "y".repeat(5000));
        let said = doctor(&hostile);
        let (_, text) = &said.facts[0];
        assert!(text.starts_with("\\x1b]0;owned\\x07y"), "{text}");
        assert!(text.chars().count() <= MAX_FACT_QUOTED + 8);
    }

    #[test]
    fn service_checks_come_from_their_first_line_bounded_and_escaped() {
        let out = format!(
            "✓ layout: ok\n{}running (pid 7, up 3s, 0 restarts)\n{}exited with 1; last log lines: \x1b[2Jboom\n{}second line not read\n✓ hermes-dashboard: not ours\n",
            service_check_line(HermesService::Gateway, true),
            service_check_line(HermesService::Cron, false),
            service_check_line(HermesService::Gateway, false),
        );
        let said = doctor(&out);
        assert_eq!(
            said.services,
            [
                ServiceSaid {
                    service: HermesService::Gateway,
                    ok: true,
                    detail: "running (pid 7, up 3s, 0 restarts)".into(),
                },
                ServiceSaid {
                    service: HermesService::Cron,
                    ok: false,
                    detail: "exited with 1; last log lines: \\x1b[2Jboom".into(),
                },
            ]
        );
        let long = format!("✗ hermes-cron: {}", "z".repeat(50_000));
        assert!(doctor(&long).services[0].detail.chars().count() <= MAX_FACT_QUOTED + 1);
        // A look-alike name is not the service's line.
        assert!(
            doctor("✓ hermes-gateway2: x\n✓ hermes-gateway:x\n")
                .services
                .is_empty()
        );
    }

    #[test]
    fn enabled_services_are_read_from_status_with_its_limits() {
        let status = r#"{"executor":{"state":"running"},"services":[
            {"name":"hermes-cron","enabled":true},
            {"name":"hermes-gateway","enabled":"yes"},
            {"name":"hermes-dashboard","enabled":true},
            {"name":"hermes-cron","enabled":true}]}"#;
        assert_eq!(enabled_services(status), Ok(vec![HermesService::Cron]));
        let both = r#"{"services":[{"name":"hermes-gateway","enabled":true},{"name":"hermes-cron","enabled":true}]}"#;
        assert_eq!(
            enabled_services(both),
            Ok(vec![HermesService::Gateway, HermesService::Cron])
        );
        // An older hb lists none; a list of another shape is none too.
        assert_eq!(enabled_services(r#"{"executor":{}}"#), Ok(vec![]));
        assert_eq!(
            enabled_services(r#"{"services":"hermes-gateway"}"#),
            Ok(vec![])
        );
        let err = enabled_services("services: \x1b[31m").unwrap_err();
        assert!(!err.chars().any(char::is_control), "{err}");
        let huge = format!("{both}{}", " ".repeat(MAX_STATUS_BYTES));
        assert!(enabled_services(&huge).is_err());
    }

    #[test]
    fn the_key_check_fails_closed_and_names_only_asked_variables() {
        let asked = ["OPENAI_API_KEY", "NPM_TOKEN"];
        assert!(unbound_credentials("", &asked).is_empty());
        assert!(unbound_credentials(" \n\t", &asked).is_empty());
        let u = unbound_credentials("NPM_TOKEN\nNPM_TOKEN\n", &asked);
        assert_eq!(u.named, ["NPM_TOKEN"]);
        assert!(!u.other && !u.is_empty());
        let u = unbound_credentials("\x1b[2J sudo-was-here OPENAI_API_KEY", &asked);
        assert_eq!(u.named, ["OPENAI_API_KEY"]);
        assert!(u.other);
        let u = unbound_credentials("ANTHROPIC_API_KEY", &asked);
        assert!(u.named.is_empty() && u.other && !u.is_empty());
    }

    #[test]
    fn tokens_are_trimmed_bounded_and_never_empty() {
        assert_eq!(token(" abc \n").unwrap().expose(), "abc");
        assert!(token(" \n").is_none());
        assert!(token(&"t".repeat(MAX_TOKEN_BYTES + 1)).is_none());
        assert!(token(&"t".repeat(MAX_TOKEN_BYTES)).is_some());
        assert_eq!(
            token_from_auth_json(r#"{"token":" abc \n"}"#)
                .unwrap()
                .expose(),
            "abc"
        );
        assert!(token_from_auth_json(r#"{"token":""}"#).is_none());
        assert!(token_from_auth_json("abc").is_none());
        assert!(token_from_auth_json(r#"{"tok":"x"}"#).is_none());
        assert!(token_from_auth_json(r#"{"token":7}"#).is_none());
    }
}
