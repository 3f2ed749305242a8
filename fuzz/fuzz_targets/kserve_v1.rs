//! See `ferry_fuzz::targets::kserve_v1`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| ferry_fuzz::targets::kserve_v1(data));
