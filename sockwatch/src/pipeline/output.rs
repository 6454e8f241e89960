//! Where events go: one JSON object per line, to stdout or a file.
//!
//! The agent must outlive its output: a lossy writer ([`JsonLines::lossy`]) whose sink refuses
//! lines (a full disk, a pipe nobody reads) drops them, counted, and writes again once the sink
//! takes lines again. A strict one (a replay's) fails with the sink's first error.
//!
//! A file is opened and followed through renames, removals and SIGHUP by
//! [`events_file::EventsFile`]; [`JsonLines::follow`] hands it the buffered lines' turn.
//!
//! `run`'s writer stamps every line ([`Stamp`]); a replay's writes the engine's verdicts
//! bare, as it has neither the recording's clocks nor its node. With `--format text` it writes
//! a sentence per verdict instead (`text::verdict::line`), and no event lines.
use std::{
    io::{self, Write},
    path::Path,
    time::{SystemTime, UNIX_EPOCH},
};

use serde::Serialize;

use crate::{
    config::EventsFileMode,
    engine::{Fact, Verdict},
    events::{EventLine, json},
    host::{clock, wall::Rfc3339Cache},
    pipeline::{
        events_file::{EventsFile, Followed, Trigger},
        notice::Notice,
    },
    text::{self, Format},
};

/// Past this many buffered bytes the lines are written at once, not at the next flush: a
/// batch drained at 50k events/s is a few hundred lines of about 360 bytes, one write.
const FLUSH_AT: usize = 64 * 1024;

/// What `run` adds to every line: the schema version, the wall-clock time of the line's
/// `ts_ns` and the node's name (see `events::Stamped`).
///
/// The kernel times events on the boot clock and the engine keeps to it; the wall time is
/// computed here, at the edge: `ts_ns + (CLOCK_REALTIME - CLOCK_BOOTTIME)`, both clocks read
/// at the first line after each flush (once per drained batch), not per line. The offset
/// moves only when the wall clock is set or slewed: a suspend advances both clocks alike.
pub struct Stamp {
    node: String,
    clock: Rfc3339Cache,
    /// Realtime minus boottime (ns) for the lines of this batch; `None` until its first line.
    boot_to_wall_ns: Option<i64>,
}

impl Stamp {
    pub fn new(node: String) -> Self {
        Self {
            node,
            clock: Rfc3339Cache::default(),
            boot_to_wall_ns: None,
        }
    }

    /// Ends `line`, a JSON object, with the stamp of its boot-clock time `ts_ns`.
    fn close(&mut self, line: &mut Vec<u8>, ts_ns: u64) -> io::Result<()> {
        let wall_ns = self.wall_ns(ts_ns);
        json::stamp(line, self.clock.format(wall_ns), &self.node)
    }

    /// The wall-clock time (ns since the epoch) of the boot-clock time `ts_ns`.
    fn wall_ns(&mut self, ts_ns: u64) -> u64 {
        let offset = *self.boot_to_wall_ns.get_or_insert_with(boot_to_wall_ns);
        ts_ns.saturating_add_signed(offset)
    }

    /// The batch is out: the next line reads the clocks again.
    fn expire(&mut self) {
        self.boot_to_wall_ns = None;
    }
}

/// Now on the wall clock minus now on the boot clock, ns (a wall clock before 1970 counts as
/// 1970).
pub fn boot_to_wall_ns() -> i64 {
    let boot = clock::boot_ns();
    let wall = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    i64::try_from(wall)
        .unwrap_or(i64::MAX)
        .saturating_sub_unsigned(boot)
}

/// The node's name, for [`Stamp::new`]: `NODE_NAME` (the DaemonSet sets it from the pod's
/// `spec.nodeName`), else the hostname; empty when neither can be read.
pub fn node_name() -> String {
    std::env::var("NODE_NAME")
        .ok()
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| {
            std::fs::read_to_string("/proc/sys/kernel/hostname")
                .map(|h| h.trim().to_owned())
                .unwrap_or_default()
        })
}

/// Where the lines go: the events file, which can be reopened, or any writer (stdout, a test's).
enum Sink {
    File(EventsFile),
    Writer(Box<dyn Write + Send>),
}

impl Write for Sink {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Sink::File(f) => f.write(buf),
            Sink::Writer(w) => w.write(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            Sink::File(f) => f.flush(),
            Sink::Writer(w) => w.flush(),
        }
    }
}

/// A JSON-lines writer; flushed after each drained batch, not per line.
pub struct JsonLines {
    sink: Sink,
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
    /// `run`'s: stamps every line.
    stamp: Option<Stamp>,
    /// JSON objects, or (`run --format text`) a sentence per verdict and no event lines.
    format: Format,
}

impl JsonLines {
    /// `-` is stdout; anything else is a file, appended to, created with `mode` when missing,
    /// never through a symbolic link ([`EventsFile::open`]).
    pub fn open(target: &Path, mode: EventsFileMode) -> io::Result<Self> {
        if target == Path::new("-") {
            return Ok(Self::new(Box::new(io::stdout())));
        }
        let file = EventsFile::open(target, mode)?;
        Ok(Self::with_sink(Sink::File(file)))
    }

    /// A strict writer: a flush fails with the sink's error, and keeps the lines.
    pub fn new(w: Box<dyn Write + Send>) -> Self {
        Self::with_sink(Sink::Writer(w))
    }

    fn with_sink(sink: Sink) -> Self {
        Self {
            sink,
            buf: Vec::with_capacity(FLUSH_AT),
            torn: false,
            lossy: false,
            dropped: 0,
            outage: None,
            stamp: None,
            format: Format::Json,
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

    /// Every line gets `stamp`'s fields.
    pub fn stamped(self, stamp: Stamp) -> Self {
        Self {
            stamp: Some(stamp),
            ..self
        }
    }

    /// Writes verdicts in `format`; with [`Format::Text`], events not at all.
    pub fn formatted(self, format: Format) -> Self {
        Self { format, ..self }
    }

    /// The node the lines are stamped with; empty when unstamped.
    pub fn node(&self) -> &str {
        self.stamp.as_ref().map_or("", |s| s.node.as_str())
    }

    pub fn write_verdict(&mut self, v: &Verdict) -> io::Result<()> {
        match self.format {
            Format::Json => self.write(v, v.ts_ns()),
            Format::Text => self.write_text(&text::verdict::sentence(v), v.ts_ns()),
        }
    }

    /// A fact the host gave about a verdict's claim, for `replay`; like events, none in text.
    pub fn write_fact(&mut self, f: &Fact) -> io::Result<()> {
        if self.format == Format::Text {
            return Ok(());
        }
        self.write(f, f.ts_ns)
    }

    pub fn write_notice(&mut self, n: &Notice) -> io::Result<()> {
        match self.format {
            Format::Json => self.write(n, n.ts_ns()),
            // A notice has no sentence (yet): its JSON, so that text readers still see it.
            Format::Text => {
                let what = format!("NOTICE: {}", serde_json::to_string(n)?);
                self.write_text(&what, n.ts_ns())
            }
        }
    }

    /// `what`, after the wall time of `ts_ns` and the node when stamped.
    fn write_text(&mut self, what: &str, ts_ns: u64) -> io::Result<()> {
        let line = match &mut self.stamp {
            Some(stamp) => text::line(stamp.wall_ns(ts_ns), &stamp.node, what),
            None => what.to_owned(),
        };
        self.buf.extend_from_slice(line.as_bytes());
        self.next_line()
    }

    /// Any JSON object, timed `ts_ns` on the boot clock.
    fn write<T: Serialize>(&mut self, value: &T, ts_ns: u64) -> io::Result<()> {
        serde_json::to_writer(&mut self.buf, value)?;
        self.end_line(ts_ns)
    }

    /// An event line, through its hand-written JSON (the hot path's); none in text.
    pub fn write_event(&mut self, line: &EventLine) -> io::Result<()> {
        if self.format == Format::Text {
            return Ok(());
        }
        json::write_line(&mut self.buf, line)?;
        self.end_line(line.event.ts_ns)
    }

    /// Ends a JSON object timed `ts_ns` with its stamp, and its line.
    fn end_line(&mut self, ts_ns: u64) -> io::Result<()> {
        if let Some(stamp) = &mut self.stamp {
            stamp.close(&mut self.buf, ts_ns)?;
        }
        self.next_line()
    }

    fn next_line(&mut self) -> io::Result<()> {
        self.buf.push(b'\n');
        if self.buf.len() >= FLUSH_AT {
            return self.flush();
        }
        Ok(())
    }

    pub fn flush(&mut self) -> io::Result<()> {
        if let Some(stamp) = &mut self.stamp {
            stamp.expire();
        }
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

    /// Reopens the events file when `trigger` asks for it ([`EventsFile::follow`]); `None`
    /// when the lines go elsewhere (stdout). The lines not yet written go to the file reopened:
    /// a removed file's inode would swallow them. The rest of a line the old file took in part
    /// (a full disk) is dropped, counted: the old file can no longer complete it.
    pub fn follow(&mut self, trigger: Trigger) -> Option<Followed> {
        let Sink::File(file) = &mut self.sink else {
            return None;
        };
        let followed = file.follow(trigger);
        if matches!(followed, Followed::Reopened { .. }) && self.torn {
            let end = self
                .buf
                .iter()
                .position(|&b| b == b'\n')
                .map_or(0, |i| i + 1);
            self.buf.drain(..end);
            self.torn = false;
            self.dropped += 1;
            if let Some(n) = &mut self.outage {
                *n += 1;
            }
        }
        Some(followed)
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
            out.write(&line, 0).expect("buffered");
        }
        out.flush().expect("a lossy flush does not fail");
        assert_eq!(disk.text(), "\"one\"\n\"tw");
        assert_eq!(out.take_dropped(), 1, "\"three\" was not begun");
        out.write(&"four", 0).expect("buffered");
        out.flush().expect("a lossy flush does not fail");
        assert_eq!(out.take_dropped(), 1, "\"four\": still no room");
        disk.make_room(usize::MAX);
        out.write(&"five", 0).expect("buffered");
        out.flush().expect("recovered");
        assert_eq!(disk.text(), "\"one\"\n\"two\"\n\"five\"\n");
        assert_eq!(out.take_dropped(), 0);
    }

    /// A stamped writer to a disk with room, its offset fixed so that boot-clock second 1 is
    /// 2026-12-02T17:20:01Z.
    fn stamped(node: &str) -> (Disk, JsonLines) {
        let disk = Disk::default();
        disk.make_room(usize::MAX);
        let stamp = Stamp {
            node: node.into(),
            clock: Rfc3339Cache::default(),
            boot_to_wall_ns: Some(1_796_232_000_000_000_000),
        };
        (disk.clone(), JsonLines::new(Box::new(disk)).stamped(stamp))
    }

    #[test]
    fn every_line_ends_with_the_schema_the_wall_time_of_its_ts_ns_and_the_node() {
        let (disk, mut out) = stamped("node \"a\"");
        out.write(&serde_json::json!({"verdict": "x"}), 1_123_456_789)
            .expect("buffered");
        out.flush().expect("room");
        assert_eq!(
            disk.text(),
            "{\"verdict\":\"x\",\"schema\":1,\"time\":\"2026-12-02T17:20:01.123456789Z\",\
             \"node\":\"node \\\"a\\\"\"}\n"
        );
    }

    #[test]
    fn the_clocks_are_read_again_at_the_first_line_after_a_flush() {
        let (_, mut out) = stamped("n");
        let offset = |out: &JsonLines| out.stamp.as_ref().and_then(|s| s.boot_to_wall_ns);
        out.flush().expect("room");
        assert_eq!(offset(&out), None, "expired with the batch");
        out.write(&serde_json::json!({}), 0).expect("buffered");
        let read = offset(&out).expect("read at the first line");
        let wall = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .expect("after 1970")
            .as_nanos();
        let expected = i64::try_from(wall).expect("before 2262") - clock::boot_ns() as i64;
        assert!(
            (expected - read).abs() < 1_000_000_000,
            "{read} vs {expected}"
        );
    }

    #[test]
    fn text_is_a_sentence_per_verdict_after_its_time_and_node_and_no_event_lines() {
        let (disk, out) = stamped("node-1");
        let mut out = out.formatted(Format::Text);
        let bind = crate::events::KernelEvent::sample(sockwatch_common::EventKind::Bind, "/run/a");
        out.write_event(&EventLine {
            event: bind,
            workload: None,
            moved: None,
            exe: None,
            runtime: None,
            seen_in: None,
        })
        .expect("buffered");
        let closed = Verdict::OrphanClosed {
            ts_ns: 1_123_456_789,
            since_ns: 123_456_789,
            duration_ns: 1_000_000_000,
            reason: crate::engine::CloseReason::Exited,
            owner: crate::engine::Proc::unknown(7),
            path: Some("/run/a".into()),
            file: crate::engine::FileId { dev: 1, ino: 2 },
            sock_ino: 3,
        };
        out.write_verdict(&closed).expect("buffered");
        out.flush().expect("room");
        assert_eq!(
            disk.text(),
            "2026-12-02T17:20:01.123Z node-1 ORPHAN CLOSED: the orphaned listener of pid 7 on \
             inode 1:2 (once /run/a) ended after 1.0 s: its last owner exited.\n"
        );
    }

    #[test]
    fn lines_buffered_when_the_file_is_reopened_go_to_the_new_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (path, gone) = (dir.path().join("events.jsonl"), dir.path().join("gone"));
        let mut out = JsonLines::open(&path, EventsFileMode::Private).expect("created");
        out.write(&"before", 0).expect("buffered");
        out.flush().expect("written");
        out.write(&"buffered", 0).expect("buffered");
        std::fs::rename(&path, &gone).expect("renamed");
        let followed = out.follow(Trigger::Check).expect("a file");
        assert!(
            matches!(followed, Followed::Reopened { .. }),
            "{followed:?}"
        );
        out.flush().expect("written");
        assert_eq!(
            std::fs::read_to_string(&gone).expect("read"),
            "\"before\"\n"
        );
        assert_eq!(
            std::fs::read_to_string(&path).expect("read"),
            "\"buffered\"\n"
        );
        assert!(matches!(out.follow(Trigger::Check), Some(Followed::Kept)));
        let mut stdout = JsonLines::new(Box::new(io::sink()));
        assert!(
            stdout.follow(Trigger::Hangup).is_none(),
            "nothing to reopen"
        );
    }

    #[test]
    fn a_strict_writer_fails_and_keeps_its_lines() {
        let disk = Disk::default();
        let mut out = JsonLines::new(Box::new(disk.clone()));
        out.write(&"kept", 0).expect("buffered");
        let e = out.flush().expect_err("no room");
        assert_eq!(e.raw_os_error(), Some(libc::ENOSPC));
        disk.make_room(usize::MAX);
        out.flush().expect("room again");
        assert_eq!(disk.text(), "\"kept\"\n");
    }
}
