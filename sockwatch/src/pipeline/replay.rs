//! `sockwatch replay`: a recorded event log (what `run` writes) through the engine again.
use std::io::BufRead;

use crate::{
    engine::{Fact, Input},
    events::{EventLine, SCHEMA},
    pipeline::Pipeline,
};

#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    /// The parse error is the message's own: no source, or `{:#}` would print it twice.
    #[error("line {line}: {error}")]
    Parse {
        line: usize,
        error: serde_json::Error,
    },
    #[error("line {line}: schema {found}, newer than this replay's {SCHEMA}")]
    Schema { line: usize, found: u64 },
    #[error("line {line}: {error}")]
    Io { line: usize, error: std::io::Error },
}

/// What a replay went through.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReplayStats {
    pub events: usize,
    /// Facts the recording agent checked on its host (`check` lines), fed to the engine.
    pub facts: usize,
    /// Verdict lines of the recording, skipped: the engine derives its own.
    pub recorded_verdicts: usize,
    /// Notice lines of the recording (what the recording agent could not see), skipped.
    pub recorded_notices: usize,
}

/// Feeds every event line and checked fact of `log` to `pipeline`; blank lines, recorded
/// verdicts and notices are skipped, anything else that is not an event is an error naming its
/// line, and so is a line of a newer schema (one without `schema` predates it). The stream's own fields (`time`,
/// `node`) are not the engine's, and are ignored. Time is the events' own (a removal's
/// takeover window ends with the first later event past it), and the end of the log decides
/// what still waits, as a live agent's timer would have.
pub fn replay(log: impl BufRead, pipeline: &mut Pipeline) -> Result<ReplayStats, ReplayError> {
    let mut stats = ReplayStats::default();
    for (i, line) in log.lines().enumerate() {
        let line_no = i + 1;
        let line = line.map_err(|error| ReplayError::Io {
            line: line_no,
            error,
        })?;
        if line.trim().is_empty() {
            continue;
        }
        let value: serde_json::Value =
            serde_json::from_str(&line).map_err(|error| ReplayError::Parse {
                line: line_no,
                error,
            })?;
        if let Some(found) = value["schema"].as_u64().filter(|&v| v > u64::from(SCHEMA)) {
            return Err(ReplayError::Schema {
                line: line_no,
                found,
            });
        }
        if value.get("verdict").is_some() {
            stats.recorded_verdicts += 1;
            continue;
        }
        if value.get("notice").is_some() {
            stats.recorded_notices += 1;
            continue;
        }
        let parse = |error| ReplayError::Parse {
            line: line_no,
            error,
        };
        let io = |error| ReplayError::Io {
            line: line_no,
            error,
        };
        if value.get("check").is_some() {
            let fact: Fact = serde_json::from_value(value).map_err(parse)?;
            pipeline.input(&Input::Fact(fact)).map_err(io)?;
            stats.facts += 1;
            continue;
        }
        let line: EventLine = serde_json::from_value(value).map_err(parse)?;
        pipeline.line(line).map_err(io)?;
        stats.events += 1;
    }
    pipeline
        .finish()
        .map_err(|error| ReplayError::Io { line: 0, error })?;
    Ok(stats)
}

#[cfg(test)]
mod tests {
    use std::{
        io::Write,
        sync::{Arc, Mutex},
    };

    use super::*;
    use crate::{
        config::EventsFilter,
        engine::{Engine, Limits},
        pipeline::output::JsonLines,
    };

    /// A writer the test can read back.
    #[derive(Clone, Default)]
    struct Shared(Arc<Mutex<Vec<u8>>>);

    impl Write for Shared {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().expect("lock").write(b)
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    fn run(log: &str) -> (Result<ReplayStats, ReplayError>, String) {
        let buf = Shared::default();
        let mut p = Pipeline::replay(
            Engine::new(Limits::default()).expect("engine"),
            JsonLines::new(Box::new(buf.clone())),
        );
        let r = replay(log.as_bytes(), &mut p);
        let text = String::from_utf8(buf.0.lock().expect("lock").clone()).expect("utf-8");
        (r, text)
    }

    const A_BINDS: &str = r#"{"kind":"bind","tier":"fentry","fidelity":"exact","ts_ns":1,"tgid":10,"pid":10,"comm":"a","cgroup_id":1,"dev":5,"ino":7,"sock_ino":70,"nlink":1,"path":"/run/m/m.sock","ret":0,"exe":"/usr/bin/m"}"#;
    const A_LISTENS: &str = r#"{"kind":"listen","tier":"fentry","fidelity":"exact","ts_ns":2,"tgid":10,"pid":10,"comm":"a","cgroup_id":1,"dev":5,"ino":7,"sock_ino":70,"nlink":1,"path":"/run/m/m.sock","ret":0,"backlog":8,"listening":true}"#;
    const B_UNLINKS: &str = r#"{"kind":"unlink","tier":"fentry","fidelity":"exact","ts_ns":3,"tgid":20,"pid":20,"comm":"b","cgroup_id":2,"dev":5,"ino":7,"sock_ino":70,"nlink":1,"path":"/run/m/m.sock","ret":0,"owner":{"tgid":10,"cgroup_id":1,"bind_ns":1},"live":true,"listening":true}"#;

    #[test]
    fn a_recorded_foreign_unlink_yields_its_verdicts() {
        let log = [
            A_BINDS,
            A_LISTENS,
            "",
            r#"{"verdict":"whatever"}"#,
            B_UNLINKS,
        ]
        .join("\n");
        let (r, out) = run(&log);
        assert_eq!(
            r.expect("replays"),
            ReplayStats {
                events: 3,
                facts: 0,
                recorded_verdicts: 1,
                recorded_notices: 0,
            }
        );
        let verdicts: Vec<serde_json::Value> = out
            .lines()
            .map(|l| serde_json::from_str(l).expect("json"))
            .collect();
        let kinds: Vec<&str> = verdicts
            .iter()
            .map(|v| v["verdict"].as_str().expect("tagged"))
            .collect();
        assert_eq!(kinds, ["foreign_unlink", "orphan_opened"], "{out}");
        assert_eq!(verdicts[0]["actor"]["tgid"], 20);
        assert_eq!(verdicts[0]["victim"]["tgid"], 10);
    }

    /// B, the same program (`exe`), re-binds the path it removed (another inode): a
    /// takeover, not a foreign unlink.
    const B_BINDS: &str = r#"{"kind":"bind","tier":"fentry","fidelity":"exact","ts_ns":5,"tgid":20,"pid":20,"comm":"b","cgroup_id":2,"dev":5,"ino":8,"sock_ino":80,"nlink":1,"path":"/run/m/m.sock","ret":0,"exe":"/usr/bin/m"}"#;

    #[test]
    fn a_recorded_takeover_replays_as_one() {
        let (r, out) = run(&[A_BINDS, A_LISTENS, B_UNLINKS, B_BINDS].join("\n"));
        assert_eq!(r.expect("replays").events, 4);
        let verdicts: Vec<serde_json::Value> = out
            .lines()
            .map(|l| serde_json::from_str(l).expect("json"))
            .collect();
        assert_eq!(verdicts.len(), 2, "{out}");
        assert_eq!(verdicts[0]["verdict"], "takeover", "{out}");
        assert_eq!(
            (
                &verdicts[0]["remover"]["tgid"],
                &verdicts[0]["predecessor"]["tgid"]
            ),
            (&serde_json::json!(20), &serde_json::json!(10))
        );
        assert_eq!(verdicts[0]["gap_ns"], 2);
        assert_eq!(
            (&verdicts[1]["verdict"], &verdicts[1]["cause"]),
            (
                &serde_json::json!("orphan_opened"),
                &serde_json::json!("taken_over")
            )
        );
    }

    /// A `check` line (what the recording agent's host said of a verdict's claim) decides
    /// in the replay as it did in the run: here, written at the run's end, where the
    /// takeover window decided B's removal.
    #[test]
    fn a_recorded_check_decides_as_it_did_in_the_run() {
        let closed = r#"{"check":"socket_open","tgid":10,"sock_ino":70,"holds":false,"ts_ns":3,"schema":1,"time":"2026-12-05T00:00:00.000Z","node":"n1"}"#;
        let (r, out) = run(&[A_BINDS, A_LISTENS, B_UNLINKS, closed].join("\n"));
        assert_eq!(r.expect("replays").facts, 1);
        assert_eq!(out, "", "A no longer held its socket: nothing stands");
        let open = closed.replace("false", "true");
        let (_, out) = run(&[A_BINDS, A_LISTENS, B_UNLINKS, &open].join("\n"));
        let verdicts: Vec<serde_json::Value> = out
            .lines()
            .map(|l| serde_json::from_str::<serde_json::Value>(l).expect("json")["verdict"].clone())
            .collect();
        assert_eq!(verdicts, ["foreign_unlink", "orphan_opened"], "{out}");
    }

    /// A live pipeline's tick past the window decides the waiting removal, and writes it out
    /// although no event followed.
    #[test]
    fn a_tick_past_the_window_writes_the_foreign_unlink() {
        let buf = Shared::default();
        let mut p = Pipeline::replay(
            Engine::new(Limits::default())
                .expect("engine")
                .with_takeover_window(100),
            JsonLines::new(Box::new(buf.clone())),
        );
        for line in [A_BINDS, A_LISTENS, B_UNLINKS] {
            p.line(serde_json::from_str(line).expect("event"))
                .expect("applies");
        }
        p.tick(103).expect("tick");
        assert!(
            buf.0.lock().expect("lock").is_empty(),
            "decided within the window"
        );
        p.tick(104).expect("tick");
        let text = String::from_utf8(buf.0.lock().expect("lock").clone()).expect("utf-8");
        let kinds: Vec<String> = text
            .lines()
            .map(|l| {
                serde_json::from_str::<serde_json::Value>(l).expect("json")["verdict"].to_string()
            })
            .collect();
        assert_eq!(
            kinds,
            [r#""foreign_unlink""#, r#""orphan_opened""#],
            "{text}"
        );
    }

    /// A line as `run` writes it now: the recorded one, stamped.
    fn stamped(line: &str) -> String {
        let body = line.strip_suffix('}').expect("an object");
        format!(r#"{body},"schema":1,"time":"2026-12-02T17:20:01.123456789Z","node":"n1"}}"#)
    }

    #[test]
    fn stamped_lines_replay_as_the_unstamped_ones_did() {
        let bare = run(&[A_BINDS, A_LISTENS, B_UNLINKS].join("\n"));
        let lines: Vec<String> = [A_BINDS, A_LISTENS, B_UNLINKS]
            .iter()
            .map(|l| stamped(l))
            .collect();
        let (r, out) = run(&lines.join("\n"));
        assert_eq!(r.expect("replays").events, 3);
        assert_eq!(out, bare.1, "the stream's fields change no verdict");
        assert!(out.contains("foreign_unlink"), "{out}");
    }

    /// What the recording agent could not see is no input: the verdicts are the ones the
    /// events alone give.
    #[test]
    fn recorded_notices_are_skipped() {
        let notices = [
            r#"{"notice":"hook_missing","hook":"exit","missed":"exits are not seen","refused":[{"tier":"tracepoint","reason":"refused"}],"ts_ns":1}"#,
            r#"{"notice":"events_lost","lost":{"bind":3},"total":3,"ts_ns":2}"#,
        ];
        let bare = run(&[A_BINDS, A_LISTENS, B_UNLINKS].join("\n"));
        let lines = [
            stamped(notices[0]),
            A_BINDS.into(),
            A_LISTENS.into(),
            stamped(notices[1]),
            B_UNLINKS.into(),
        ];
        let (r, out) = run(&lines.join("\n"));
        assert_eq!(
            r.expect("replays"),
            ReplayStats {
                events: 3,
                facts: 0,
                recorded_verdicts: 0,
                recorded_notices: 2,
            }
        );
        assert_eq!(out, bare.1);
        assert!(out.contains("foreign_unlink"), "{out}");
    }

    #[test]
    fn a_line_of_a_newer_schema_is_refused() {
        let newer = stamped(A_BINDS).replace(r#""schema":1"#, r#""schema":2"#);
        let (r, _) = run(&[A_BINDS, &newer].join("\n"));
        assert_eq!(
            r.expect_err("newer schema").to_string(),
            "line 2: schema 2, newer than this replay's 1"
        );
    }

    /// `--events-filter`: the verdicts are the same either way; only `all` writes the events.
    #[test]
    fn the_events_filter_drops_event_lines_not_events() {
        let write = |filter| {
            let buf = Shared::default();
            let mut p = Pipeline::replay(
                Engine::new(Limits::default()).expect("engine"),
                JsonLines::new(Box::new(buf.clone())),
            );
            p.filter_output(filter);
            for line in [A_BINDS, A_LISTENS, B_UNLINKS] {
                let line: EventLine = serde_json::from_str(line).expect("event");
                p.event(line.event).expect("applies");
            }
            p.finish().expect("finishes");
            let text = String::from_utf8(buf.0.lock().expect("lock").clone()).expect("utf-8");
            text.lines().map(str::to_owned).collect::<Vec<_>>()
        };
        let (all, verdicts) = (write(EventsFilter::All), write(EventsFilter::Verdicts));
        assert_eq!(all.len(), 5, "three events, two verdicts: {all:#?}");
        assert!(
            all[..3].iter().all(|l| l.starts_with(r#"{"kind":"#)),
            "{all:#?}"
        );
        assert_eq!(verdicts, all[3..], "the same verdicts, no event line");
    }

    #[test]
    fn a_bad_line_is_named() {
        let (r, _) = run(&[A_BINDS, "{not json"].join("\n"));
        let e = r.unwrap_err().to_string();
        assert!(e.starts_with("line 2: "), "{e}");
        let (r, _) = run(r#"{"kind":"bind"}"#);
        assert!(
            r.unwrap_err()
                .to_string()
                .starts_with("line 1: missing field")
        );
    }
}
