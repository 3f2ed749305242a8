//! See `ferry_fuzz::targets::bypass`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| ferry_fuzz::targets::bypass(data));
