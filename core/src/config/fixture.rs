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
