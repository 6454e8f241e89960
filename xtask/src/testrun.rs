//! Reading libtest's `test result:` lines and adding them up per layer.
use std::{
    io::{BufRead as _, BufReader},
    ops::AddAssign,
    process::{Command, ExitStatus, Stdio},
};

use anyhow::Context as _;

use crate::cmd;

/// How a test says it left a case or a tier untested here, and why: a line the tests'
/// harness (sockwatch/tests/it/common's `skip`) writes past libtest's capture, so it reaches the
/// output of a passing test too.
pub const SKIP_MARK: &str = "SOCKWATCH-SKIP: ";

/// What one or more `test result:` lines say, and the skips the tests reported.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    pub passed: u64,
    pub failed: u64,
    pub ignored: u64,
    /// How many `test result:` lines were added up (one per test binary or doc-test run).
    pub runs: u64,
    /// Cases or tiers tests left untested here ([`SKIP_MARK`] lines): a test that ran the
    /// rest passed, but not these.
    pub skips: u64,
}

impl AddAssign for Counts {
    fn add_assign(&mut self, o: Counts) {
        self.passed += o.passed;
        self.failed += o.failed;
        self.ignored += o.ignored;
        self.runs += o.runs;
        self.skips += o.skips;
    }
}

/// The reasons of the [`SKIP_MARK`] lines in `text`, each once, with how often it came.
pub fn skip_reasons(text: &str) -> Vec<(String, usize)> {
    let mut seen: Vec<(String, usize)> = Vec::new();
    for reason in text
        .lines()
        .filter_map(|l| l.split_once(SKIP_MARK).map(|(_, r)| r.trim().to_owned()))
    {
        match seen.iter_mut().find(|(r, _)| *r == reason) {
            Some((_, n)) => *n += 1,
            None => seen.push((reason, 1)),
        }
    }
    seen
}

/// Parses `test result: ok. 3 passed; 0 failed; 1 ignored; 0 measured; 0 filtered out; ...`
/// anywhere in `line` (a serial console may put kernel noise or `\r` around it).
pub fn parse_result_line(line: &str) -> Option<Counts> {
    let rest = &line[line.find("test result: ")? + "test result: ".len()..];
    let (_verdict, rest) = rest.split_once(". ")?;
    let mut counts = Counts {
        runs: 1,
        ..Counts::default()
    };
    let (mut saw_passed, mut saw_failed) = (false, false);
    for field in rest.split(';') {
        let mut words = field.split_whitespace();
        let (Some(n), Some(what)) = (words.next(), words.next()) else {
            continue;
        };
        let Ok(n) = n.parse::<u64>() else { continue };
        match what {
            "passed" => (counts.passed, saw_passed) = (n, true),
            "failed" => (counts.failed, saw_failed) = (n, true),
            "ignored" => counts.ignored = n,
            _ => {}
        }
    }
    (saw_passed && saw_failed).then_some(counts)
}

/// Sums every `test result:` line in `text`, and counts its skip lines.
pub fn sum_results(text: &str) -> Counts {
    let mut total = Counts::default();
    for c in text.lines().filter_map(parse_result_line) {
        total += c;
    }
    total.skips = text.lines().filter(|l| l.contains(SKIP_MARK)).count() as u64;
    total
}

/// Runs a `cargo test` command, passing its stdout through while adding up its result lines.
/// Runs `cmd`, echoing its output; returns its status, its result counts and its whole output.
pub fn run_and_count(mut cmd: Command) -> anyhow::Result<(ExitStatus, Counts, String)> {
    let what = cmd::describe(&cmd);
    let mut child = cmd
        .stdout(Stdio::piped())
        .spawn()
        .with_context(|| format!("cannot start `{what}`"))?;
    let mut total = Counts::default();
    let mut text = String::new();
    let stdout = child.stdout.take().expect("piped");
    for line in BufReader::new(stdout).lines() {
        let line = line.with_context(|| format!("reading the output of `{what}`"))?;
        println!("{line}");
        text.push_str(&line);
        text.push('\n');
        if let Some(c) = parse_result_line(&line) {
            total += c;
        }
        total.skips += u64::from(line.contains(SKIP_MARK));
    }
    let status = child
        .wait()
        .with_context(|| format!("waiting for `{what}`"))?;
    Ok((status, total, text))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ok_line() {
        let c = parse_result_line(
            "test result: ok. 12 passed; 0 failed; 3 ignored; 0 measured; 0 filtered out; \
             finished in 0.52s",
        );
        assert_eq!(
            c,
            Some(Counts {
                passed: 12,
                failed: 0,
                ignored: 3,
                runs: 1,
                skips: 0
            })
        );
    }

    #[test]
    fn failed_line_with_console_noise() {
        let c = parse_result_line(
            "[   12.3] audit: x\rtest result: FAILED. 4 passed; 2 failed; 0 ignored; \
             0 measured; 1 filtered out; finished in 3.01s\r",
        )
        .expect("parses");
        assert_eq!((c.passed, c.failed, c.ignored), (4, 2, 0));
    }

    #[test]
    fn not_result_lines() {
        assert_eq!(parse_result_line("test bind_event ... ok"), None);
        assert_eq!(parse_result_line("running 3 tests"), None);
        assert_eq!(parse_result_line("test result: garbage"), None);
        assert_eq!(parse_result_line("test result: ok. lots passed"), None);
    }

    #[test]
    fn sums_binaries_and_doctests() {
        let out = "running 2 tests\n\
                   SOCKWATCH-SKIP: a_lsm: tier lsm refused by this kernel\n\
                   test a ... ok\n\
                   test result: ok. 2 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out\n\
                   \n\
                   test result: FAILED. 1 passed; 1 failed; 2 ignored; 0 measured; 0 filtered out\n\
                   Doc-tests sockwatch\n\
                   test result: ok. 0 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out\n";
        assert_eq!(
            sum_results(out),
            Counts {
                passed: 3,
                failed: 1,
                ignored: 2,
                runs: 3,
                skips: 1
            }
        );
    }

    #[test]
    fn skip_reasons_are_counted_once_each() {
        let out = "SOCKWATCH-SKIP: x: no Go\n\
                   [  1.0] SOCKWATCH-SKIP: y: needs root\r\n\
                   SOCKWATCH-SKIP: x: no Go\n";
        assert_eq!(
            skip_reasons(out),
            [("x: no Go".to_owned(), 2), ("y: needs root".to_owned(), 1)]
        );
    }
}
