use super::super::fixture::*;
use super::super::Config;
use super::normalize_host;
use ferry_protos::v1 as pb;

#[test]
fn short_names_and_route_matching() {
    let c = route_with(|r| r.feature_names = pb::FeatureNames::Short as i32);
    assert_eq!(c.routes[0].output_names, ["age", "score", "count"]);
    let none = |_: &str| None;
    assert_eq!(
        c.match_route("/v1/models/fraud:predict?x=1", &none),
        Some(0)
    );
    assert!(c.match_route("/v1/models/other:predict", &none).is_none());
    let c = route_with(|r| {
        r.r#match = Some(pb::RouteMatch {
            path_exact: "/p".into(),
            ..Default::default()
        })
    });
    assert!(c.match_route("/p?q", &none).is_some());
    assert!(c.match_route("/p/x", &none).is_none());
}

fn headers<'a>(pairs: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
    move |name| {
        pairs
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v.to_string())
    }
}

#[test]
fn routes_match_on_host_and_headers_and_by_name() {
    let s = ferry_test_support::snapshot::routes_by_match(vec![
        (
            "by-host",
            pb::RouteMatch {
                path_prefix: "/v1/".into(),
                host: "Models.Example.com".into(),
                ..Default::default()
            },
        ),
        (
            "by-subdomain",
            pb::RouteMatch {
                host: "*.example.com".into(),
                ..Default::default()
            },
        ),
        (
            "by-header",
            pb::RouteMatch {
                path_prefix: "/".into(),
                headers: vec![
                    pb::HeaderMatch {
                        name: "x-model".into(),
                        exact: "fraud".into(),
                    },
                    pb::HeaderMatch {
                        name: "x-tenant".into(),
                        exact: String::new(),
                    },
                ],
                ..Default::default()
            },
        ),
        ("by-name", pb::RouteMatch::default()),
    ]);
    let c = Config::from_snapshot(s).unwrap();
    let m = |path: &str, h: &[(&str, &str)]| {
        c.match_route(path, &headers(h))
            .map(|i| c.routes[i].name.as_str())
    };
    // `example.com` and `badexample.com` are not subdomains of `*.example.com`.
    let by_authority = [
        ("/v1/x", "models.example.com:8080", Some("by-host")),
        ("/v1/x", "MODELS.example.com.", Some("by-host")),
        ("/v2/x", "models.example.com", Some("by-subdomain")),
        ("/x", "a.b.example.com", Some("by-subdomain")),
        ("/x", "example.com", None),
        ("/x", "badexample.com", None),
    ];
    for (path, authority, want) in by_authority {
        let got = m(path, &[(":authority", authority)]);
        assert_eq!(got, want, "{path} at {authority}");
    }
    assert_eq!(
        m("/x", &[("x-model", "fraud"), ("x-tenant", "")]),
        Some("by-header"),
        "present with an empty value"
    );
    assert_eq!(m("/x", &[("x-model", "fraud")]), None, "x-tenant absent");
    assert_eq!(m("/x", &[("x-model", "Fraud"), ("x-tenant", "a")]), None);
    assert_eq!(m("/x", &[]), None, "by-name never matches a request");
    assert_eq!(c.route_named("by-name"), Some(3));
    assert_eq!(c.route_named("nope"), None);
    assert_eq!(normalize_host("[::1]:10000"), "[::1]");
    assert_eq!(normalize_host("Host"), "host");
}
