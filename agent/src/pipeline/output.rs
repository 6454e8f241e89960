//! Where events go: one JSON object per line, to stdout or a file.
//!
//! The agent must outlive its output: a lossy writer ([`JsonLines::lossy`]) whose sink refuses
//! lines (a full disk, a pipe nobody reads) drops them, counted, and writes again once the sink
//! takes lines again. A strict one (a replay's) fails with the sink's first error.
use std::{
    fs::OpenOptions,
    io::{self, Write},
    path::Path,
};

use serde::Serialize;

use crate::events::{EventLine, json};

/// Past this many buffered bytes the lines are written at once, not at the next flush.
const FLUSH_AT: usize = 8 * 1024;

/// A JSON-lines writer; flushed after each drained batch, not per line.
pub struct JsonLines {
    sink: Box<dyn Write + Send>,
    /// Lines not yet handed to the sink.
    buf: Vec<u8>,
    /// `buf` starts in the middle of a line: the sink holds that line's beginning.
    torn: bool,
    /// Drop what the sink refuses instead of failing.
    lossy: bool,
    /// Lines dropped and not yet taken by [`JsonLines::take_dropped`].
    dropped: u64,
    /// While the sink fails: the lines dropped since it began to.
    outage: Option<u64>,
}

impl JsonLines {
    /// `-` is stdout; anything else is a file, appended to.
    pub fn open(target: &Path) -> io::Result<Self> {
        let w: Box<dyn Write + Send> = if target == Path::new("-") {
            Box::new(io::stdout())
        } else {
            Box::new(OpenOptions::new().create(true).append(true).open(target)?)
        };
        Ok(Self::new(w))
    }

    /// A strict writer: a flush fails with the sink's error, and keeps the lines.
    pub fn new(w: Box<dyn Write + Send>) -> Self {
        Self {
            sink: w,
            buf: Vec::with_capacity(FLUSH_AT),
            torn: false,
            lossy: false,
            dropped: 0,
            outage: None,
        }
    }

    /// Flushes never fail: lines the sink refuses are dropped and counted
    /// ([`JsonLines::take_dropped`]), one log line when it begins failing, one when it recovers.
    pub fn lossy(self) -> Self {
        Self {
            lossy: true,
            ..self
        }
    }

    pub fn write<T: Serialize>(&mut self, value: &T) -> io::Result<()> {
        serde_json::to_writer(&mut self.buf, value)?;
        self.end_line()
    }

    /// An event line, through its hand-written JSON (the hot path's).
    pub fn write_event(&mut self, line: &EventLine) -> io::Result<()> {
        json::write_line(&mut self.buf, line)?;
        self.end_line()
    }

    fn end_line(&mut self) -> io::Result<()> {
        self.buf.push(b'\n');
        if self.buf.len() >= FLUSH_AT {
            return self.flush();
        }
        Ok(())
    }

    pub fn flush(&mut self) -> io::Result<()> {
        match self.write_out() {
            Ok(()) => {
                if let Some(lost) = self.outage.take() {
                    log::info!(
                        "events output recovered; {lost} lines were dropped while it failed"
                    );
                }
                Ok(())
            }
            Err(e) if self.lossy => {
                self.drop_unbegun(&e);
                Ok(())
            }
            Err(e) => Err(e),
        }
    }

    /// Lines dropped since the last call.
    pub fn take_dropped(&mut self) -> u64 {
        std::mem::take(&mut self.dropped)
    }

    /// Hands the buffer to the sink, removing what it took.
    fn write_out(&mut self) -> io::Result<()> {
        while !self.buf.is_empty() {
            match self.sink.write(&self.buf) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => {
                    self.torn = self.buf[n - 1] != b'\n';
                    self.buf.drain(..n);
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        self.sink.flush()
    }

    /// The sink failed: the lines it has not begun are dropped and counted; the rest of a line
    /// it took in part is kept, so that the output holds whole lines once the sink recovers.
    fn drop_unbegun(&mut self, e: &io::Error) {
        let keep = match self.buf.iter().position(|&b| b == b'\n') {
            Some(end) if self.torn => end + 1,
            _ => 0,
        };
        let lost = self.buf[keep..].iter().filter(|&&b| b == b'\n').count() as u64;
        self.buf.truncate(keep);
        self.dropped += lost;
        match &mut self.outage {
            Some(n) => *n += lost,
            None => {
                log::warn!(
                    "events output failed: {e}; dropping lines (counted in \
                     sockwatch_output_lines_dropped_total) until it takes them again"
                );
                self.outage = Some(lost);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;

    /// A sink with room for a given number of bytes, then ENOSPC; what it took is shared.
    #[derive(Clone, Default)]
    struct Disk {
        room: Arc<Mutex<usize>>,
        taken: Arc<Mutex<Vec<u8>>>,
    }

    impl Disk {
        fn make_room(&self, bytes: usize) {
            *self.room.lock().expect("room") = bytes;
        }

        fn text(&self) -> String {
            String::from_utf8(self.taken.lock().expect("taken").clone()).expect("utf-8")
        }
    }

    impl Write for Disk {
        fn write(&mut self, b: &[u8]) -> io::Result<usize> {
            let mut room = self.room.lock().expect("room");
            if *room == 0 {
                return Err(io::Error::from_raw_os_error(libc::ENOSPC));
            }
            let n = b.len().min(*room);
            *room -= n;
            self.taken.lock().expect("taken").extend_from_slice(&b[..n]);
            Ok(n)
        }

        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_lossy_writer_drops_unbegun_lines_and_completes_a_torn_one() {
        let disk = Disk::default();
        let mut out = JsonLines::new(Box::new(disk.clone())).lossy();
        disk.make_room("\"one\"\n".len() + 3);
        for line in ["one", "two", "three"] {
            out.write(&line).expect("buffered");
        }
        out.flush().expect("a lossy flush does not fail");
        assert_eq!(disk.text(), "\"one\"\n\"tw");
        assert_eq!(out.take_dropped(), 1, "\"three\" was not begun");
        out.write(&"four").expect("buffered");
        out.flush().expect("a lossy flush does not fail");
        assert_eq!(out.take_dropped(), 1, "\"four\": still no room");
        disk.make_room(usize::MAX);
        out.write(&"five").expect("buffered");
        out.flush().expect("recovered");
        assert_eq!(disk.text(), "\"one\"\n\"two\"\n\"five\"\n");
        assert_eq!(out.take_dropped(), 0);
    }

    #[test]
    fn a_strict_writer_fails_and_keeps_its_lines() {
        let disk = Disk::default();
        let mut out = JsonLines::new(Box::new(disk.clone()));
        out.write(&"kept").expect("buffered");
        let e = out.flush().expect_err("no room");
        assert_eq!(e.raw_os_error(), Some(libc::ENOSPC));
        disk.make_room(usize::MAX);
        out.flush().expect("room again");
        assert_eq!(disk.text(), "\"kept\"\n");
    }
}
