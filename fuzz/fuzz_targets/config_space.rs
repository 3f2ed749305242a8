//! See `ferry_fuzz::config_space` (the coverage-guided entry: it skips no known bug unless
//! `FERRY_FUZZ_SKIP_KNOWN` says so).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| ferry_fuzz::config_space::run(data));
