#![no_std]
#![no_main]

mod emit;
mod live;
mod maps;
mod pending;
mod programs;
mod shim;
mod watch;

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    loop {}
}

#[unsafe(link_section = "license")]
#[unsafe(no_mangle)]
static LICENSE: [u8; 4] = *b"GPL\0";
