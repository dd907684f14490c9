//! The HTTP/1.1 the interceptor speaks on a credential host: request heads, message
//! framing, and the substitution rules with smolvm's refusals (texts measured on smolvm
//! 1.18.2/1.22.2, `docs/credentials/SKILL.md`; the 405 and the CONNECT/WebSocket texts are
//! the simulator's, smolvm's were not seen).

use std::collections::BTreeMap;
use std::io::{self, BufRead, Read, Write};

use crate::policy::credential::{Binding, METHODS, PLACEHOLDER_PREFIX};

/// Headers a placeholder may never be substituted in (`PROTECTED_HEADERS`).
const PROTECTED: [&str; 12] = [
    "host",
    "content-length",
    "transfer-encoding",
    "connection",
    "keep-alive",
    "te",
    "trailer",
    "upgrade",
    "proxy-authorization",
    "proxy-authenticate",
    "proxy-connection",
    "cookie",
];

/// Request bodies on credential hosts are buffered up to this (smolvm: 8 MiB).
pub const MAX_BODY: usize = 8 * 1024 * 1024;
const MAX_HEAD: usize = 64 * 1024;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Head {
    /// Method (request) or status code (response).
    pub first: [String; 3],
    pub headers: Vec<(String, String)>,
}

impl Head {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    pub fn remove(&mut self, name: &str) {
        self.headers.retain(|(k, _)| !k.eq_ignore_ascii_case(name));
    }

    pub fn bytes(&self) -> Vec<u8> {
        let mut out = format!("{} {} {}\r\n", self.first[0], self.first[1], self.first[2]);
        for (k, v) in &self.headers {
            out.push_str(&format!("{k}: {v}\r\n"));
        }
        out.push_str("\r\n");
        out.into_bytes()
    }
}

/// A message head, or `None` at a clean end of the stream.
pub fn read_head(r: &mut impl BufRead) -> io::Result<Option<Head>> {
    let mut lines = Vec::new();
    let mut total = 0;
    loop {
        let mut line = Vec::new();
        let n = r
            .take((MAX_HEAD - total) as u64 + 1)
            .read_until(b'\n', &mut line)?;
        if n == 0 {
            if lines.is_empty() {
                return Ok(None);
            }
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "truncated head",
            ));
        }
        total += n;
        if total > MAX_HEAD {
            return Err(io::Error::new(io::ErrorKind::InvalidData, "head too large"));
        }
        let text = String::from_utf8_lossy(&line)
            .trim_end_matches(['\r', '\n'])
            .to_string();
        if text.is_empty() {
            if lines.is_empty() {
                continue;
            }
            break;
        }
        lines.push(text);
    }
    let mut first = lines[0].splitn(3, ' ').map(str::to_string);
    let first = [
        first.next().unwrap_or_default(),
        first.next().unwrap_or_default(),
        first.next().unwrap_or_default(),
    ];
    let mut headers = Vec::new();
    for l in &lines[1..] {
        let (k, v) = l
            .split_once(':')
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "bad header line"))?;
        headers.push((k.trim().to_string(), v.trim().to_string()));
    }
    Ok(Some(Head { first, headers }))
}

/// How a message's body is delimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Body {
    None,
    Length(u64),
    Chunked,
    UntilClose,
}

fn framing(head: &Head) -> io::Result<Option<Body>> {
    if head
        .header("transfer-encoding")
        .is_some_and(|v| v.to_ascii_lowercase().contains("chunked"))
    {
        return Ok(Some(Body::Chunked));
    }
    match head.header("content-length") {
        Some(v) => v
            .trim()
            .parse()
            .map(|n| Some(Body::Length(n)))
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "bad content-length")),
        None => Ok(None),
    }
}

pub fn request_body(head: &Head) -> io::Result<Body> {
    Ok(framing(head)?.unwrap_or(Body::None))
}

pub fn response_body(method: &str, head: &Head) -> io::Result<Body> {
    let status: u16 = head.first[1].parse().unwrap_or(0);
    if method.eq_ignore_ascii_case("HEAD")
        || (100..200).contains(&status)
        || status == 204
        || status == 304
    {
        return Ok(Body::None);
    }
    Ok(framing(head)?.unwrap_or(Body::UntilClose))
}

/// Copy one body from `r` to `w` as it arrives (responses stream, SSE included).
pub fn relay_body(r: &mut impl BufRead, w: &mut impl Write, body: Body) -> io::Result<()> {
    match body {
        Body::None => Ok(()),
        Body::Length(n) => {
            let copied = io::copy(&mut r.take(n), &mut FlushEach(w))?;
            if copied < n {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "body cut short",
                ));
            }
            Ok(())
        }
        Body::UntilClose => io::copy(r, &mut FlushEach(w)).map(drop),
        Body::Chunked => loop {
            let mut line = Vec::new();
            r.take(4096).read_until(b'\n', &mut line)?;
            if line.is_empty() {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "chunk cut short",
                ));
            }
            w.write_all(&line)?;
            let size_text = String::from_utf8_lossy(&line);
            let size =
                u64::from_str_radix(size_text.trim().split(';').next().unwrap_or("").trim(), 16)
                    .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "bad chunk size"))?;
            if size == 0 {
                // Trailers, up to the empty line.
                loop {
                    let mut t = Vec::new();
                    r.take(4096).read_until(b'\n', &mut t)?;
                    w.write_all(&t)?;
                    if t.is_empty() || t == b"\r\n" || t == b"\n" {
                        w.flush()?;
                        return Ok(());
                    }
                }
            }
            let copied = io::copy(&mut r.take(size + 2), w)?;
            w.flush()?;
            if copied < size + 2 {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "chunk cut short",
                ));
            }
        },
    }
}

struct FlushEach<'a, W: Write>(&'a mut W);

impl<W: Write> Write for FlushEach<'_, W> {
    fn write(&mut self, b: &[u8]) -> io::Result<usize> {
        self.0.write_all(b)?;
        self.0.flush()?;
        Ok(b.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        self.0.flush()
    }
}

/// A request body, buffered (raw, as framed) so it can be checked before anything leaves.
pub fn read_request_body(r: &mut impl BufRead, body: Body) -> io::Result<Vec<u8>> {
    let mut out = Vec::new();
    match body {
        Body::None => {}
        Body::Length(n) => {
            if n > MAX_BODY as u64 {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    "request body over 8 MiB",
                ));
            }
            r.take(n).read_to_end(&mut out)?;
            if out.len() as u64 != n {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "body cut short",
                ));
            }
        }
        Body::Chunked | Body::UntilClose => {
            let mut w = Capped(&mut out);
            relay_body(r, &mut w, Body::Chunked)?;
        }
    }
    Ok(out)
}

struct Capped<'a>(&'a mut Vec<u8>);

impl Write for Capped<'_> {
    fn write(&mut self, b: &[u8]) -> io::Result<usize> {
        if self.0.len() + b.len() > MAX_BODY + 64 * 1024 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "request body over 8 MiB",
            ));
        }
        self.0.extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// A refusal the interceptor answers itself: status and the one-line reason.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Refusal(pub u16, pub &'static str);

pub const UNAVAILABLE: Refusal = Refusal(502, "credential unavailable");
pub const UPSTREAM_FAILED: Refusal = Refusal(502, "upstream request failed");

impl Refusal {
    pub fn response(self) -> Vec<u8> {
        let body = format!("smolvm credentials: {}\n", self.1);
        let reason = match self.0 {
            403 => "Forbidden",
            405 => "Method Not Allowed",
            _ => "Bad Gateway",
        };
        format!(
            "HTTP/1.1 {} {reason}\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            self.0,
            body.len()
        )
        .into_bytes()
    }
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

/// Apply the rules to one request to `host` and put the value in place of the placeholder.
/// `value` resolves a binding's variable (the environment of `machine start`).
pub fn substitute(
    head: &mut Head,
    body: &[u8],
    host: &str,
    bindings: &[Binding],
    placeholders: &BTreeMap<String, String>,
    value: impl Fn(&str) -> Option<String>,
) -> Result<(), Refusal> {
    let method = head.first[0].clone();
    if method.eq_ignore_ascii_case("CONNECT") {
        return Err(Refusal(403, "CONNECT is refused on credential hosts"));
    }
    if head.header("upgrade").is_some() {
        return Err(Refusal(
            403,
            "WebSocket upgrades are refused on credential hosts",
        ));
    }
    let prefix = PLACEHOLDER_PREFIX.as_bytes();
    let headers_only = Refusal(403, "placeholders are substituted in request headers only");
    if contains(head.first[1].as_bytes(), prefix) || contains(body, prefix) {
        return Err(headers_only);
    }
    let carrying: Vec<usize> = (0..head.headers.len())
        .filter(|&i| contains(head.headers[i].1.as_bytes(), prefix))
        .collect();
    if carrying.is_empty() {
        return Ok(());
    }
    if carrying
        .iter()
        .any(|&i| PROTECTED.contains(&head.headers[i].0.to_ascii_lowercase().as_str()))
    {
        return Err(Refusal(
            403,
            "placeholders are not substituted in routing or framing headers",
        ));
    }
    let count: usize = carrying
        .iter()
        .map(|&i| head.headers[i].1.matches(PLACEHOLDER_PREFIX).count())
        .sum();
    if count > 1 {
        return Err(Refusal(403, "a request may carry one placeholder"));
    }
    let i = carrying[0];
    let v = &head.headers[i].1;
    let at = v.find(PLACEHOLDER_PREFIX).unwrap_or(0);
    let end = v[at..]
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .map_or(v.len(), |n| at + n);
    let token = v[at..end].to_string();
    let Some(binding) = bindings
        .iter()
        .find(|b| placeholders.get(&b.name) == Some(&token))
    else {
        return Err(Refusal(403, "unknown placeholder"));
    };
    if !binding.allows_host(host) {
        return Err(Refusal(403, "this credential is not allowed for this host"));
    }
    if !METHODS.iter().any(|m| m.eq_ignore_ascii_case(&method)) {
        return Err(Refusal(
            405,
            "this credential is not allowed for this method",
        ));
    }
    let real = value(&binding.env)
        .filter(|s| !s.is_empty() && !s.chars().any(char::is_control))
        .ok_or(UNAVAILABLE)?;
    head.headers[i].1 = format!("{}{real}{}", &v[..at], &v[end..]);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn setup() -> (Vec<Binding>, BTreeMap<String, String>) {
        let b = crate::policy::credential::parse("anthropic=ANTHROPIC_API_KEY@api.anthropic.com")
            .unwrap_or_else(|e| panic!("{e}"));
        let mut p = BTreeMap::new();
        p.insert(
            "anthropic".to_string(),
            "SMOL_PLACEHOLDER_ANTHROPIC_00AA".to_string(),
        );
        (vec![b], p)
    }

    fn head(text: &str) -> Head {
        read_head(&mut text.as_bytes())
            .ok()
            .flatten()
            .unwrap_or_else(|| panic!("no head in {text:?}"))
    }

    fn run(text: &str, body: &str, host: &str, value: Option<&str>) -> Result<Head, Refusal> {
        let (b, p) = setup();
        let mut h = head(text);
        substitute(&mut h, body.as_bytes(), host, &b, &p, |_| {
            value.map(str::to_string)
        })?;
        Ok(h)
    }

    const H: &str = "api.anthropic.com";

    #[test]
    fn a_placeholder_in_a_header_is_replaced_in_place() {
        let h = run(
            "POST /v1/messages HTTP/1.1\r\nHost: api.anthropic.com\r\nx-api-key: SMOL_PLACEHOLDER_ANTHROPIC_00AA\r\nAuthorization: Bearer SMOL_PLACEHOLDER_ANTHROPIC_00AAx\r\n\r\n",
            "",
            H,
            Some("sk-real"),
        );
        // Two headers carry it: refused, nothing substituted.
        assert_eq!(h.unwrap_err().1, "a request may carry one placeholder");
        let h = run(
            "POST /v1/messages HTTP/1.1\r\nHost: api.anthropic.com\r\nAuthorization: Bearer SMOL_PLACEHOLDER_ANTHROPIC_00AA\r\n\r\n",
            "{}",
            H,
            Some("sk-real"),
        )
        .unwrap_or_else(|r| panic!("{r:?}"));
        assert_eq!(h.header("authorization"), Some("Bearer sk-real"));
    }

    #[test]
    fn smolvms_refusals() {
        let ok_head = "GET / HTTP/1.1\r\nHost: api.anthropic.com\r\nx-api-key: SMOL_PLACEHOLDER_ANTHROPIC_00AA\r\n\r\n";
        for (text, body, host, value, want) in [
            (
                "GET /?k=SMOL_PLACEHOLDER_ANTHROPIC_00AA HTTP/1.1\r\n\r\n",
                "",
                H,
                Some("v"),
                (403, "placeholders are substituted in request headers only"),
            ),
            (
                "POST / HTTP/1.1\r\nContent-Length: 40\r\n\r\n",
                "k=SMOL_PLACEHOLDER_ANTHROPIC_00AA",
                H,
                Some("v"),
                (403, "placeholders are substituted in request headers only"),
            ),
            (
                "GET / HTTP/1.1\r\nCookie: a=SMOL_PLACEHOLDER_ANTHROPIC_00AA\r\n\r\n",
                "",
                H,
                Some("v"),
                (
                    403,
                    "placeholders are not substituted in routing or framing headers",
                ),
            ),
            (
                "GET / HTTP/1.1\r\nx-api-key: SMOL_PLACEHOLDER_ANTHROPIC_FFFF\r\n\r\n",
                "",
                H,
                Some("v"),
                (403, "unknown placeholder"),
            ),
            (
                ok_head,
                "",
                "api.other.com",
                Some("v"),
                (403, "this credential is not allowed for this host"),
            ),
            (
                "TRACE / HTTP/1.1\r\nx-api-key: SMOL_PLACEHOLDER_ANTHROPIC_00AA\r\n\r\n",
                "",
                H,
                Some("v"),
                (405, "this credential is not allowed for this method"),
            ),
            (ok_head, "", H, None, (502, "credential unavailable")),
            (
                ok_head,
                "",
                H,
                Some("bad\nvalue"),
                (502, "credential unavailable"),
            ),
            (
                "GET /ws HTTP/1.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n",
                "",
                H,
                Some("v"),
                (403, "WebSocket upgrades are refused on credential hosts"),
            ),
            (
                "CONNECT a:443 HTTP/1.1\r\n\r\n",
                "",
                H,
                Some("v"),
                (403, "CONNECT is refused on credential hosts"),
            ),
        ] {
            let got = run(text, body, host, value).map(drop).unwrap_err();
            assert_eq!((got.0, got.1), want, "{text}");
        }
        let page =
            String::from_utf8(Refusal(403, "unknown placeholder").response()).unwrap_or_default();
        assert!(page.starts_with("HTTP/1.1 403 Forbidden\r\n"), "{page}");
        assert!(
            page.ends_with("\r\n\r\nsmolvm credentials: unknown placeholder\n"),
            "{page}"
        );
    }

    #[test]
    fn a_request_without_a_placeholder_passes_untouched() {
        let text =
            "GET /v1/models HTTP/1.1\r\nHost: api.anthropic.com\r\nx-api-key: my-own\r\n\r\n";
        assert_eq!(run(text, "", H, None), Ok(head(text)));
    }

    #[test]
    fn bodies_are_framed_and_relayed() {
        let mut out = Vec::new();
        let chunked = b"4\r\nabcd\r\n0\r\nX-T: 1\r\n\r\nNEXT";
        let mut r = &chunked[..];
        relay_body(&mut r, &mut out, Body::Chunked).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(out, &chunked[..chunked.len() - 4]);
        assert_eq!(r, b"NEXT");
        let mut r = &b"hello world"[..];
        let body = read_request_body(&mut r, Body::Length(5)).unwrap_or_default();
        assert_eq!(body, b"hello");
        assert!(read_request_body(&mut &b"abc"[..], Body::Length(5)).is_err());
        let resp = head("HTTP/1.1 204 No Content\r\nContent-Length: 5\r\n\r\n");
        assert_eq!(response_body("GET", &resp).ok(), Some(Body::None));
        let sse = head("HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\n");
        assert_eq!(response_body("POST", &sse).ok(), Some(Body::UntilClose));
        assert!(read_head(&mut &b"GET / HTTP/1.1\r\nno colon\r\n\r\n"[..]).is_err());
    }
}
