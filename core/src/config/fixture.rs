//! The standard snapshot of ferry-test-support as the filter holds it, for the unit tests of
//! every module.

use super::Config;
use ferry_protos::v1 as pb;
pub use ferry_test_support::snapshot::{snapshot, DAY, FP};

pub fn config() -> Config {
    Config::from_snapshot(snapshot()).unwrap()
}

pub fn route_with(f: impl FnOnce(&mut pb::Route)) -> Config {
    Config::from_snapshot(ferry_test_support::snapshot::route_with(f)).unwrap()
}

/// The standard snapshot with its route in `format` and its entity key an int64.
pub fn int64_ids(format: pb::Format) -> Config {
    let mut s = snapshot();
    s.routes[0].format = format as i32;
    s.services[0].entity_keys[0].r#type = pb::ValueType::Int64 as i32;
    Config::from_snapshot(s).unwrap()
}
