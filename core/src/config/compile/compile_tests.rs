use crate::config::fixture::*;
use crate::config::Config;
use ferry_protos::v1 as pb;
use prost::Message;

#[test]
fn valid_snapshot_is_indexed() {
    let c = Config::from_bytes(&snapshot().encode_to_vec()).unwrap();
    let r = &c.routes[0];
    assert_eq!(
        r.output_names,
        ["profile__age", "profile__score", "txn__count"]
    );
    assert_eq!(r.service().feature_count, 3);
    assert_eq!(r.service().views[1].ttl_us, Some(DAY * 1_000_000));
    assert_eq!(r.service().views[0].ttl_us, None);
    assert_eq!(
        r.service().views[0].features[0].default,
        Some(pb::value::Kind::Int64Val(-1))
    );
    assert_eq!(r.service().fingerprint_hex, "123456789abcdef0");
}

#[test]
fn invalid_snapshots_are_refused_with_a_reason() {
    let refuse = |f: &dyn Fn(&mut pb::Snapshot), want: &str| {
        let mut s = snapshot();
        f(&mut s);
        let e = Config::from_snapshot(s).unwrap_err();
        let e = e.to_string();
        assert!(e.contains(want), "{e} does not contain {want}");
    };
    refuse(
        &|s| s.routes[0].service = "nope".into(),
        "unknown service 'nope'",
    );
    refuse(
        &|s| s.near_cache_max_bytes = u64::MAX,
        "near_cache_max_bytes 18446744073709551615 is over the repo's limit of 1 GiB",
    );
    refuse(
        &|s| s.services.push(s.services[0].clone()),
        "service 'scoring' defined twice",
    );
    let bad_matches = [
        (
            pb::RouteMatch {
                path_prefix: "/a".into(),
                path_exact: "/a".into(),
                ..Default::default()
            },
            "set at most one of path_prefix and path_exact",
        ),
        (
            pb::RouteMatch {
                host: "example.com:80".into(),
                ..Default::default()
            },
            "must be a host name or *.domain",
        ),
        (
            pb::RouteMatch {
                headers: vec![pb::HeaderMatch {
                    name: "X-Upper".into(),
                    exact: String::new(),
                }],
                ..Default::default()
            },
            "must be a lowercase header name",
        ),
    ];
    for (m, want) in bad_matches {
        refuse(&|s| s.routes[0].r#match = Some(m.clone()), want);
    }
    refuse(
        &|s| s.routes[0].on_missing_entity = 0,
        "on_missing_entity is not set",
    );
    refuse(
        &|s| s.routes[0].entity_fields.clear(),
        "entity names 0 field(s) but feature service 'scoring' has 1 entity key(s)",
    );
    refuse(&|s| s.routes[0].format = 99, "unknown format 99");
    refuse(
        &|s| s.routes[0].format = pb::Format::Unspecified as i32,
        "not supported",
    );
    refuse(
        &|s| {
            s.routes[0].format = pb::Format::Header as i32;
            s.routes[0].features_header = "x bad".into();
        },
        "is not a header name",
    );
    refuse(&|s| s.services[0].fingerprint = 0, "fingerprint is 0");
    refuse(&|s| s.reader_cluster.clear(), "reader_cluster");
    refuse(
        &|s| {
            s.services[0].views[0].features[0].default_value = Some(pb::Value {
                kind: Some(pb::value::Kind::StringVal("x".into())),
            })
        },
        "default has the wrong type",
    );
    refuse(
        &|s| {
            s.routes[0].feature_names = pb::FeatureNames::Short as i32;
            s.services[0].views[1].features[0].name = "age".into();
        },
        "feature name 'age' is given by views 'profile' and 'txn'",
    );
    assert!(Config::from_bytes(b"\xff\xff garbage").is_err());
}

/// A Feast layout matching the fixture's `scoring` service.
fn feast_layout() -> pb::FeastLayout {
    let view = |name: &str, features: &[&str]| pb::FeastView {
        timestamp_field: ferry_protos::feast::timestamp_field(name),
        feature_fields: features
            .iter()
            .map(|f| ferry_protos::feast::feature_field(name, f))
            .collect(),
        ..Default::default()
    };
    pb::FeastLayout {
        project: "bank".into(),
        join_keys: vec![pb::FeastJoinKey {
            name: "user_id".into(),
            int64: false,
        }],
        views: vec![view("profile", &["age", "score"]), view("txn", &["count"])],
        ..Default::default()
    }
}

#[test]
fn a_feast_layout_must_describe_its_service_exactly() {
    let with = |edit: &dyn Fn(&mut pb::FeastLayout)| {
        let mut s = snapshot();
        let mut layout = feast_layout();
        edit(&mut layout);
        s.services[0].feast = Some(layout);
        Config::from_snapshot(s).map_err(|e| e.to_string())
    };
    let c = with(&|_| {}).unwrap();
    assert_eq!(c.routes[0].service().feast, Some(feast_layout()));
    let int64 = with(&|l| l.join_keys[0].int64 = true).unwrap_err();
    assert!(int64.contains("join keys differ"), "{int64}");
    let short = with(&|l| l.views[1].feature_fields.clear()).unwrap_err();
    assert!(short.contains("feature fields differ"), "{short}");
    let project = with(&|l| l.project = "a:b".into()).unwrap_err();
    assert!(project.contains("invalid project name"), "{project}");
}
