//! See `ferry_fuzz::targets::feast_rest`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| ferry_fuzz::targets::feast_rest(data));
