//! The agent's integration tests: one binary, a module per concern, sharing `common`. Most
//! need root and run one test thread (`RUST_TEST_THREADS=1`); `cargo xtask test` runs them
//! on the host and, module by module (`it kernel::`), in the guests.
mod common;

mod blocking;
mod degrade;
mod engine_replay;
mod faults;
mod first_run;
mod guard;
mod handover;
mod headroom;
mod healthy_node;
mod http_abuse;
mod idle;
mod kernel;
mod late_start;
mod lifecycle;
mod overlay;
mod patterns;
mod privilege;
mod production;
mod prometheus_e2e;
mod readable;
mod renames;
mod replay_run;
mod scan_root;
mod scope;
mod stale_connect;
mod verdicts;
mod waiting;

/// The actor process the tests start ([`common::actor`]): this binary, re-run.
#[test]
#[ignore = "helper process for the other tests, started by them"]
fn actor() {
    common::actor::serve();
}
