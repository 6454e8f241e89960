//! Present so the agent can list this crate as a build-dependency and cargo rebuilds the
//! kernel object when it changes; the programs themselves are in the `sockwatch-ebpf` binary.
#![no_std]
