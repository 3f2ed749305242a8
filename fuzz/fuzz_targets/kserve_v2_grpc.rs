//! See `ferry_fuzz::targets::kserve_v2_grpc`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| ferry_fuzz::targets::kserve_v2_grpc(data));
