//! See `ferry_fuzz::targets::vector_decode`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| ferry_fuzz::targets::vector_decode(data));
