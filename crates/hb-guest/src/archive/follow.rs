//! The parts of one `--from` directory read as one stream while the host is still copying
//! them in (`hb import --follow`; the protocol is box_proto::archive::follow).
//!
//! [`FollowReader`] waits for the marker of the next part it needs, takes it only as one
//! complete line that names that part, reads the part checking its size and hash as
//! [`super::parts::PartsReader`] does, and removes the part and its marker once it passed:
//! the guest holds only the parts the host copied ahead. After the end marker it reads the
//! part index, which must list exactly the parts it took; only then does the stream end.
//! A host that stops copying (killed mid-load) leaves it waiting: after its patience it
//! fails, and the import discards its stage.

use std::fs;
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use box_proto::archive::follow::{
    self, END_MARKER, EndMarker, MAX_MARKER_BYTES, MarkerText, WAITING, ready_marker,
};
use box_proto::archive::parts::{INDEX_FILE, Part, PartIndex, part_name};

use super::parts::{Reading, open_nofollow};

/// How often a waiting reader looks for the next marker.
const POLL: Duration = Duration::from_millis(5);
/// How often a waiting reader says so on its output: a line that fails once box is gone.
const KEEPALIVE: Duration = Duration::from_secs(1);
/// How long the import waits for a marker before it takes the host for gone: the same
/// backstop as a streaming export's. A box that died is noticed sooner, by the keepalive
/// line failing and by smolvm killing what its vanished exec client ran; a live one may
/// go minutes without a part (`box clone`'s source exporting a large file of zeros, which
/// compresses to almost nothing, before its first part is full).
pub const PATIENCE: Duration = Duration::from_secs(30 * 60);

/// Where a following import says what it took, and how long it waits.
pub struct Follow<'a> {
    /// The `part-taken` and keepalive lines go here (stdout: box reads them).
    pub out: &'a mut dyn Write,
    pub patience: Duration,
}

/// The parts of one directory, read as they arrive.
pub struct FollowReader<'a, 'f> {
    dir: PathBuf,
    follow: &'a mut Follow<'f>,
    /// The parts read and removed so far, in order.
    taken: Vec<Part>,
    current: Option<Reading>,
    /// The index, once the end marker came and the index agreed with what was taken.
    index: Option<PartIndex>,
    /// Why reading stopped, in its own words (a reader's consumer wraps them in its own).
    failure: Option<String>,
}

/// What the directory holds next.
enum Next {
    Part(Part),
    End(EndMarker),
}

fn invalid(what: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what)
}

impl<'a, 'f> FollowReader<'a, 'f> {
    pub fn new(dir: &Path, follow: &'a mut Follow<'f>) -> Self {
        FollowReader {
            dir: dir.to_path_buf(),
            follow,
            taken: Vec::new(),
            current: None,
            index: None,
            failure: None,
        }
    }

    /// The directory's index, once the stream has ended.
    pub fn index(&self) -> Option<&PartIndex> {
        self.index.as_ref()
    }

    /// After the reader's consumer failed, what the parts had to do with it: why the
    /// reader failed, if it did; else the rest of the part it was in, checked (a damaged
    /// part breaks the compression or a member before its own end is seen).
    pub fn own_failure(&mut self) -> Option<String> {
        if let Some(failure) = &self.failure {
            return Some(failure.clone());
        }
        let reading = self.current.as_mut()?;
        reading.check_rest().err().map(|e| e.to_string())
    }

    /// A marker file's complete line, `None` while it is missing or not yet whole.
    fn marker_line(&self, name: &str) -> io::Result<Option<String>> {
        let path = self.dir.join(name);
        let file = match open_nofollow(&path) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e),
        };
        let mut bytes = Vec::new();
        file.take(MAX_MARKER_BYTES + 1).read_to_end(&mut bytes)?;
        match follow::marker_text(&bytes) {
            MarkerText::Incomplete => Ok(None),
            MarkerText::Line(line) => Ok(Some(line.to_string())),
            MarkerText::Invalid => Err(invalid(format!(
                "{} is not one line of at most {MAX_MARKER_BYTES} bytes",
                path.display()
            ))),
        }
    }

    /// What comes next, once its marker is whole: the next part, or the end.
    fn next(&self) -> io::Result<Option<Next>> {
        let expected = part_name(self.taken.len());
        let marker = ready_marker(&expected);
        if let Some(line) = self.marker_line(&marker)? {
            let shown =
                || box_proto::guest_output::quoted(&line, box_proto::guest_output::MAX_LINE_QUOTED);
            return match Part::parse_ready(&line) {
                Some(Ok(part)) if part.name == expected => Ok(Some(Next::Part(part))),
                Some(Ok(part)) => Err(invalid(format!(
                    "{marker} names {} where {expected} was next",
                    part.name
                ))),
                _ => Err(invalid(format!(
                    "{marker} is not a part marker: {}",
                    shown()
                ))),
            };
        }
        match self.marker_line(END_MARKER)? {
            None => Ok(None),
            Some(line) => match EndMarker::parse(&line) {
                Some(end) => Ok(Some(Next::End(end))),
                None => Err(invalid(format!(
                    "{END_MARKER} is not an end marker: {}",
                    box_proto::guest_output::quoted(
                        &line,
                        box_proto::guest_output::MAX_LINE_QUOTED
                    )
                ))),
            },
        }
    }

    /// Waits for [`Self::next`], saying so, until the patience runs out.
    fn wait_next(&mut self) -> io::Result<Next> {
        let since = Instant::now();
        let mut said = Instant::now();
        loop {
            if let Some(next) = self.next()? {
                return Ok(next);
            }
            if said.elapsed() >= KEEPALIVE {
                said = Instant::now();
                writeln!(self.follow.out, "{WAITING} {}", part_name(self.taken.len()))?;
                self.follow.out.flush()?;
            }
            if since.elapsed() > self.follow.patience {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!(
                        "no part arrived in {} for {}s after {} part(s) (waiting for {}); is box still running?",
                        self.dir.display(),
                        self.follow.patience.as_secs(),
                        self.taken.len(),
                        ready_marker(&part_name(self.taken.len()))
                    ),
                ));
            }
            std::thread::sleep(POLL);
        }
    }

    /// A part read whole and checked: removed with its marker, said, counted.
    fn took(&mut self, part: Part) -> io::Result<()> {
        fs::remove_file(self.dir.join(&part.name))?;
        fs::remove_file(self.dir.join(ready_marker(&part.name)))?;
        writeln!(self.follow.out, "{}", follow::render_taken(&part))?;
        self.follow.out.flush()?;
        self.taken.push(part);
        Ok(())
    }

    /// The end: the index must list exactly the parts taken, as the end marker counts them.
    fn end(&mut self, end: EndMarker) -> io::Result<()> {
        let path = self.dir.join(INDEX_FILE);
        let mut text = String::new();
        open_nofollow(&path)?
            .take(box_proto::archive::parts::MAX_PARTS as u64 * 200)
            .read_to_string(&mut text)?;
        let index = PartIndex::parse(&text)
            .map_err(|e| invalid(format!("bad part index {}: {e}", path.display())))?;
        let total: u64 = self.taken.iter().map(|p| p.size).sum();
        if index.parts != self.taken {
            return Err(invalid(format!(
                "the part index {} lists {} part(s), not the {} taken",
                path.display(),
                index.parts.len(),
                self.taken.len()
            )));
        }
        if end.parts != self.taken.len() || end.total != total || index.total_size != total {
            return Err(invalid(format!(
                "{END_MARKER} says {} part(s) of {} bytes; {} part(s) of {total} bytes arrived",
                end.parts,
                end.total,
                self.taken.len()
            )));
        }
        self.index = Some(index);
        Ok(())
    }
}

impl FollowReader<'_, '_> {
    fn read_on(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            if self.index.is_some() {
                return Ok(0);
            }
            if let Some(reading) = self.current.as_mut() {
                if let Some(n) = reading.read(buf)? {
                    return Ok(n);
                }
                if let Some(done) = self.current.take() {
                    self.took(done.part().clone())?;
                }
                continue;
            }
            match self.wait_next()? {
                Next::Part(part) => self.current = Some(Reading::open(&self.dir, part)?),
                Next::End(end) => self.end(end)?,
            }
        }
    }
}

impl Read for FollowReader<'_, '_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        if let Some(failure) = &self.failure {
            return Err(io::Error::other(failure.clone()));
        }
        self.read_on(buf).inspect_err(|e| {
            self.failure = Some(e.to_string());
            self.current = None;
        })
    }
}
