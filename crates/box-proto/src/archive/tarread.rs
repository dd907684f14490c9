//! Our own tar reader, reading what GNU tar 1.34 reads the way it reads it (issue 13).
//!
//! The `tar` crate could not be made to: it skips a directory's size as data (GNU tar
//! does not, and keeps the next member), treats a PAX global header as a member, takes
//! malformed PAX records silently, and knows no PAX sparse format (0.0 was extracted as
//! its packed data: silent loss). Here every header is decoded into a [`Member`]:
//!
//! * ustar/GNU/v7/star headers, octal or base-256 numbers (a field that is neither is a
//!   corrupt header, named), checksums signed or unsigned, as GNU tar accepts them;
//! * GNU long names (`L`, `K`), PAX local (`x`, Solaris `X`) and global (`g`) headers,
//!   records parsed strictly (a malformed record is refused, named by its offset and
//!   keyword); global records apply to every later member, local ones override them;
//! * sparse files in every format GNU tar reads: old GNU (`S`, with extension blocks),
//!   PAX 0.0 (`GNU.sparse.offset`/`numbytes` pairs), 0.1 (`GNU.sparse.map`) and 1.0 (the
//!   map at the start of the data); the map is checked (inside the real size, in order,
//!   not overlapping, covering exactly the stored bytes);
//! * a directory's size is not data (GNU tar's extraction reads none), nor is a link's;
//! * volume labels (`V`) are skipped, GNU dumpdirs (`D`) are directories, as GNU tar does
//!   without `--incremental`.
//!
//! Names quoted in errors are escaped and cut short ([`super::shown`]).

use std::collections::BTreeMap;
use std::io::{self, Read};

use crate::archive::shown::shown_name;
use crate::escape::shown;

/// Largest PAX or GNU long-name header read into memory (GNU tar has no limit; a 1 MiB
/// name is already absurd, and Go's `pax-bad-hdr-large` is one).
pub const MAX_META_BYTES: u64 = 1 << 20;

/// Most sparse map entries of one member (each costs 16 bytes of memory).
pub const MAX_SPARSE_ENTRIES: u64 = 1 << 16;

/// Most PAX global headers in one archive. Writers put one at the start (git archive's
/// commit id, `tar --pax-option`); each one applies to every later member, so without a
/// cap a crafted archive made every member pay for megabytes of them.
pub const MAX_GLOBAL_HEADERS: u64 = 1000;

/// Most bytes of PAX global headers in one archive, all of them together.
pub const MAX_GLOBAL_BYTES: u64 = 64 << 10;

/// The PAX keywords that change how a member is read: the only global records kept (the
/// others, comments and the like, change nothing GNU tar's extraction does).
const MEMBER_KEYWORDS: &[&[u8]] = &[
    b"path",
    b"linkpath",
    b"size",
    b"mtime",
    b"GNU.sparse.name",
    b"GNU.sparse.size",
    b"GNU.sparse.realsize",
    b"GNU.sparse.major",
    b"GNU.sparse.minor",
    b"GNU.sparse.numblocks",
    b"GNU.sparse.offset",
    b"GNU.sparse.numbytes",
    b"GNU.sparse.map",
];

/// What a member is, once its headers are decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemberKind {
    Dir,
    File,
    Symlink,
    Hardlink,
    /// Any other type flag (devices, FIFOs, unknown): rule 4 refuses it.
    Other(u8),
}

impl MemberKind {
    /// The tar type flag the validator's rules are written against.
    pub fn entry_type(self) -> tar::EntryType {
        match self {
            MemberKind::Dir => tar::EntryType::Directory,
            MemberKind::File => tar::EntryType::Regular,
            MemberKind::Symlink => tar::EntryType::Symlink,
            MemberKind::Hardlink => tar::EntryType::Link,
            MemberKind::Other(b) => tar::EntryType::new(b),
        }
    }
}

/// One decoded member.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    pub name: Vec<u8>,
    pub link: Vec<u8>,
    pub kind: MemberKind,
    /// Permission bits as stored (the caller masks them).
    pub mode: u32,
    /// Seconds and nanoseconds since the epoch (PAX times may be fractional or negative).
    pub mtime: (i64, u32),
    /// The logical size of a file (the real size of a sparse one).
    pub size: u64,
    /// Where the stored bytes go, for a sparse file: (offset, length), in order.
    pub sparse: Option<Vec<(u64, u64)>>,
    /// Bytes of data stored in the archive for this member (after a 1.0 sparse map).
    pub stored: u64,
    /// Byte offset of the member's (first) header in the tar stream.
    pub offset: u64,
    /// A GNU dumpdir (type `D`): a directory whose data lists its entries
    /// (box_proto::archive::incremental).
    pub dumpdir: bool,
}

/// Why the stream is not a tar GNU tar would extract cleanly.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TarError(pub String);

impl std::fmt::Display for TarError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// Reads members from an uncompressed tar stream.
pub struct TarReader<R: Read> {
    inner: R,
    /// Bytes consumed from `inner`.
    pos: u64,
    /// Data bytes of the current member not yet read, and padding after them.
    left: u64,
    pad: u64,
    global: BTreeMap<Vec<u8>, Vec<u8>>,
    /// PAX global headers read so far, and their bytes.
    globals: u64,
    global_bytes: u64,
    done: bool,
    /// An I/O error of `inner` (decompression, limits), kept for the caller.
    pub io_error: Option<io::Error>,
    /// Set when the archive broke a cap on PAX global headers (the error's text says
    /// which): a safety refusal, not a malformed stream.
    pub global_cap_broken: bool,
}

fn err<T>(what: String) -> Result<T, TarError> {
    Err(TarError(what))
}

impl<R: Read> TarReader<R> {
    pub fn new(inner: R) -> Self {
        TarReader {
            inner,
            pos: 0,
            left: 0,
            pad: 0,
            global: BTreeMap::new(),
            globals: 0,
            global_bytes: 0,
            done: false,
            io_error: None,
            global_cap_broken: false,
        }
    }

    /// PAX global headers read so far (the validator counts them with the members).
    pub fn global_headers(&self) -> u64 {
        self.globals
    }

    /// Gives the underlying reader back (to drain what follows the end marker).
    pub fn into_inner(self) -> R {
        self.inner
    }

    fn io(&mut self, e: io::Error, what: &str) -> TarError {
        let t = TarError(format!("{what}: {}", shown(e.to_string().as_bytes())));
        self.io_error = Some(e);
        t
    }

    /// Reads exactly `buf.len()` bytes; `Ok(false)` on a clean EOF before the first byte.
    fn fill(&mut self, buf: &mut [u8]) -> Result<bool, TarError> {
        let mut got = 0;
        while got < buf.len() {
            match self.inner.read(&mut buf[got..]) {
                Ok(0) => break,
                Ok(n) => got += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(self.io(e, "corrupt tar or compressed stream")),
            }
        }
        self.pos += got as u64;
        if got == 0 {
            return Ok(false);
        }
        if got < buf.len() {
            return err(format!(
                "truncated tar stream: it ends inside a block at byte {}",
                self.pos
            ));
        }
        Ok(true)
    }

    fn skip(&mut self, mut n: u64) -> Result<(), TarError> {
        let mut buf = [0u8; 8192];
        while n > 0 {
            let want = n.min(buf.len() as u64) as usize;
            match self.inner.read(&mut buf[..want]) {
                Ok(0) => {
                    return err(format!(
                        "truncated tar stream: a member's data ends early at byte {}",
                        self.pos
                    ));
                }
                Ok(k) => {
                    n -= k as u64;
                    self.pos += k as u64;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(self.io(e, "corrupt tar or compressed stream")),
            }
        }
        Ok(())
    }

    /// Reads from the current member's data.
    pub fn read_data(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let want = (buf.len() as u64).min(self.left) as usize;
        if want == 0 {
            return Ok(0);
        }
        let n = self.inner.read(&mut buf[..want])?;
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!(
                    "truncated tar stream: a member's data ends early at byte {}",
                    self.pos
                ),
            ));
        }
        self.left -= n as u64;
        self.pos += n as u64;
        Ok(n)
    }

    /// Reads a whole metadata member (long name, PAX records) of `size` bytes.
    fn read_meta(&mut self, size: u64, what: &str, at: u64) -> Result<Vec<u8>, TarError> {
        if size > MAX_META_BYTES {
            return err(format!(
                "{what} at byte {at} is {size} bytes (more than {MAX_META_BYTES} is refused)"
            ));
        }
        let padded = size.div_ceil(512) * 512;
        let mut buf = vec![0u8; padded as usize];
        if padded > 0 && !self.fill(&mut buf)? {
            return err(format!(
                "truncated tar stream: {what} at byte {at} has no data"
            ));
        }
        buf.truncate(size as usize);
        Ok(buf)
    }

    /// The next member, or `None` at the end-of-archive marker (or a clean EOF between
    /// members, which GNU tar also accepts).
    pub fn next_member(&mut self) -> Result<Option<Member>, TarError> {
        if self.done {
            return Ok(None);
        }
        let (l, p) = (self.left, self.pad);
        self.skip(l + p)?;
        self.left = 0;
        self.pad = 0;
        let mut long_name: Option<Vec<u8>> = None;
        let mut long_link: Option<Vec<u8>> = None;
        let mut local: Option<Vec<Record>> = None;
        loop {
            let offset = self.pos;
            let mut block = [0u8; 512];
            // EOF or a zero block, even right after extended headers that then describe
            // nothing: the end (GNU tar extracts what came, silently).
            if !self.fill(&mut block)? || block.iter().all(|b| *b == 0) {
                self.done = true;
                return Ok(None);
            }
            check_checksum(&block, offset)?;
            let flag = block[156];
            let size = number(&block[124..136], "size", offset)?;
            let size = u64::try_from(size).map_err(|_| {
                TarError(format!(
                    "corrupt tar header at byte {offset}: negative size {size}"
                ))
            })?;
            match flag {
                b'L' => {
                    long_name = Some(until_nul(&self.read_meta(size, "GNU long name", offset)?));
                    continue;
                }
                b'K' => {
                    long_link = Some(until_nul(&self.read_meta(size, "GNU long link", offset)?));
                    continue;
                }
                b'x' | b'X' => {
                    let data = self.read_meta(size, "PAX extended header", offset)?;
                    // A second local header before a member replaces the first whole, as
                    // in GNU tar (Go's pax-multi-hdrs: only the last one counts).
                    local = Some(parse_pax(&data, offset)?);
                    continue;
                }
                b'g' => {
                    self.globals += 1;
                    self.global_bytes = self.global_bytes.saturating_add(size);
                    if self.globals > MAX_GLOBAL_HEADERS || self.global_bytes > MAX_GLOBAL_BYTES {
                        self.global_cap_broken = true;
                        return err(format!(
                            "more than {MAX_GLOBAL_HEADERS} PAX global headers or {} KiB of them, at byte {offset}",
                            MAX_GLOBAL_BYTES >> 10
                        ));
                    }
                    let data = self.read_meta(size, "PAX global header", offset)?;
                    // An empty value is kept as empty (GNU tar then names the next
                    // members "", as it does Go's pax-global-records), not a deletion.
                    for (k, v) in parse_pax(&data, offset)? {
                        if MEMBER_KEYWORDS.contains(&k.as_slice()) {
                            self.global.insert(k, v);
                        }
                    }
                    continue;
                }
                b'V' => {
                    // A volume label: GNU tar skips it when extracting.
                    self.skip(size.div_ceil(512) * 512)?;
                    continue;
                }
                _ => {}
            }
            let member = self.decode(
                &block,
                offset,
                size,
                long_name.take(),
                long_link.take(),
                local.take(),
            )?;
            return Ok(Some(member));
        }
    }

    fn decode(
        &mut self,
        block: &[u8; 512],
        offset: u64,
        header_size: u64,
        long_name: Option<Vec<u8>>,
        long_link: Option<Vec<u8>>,
        local: Option<Vec<Record>>,
    ) -> Result<Member, TarError> {
        let flag = block[156];
        let ustar = &block[257..263] == b"ustar\0";
        let mut name = until_nul(&block[..100]);
        if ustar && block[345] != 0 {
            let prefix = until_nul(&block[345..500]);
            let mut full = prefix;
            full.push(b'/');
            full.extend_from_slice(&name);
            name = full;
        }
        if let Some(n) = long_name {
            name = n;
        }
        let mut link = until_nul(&block[157..257]);
        if let Some(l) = long_link {
            link = l;
        }
        let mode = number(&block[100..108], "mode", offset)?;
        let mut mtime = (number(&block[136..148], "mtime", offset)?, 0u32);
        let mut size = header_size;
        // Records: globals first, the member's own override them (POSIX, GNU tar).
        let local = local.unwrap_or_default();
        let records = self.global.iter().chain(local.iter().map(|(k, v)| (k, v)));
        let mut sparse = SparseRecords::default();
        for (key, value) in records {
            let text = || String::from_utf8_lossy(value).into_owned();
            match key.as_slice() {
                b"path" => name = value.clone(),
                b"linkpath" => link = value.clone(),
                b"size" => size = pax_u64(value, "size", offset)?,
                b"mtime" => {
                    if let Some(t) = pax_time(value) {
                        mtime = t;
                    }
                }
                b"GNU.sparse.name" => sparse.name = Some(value.clone()),
                b"GNU.sparse.size" | b"GNU.sparse.realsize" => {
                    sparse.realsize = Some(pax_u64(value, &String::from_utf8_lossy(key), offset)?)
                }
                b"GNU.sparse.major" => sparse.major = Some(text()),
                b"GNU.sparse.minor" => sparse.minor = Some(text()),
                b"GNU.sparse.numblocks" => {
                    sparse.numblocks = Some(pax_u64(value, "GNU.sparse.numblocks", offset)?)
                }
                b"GNU.sparse.offset" => {
                    sparse.pairs_open = Some(pax_u64(value, "GNU.sparse.offset", offset)?)
                }
                b"GNU.sparse.numbytes" => {
                    let n = pax_u64(value, "GNU.sparse.numbytes", offset)?;
                    match sparse.pairs_open.take() {
                        Some(o) => sparse.pairs.push((o, n)),
                        None => {
                            return err(format!(
                                "malformed PAX record GNU.sparse.numbytes at byte {offset}: no GNU.sparse.offset before it"
                            ));
                        }
                    }
                    if sparse.pairs.len() as u64 > MAX_SPARSE_ENTRIES {
                        return err(format!(
                            "sparse map at byte {offset} has more than {MAX_SPARSE_ENTRIES} entries"
                        ));
                    }
                }
                b"GNU.sparse.map" => sparse.map = Some(parse_map_01(value, offset)?),
                _ => {}
            }
        }
        if let Some(n) = sparse.name.take() {
            name = n;
        }
        let mut kind = match flag {
            b'0' | 0 | b'7' => {
                if name.ends_with(b"/") && flag != b'7' {
                    MemberKind::Dir
                } else {
                    MemberKind::File
                }
            }
            b'S' => MemberKind::File,
            b'1' => MemberKind::Hardlink,
            b'2' => MemberKind::Symlink,
            b'5' | b'D' => MemberKind::Dir,
            other => MemberKind::Other(other),
        };
        if matches!(kind, MemberKind::Dir) && flag == 0 && !name.ends_with(b"/") {
            kind = MemberKind::File;
        }
        // What is stored after the header, and how much of it is data.
        let stored_total = match kind {
            // A directory's size is not data to GNU tar's extraction (a 'D' dumpdir's is).
            MemberKind::Dir if flag != b'D' => 0,
            MemberKind::Symlink | MemberKind::Hardlink => 0,
            _ => size,
        };
        let mut member = Member {
            name,
            link,
            kind,
            mode: u32::try_from(mode & 0o7777).unwrap_or(0),
            mtime,
            size,
            sparse: None,
            stored: stored_total,
            offset,
            dumpdir: flag == b'D',
        };
        self.left = stored_total;
        self.pad = stored_total.div_ceil(512) * 512 - stored_total;
        if flag == b'S' {
            let map = self.old_gnu_sparse(block, offset)?;
            let real = number(&block[483..495], "realsize", offset)?;
            let real = u64::try_from(real).map_err(|_| {
                TarError(format!(
                    "corrupt tar header at byte {offset}: negative realsize"
                ))
            })?;
            member.size = real;
            member.sparse = Some(map);
        } else if sparse.is_pax() {
            let real = sparse.realsize.ok_or_else(|| {
                TarError(format!(
                    "sparse member at byte {offset} has no GNU.sparse.size or GNU.sparse.realsize"
                ))
            })?;
            let map = match (sparse.major.as_deref(), sparse.minor.as_deref()) {
                (Some("1"), Some("0")) => self.map_10(offset)?,
                (Some(major), minor) => {
                    return err(format!(
                        "sparse member at byte {offset} uses PAX sparse format {}.{}, which GNU tar 1.34 does not read either",
                        shown_name(major.as_bytes()),
                        shown_name(minor.unwrap_or("?").as_bytes())
                    ));
                }
                (None, _) => match sparse.map.take() {
                    Some(m) => m,
                    None => {
                        if sparse.pairs_open.is_some() {
                            return err(format!(
                                "malformed PAX record GNU.sparse.offset at byte {offset}: no GNU.sparse.numbytes after it"
                            ));
                        }
                        std::mem::take(&mut sparse.pairs)
                    }
                },
            };
            if let Some(n) = sparse.numblocks
                && n != map.len() as u64
            {
                return err(format!(
                    "sparse member at byte {offset}: GNU.sparse.numblocks is {n} but the map has {} entries",
                    map.len()
                ));
            }
            member.size = real;
            member.stored = self.left;
            member.sparse = Some(map);
        }
        if let Some(map) = &mut member.sparse {
            // GNU tar's file ends where the map's last entry ends (it never extends the
            // file to the real size itself); an empty map is a whole hole of the real size.
            if map.is_empty() {
                map.push((member.size, 0));
            }
            let end = map.last().map_or(0, |(o, n)| o.saturating_add(*n));
            check_map(map, member.size, self.left, offset, &member.name)?;
            member.size = end;
            if member.kind != MemberKind::File {
                return err(format!(
                    "sparse data on a member that is not a regular file at byte {offset}"
                ));
            }
        }
        Ok(member)
    }

    /// The old GNU sparse map: four entries in the header, 21 per extension block.
    fn old_gnu_sparse(
        &mut self,
        block: &[u8; 512],
        offset: u64,
    ) -> Result<Vec<(u64, u64)>, TarError> {
        let mut map = Vec::new();
        let take = |entries: &[u8], map: &mut Vec<(u64, u64)>| -> Result<bool, TarError> {
            for e in entries.chunks_exact(24) {
                // GNU tar ends the map at an entry whose numbytes field is empty.
                if e[12] == 0 {
                    return Ok(false);
                }
                let o = number(&e[..12], "sparse offset", offset)?;
                let n = number(&e[12..], "sparse numbytes", offset)?;
                let (Ok(o), Ok(n)) = (u64::try_from(o), u64::try_from(n)) else {
                    return err(format!(
                        "corrupt tar header at byte {offset}: negative sparse map entry"
                    ));
                };
                map.push((o, n));
                if map.len() as u64 > MAX_SPARSE_ENTRIES {
                    return err(format!(
                        "sparse map at byte {offset} has more than {MAX_SPARSE_ENTRIES} entries"
                    ));
                }
            }
            Ok(true)
        };
        take(&block[386..482], &mut map)?;
        let mut extended = block[482] != 0;
        while extended {
            let mut ext = [0u8; 512];
            if !self.fill(&mut ext)? {
                return err(format!(
                    "truncated tar stream: sparse extension block of the member at byte {offset} is missing"
                ));
            }
            take(&ext[..504], &mut map)?;
            extended = ext[504] != 0;
        }
        Ok(map)
    }

    /// The PAX 1.0 map at the start of the data: decimal numbers, one a line (count, then
    /// offset/size pairs), padded to a block.
    fn map_10(&mut self, offset: u64) -> Result<Vec<(u64, u64)>, TarError> {
        let mut used = 0u64;
        let mut line = Vec::new();
        let mut next_number = |r: &mut Self| -> Result<u64, TarError> {
            line.clear();
            loop {
                let mut b = [0u8; 1];
                let n = r.read_data(&mut b).map_err(|e| {
                    TarError(format!(
                        "sparse map (format 1.0) of the member at byte {offset}: {e}"
                    ))
                })?;
                if n == 0 {
                    return err(format!(
                        "sparse map (format 1.0) of the member at byte {offset} runs past the member's data"
                    ));
                }
                used += 1;
                if b[0] == b'\n' {
                    break;
                }
                if !b[0].is_ascii_digit() || line.len() >= 20 {
                    return err(format!(
                        "sparse map (format 1.0) of the member at byte {offset} is not decimal numbers, one a line"
                    ));
                }
                line.push(b[0]);
            }
            std::str::from_utf8(&line)
                .ok()
                .and_then(|s| s.parse::<u64>().ok())
                .ok_or_else(|| {
                    TarError(format!(
                        "sparse map (format 1.0) of the member at byte {offset} holds an empty or too large number"
                    ))
                })
        };
        let count = next_number(self)?;
        if count > MAX_SPARSE_ENTRIES {
            return err(format!(
                "sparse map at byte {offset} has more than {MAX_SPARSE_ENTRIES} entries"
            ));
        }
        let mut map = Vec::with_capacity(count as usize);
        for _ in 0..count {
            let o = next_number(self)?;
            let n = next_number(self)?;
            map.push((o, n));
        }
        // The map is padded to a whole block; the data follows.
        let pad = used.div_ceil(512) * 512 - used;
        if pad > self.left {
            return err(format!(
                "sparse map (format 1.0) of the member at byte {offset} runs past the member's data"
            ));
        }
        let mut rest = vec![0u8; pad as usize];
        let mut got = 0;
        while got < rest.len() {
            let n = self
                .read_data(&mut rest[got..])
                .map_err(|e| TarError(format!("sparse map of the member at byte {offset}: {e}")))?;
            got += n;
        }
        Ok(map)
    }
}

#[derive(Default)]
struct SparseRecords {
    name: Option<Vec<u8>>,
    realsize: Option<u64>,
    major: Option<String>,
    minor: Option<String>,
    numblocks: Option<u64>,
    pairs_open: Option<u64>,
    pairs: Vec<(u64, u64)>,
    map: Option<Vec<(u64, u64)>>,
}

impl SparseRecords {
    fn is_pax(&self) -> bool {
        self.major.is_some()
            || self.map.is_some()
            || !self.pairs.is_empty()
            || self.pairs_open.is_some()
            || self.numblocks.is_some()
    }
}

/// A sparse map must lie inside the file, in order, without overlaps, and its runs must
/// fit in the bytes stored. As GNU tar reads them (`sparse_extract_region`), each run's
/// data starts on a block boundary of the member's data: a run of n bytes takes
/// ceil(n/512) blocks (GNU tar writes them so; others, like Go's tests, do not, and GNU
/// tar fails on those with "Unexpected EOF", as we refuse them). Bytes stored beyond the
/// last run are skipped, as GNU tar skips them.
fn check_map(
    map: &[(u64, u64)],
    real: u64,
    stored: u64,
    offset: u64,
    name: &[u8],
) -> Result<(), TarError> {
    let mut end = 0u64;
    let mut blocks = 0u64;
    for (o, n) in map {
        let Some(e) = o.checked_add(*n) else {
            return err(format!(
                "sparse map of {} (at byte {offset}) has an entry past any file size",
                shown_name(name)
            ));
        };
        if *o < end {
            return err(format!(
                "sparse map of {} (at byte {offset}) has overlapping or unordered entries",
                shown_name(name)
            ));
        }
        if e > real {
            return err(format!(
                "sparse map of {} (at byte {offset}) points outside the file ({e} > size {real})",
                shown_name(name)
            ));
        }
        end = e;
        blocks += n.div_ceil(512);
    }
    if blocks > stored.div_ceil(512) {
        return err(format!(
            "sparse map of {} (at byte {offset}) needs {blocks} blocks of data but {stored} bytes are stored (GNU tar: Unexpected EOF)",
            shown_name(name)
        ));
    }
    Ok(())
}

fn until_nul(bytes: &[u8]) -> Vec<u8> {
    let end = bytes.iter().position(|b| *b == 0).unwrap_or(bytes.len());
    bytes[..end].to_vec()
}

/// A header's checksum: the sum of its bytes with the field as spaces, unsigned or signed
/// (old tars summed signed chars).
fn check_checksum(block: &[u8; 512], offset: u64) -> Result<(), TarError> {
    let field = &block[148..156];
    let stored = number(field, "checksum", offset)?;
    let mut unsigned: i64 = 0;
    let mut signed: i64 = 0;
    for (i, b) in block.iter().enumerate() {
        let b = if (148..156).contains(&i) { b' ' } else { *b };
        unsigned += i64::from(b);
        signed += i64::from(b as i8);
    }
    if stored != unsigned && stored != signed {
        return err(format!(
            "corrupt tar header at byte {offset}: checksum mismatch (not a tar archive, or damaged)"
        ));
    }
    Ok(())
}

/// A numeric header field: octal (spaces or NULs around it), or base-256 when the first
/// byte is 0x80 (positive) or 0xff (negative), as GNU tar reads them.
fn number(field: &[u8], what: &str, offset: u64) -> Result<i64, TarError> {
    let bad = || {
        TarError(format!(
            "corrupt tar header at byte {offset}: the {what} field is not a number ({})",
            shown(field)
        ))
    };
    match field.first() {
        Some(0x80) | Some(0xff) => {
            let mut v: i128 = if field[0] == 0xff { -1 } else { 0 };
            for b in &field[1..] {
                v = (v << 8) | i128::from(*b);
                if v > i128::from(i64::MAX) || v < i128::from(i64::MIN) {
                    return Err(bad());
                }
            }
            i64::try_from(v).map_err(|_| bad())
        }
        _ => {
            let s = field;
            let start = s.iter().position(|b| *b != b' ' && *b != 0);
            let Some(start) = start else {
                return Ok(0);
            };
            let digits_end = s[start..]
                .iter()
                .position(|b| !(b'0'..=b'7').contains(b))
                .map_or(s.len(), |p| start + p);
            if digits_end == start || s[digits_end..].iter().any(|b| *b != b' ' && *b != 0) {
                return Err(bad());
            }
            let mut v: i64 = 0;
            for b in &s[start..digits_end] {
                v = v
                    .checked_mul(8)
                    .and_then(|v| v.checked_add(i64::from(b - b'0')))
                    .ok_or_else(bad)?;
            }
            Ok(v)
        }
    }
}

/// One PAX record: keyword and value.
pub type Record = (Vec<u8>, Vec<u8>);

/// PAX records, strictly: `<len> <key>=<value>\n`, `<len>` counting the whole record.
/// A malformed one is refused naming its offset (and keyword when there is one), as GNU
/// tar refuses it ("Malformed extended header").
pub fn parse_pax(data: &[u8], at: u64) -> Result<Vec<Record>, TarError> {
    let mut out = Vec::new();
    let mut i = 0usize;
    while i < data.len() {
        let rest = &data[i..];
        let bad = |why: &str, key: Option<&[u8]>| {
            TarError(format!(
                "malformed PAX record{} at byte {} of the extended header at byte {at}: {why}",
                key.map(|k| format!(" {}", shown_name(k)))
                    .unwrap_or_default(),
                i
            ))
        };
        let Some(space) = rest.iter().take(21).position(|b| *b == b' ') else {
            return Err(bad("missing length", None));
        };
        let len_text = &rest[..space];
        if len_text.is_empty() || !len_text.iter().all(u8::is_ascii_digit) {
            return Err(bad("missing length", None));
        }
        let len: usize = std::str::from_utf8(len_text)
            .ok()
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| bad("length overflow", None))?;
        if len > rest.len() || len < space + 2 {
            return Err(bad("length overflow", None));
        }
        let record = &rest[space + 1..len];
        let Some(eq) = record.iter().position(|b| *b == b'=') else {
            return Err(bad("missing equal sign", None));
        };
        let key = &record[..eq];
        if !record.ends_with(b"\n") {
            return Err(bad("missing newline", Some(key)));
        }
        if key.is_empty() || key.contains(&0) {
            return Err(bad("empty or NUL-holding keyword", Some(key)));
        }
        let value = &record[eq + 1..record.len() - 1];
        out.push((key.to_vec(), value.to_vec()));
        i += len;
    }
    Ok(out)
}

fn pax_u64(value: &[u8], what: &str, offset: u64) -> Result<u64, TarError> {
    std::str::from_utf8(value)
        .ok()
        .filter(|s| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
        .and_then(|s| s.parse::<u64>().ok())
        .ok_or_else(|| {
            TarError(format!(
                "malformed PAX record {what} in the extended header of the member at byte {offset}: {:?} is not a size",
                shown_name(value)
            ))
        })
}

/// A PAX time: `[-]seconds[.fraction]`, read as GNU tar 1.34 reads it: the longest such
/// prefix counts, what follows is ignored, and a value with no leading number is ignored
/// (the header's mtime stays) — GNU tar extracts libarchive's `pax_timestamps`
/// (`1748089464.951928467a`) and Go's `pax-bad-mtime-file` (`999xxx9324.4…`) without a word.
fn pax_time(value: &[u8]) -> Option<(i64, u32)> {
    let (neg, rest) = match value.strip_prefix(b"-") {
        Some(r) => (true, r),
        None => (false, value),
    };
    let int_len = rest.iter().take_while(|b| b.is_ascii_digit()).count();
    if int_len == 0 {
        return None;
    }
    let secs: i64 = std::str::from_utf8(&rest[..int_len]).ok()?.parse().ok()?;
    let mut nanos: u32 = 0;
    if rest.get(int_len) == Some(&b'.') {
        let frac = rest[int_len + 1..]
            .iter()
            .take_while(|b| b.is_ascii_digit());
        for (i, d) in frac.take(9).enumerate() {
            nanos += u32::from(d - b'0') * 10u32.pow(8 - i as u32);
        }
    }
    if neg {
        // -1.5 is 1.5 s before the epoch: -2 s + 0.5 s.
        if nanos > 0 {
            Some((-secs - 1, 1_000_000_000 - nanos))
        } else {
            Some((-secs, 0))
        }
    } else {
        Some((secs, nanos))
    }
}

/// `GNU.sparse.map`: `offset,size,offset,size,…`.
fn parse_map_01(value: &[u8], offset: u64) -> Result<Vec<(u64, u64)>, TarError> {
    if value.is_empty() {
        return Ok(Vec::new());
    }
    let nums: Result<Vec<u64>, TarError> = value
        .split(|b| *b == b',')
        .take(MAX_SPARSE_ENTRIES as usize * 2 + 1)
        .map(|n| pax_u64(n, "GNU.sparse.map", offset))
        .collect();
    let nums = nums?;
    if nums.len() % 2 != 0 || nums.len() as u64 > MAX_SPARSE_ENTRIES * 2 {
        return err(format!(
            "malformed PAX record GNU.sparse.map of the member at byte {offset}: an odd or too large number of values"
        ));
    }
    Ok(nums.chunks_exact(2).map(|c| (c[0], c[1])).collect())
}

/// A member's data as a reader (the stored bytes: for a sparse file, packed).
pub struct Data<'a, R: Read> {
    pub(crate) reader: &'a mut TarReader<R>,
}

impl<R: Read> Read for Data<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.reader.read_data(buf)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pax_records_are_strict() {
        assert_eq!(
            parse_pax(b"12 path=abc\n", 0).unwrap(),
            vec![(b"path".to_vec(), b"abc".to_vec())]
        );
        for (bad, why) in [
            (&b"12 path=abcd"[..], "missing newline"),
            (b"9 pathab\n", "missing equal sign"),
            (b"x path=a\n", "missing length"),
            (b"99 path=a\n", "length overflow"),
        ] {
            let e = parse_pax(bad, 0).unwrap_err().0;
            assert!(e.contains(why), "{e}");
        }
    }

    #[test]
    fn numbers_octal_and_base256() {
        assert_eq!(number(b"0000644\0", "mode", 0).unwrap(), 0o644);
        assert_eq!(number(b"   644 \0", "mode", 0).unwrap(), 0o644);
        assert_eq!(number(&[0x80, 0, 0, 0, 0, 0, 0, 1], "size", 0).unwrap(), 1);
        assert_eq!(number(&[0xff; 8], "size", 0).unwrap(), -1);
        assert!(number(b"\xf4101\xf40t", "size", 0).is_err());
        assert!(number(b"12x4", "size", 0).is_err());
    }

    #[test]
    fn maps_are_checked() {
        // Each run takes whole blocks of the stored data.
        assert!(check_map(&[(0, 1), (10, 2)], 12, 1024, 0, b"f").is_ok());
        assert!(check_map(&[(0, 1), (10, 2)], 12, 513, 0, b"f").is_ok());
        assert!(check_map(&[(0, 1), (10, 2)], 12, 512, 0, b"f").is_err());
        assert!(check_map(&[(0, 1), (10, 2)], 12, 4096, 0, b"f").is_ok());
        // Overlapping, outside the file, past any size.
        assert!(check_map(&[(0, 5), (3, 2)], 12, 1024, 0, b"f").is_err());
        assert!(check_map(&[(0, 5), (10, 3)], 12, 1024, 0, b"f").is_err());
        assert!(check_map(&[(u64::MAX, 5)], 12, 512, 0, b"f").is_err());
    }

    #[test]
    fn pax_times() {
        assert_eq!(pax_time(b"1.5"), Some((1, 500_000_000)));
        assert_eq!(pax_time(b"-1.5"), Some((-2, 500_000_000)));
        assert_eq!(
            pax_time(b"1748089464.951928467a"),
            Some((1748089464, 951928467))
        );
        assert_eq!(pax_time(b"999xxx9324.4"), Some((999, 0)));
        assert_eq!(pax_time(b"x1"), None);
    }
}
