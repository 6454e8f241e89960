//! Where events go: one JSON object per line, to stdout or a file.
use std::{
    fs::OpenOptions,
    io::{self, BufWriter, Write},
    path::Path,
};

use serde::Serialize;

use crate::events::{EventLine, json};

/// A JSON-lines writer; flushed after each drained batch, not per line.
pub struct JsonLines {
    out: BufWriter<Box<dyn Write + Send>>,
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

    pub fn new(w: Box<dyn Write + Send>) -> Self {
        Self {
            out: BufWriter::new(w),
        }
    }

    pub fn write<T: Serialize>(&mut self, value: &T) -> io::Result<()> {
        serde_json::to_writer(&mut self.out, value)?;
        self.out.write_all(b"\n")
    }

    /// An event line, through its hand-written JSON (the hot path's).
    pub fn write_event(&mut self, line: &EventLine) -> io::Result<()> {
        json::write_line(&mut self.out, line)?;
        self.out.write_all(b"\n")
    }

    pub fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }
}
