//! sockwatch's kernel programs. Each module imports only from the layers below it:
//! - `programs`: the BPF programs, one module per hook family;
//! - `guard` (guard mode's decision, LSM tier), `emit` (events), `pending` (entry-to-exit state), `live` (the live-socket table),
//!   `watch` (watched directories);
//! - `current` (the running task), `counters` (the `COUNTERS` array), `filter` (the slot
//!   filters in front of hash tables), `maps` (every map and load-time global);
//! - `record` (`PENDING`'s records), `shim` (the C CO-RE shim), `sockaddr` (`sockaddr_un`).
#![no_std]
#![no_main]

mod counters;
mod current;
mod emit;
mod filter;
mod guard;
mod live;
mod maps;
mod pending;
mod programs;
mod record;
mod shim;
mod sockaddr;
mod watch;

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    loop {}
}

#[unsafe(link_section = "license")]
#[unsafe(no_mangle)]
static LICENSE: [u8; 4] = *b"GPL\0";
