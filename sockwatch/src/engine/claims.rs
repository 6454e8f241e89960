//! Verdicts that stand only on what the host says now. A stale socket file is stale only while
//! that very file is still on disk (the tracepoint tier misses an unlink once the closed
//! socket's name left the kernel's released names); a verdict that calls a socket open
//! (a foreign unlink's victim, an orphan) stands only while its holder still has it, on a
//! kernel without a release hook. The engine cannot look: it [holds](Held) such verdicts,
//! names their [`Claim`]s, and decides on the [`Fact`]s the caller gathered, which come back
//! as inputs, so a replay of the recorded facts decides as the run did. A claim nobody
//! answered stands (what is known). A fact may come before the verdict that claims it: the
//! run's timer decided that verdict between two events, a replay decides it at the next one;
//! it answers the verdicts held by the next input, and is forgotten after.
use std::collections::VecDeque;

use serde::{Deserialize, Serialize};

use super::{FileId, Verdict};

/// What a verdict takes for true about the host.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "check", rename_all = "snake_case")]
pub enum Claim {
    /// `path` (in the agent's view) still leads to `file`.
    FileOnDisk { path: String, file: FileId },
    /// Process `tgid` still holds socket `sock_ino` (`/proc/TGID/fd`).
    SocketOpen { tgid: u32, sock_ino: u64 },
}

impl Claim {
    /// The claim `v` makes, if any.
    pub fn of(v: &Verdict) -> Option<Claim> {
        if let Verdict::StaleSocketFile {
            path: Some(path),
            file,
            ..
        } = v
        {
            return Some(Claim::FileOnDisk {
                path: path.clone(),
                file: *file,
            });
        }
        v.open_socket()
            .map(|(tgid, sock_ino)| Claim::SocketOpen { tgid, sock_ino })
    }
}

/// The host's answer to a claim made by a verdict of time `ts_ns`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Fact {
    #[serde(flatten)]
    pub claim: Claim,
    pub holds: bool,
    pub ts_ns: u64,
}

/// A verdict waiting for the answer to its claim.
#[derive(Debug)]
struct Waiting {
    verdict: Verdict,
    claim: Option<Claim>,
    answer: Option<bool>,
}

/// The verdicts held for answers, in the order the engine decided them: a verdict behind a
/// held one waits with it, so that answers never reorder the output.
#[derive(Debug, Default)]
pub struct Held {
    queue: VecDeque<Waiting>,
    /// Facts no held verdict claimed yet: the next input's verdicts may.
    early: Vec<Fact>,
    /// Verdicts a false claim withheld, for the caller to account for.
    withheld: Vec<Verdict>,
}

impl Held {
    /// Takes `out[start..]` from the first verdict that makes a claim on (all of it when
    /// verdicts wait already).
    pub fn hold(&mut self, out: &mut Vec<Verdict>, start: usize) {
        let first = if self.queue.is_empty() {
            out[start..]
                .iter()
                .position(|v| Claim::of(v).is_some())
                .map(|at| start + at)
        } else {
            Some(start)
        };
        let Some(first) = first else {
            return;
        };
        let early = &self.early;
        self.queue.extend(out.drain(first..).map(|verdict| {
            let claim = Claim::of(&verdict);
            let answer = early
                .iter()
                .find(|f| claim.as_ref() == Some(&f.claim))
                .map(|f| f.holds);
            Waiting {
                verdict,
                claim,
                answer,
            }
        }));
        self.release_decided(out);
    }

    /// The claims not answered yet, each once, with the time of the first verdict making it.
    pub fn open_claims(&self) -> Vec<(u64, Claim)> {
        let mut claims: Vec<(u64, Claim)> = Vec::new();
        for w in self.queue.iter().filter(|w| w.answer.is_none()) {
            if let Some(c) = &w.claim
                && !claims.iter().any(|(_, known)| known == c)
            {
                claims.push((w.verdict.ts_ns(), c.clone()));
            }
        }
        claims
    }

    /// Answers every held verdict that makes `fact`'s claim (or keeps the fact for the next
    /// input's), and releases those now decided at the front of the queue into `out`.
    pub fn answer(&mut self, fact: &Fact, out: &mut Vec<Verdict>) {
        let mut claimed = false;
        for w in &mut self.queue {
            if w.claim.as_ref() == Some(&fact.claim) {
                w.answer = Some(fact.holds);
                claimed = true;
            }
        }
        if !claimed {
            self.early.push(fact.clone());
        }
        self.release_decided(out);
    }

    /// Forgets the facts that came early: only the input right after them may use them.
    pub fn forget_early(&mut self) {
        self.early.clear();
    }

    /// Releases the decided verdicts at the front of the queue.
    fn release_decided(&mut self, out: &mut Vec<Verdict>) {
        while self
            .queue
            .front()
            .is_some_and(|w| w.claim.is_none() || w.answer.is_some())
        {
            let Some(w) = self.queue.pop_front() else {
                break;
            };
            self.release(w, out);
        }
    }

    /// Releases every held verdict: a claim nobody answered stands.
    pub fn settle(&mut self, out: &mut Vec<Verdict>) {
        while let Some(w) = self.queue.pop_front() {
            self.release(w, out);
        }
    }

    fn release(&mut self, w: Waiting, out: &mut Vec<Verdict>) {
        if w.answer == Some(false) {
            self.withheld.push(w.verdict);
        } else {
            out.push(w.verdict);
        }
    }

    /// The verdicts withheld since the last call.
    pub fn take_withheld(&mut self) -> Vec<Verdict> {
        std::mem::take(&mut self.withheld)
    }
}
