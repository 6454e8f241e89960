//! Guard mode in `run`: turned on once the probes attached, where the kernel can refuse,
//! enforcing or auditing; paused by SIGUSR1 and resumed by SIGUSR2 without a restart. Every state is a metric and a
//! log line, and where the kernel cannot refuse the agent says so and only observes.
use std::sync::Mutex;

use sockwatch_common::{GuardPolicy, GuardSwitch};
use tokio::signal::unix::{Signal, SignalKind, signal};

use crate::{
    config::{Config, GuardConfig, GuardMode},
    kernel::{
        guard::{self, GuardTier, RemovalHook},
        loader::Probes,
    },
    metrics::{GuardState, Label as _, Metrics},
    pipeline::lock,
};

/// Writes the policies and turns the guard on (enforcing or auditing) where it can be;
/// returns its state.
pub fn start(
    probes: &mut Probes,
    config: &Config,
    metrics: &Metrics,
) -> anyhow::Result<GuardState> {
    let slots = config.guard_slots();
    let hooks = RemovalHook::attached(&probes.report);
    let state = if !guard::wanted(&slots) {
        GuardState::Off
    } else {
        match GuardTier::of(&hooks, probes.mode) {
            GuardTier::Unavailable(why) => {
                log::warn!("guard: unavailable: {why}; observing only, no removal is refused");
                GuardState::Unavailable
            }
            tier @ GuardTier::Lsm(_) => {
                probes.guard_policies(&slots)?;
                probes.guard_switch(config.guard_mode.switch())?;
                let state = running(config.guard_mode);
                log::info!(
                    "guard: {} ({}; {}){}; SIGUSR1 pauses it, SIGUSR2 resumes it",
                    state.label(),
                    describe(config, &slots),
                    tier.line(),
                    match config.guard_mode {
                        GuardMode::Enforce => "",
                        GuardMode::Audit =>
                            ": removals it would refuse are let through and reported",
                    }
                );
                state
            }
        }
    };
    metrics.guard_state(state);
    Ok(state)
}

/// The state of a guard that runs in `mode`.
fn running(mode: GuardMode) -> GuardState {
    match mode {
        GuardMode::Enforce => GuardState::On,
        GuardMode::Audit => GuardState::Audit,
    }
}

/// `top level stale_owner, multus foreign`: each scope that refuses something.
fn describe(config: &Config, slots: &[GuardConfig]) -> String {
    let names = std::iter::once("top level").chain(config.watch_names());
    names
        .zip(slots)
        .filter(|(_, g)| g.policy != GuardPolicy::Off)
        .map(|(name, g)| format!("{name} {}", g.policy.name()))
        .collect::<Vec<_>>()
        .join(", ")
}

/// SIGUSR1 (pause) and SIGUSR2 (resume), registered before the agent says it runs: their
/// default action would end it.
pub struct Signals {
    pause: Signal,
    resume: Signal,
}

impl Signals {
    pub fn register() -> std::io::Result<Self> {
        Ok(Self {
            pause: signal(SignalKind::user_defined1())?,
            resume: signal(SignalKind::user_defined2())?,
        })
    }

    /// Follows the signals for as long as the agent runs; resuming returns to the state the
    /// guard started in (on, or audit).
    pub async fn follow(
        mut self,
        probes: &Mutex<Probes>,
        metrics: &Metrics,
        mut state: GuardState,
    ) {
        let running = state;
        loop {
            let want = tokio::select! {
                _ = self.pause.recv() => GuardState::Paused,
                _ = self.resume.recv() => running,
            };
            state = switch(probes, state, want);
            metrics.guard_state(state);
        }
    }
}

/// Moves between running (on or audit) and paused; any other state stays as it is, said in
/// the log.
fn switch(probes: &Mutex<Probes>, now: GuardState, want: GuardState) -> GuardState {
    let to = match (now, want) {
        (GuardState::Off | GuardState::Unavailable, _) => {
            log::warn!("guard: {} cannot be changed by signal", now.label());
            return now;
        }
        (_, GuardState::Paused) => GuardSwitch::Paused,
        (_, GuardState::Audit) => GuardSwitch::Audit,
        _ => GuardSwitch::On,
    };
    match lock(probes).guard_switch(to) {
        Ok(()) => {
            log::info!("guard: {} (signal)", want.label());
            want
        }
        Err(e) => {
            log::warn!("guard: {e}; it stays {}", now.label());
            now
        }
    }
}
