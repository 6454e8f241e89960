#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| sockwatch_fuzz::text(data));
