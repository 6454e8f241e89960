//! What happens to each kernel event: completed, written, and run through the engine, whose
//! verdicts are written as their own lines.
use std::{collections::VecDeque, io};

use crate::{
    adapter,
    engine::{Engine, Input, Verdict},
    enrich::{self, LiveTable},
    event::SockEvent,
    output::JsonLines,
};

/// Verdicts kept for the API.
const RECENT_VERDICTS: usize = 1_024;

pub struct Pipeline {
    pub engine: Engine,
    out: JsonLines,
    live: Option<LiveTable>,
    recent: VecDeque<Verdict>,
    /// Write each event before its verdicts (`run`); off when replaying a recorded log.
    echo_events: bool,
}

impl Pipeline {
    /// A live pipeline: events and verdicts are written; `live` (the kernel's table)
    /// completes refused connects.
    pub fn live(engine: Engine, out: JsonLines, live: LiveTable) -> Self {
        Self {
            engine,
            out,
            live: Some(live),
            recent: VecDeque::new(),
            echo_events: true,
        }
    }

    /// A replay of recorded events: only verdicts are written.
    pub fn replay(engine: Engine, out: JsonLines) -> Self {
        Self {
            engine,
            out,
            live: None,
            recent: VecDeque::new(),
            echo_events: false,
        }
    }

    /// Completes, writes and correlates one kernel event.
    pub fn event(&mut self, mut ev: SockEvent) -> io::Result<()> {
        if let Some(live) = &self.live {
            enrich::connect_target(&mut ev, |id| live.get(id));
        }
        if self.echo_events {
            self.out.write(&ev)?;
        }
        match adapter::to_input(&ev) {
            Some(input) => self.input(&input),
            None => Ok(()),
        }
    }

    /// Runs one engine input (a kernel event or a reconciliation scan) and writes its verdicts.
    pub fn input(&mut self, input: &Input) -> io::Result<()> {
        for v in self.engine.apply(input) {
            self.out.write(&v)?;
            if self.recent.len() == RECENT_VERDICTS {
                self.recent.pop_front();
            }
            self.recent.push_back(v);
        }
        Ok(())
    }

    /// The latest verdicts, oldest first.
    pub fn recent(&self) -> impl Iterator<Item = &Verdict> {
        self.recent.iter()
    }

    pub fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }
}
