//! Feast on-demand feature views with their CEL in ferry.yaml (`feast/odfv.rs`).

use super::*;
use crate::types::FeatureType;

fn request_source(name: &str, schema: Vec<fp::FeatureSpec>) -> fp::OnDemandSource {
    fp::OnDemandSource {
        source: Some(fp::on_demand_source::Source::RequestDataSource(
            fp::DataSource {
                name: name.into(),
                options: Some(fp::data_source::Options::RequestDataOptions(
                    fp::RequestDataOptions { schema },
                )),
                ..Default::default()
            },
        )),
    }
}

fn view_source(view: &str, columns: Vec<fp::FeatureSpec>) -> fp::OnDemandSource {
    fp::OnDemandSource {
        source: Some(fp::on_demand_source::Source::FeatureViewProjection(
            projection(view, columns),
        )),
    }
}

fn odfv(
    name: &str,
    sources: Vec<(&str, fp::OnDemandSource)>,
    features: Vec<fp::FeatureSpec>,
) -> fp::OnDemandFeatureView {
    fp::OnDemandFeatureView {
        spec: Some(fp::OnDemandFeatureViewSpec {
            name: name.into(),
            project: "shop".into(),
            features,
            sources: sources
                .into_iter()
                .map(|(k, s)| (k.to_owned(), s))
                .collect(),
            mode: "python".into(),
            write_to_online_store: false,
            aggregations: Vec::new(),
            ..Default::default()
        }),
    }
}

fn risk_features() -> Vec<fp::FeatureSpec> {
    vec![
        feature("ratio", Fvt::Double),
        feature("big", Fvt::Bool),
        feature("per_year", Fvt::Int64),
    ]
}

/// The base registry with an ODFV `risk` over `profile` and a request source, listed by
/// `scoring` with its sources, and `live`, a service of an ODFV over request data only.
fn odfv_registry() -> fp::Registry {
    let mut reg = registry();
    let profile = vec![feature("age", Fvt::Int64), feature("score", Fvt::Float)];
    let txn = vec![feature("amount", Fvt::Double), feature("n", Fvt::Int32)];
    reg.on_demand_feature_views = vec![
        odfv(
            "risk",
            vec![
                ("profile", view_source("profile", profile)),
                ("txn", request_source("txn", txn.clone())),
            ],
            risk_features(),
        ),
        odfv(
            "echo",
            vec![("txn", request_source("txn", txn))],
            vec![feature("double_amount", Fvt::Double)],
        ),
    ];
    service_of(&mut reg)
        .features
        .push(projection("risk", risk_features()));
    let mut live = reg.feature_services[0].clone();
    let spec = live.spec.as_mut().unwrap();
    spec.name = "live".into();
    spec.features = vec![projection(
        "echo",
        vec![feature("double_amount", Fvt::Double)],
    )];
    spec.precompute_online = false;
    reg.feature_services.push(live);
    reg
}

const CEL: &str = "  on_demand:
    - view: risk
      features:
        - {name: ratio, expr: \"request.amount / profile.score\"}
        - {name: big, type: bool, expr: \"request.amount > 100.0\"}
        - {name: per_year, expr: \"request.n / profile.age\"}
    - view: echo
      features: [{name: double_amount, expr: \"request.amount * 2.0\"}]
";

fn ferry_yaml(on_demand: &str) -> String {
    FERRY_YAML.replace(
        "feast: {repo: feast}\n",
        &format!("feast:\n  repo: feast\n{on_demand}"),
    )
}

fn refused(reg: &fp::Registry, on_demand: &str) -> String {
    match load_with(reg, STORE_YAML, &ferry_yaml(on_demand)).1 {
        Err(e) => e.to_string(),
        Ok(_) => panic!("expected the repo to be refused"),
    }
}

#[test]
fn an_odfv_with_cel_is_an_on_demand_view_of_the_registrys_names_and_types() {
    let (_dir, loaded) = load_with(&odfv_registry(), STORE_YAML, &ferry_yaml(CEL));
    let reg = loaded.unwrap();
    let risk = &reg.on_demand_views[0];
    assert_eq!(risk.name, "risk");
    // The RequestSource's schema: int32 is read as int64 (request data is JSON).
    let request: Vec<(&str, FeatureType)> = risk
        .request
        .iter()
        .map(|r| (r.name.as_str(), r.ty))
        .collect();
    assert_eq!(
        request,
        [("amount", FeatureType::Float64), ("n", FeatureType::Int64)]
    );
    assert_eq!(reg.views[risk.sources[0]].name, "profile");
    let features: Vec<(&str, FeatureType)> = risk
        .features
        .iter()
        .map(|f| (f.name.as_str(), f.ty))
        .collect();
    assert_eq!(
        features,
        [
            ("ratio", FeatureType::Float64),
            ("big", FeatureType::Bool),
            ("per_year", FeatureType::Int64)
        ]
    );
    let scoring = reg.service("scoring").unwrap();
    assert_eq!(scoring.derived.len(), 1);
    assert_eq!(scoring.derived[0].features.len(), 3);
    assert_eq!(scoring.derived_version.len(), 16);

    // The stored vector is still Feast's hash: the layout holds the stored views only, and a
    // service of request data only reads nothing.
    let snap = snapshot::build(&reg);
    let layout = snap.services[0].feast.as_ref().unwrap();
    assert_eq!(layout.views.len(), 2);
    assert_eq!(snap.services[0].derived[0].features.len(), 3);
    let live = snap.services.iter().find(|s| s.name == "live").unwrap();
    assert!(live.feast.is_none(), "{live:?}");
    ferry_core::config::Config::from_snapshot(snap).unwrap();
}

#[test]
fn a_service_with_an_odfv_without_cel_is_refused_by_name() {
    let err = refused(&odfv_registry(), "");
    assert!(
        err.contains(
            "feast feature service 'scoring': feature view 'risk': on-demand feature view \
             without CEL for ratio, big, per_year: Feast's transformation cannot run in Envoy; \
             give its CEL in ferry.yaml (feast: {on_demand: [{view: risk, features: [{name: \
             ratio, expr: \"...\"}]}]})"
        ),
        "{err}"
    );
    let partial = "  on_demand:
    - view: risk
      features: [{name: big, expr: \"request.amount > 100.0\"}]
    - view: echo
      features: [{name: double_amount, expr: \"request.amount * 2.0\"}]
";
    let err = refused(&odfv_registry(), partial);
    assert!(err.contains("without CEL for ratio, per_year:"), "{err}");
    assert!(!err.contains("'live'"), "{err}");
}

#[test]
fn cel_for_an_odfv_is_checked_against_the_registry() {
    let reg = odfv_registry();
    let cases = [
        (
            CEL.replace("view: echo", "view: nope"),
            "feast.on_demand[1] 'nope': no on-demand feature view 'nope' in the Feast \
             registry (it has: echo, risk)",
        ),
        (
            CEL.replace("name: per_year,", "name: per_month,"),
            "feast.on_demand[0] 'risk': features[2] 'per_month': on-demand feature view \
             'risk' has no feature 'per_month' (it has: ratio, big, per_year)",
        ),
        (
            CEL.replace("type: bool", "type: int64"),
            "feast.on_demand[0] 'risk': features[1] 'big': type 'int64' differs from the \
             registry's 'bool'",
        ),
        (
            CEL.replace("request.amount > 100.0", "request.amount > 100"),
            "feast.on_demand[0] 'risk': features[1] 'big': expr: 1:16: '>' of double and int",
        ),
        (
            CEL.replace(
                "request.amount / profile.score",
                "request.amt / profile.score",
            ),
            "feast.on_demand[0] 'risk': features[0] 'ratio': expr: 1:9: request has no field \
             'amt' (declared: amount, n; and time)",
        ),
        (
            CEL.replace(
                "request.amount / profile.score",
                "request.amount / recent.clicks",
            ),
            "'recent' is not a source of this on-demand view (sources: profile)",
        ),
        (CEL.replace("request.amount * 2.0", "request.amount"), ""),
        (
            format!("{CEL}    - view: risk\n      features: []\n"),
            "feast.on_demand[2] 'risk': listed twice (first at feast.on_demand[0])",
        ),
    ];
    for (yaml, expected) in cases {
        if expected.is_empty() {
            load_with(&reg, STORE_YAML, &ferry_yaml(&yaml)).1.unwrap();
            continue;
        }
        let err = refused(&reg, &yaml);
        assert!(err.contains(expected), "{expected}\nnot in:\n{err}");
    }
}

#[test]
fn what_ferry_cannot_compute_of_an_odfv_is_refused_by_name() {
    let mut stored = odfv_registry();
    let spec = stored.on_demand_feature_views[0].spec.as_mut().unwrap();
    spec.write_to_online_store = true;
    assert!(refused(&stored, CEL)
        .contains("feast.on_demand[0] 'risk': write_to_online_store=True is not supported"));

    let mut alias = odfv_registry();
    let spec = alias.on_demand_feature_views[0].spec.as_mut().unwrap();
    if let Some(fp::on_demand_source::Source::FeatureViewProjection(p)) =
        &mut spec.sources.get_mut("profile").unwrap().source
    {
        p.feature_view_name_alias = "p2".into();
    }
    assert!(refused(&alias, CEL).contains("source 'profile': feature view aliases"));

    let mut list = odfv_registry();
    let spec = list.on_demand_feature_views[1].spec.as_mut().unwrap();
    spec.sources.insert(
        "tags".into(),
        request_source("tags", vec![feature("tags", Fvt::StringList)]),
    );
    assert!(refused(&list, CEL).contains(
        "source 'tags': field 'tags': Feast type STRING_LIST is not supported for request data"
    ));

    // The service must select what the expressions read: Ferry reads one stored vector.
    let mut unselected = odfv_registry();
    service_of(&mut unselected).features[0]
        .feature_columns
        .retain(|c| c.name != "score");
    assert!(refused(&unselected, CEL).contains(
        "on-demand view 'risk' reads 'profile:score', which this feature service does not select"
    ));

    let own = format!(
        "{}on_demand_views:\n  - {{name: x, features: [{{name: y, type: bool, expr: 'true'}}]}}\n",
        ferry_yaml(CEL)
    );
    let err = match load_with(&odfv_registry(), STORE_YAML, &own).1 {
        Err(e) => e.to_string(),
        Ok(_) => panic!("on_demand_views in a Feast-backed repo must be refused"),
    };
    assert!(err.contains("on_demand_views: a Feast-backed repo takes its on-demand views from the Feast registry"), "{err}");
}
