//! One `sockwatch run` shared by the tests of this process that need no agent of their own
//! (the default configuration, started before they create anything): starting and stopping
//! the agent costs seconds a test under emulation. Each test gets a directory of its own
//! under the shared agent's watched root and sees only the lines about that directory.
use std::{
    cell::{Cell, RefCell},
    collections::HashSet,
    io::{Read, Seek, SeekFrom},
    path::{Path, PathBuf},
    sync::{Mutex, OnceLock, PoisonError},
    time::Duration,
};

use serde_json::Value;
use sockwatch::{config::DEFAULT_TAKEOVER_WINDOW, host::clock::boot_ns};
use tempfile::TempDir;

use super::{
    actor::Actor,
    agent::{Agent, AgentLines, checked_line, wait_for},
};

/// The shared agent, started by the first test that joins it and stopped at process exit.
struct Shared {
    agent: Mutex<Agent>,
    /// This process: a child forked from it (not exec'd) runs the exit handler too.
    pid: u32,
    /// Its directory: its events file and log, and `watched/`, the root it watches.
    base: PathBuf,
}

static SHARED: OnceLock<Shared> = OnceLock::new();

fn shared() -> &'static Shared {
    SHARED.get_or_init(|| {
        let pid = std::process::id();
        let base = PathBuf::from(format!("/tmp/sockwatch-shared-{pid}"));
        let watched = base.join("watched");
        // What a process of the same id, killed, left there.
        let _ = std::fs::remove_dir_all(&base);
        std::fs::create_dir_all(&watched).expect("the shared agent's directories");
        let agent = Agent::start(&base, &watched, &[]);
        // SAFETY: registers a function that takes no arguments and returns nothing.
        let rc = unsafe { libc::atexit(stop_at_exit) };
        assert_eq!(rc, 0, "atexit");
        Shared {
            agent: Mutex::new(agent),
            pid,
            base,
        }
    })
}

impl Shared {
    fn agent(&self) -> std::sync::MutexGuard<'_, Agent> {
        // A test that failed while holding it leaves the agent as usable as before.
        self.agent.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// At exit (libtest's threads are done; a test thread's exit must not stop the agent): the
/// shared agent stops as `Agent::stop` stops one, exiting cleanly with every line it wrote
/// matching the schema, its programs detached before the next test process loads its own. A
/// failure here fails the process.
extern "C" fn stop_at_exit() {
    let Some(shared) = SHARED.get().filter(|s| s.pid == std::process::id()) else {
        return;
    };
    let stopped = std::panic::catch_unwind(|| {
        let mut agent = shared.agent();
        agent.interrupt();
        agent.lines(); // agent-wide lines (notices) too, which no test's share shows
    });
    let _ = std::fs::remove_dir_all(&shared.base);
    if stopped.is_err() {
        eprintln!("the shared agent failed at exit (above)");
        // SAFETY: ends the process at once; exit(3) is running already.
        unsafe { libc::_exit(1) };
    }
}

/// A test's share of the shared agent: its own directory under the watched root, and the
/// agent's lines about it.
pub struct SharedAgent {
    /// Binds the markers of [`SharedAgent::finish`] and holds them until the test ends (a
    /// closed one could yield lines of its own). Another process: were this one to bind in
    /// the watched root, the agent would track it and every actor it forks, as no agent of
    /// a test's own does.
    marker: RefCell<Option<Actor>>,
    markers: Cell<usize>,
    dir: TempDir,
    seen: RefCell<Seen>,
}

/// What this test's share has read of the shared events file.
#[derive(Default)]
struct Seen {
    /// Bytes of the file read (whole lines only).
    read: u64,
    /// Lines read since the test joined.
    count: usize,
    /// The lines about this test's directory, checked against the schema, each with its
    /// place in the file.
    lines: Vec<(usize, Value)>,
    /// The sockets bound in it: some lines about them name no path (an orphan's end).
    sockets: HashSet<u64>,
    /// The processes whose exit the agent wrote, each with the line's place in the file.
    exits: Vec<(usize, u64)>,
}

/// The fields of a line that name a path, and those that name a socket.
const PATH_FIELDS: [&str; 5] = ["path", "victim_path", "from_path", "from", "to"];
const SOCKET_FIELDS: [&str; 3] = ["sock_ino", "old_sock_ino", "new_sock_ino"];

impl SharedAgent {
    /// Joins the shared agent (started on first use; under `SOCKWATCH_PROBE_MODE`, checked
    /// to run on that tier) with a fresh directory, watched from now on.
    pub fn join() -> SharedAgent {
        let watched = shared().base.join("watched");
        let dir = tempfile::Builder::new()
            .prefix("test")
            .tempdir_in(watched)
            .expect("the test's directory");
        // The lines written before the directory existed are none of its own.
        let events = shared().agent().events.clone();
        let read = whole_lines(&std::fs::read(events).expect("the events file")) as u64;
        SharedAgent {
            marker: RefCell::default(),
            markers: Cell::default(),
            dir,
            seen: RefCell::new(Seen {
                read,
                ..Seen::default()
            }),
        }
    }

    /// The test's directory.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The shared agent's log.
    pub fn log_text(&self) -> String {
        shared().agent().log_text()
    }

    /// Every line about this test's directory written so far, each checked against the schema.
    pub fn lines(&self) -> Vec<Value> {
        let mut agent = shared().agent();
        assert!(
            agent.exit_status().is_none(),
            "the shared agent exited: {}",
            agent.log_text()
        );
        let mut seen = self.seen.borrow_mut();
        let mut file = std::fs::File::open(&agent.events).expect("the events file");
        drop(agent);
        file.seek(SeekFrom::Start(seen.read)).expect("seek");
        let mut text = Vec::new();
        file.read_to_end(&mut text).expect("read the events file");
        let whole = whole_lines(&text);
        seen.read += whole as u64;
        let text = std::str::from_utf8(&text[..whole]).expect("UTF-8 lines");
        for line in text.lines() {
            let value: Value = serde_json::from_str(line).unwrap_or_else(|_| checked_line(line));
            let at = seen.count;
            seen.count += 1;
            if value["kind"] == "exit" {
                let tgid = value["tgid"].as_u64().expect("an exit's tgid");
                seen.exits.push((at, tgid));
            }
            if seen.takes(&value, self.dir()) {
                seen.lines.push((at, checked_line(line)));
            }
        }
        seen.lines.iter().map(|(_, l)| l.clone()).collect()
    }

    pub fn verdicts(&self) -> Vec<Value> {
        self.lines()
            .into_iter()
            .filter(|v| v.get("verdict").is_some())
            .collect()
    }

    /// As [`Agent::expect_line`], among this test's lines.
    pub fn expect_line(&self, what: &str, want: impl Fn(&Value) -> bool) -> Value {
        wait_for(what, || self.lines(), want, || self.context())
    }

    /// As [`Agent::expect_verdict`], among this test's lines.
    pub fn expect_verdict(&self, what: &str, want: impl Fn(&Value) -> bool) -> Value {
        let what = format!("{what} verdict");
        wait_for(&what, || self.verdicts(), want, || self.context())
    }

    fn context(&self) -> String {
        format!("{:#?}\nlog: {}", self.lines(), self.log_text())
    }

    /// What `Agent::stop` gives, without stopping the shared agent: every verdict about this
    /// test's directory once every event the test caused is handled and every takeover
    /// window they opened is decided.
    ///
    /// The agent handles events in the order of the one ring buffer they share, written as
    /// each syscall runs: once the line of a marker bound now is written, every earlier event
    /// was handled and its lines written. A window that may still be open ends at its
    /// unlink's time plus the takeover window, and the engine decides it before it handles
    /// any later event: a marker bound after that end, then one more (written after the first
    /// marker's handling, verdicts included), make it decided and written as stopping would.
    pub fn finish(&self) -> Vec<Value> {
        let (at, mut last) = self.marker();
        if let Some(due) = self.open_window_end(at) {
            while last <= due {
                std::thread::sleep(Duration::from_nanos(due.saturating_sub(boot_ns())));
                last = self.marker().1;
            }
            self.marker();
        }
        self.verdicts()
    }

    /// When the last takeover window that this test's unlinks written before line `at` may
    /// still hold open ends (boot clock). Only a foreign unlink waits for a successor
    /// (`Engine::decide_removal`), and it is decided once a verdict names its remover and
    /// time (a foreign unlink, takeover or hijack), or once its remover's exit was handled.
    fn open_window_end(&self, at: usize) -> Option<u64> {
        let window = u64::try_from(DEFAULT_TAKEOVER_WINDOW.as_nanos()).expect("ns");
        let seen = self.seen.borrow();
        let decided = |i: usize, unlink: &Value| {
            let (Some(remover), Some(ts)) = (unlink["tgid"].as_u64(), unlink["ts_ns"].as_u64())
            else {
                return false;
            };
            let exited = seen
                .exits
                .iter()
                .any(|&(j, tgid)| i < j && j < at && tgid == remover);
            // Such a verdict has its removal's time.
            let named = seen.lines.iter().any(|(_, v)| {
                let who = match v["verdict"].as_str() {
                    Some("foreign_unlink") => "actor",
                    Some("takeover" | "hijack") => "remover",
                    _ => return false,
                };
                v[who]["tgid"].as_u64() == Some(remover) && v["ts_ns"].as_u64() == Some(ts)
            });
            exited || named
        };
        seen.lines
            .iter()
            .filter(|(i, l)| *i < at && l["kind"] == "unlink" && !decided(*i, l))
            .filter_map(|(_, l)| l["ts_ns"].as_u64())
            .max()
            .map(|ts| ts + window)
    }

    /// Has a marker socket bound in the test's directory and waits for its bind line: the
    /// line's place in the file, and its time.
    fn marker(&self) -> (usize, u64) {
        let n = self.markers.replace(self.markers.get() + 1);
        let path = self.dir().join(format!(".marker-{n}"));
        let path = path.to_str().expect("utf-8").to_owned();
        self.marker
            .borrow_mut()
            .get_or_insert_with(Actor::spawn)
            .must(&format!("bind {path}"));
        self.expect_line("the marker's bind", |l| {
            l["kind"] == "bind" && l["path"] == path.as_str()
        });
        let seen = self.seen.borrow();
        let (at, line) = seen
            .lines
            .iter()
            .find(|(_, l)| l["kind"] == "bind" && l["path"] == path.as_str())
            .expect("the marker's line");
        (*at, line["ts_ns"].as_u64().expect("ts_ns"))
    }
}

/// The length of `text`'s whole lines: the agent may be writing a line as it is read.
fn whole_lines(text: &[u8]) -> usize {
    text.iter()
        .rposition(|&b| b == b'\n')
        .map_or(0, |end| end + 1)
}

impl Seen {
    /// Whether `line` is about `dir`: a path under it, or a socket bound there. Lines about
    /// no path nor socket (notices, exits) are the agent's, no test's.
    fn takes(&mut self, line: &Value, dir: &Path) -> bool {
        // 0: no socket (an exit's line).
        let sockets = SOCKET_FIELDS
            .iter()
            .filter_map(|f| line[f].as_u64())
            .filter(|&s| s != 0);
        let under = PATH_FIELDS
            .iter()
            .filter_map(|f| line[f].as_str())
            .any(|p| Path::new(p).starts_with(dir));
        if under {
            self.sockets.extend(sockets);
            return true;
        }
        let known = &self.sockets;
        sockets.into_iter().any(|s| known.contains(&s))
    }
}

impl AgentLines for SharedAgent {
    fn lines(&self) -> Vec<Value> {
        SharedAgent::lines(self)
    }

    fn log_text(&self) -> String {
        SharedAgent::log_text(self)
    }
}
