//! See `ferry_fuzz::targets::reader_response`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| ferry_fuzz::targets::reader_response(data));
