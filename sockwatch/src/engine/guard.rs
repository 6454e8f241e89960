//! Removals the guard refused in the kernel: nothing changes for the listener, which keeps
//! its path; the verdict names who tried and whose listener was kept. In audit mode the same
//! verdict's twin says it would have been refused, and the removal follows as usual.
use super::{
    Engine, Verdict, inputs::Denied, model::GuardDecision, sockets::HistoryEvent, verdict::Guarded,
};

impl Engine {
    pub(super) fn on_denied(&mut self, d: &Denied, out: &mut Vec<Verdict>) {
        let (ts_ns, actor) = (d.ts_ns, &d.proc);
        // The kernel's table knew the listener; a late start may not have told the engine.
        self.adopt_kernel_view(d.file, &d.live, ts_ns, out);
        let victim = match self.sockets.get(&d.file) {
            Some(s) => self.victim(s, Some(d.live.owner_tgid)),
            None => self.proc_or_unknown(d.live.owner_tgid),
        };
        let guarded = Guarded {
            ts_ns,
            actor: self.with_known_runtime(actor),
            victim,
            operation: d.operation,
            policy: d.policy,
            path: d.path.clone(),
            file: d.file,
            sock_ino: d.live.sock_ino,
        };
        out.push(match d.decision {
            GuardDecision::Denied => {
                self.sockets
                    .record(&d.file, ts_ns, actor.tgid, HistoryEvent::RemovalDenied);
                Verdict::UnlinkDenied(guarded)
            }
            // The removal's own input records it in the history.
            GuardDecision::WouldDeny => Verdict::UnlinkWouldDeny(guarded),
        });
    }
}
