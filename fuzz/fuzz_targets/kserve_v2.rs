//! See `ferry_fuzz::targets::kserve_v2`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| ferry_fuzz::targets::kserve_v2(data));
