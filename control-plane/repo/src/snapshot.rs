//! The registry snapshot (`ferry.v1.Snapshot`): what the filter needs to enrich requests. It is
//! built from a validated registry, so the filter never receives a definition the CLI refused.
//! Its version is a content hash, so the same repo always yields the same bytes and version.

use ferry_protos::{feast, v1};
use prost::Message as _;
use sha2::{Digest, Sha256};

use crate::feast::FeastRepo;
use crate::types::KeyType;
use crate::{FeatureService, Registry, Route};

/// Builds the snapshot, version included.
pub fn build(reg: &Registry) -> v1::Snapshot {
    let mut snap = v1::Snapshot {
        project: reg.project.clone(),
        version: String::new(),
        services: reg.services.iter().map(|s| service(reg, s)).collect(),
        routes: reg.routes.iter().map(|r| route(reg, r)).collect(),
        reader_cluster: reg.reader.cluster.clone(),
        reader_authority: reg.reader.authority.clone(),
        near_cache_max_bytes: reg.near_cache_max_bytes,
        protected_paths: reg.protected_paths.clone(),
        on_demand_views: on_demand_views(reg),
        write_views: write_views(reg),
        push_sources: push_sources(reg),
    };
    snap.version = content_version(&snap);
    snap
}

/// Every view Ferry can write (those with a source), sorted by name.
fn write_views(reg: &Registry) -> Vec<v1::WriteView> {
    if let Some(f) = &reg.feast {
        return f.write_views.clone();
    }
    let mut out: Vec<v1::WriteView> = reg
        .views
        .iter()
        .filter_map(|view| {
            let source = view.source.as_ref()?;
            let mut keys: Vec<v1::EntityKey> = view
                .entities
                .iter()
                .map(|&e| {
                    let e = &reg.entities[e];
                    v1::EntityKey {
                        entity: e.name.clone(),
                        join_key: e.join_key.clone(),
                        r#type: e.key_type.to_proto() as i32,
                    }
                })
                .collect();
            keys.sort_by(|a, b| a.join_key.cmp(&b.join_key));
            // Sorted by name, so the version does not depend on the listing order.
            let mut features: Vec<v1::Feature> = view
                .features
                .iter()
                .map(|f| v1::Feature {
                    name: f.name.clone(),
                    r#type: f.ty.to_proto() as i32,
                    default_value: None,
                })
                .collect();
            features.sort_by(|a, b| a.name.cmp(&b.name));
            Some(v1::WriteView {
                name: view.name.clone(),
                entity_keys: keys,
                timestamp_field: source.timestamp_field.clone(),
                features,
                feast: None,
            })
        })
        .collect();
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out
}

/// The push sources, sorted by name, each with its views sorted.
fn push_sources(reg: &Registry) -> Vec<v1::PushSource> {
    if let Some(f) = &reg.feast {
        return f.push_sources.clone();
    }
    let mut out: Vec<v1::PushSource> = reg
        .push_sources
        .iter()
        .map(|p| {
            let mut views: Vec<String> =
                p.views.iter().map(|&v| reg.views[v].name.clone()).collect();
            views.sort();
            v1::PushSource {
                name: p.name.clone(),
                views,
            }
        })
        .collect();
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out
}

fn service(reg: &Registry, s: &FeatureService) -> v1::FeatureService {
    v1::FeatureService {
        // A service of on-demand views over request data only reads nothing, from Feast or not.
        feast: reg
            .feast
            .as_ref()
            .filter(|_| !s.views.is_empty())
            .map(|f| feast_layout(reg, f, s)),
        derived: s
            .derived
            .iter()
            .map(|d| {
                let v = &reg.on_demand_views[d.view];
                v1::ServiceDerived {
                    view: v.name.clone(),
                    features: d
                        .features
                        .iter()
                        .map(|&f| v.features[f].name.clone())
                        .collect(),
                }
            })
            .collect(),
        derived_version: s.derived_version.clone(),
        name: s.name.clone(),
        fingerprint: s.fingerprint,
        entity_keys: s
            .keys
            .iter()
            .map(|k| v1::EntityKey {
                entity: k.entity.clone(),
                join_key: k.join_key.clone(),
                r#type: k.key_type.to_proto() as i32,
            })
            .collect(),
        views: reg
            .selected(s)
            .map(|(view, features)| v1::ServiceView {
                name: view.name.clone(),
                ttl_seconds: view.ttl_seconds,
                features: features
                    .map(|f| v1::Feature {
                        name: f.name.clone(),
                        r#type: f.ty.to_proto() as i32,
                        default_value: f.default.clone(),
                    })
                    .collect(),
            })
            .collect(),
    }
}

/// The on-demand views, sorted by name, each with its features sorted by name (the slot
/// layout, request fields then `request.time` then `stored`, is the registry's).
fn on_demand_views(reg: &Registry) -> Vec<v1::OnDemandView> {
    let mut out: Vec<v1::OnDemandView> = reg
        .on_demand_views
        .iter()
        .map(|v| {
            let mut features: Vec<v1::DerivedFeature> = v
                .features
                .iter()
                .map(|f| v1::DerivedFeature {
                    name: f.name.clone(),
                    r#type: f.ty.to_proto() as i32,
                    text: f.text.clone(),
                    expr: Some(f.expr.clone()),
                    cost: f.cost,
                })
                .collect();
            features.sort_by(|a, b| a.name.cmp(&b.name));
            v1::OnDemandView {
                name: v.name.clone(),
                request: v
                    .request
                    .iter()
                    .map(|r| v1::RequestField {
                        name: r.name.clone(),
                        field: r.field.clone(),
                        r#type: r.ty.to_proto() as i32,
                    })
                    .collect(),
                sources: v
                    .sources
                    .iter()
                    .map(|&s| reg.views[s].name.clone())
                    .collect(),
                stored: v
                    .stored
                    .iter()
                    .map(|&(vi, fi)| {
                        let f = &reg.views[vi].features[fi];
                        v1::StoredInput {
                            view: reg.views[vi].name.clone(),
                            feature: f.name.clone(),
                            r#type: f.ty.to_proto() as i32,
                        }
                    })
                    .collect(),
                features,
            }
        })
        .collect();
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out
}

fn route(reg: &Registry, r: &Route) -> v1::Route {
    let mut route = v1::Route {
        name: r.name.clone(),
        r#match: Some(r.matcher.to_proto()),
        service: reg.services[r.service].name.clone(),
        entity_fields: r.entity_fields.clone(),
        feature_names: r.feature_names as i32,
        on_missing_entity: r.on_missing_entity as i32,
        on_stale: r.on_stale as i32,
        on_reader_error: r.on_reader_error as i32,
        max_body_bytes: r.max_body_bytes,
        max_entities: r.max_entities,
        reader_timeout_ms: r.reader_timeout_ms,
        cache_max_age_ms: r.cache_max_age_ms,
        log: r.log.clone(),
        extra_services: r
            .extra_services
            .iter()
            .map(|e| v1::ExtraService {
                service: reg.services[e.service].name.clone(),
                entity_fields: e.entity_fields.clone(),
            })
            .collect(),
        feast_services: r
            .feast_services
            .iter()
            .map(|&s| reg.services[s].name.clone())
            .collect(),
        ..Default::default()
    };
    r.format.write_to(&mut route);
    route
}

/// Where Feast keeps a service: its join keys in key order (Ferry's is Feast's: sorted by
/// name) and, per view in the service's order, the fields of the selected features (under
/// the view's versioned name), or its precomputed vector's field and names.
fn feast_layout(reg: &Registry, f: &FeastRepo, s: &FeatureService) -> v1::FeastLayout {
    let precomputed = f.precomputed.contains(&s.name);
    v1::FeastLayout {
        project: f.project.clone(),
        join_keys: s
            .keys
            .iter()
            .map(|k| v1::FeastJoinKey {
                name: k.join_key.clone(),
                int64: k.key_type == KeyType::Int64,
            })
            .collect(),
        views: reg
            .selected(s)
            .map(|(view, features)| {
                f.view_layout(&view.name, features.map(|x| x.name.as_str()), precomputed)
            })
            .collect(),
        precomputed_field: if precomputed {
            feast::precomputed_field(&s.name)
        } else {
            Vec::new()
        },
    }
}

/// First 16 hex digits of SHA-256 over the snapshot encoded with an empty version.
pub fn content_version(snap: &v1::Snapshot) -> String {
    let mut unversioned = snap.clone();
    unversioned.version.clear();
    let digest = Sha256::digest(unversioned.encode_to_vec());
    digest[..8].iter().map(|b| format!("{b:02x}")).collect()
}

/// The snapshot's wire bytes (what `--output` writes and Envoy receives).
pub fn encode(snap: &v1::Snapshot) -> Vec<u8> {
    snap.encode_to_vec()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::{load_repo, ORDER_FILES, ORDER_YAML};
    use crate::types::{FeatureType, KeyType};
    use ferry_protos::v1::{
        value::Kind, FeatureNames, Format, MissingEntityPolicy, ReaderErrorPolicy, StalePolicy,
        ValueType,
    };

    #[test]
    fn services_are_in_canonical_order_and_pinned_by_the_fingerprint() {
        let (_dir, reg) = load_repo(ORDER_YAML, &ORDER_FILES);
        let snap = build(&reg.unwrap());
        assert_eq!(snap.project, "shop");
        let s = &snap.services[0];
        let keys: Vec<(&str, &str, i32)> = s
            .entity_keys
            .iter()
            .map(|k| (k.entity.as_str(), k.join_key.as_str(), k.r#type))
            .collect();
        assert_eq!(
            keys,
            [
                ("merchant", "merchant_id", ValueType::Int64 as i32),
                ("user", "user_id", ValueType::String as i32)
            ]
        );
        let layout: Vec<(&str, i64, Vec<&str>)> = s
            .views
            .iter()
            .map(|v| {
                (
                    v.name.as_str(),
                    v.ttl_seconds,
                    v.features.iter().map(|f| f.name.as_str()).collect(),
                )
            })
            .collect();
        assert_eq!(
            layout,
            [
                ("alpha", 0, vec!["a", "c"]),
                ("zeta", 7200, vec!["z1", "z2"])
            ]
        );
        assert_eq!(s.views[0].features[0].r#type, ValueType::Float32List as i32);
        assert_eq!(
            s.views[1].features[0]
                .default_value
                .as_ref()
                .and_then(|v| v.kind.clone()),
            Some(Kind::BoolVal(true))
        );
        assert_eq!(s.views[1].features[1].default_value, None);
        let expected = crate::fingerprint::fingerprint(
            &[
                ("user_id", KeyType::String),
                ("merchant_id", KeyType::Int64),
            ],
            &[
                ("zeta", "z1", FeatureType::Bool),
                ("alpha", "a", FeatureType::Float32List),
                ("zeta", "z2", FeatureType::Float64),
                ("alpha", "c", FeatureType::Int32),
            ],
        );
        assert_eq!(s.fingerprint, expected);
    }

    #[test]
    fn routes_carry_explicit_enums_and_limits() {
        let (_dir, reg) = load_repo(ORDER_YAML, &ORDER_FILES);
        let snap = build(&reg.unwrap());
        let r = &snap.routes[0];
        assert_eq!(r.name, "route-0");
        let m = r.r#match.as_ref().unwrap();
        assert_eq!(
            (m.path_prefix.as_str(), m.path_exact.as_str()),
            ("", "/v1/models/pair:predict")
        );
        assert_eq!(r.service, "pair");
        assert_eq!(r.format, Format::KserveV1 as i32);
        assert_eq!(r.entity_fields, ["mid", "uid"]);
        assert_eq!(r.feature_names, FeatureNames::Short as i32);
        assert_eq!(r.on_missing_entity, MissingEntityPolicy::MissingNull as i32);
        assert_eq!(r.on_stale, StalePolicy::StaleReject as i32);
        assert_eq!(
            r.on_reader_error,
            ReaderErrorPolicy::ReaderErrorForward as i32
        );
        assert_eq!(
            (r.max_body_bytes, r.max_entities, r.reader_timeout_ms),
            (2048, 10, 50)
        );
        assert_eq!(
            (snap.reader_cluster.as_str(), snap.reader_authority.as_str()),
            ("ferry_reader", "ferry-reader")
        );
    }

    #[test]
    fn version_is_a_content_hash_independent_of_listing_order() {
        let (_dir, reg) = load_repo(ORDER_YAML, &ORDER_FILES);
        let snap = build(&reg.unwrap());
        assert_eq!(snap.version.len(), 16);
        let mut unversioned = snap.clone();
        unversioned.version.clear();
        let digest = Sha256::digest(unversioned.encode_to_vec());
        let hex: String = digest[..8].iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(snap.version, hex);
        assert_eq!(
            v1::Snapshot::decode(encode(&snap).as_slice()).unwrap(),
            snap
        );

        // Same definitions listed in another order: same snapshot bytes.
        let reordered = ORDER_YAML
            .replace(
                "      - {name: b, type: string}\n      - {name: a, type: float32_list}\n",
                "      - {name: a, type: float32_list}\n      - {name: b, type: string}\n",
            )
            .replace(
                "[zeta, \"alpha:c\", \"alpha:a\"]",
                "[\"alpha:a\", zeta, \"alpha:c\"]",
            );
        assert_ne!(reordered, ORDER_YAML);
        let (_dir2, reg2) = load_repo(&reordered, &ORDER_FILES);
        assert_eq!(encode(&build(&reg2.unwrap())), encode(&snap));

        // A TTL change keeps the fingerprint but changes the version.
        let (_dir3, reg3) = load_repo(&ORDER_YAML.replace("ttl: 2h", "ttl: 3h"), &ORDER_FILES);
        let snap3 = build(&reg3.unwrap());
        assert_eq!(snap3.services[0].fingerprint, snap.services[0].fingerprint);
        assert_ne!(snap3.version, snap.version);
    }
}
