//! See `ferry_fuzz::targets::header`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| ferry_fuzz::targets::header(data));
