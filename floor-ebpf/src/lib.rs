//! Present so the floor can list this crate as a build-dependency and cargo rebuilds the
//! kernel object when it changes; the programs are in the `sockwatch-floor-ebpf` binary.
#![no_std]
