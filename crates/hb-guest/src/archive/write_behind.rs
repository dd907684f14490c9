//! The export's compressed output written on a thread of its own.
//!
//! `hb export`'s main thread walks `/data`, reads every file and feeds zstd, whose workers
//! compress. On a tree of many small files the main thread is the slower side: its opens,
//! reads and path lookups leave zstd's workers waiting (on the `source` bench corpus, an
//! export alone kept 1.4 of 2 cores busy). Writing the compressed parts (the page cache's
//! copy, ext4's allocation, each part's hash, its announcement and the wait for box to
//! take it) was the main thread's too; [`WriteBehind`] moves it to another thread, so the
//! main thread only copies the output into a buffer and goes on.
//!
//! At most `IN_FLIGHT` buffers of `BUF` bytes (1 MiB) wait for the writer: the memory is
//! bounded, and a writer held back (box has not taken its parts) holds back the export. An
//! error of the writer (a full disk, a reader gone) is returned by the next write or by
//! [`WriteBehind::finish`], in the writer's own words.

use std::io::{self, Write};
use std::sync::mpsc::{Receiver, SyncSender, sync_channel};
use std::thread::JoinHandle;

/// Bytes gathered before they are handed to the writer.
const BUF: usize = 1 << 20;
/// Full buffers that may wait for the writer.
const IN_FLIGHT: usize = 4;

/// A writer whose writes happen on a thread of its own (see the module documentation).
pub struct WriteBehind<W: Write + Send + 'static> {
    filling: Vec<u8>,
    to_writer: Option<SyncSender<Vec<u8>>>,
    /// Buffers the writer is done with, to fill again.
    spent: Receiver<Vec<u8>>,
    writer: Option<JoinHandle<io::Result<W>>>,
}

impl<W: Write + Send + 'static> WriteBehind<W> {
    /// Starts the thread that writes into `inner`.
    pub fn spawn(inner: W) -> io::Result<Self> {
        let (to_writer, from_main) = sync_channel::<Vec<u8>>(IN_FLIGHT);
        let (give_back, spent) = sync_channel::<Vec<u8>>(IN_FLIGHT + 2);
        let writer = std::thread::Builder::new()
            .name("hb-export-out".into())
            .spawn(move || write_all(inner, &from_main, &give_back))?;
        Ok(WriteBehind {
            filling: Vec::with_capacity(BUF),
            to_writer: Some(to_writer),
            spent,
            writer: Some(writer),
        })
    }

    /// Hands the gathered bytes to the writer; a writer that stopped says why.
    fn hand_over(&mut self) -> io::Result<()> {
        if self.filling.is_empty() {
            return Ok(());
        }
        let next = self
            .spent
            .try_recv()
            .unwrap_or_else(|_| Vec::with_capacity(BUF));
        let full = std::mem::replace(&mut self.filling, next);
        let sent = self.to_writer.as_ref().map(|tx| tx.send(full));
        match sent {
            Some(Ok(())) => Ok(()),
            _ => Err(self.stopped()),
        }
    }

    /// The writer's error, once it has stopped.
    fn stopped(&mut self) -> io::Error {
        self.to_writer.take();
        match self.writer.take().map(JoinHandle::join) {
            Some(Ok(Err(e))) => e,
            Some(Err(_)) => io::Error::other("the export's output thread panicked"),
            _ => io::Error::other("the export's output thread stopped"),
        }
    }

    /// Writes what is left, waits for the writer and returns its writer.
    pub fn finish(mut self) -> io::Result<W> {
        self.hand_over()?;
        self.to_writer.take();
        match self.writer.take().map(JoinHandle::join) {
            Some(Ok(done)) => done,
            Some(Err(_)) => Err(io::Error::other("the export's output thread panicked")),
            None => Err(io::Error::other("the export's output thread stopped")),
        }
    }
}

/// The writer's thread: every buffer, in order, into `inner`; flushed at the end.
fn write_all<W: Write>(
    mut inner: W,
    from_main: &Receiver<Vec<u8>>,
    give_back: &SyncSender<Vec<u8>>,
) -> io::Result<W> {
    for mut buf in from_main {
        inner.write_all(&buf)?;
        buf.clear();
        // The main thread allocates a new one when none comes back.
        let _ = give_back.try_send(buf);
    }
    inner.flush()?;
    Ok(inner)
}

impl<W: Write + Send + 'static> Write for WriteBehind<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let room = BUF - self.filling.len();
        let n = room.min(buf.len());
        self.filling.extend_from_slice(&buf[..n]);
        if self.filling.len() == BUF {
            self.hand_over()?;
        }
        Ok(n)
    }

    /// Hands over what is gathered; the writer flushes once, at the end (an export's
    /// output is complete only when [`WriteBehind::finish`] returns).
    fn flush(&mut self) -> io::Result<()> {
        self.hand_over()
    }
}

impl<W: Write + Send + 'static> Drop for WriteBehind<W> {
    fn drop(&mut self) {
        // An export that failed: the writer ends with the channel; its error is moot.
        self.to_writer.take();
        if let Some(writer) = self.writer.take() {
            let _ = writer.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    /// A writer that keeps what it got, or fails after `fail_after` bytes.
    #[derive(Clone)]
    struct Kept {
        got: Arc<Mutex<Vec<u8>>>,
        fail_after: Option<usize>,
    }

    impl Write for Kept {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            let mut got = self.got.lock().unwrap();
            if self.fail_after.is_some_and(|n| got.len() + buf.len() > n) {
                return Err(io::Error::new(
                    io::ErrorKind::StorageFull,
                    "the box's disk is full",
                ));
            }
            got.extend_from_slice(buf);
            Ok(buf.len())
        }

        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn every_byte_arrives_in_order() {
        let kept = Kept {
            got: Arc::default(),
            fail_after: None,
        };
        let mut w = WriteBehind::spawn(kept.clone()).unwrap();
        let mut want = Vec::new();
        for i in 0..5000u32 {
            let piece: Vec<u8> = (0..(i % 3000)).map(|j| (i + j) as u8).collect();
            w.write_all(&piece).unwrap();
            want.extend_from_slice(&piece);
        }
        w.finish().unwrap();
        assert_eq!(*kept.got.lock().unwrap(), want);
    }

    #[test]
    fn the_writers_error_comes_back_in_its_own_words() {
        let kept = Kept {
            got: Arc::default(),
            fail_after: Some(3 * BUF),
        };
        let mut w = WriteBehind::spawn(kept).unwrap();
        let chunk = vec![1u8; 64 << 10];
        let err = (0..1000)
            .find_map(|_| w.write_all(&chunk).err())
            .or_else(|| w.finish().err())
            .expect("a writer that fails fails the export");
        assert_eq!(err.kind(), io::ErrorKind::StorageFull);
        assert!(err.to_string().contains("disk is full"), "{err}");
    }
}
