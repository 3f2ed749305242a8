//! See `ferry_fuzz::targets::json`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| ferry_fuzz::targets::json(data));
