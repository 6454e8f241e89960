#![no_std]
#![no_main]

mod counters;
mod current;
mod emit;
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
