//! An observer switched on around one window of the overhead phase, and the check that it saw
//! everything.
use std::{fs, time::Duration};

use super::{agent::Agent, audit, bpftrace, bpftrace::Bpftrace, env::Env, plan::Variant};

/// An observer switched on for one window.
pub enum Observer {
    Off,
    Sockwatch(Agent),
    Bpftrace(Bpftrace),
    Auditd { lost_before: u64 },
    Floor(Bpftrace),
}

impl Observer {
    pub fn start(v: Variant, env: &Env) -> anyhow::Result<Observer> {
        Ok(match v {
            Variant::Off => Observer::Off,
            Variant::Sockwatch => Observer::Sockwatch(start_sockwatch(env)?),
            Variant::Bpftrace => Observer::Bpftrace(start_bpftrace(
                env,
                "bpftrace",
                &bpftrace::script(&env.watched),
            )?),
            Variant::Floor => {
                Observer::Floor(start_bpftrace(env, "floor", &bpftrace::floor_script())?)
            }
            Variant::Auditd => {
                let lost_before = audit::lost()?;
                audit::on(&env.watched)?;
                Observer::Auditd { lost_before }
            }
        })
    }

    /// Switches it off; checks that it saw the window's `binds` socket binds (a tracer that
    /// saw nothing would make a cheap-looking figure). Returns a problem, if any.
    pub fn stop(self, binds: u64) -> anyhow::Result<Option<String>> {
        Ok(match self {
            Observer::Off => None,
            Observer::Sockwatch(agent) => {
                let m = agent.settle(Duration::from_secs(10))?;
                agent.stop()?;
                let got = m.sum("sockwatch_events_total", &[("kind", "bind")]) as u64;
                let lost = m.sum("sockwatch_events_lost_total", &[]) as u64;
                (got != binds || lost != 0)
                    .then(|| format!("sockwatch saw {got} of {binds} binds, {lost} events lost"))
            }
            Observer::Bpftrace(b) => {
                let err = b.stderr();
                let lines = b.stop()?;
                let got = lines.get("bind").copied().unwrap_or(0);
                let lost = lines.get("Lost").copied().unwrap_or(0);
                (got != binds || lost != 0).then(|| {
                    format!(
                        "bpftrace printed {got} of {binds} binds, {lost} `Lost` lines; \
                         its lines by first word: {lines:?}; stderr: {err:?}"
                    )
                })
            }
            // Empty programs report nothing to check (`start` saw every one attached), and
            // one that ignores SIGINT is killed: its window's figures stand either way.
            Observer::Floor(b) => {
                if let Err(e) = b.stop() {
                    eprintln!("bench: the floor's bpftrace was killed: {e:#}");
                }
                None
            }
            Observer::Auditd { lost_before } => {
                audit::off()?;
                let lost = audit::lost()?.saturating_sub(lost_before);
                (lost != 0).then(|| format!("audit lost {lost} records"))
            }
        })
    }
}

/// bpftrace running `text`, written to `NAME.bt` in the bench's tmpfs, printing to `NAME.out`.
fn start_bpftrace(env: &Env, name: &str, text: &str) -> anyhow::Result<Bpftrace> {
    let script = env.root.join(format!("{name}.bt"));
    fs::write(&script, text)?;
    Bpftrace::start(
        &script,
        &env.root.join(format!("{name}.out")),
        bpftrace::probes(text),
    )
}

/// sockwatch as the overhead phase runs it: tracepoint tier, the watched directory, /metrics.
pub fn start_sockwatch(env: &Env) -> anyhow::Result<Agent> {
    let (agent, _) = env.start_agent("overhead", "tracepoint", true, &env.watch_watched())?;
    Ok(agent)
}
