//! Snapshots of a chosen size for the pushes: the test suite's banking snapshot (what the
//! control plane's bootstrap expects: reader cluster `ferry_reader`) with its service given
//! views of float features until the encoded snapshot reaches the size asked for. A salt
//! (the near cache's size) makes every push a new content version.

use ferry_protos::v1::{self as pb, ValueType};
use ferry_test_support::snapshot::{feature, snapshot, view};
use prost::Message as _;

/// Features per generated view.
const FEATURES_PER_VIEW: usize = 100;

/// A snapshot of at least `bytes` encoded bytes (the base one when smaller), distinct per `salt`.
pub fn of_size(bytes: usize, salt: u64) -> pb::Snapshot {
    let mut s = snapshot();
    s.near_cache_max_bytes += salt;
    let mut v = 0;
    while s.encoded_len() < bytes {
        let features = (0..FEATURES_PER_VIEW)
            .map(|f| {
                feature(
                    &format!("generated_feature_{v:04}_{f:03}"),
                    ValueType::Float32,
                    None,
                )
            })
            .collect();
        s.services[0]
            .views
            .push(view(&format!("generated_{v:04}"), 0, features));
        v += 1;
    }
    s
}

/// A snapshot the control plane refuses (the filter's validation fails: a route names a
/// service that does not exist).
pub fn refused(salt: u64) -> pb::Snapshot {
    let mut s = of_size(0, salt);
    s.routes[0].service = "no_such_service".into();
    s
}
