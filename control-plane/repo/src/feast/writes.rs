//! What a Feast-backed repo lets Ferry write, read from the Feast registry: every online batch
//! feature view of the project (all its features, as Feast's `online_write_batch` writes them,
//! whether or not a service selects them) and the push sources (`PushSource`) that feed them.
//! A view Ferry cannot write as Feast would (a feature type Ferry does not serve, a join key
//! that is not a string or int64, a field mapping on its source) is left out, and a push
//! source feeding one with it: a push to it answers `unknown_push_source`, never a partial
//! write. With online versioning, a view at a version above 0 is left out too (Feast writes
//! it under `VIEW_vN`, Ferry's writes name fields after the view).

use std::collections::BTreeMap;

use ferry_protos::feast_proto::{self as fp, data_source::SourceType, ValueType as Fvt};
use ferry_protos::v1;

use crate::types::{FeatureType, KeyType};

/// The writable views (sorted by name) and push sources (sorted by name, each with its views
/// sorted) of `project` in `reg`; `feast` is the online store's write options, `versioning`
/// whether online feature view versioning is on.
pub fn writes(
    reg: &fp::Registry,
    project: &str,
    feast: &v1::FeastWrite,
    versioning: bool,
) -> (Vec<v1::WriteView>, Vec<v1::PushSource>) {
    let mut views = Vec::new();
    let mut sources: BTreeMap<String, (Vec<String>, bool)> = BTreeMap::new();
    for spec in reg
        .feature_views
        .iter()
        .filter(|v| !versioning || super::versions::current_version(v) == 0)
        .filter_map(|v| v.spec.as_ref())
        .filter(|s| s.project == project)
    {
        let view = write_view(reg, spec, feast);
        if let Some(push) = push_source(spec) {
            let entry = sources.entry(push.to_owned()).or_default();
            entry.0.push(spec.name.clone());
            entry.1 |= view.is_none();
        }
        views.extend(view);
    }
    views.sort_by(|a, b| a.name.cmp(&b.name));
    let push_sources = sources
        .into_iter()
        .filter(|(_, (_, unwritable))| !unwritable)
        .map(|(name, (mut views, _))| {
            views.sort();
            v1::PushSource { name, views }
        })
        .collect();
    (views, push_sources)
}

/// The push source's name if the view's `source=` is a `PushSource`.
fn push_source(spec: &fp::FeatureViewSpec) -> Option<&str> {
    spec.stream_source
        .as_ref()
        .filter(|s| s.r#type == SourceType::PushSource as i32 && !s.name.is_empty())
        .map(|s| s.name.as_str())
}

/// The view's write schema, or None when Ferry cannot write it as Feast does.
fn write_view(
    reg: &fp::Registry,
    spec: &fp::FeatureViewSpec,
    feast: &v1::FeastWrite,
) -> Option<v1::WriteView> {
    if !spec.online {
        return None;
    }
    let batch = spec.batch_source.as_ref()?;
    if batch.timestamp_field.is_empty() || !batch.field_mapping.is_empty() {
        return None;
    }
    let mut entity_keys = Vec::with_capacity(spec.entities.len());
    for name in &spec.entities {
        let e = reg
            .entities
            .iter()
            .filter_map(|e| e.spec.as_ref())
            .find(|e| e.project == spec.project && &e.name == name)?;
        let ty = match Fvt::try_from(e.value_type).ok()? {
            Fvt::String => KeyType::String,
            Fvt::Int64 => KeyType::Int64,
            _ => return None,
        };
        entity_keys.push(v1::EntityKey {
            entity: e.name.clone(),
            join_key: e.join_key.clone(),
            r#type: ty.to_proto() as i32,
        });
    }
    if entity_keys.is_empty() {
        return None;
    }
    entity_keys.sort_by(|a, b| a.join_key.cmp(&b.join_key));
    let mut features = Vec::with_capacity(spec.features.len());
    for f in &spec.features {
        features.push(v1::Feature {
            name: f.name.clone(),
            r#type: feature_type(f.value_type)?.to_proto() as i32,
            default_value: None,
        });
    }
    features.sort_by(|a, b| a.name.cmp(&b.name));
    Some(v1::WriteView {
        name: spec.name.clone(),
        entity_keys,
        timestamp_field: batch.timestamp_field.clone(),
        features,
        feast: Some(*feast),
    })
}

fn feature_type(t: i32) -> Option<FeatureType> {
    Some(match Fvt::try_from(t).ok()? {
        Fvt::Int32 => FeatureType::Int32,
        Fvt::Int64 => FeatureType::Int64,
        Fvt::Float => FeatureType::Float32,
        Fvt::Double => FeatureType::Float64,
        Fvt::Bool => FeatureType::Bool,
        Fvt::String => FeatureType::String,
        Fvt::Bytes => FeatureType::Bytes,
        Fvt::FloatList => FeatureType::Float32List,
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn source(ty: SourceType, name: &str) -> fp::DataSource {
        fp::DataSource {
            r#type: ty as i32,
            name: name.into(),
            timestamp_field: "ts".into(),
            ..Default::default()
        }
    }

    fn view(name: &str, push: Option<&str>, value_type: Fvt) -> fp::FeatureView {
        fp::FeatureView {
            spec: Some(fp::FeatureViewSpec {
                name: name.into(),
                project: "p".into(),
                entities: vec!["user".into()],
                features: vec![
                    fp::FeatureSpec {
                        name: "b".into(),
                        value_type: value_type as i32,
                    },
                    fp::FeatureSpec {
                        name: "a".into(),
                        value_type: Fvt::Int64 as i32,
                    },
                ],
                online: true,
                batch_source: Some(source(SourceType::BatchFile, "")),
                stream_source: push.map(|p| source(SourceType::PushSource, p)),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn push_sources_come_from_the_views_and_unwritable_views_are_left_out() {
        let reg = fp::Registry {
            entities: vec![fp::Entity {
                spec: Some(fp::EntitySpec {
                    name: "user".into(),
                    value_type: Fvt::String as i32,
                    join_key: "user_id".into(),
                    project: "p".into(),
                }),
            }],
            feature_views: vec![
                view("v2", Some("s"), Fvt::Double),
                view("v1", Some("s"), Fvt::Float),
                view("batch_only", None, Fvt::Bool),
                // UNIX_TIMESTAMP: not a type Ferry writes, so its push source is left out.
                view("odd", Some("t"), Fvt::UnixTimestamp),
            ],
            ..Default::default()
        };
        let opts = v1::FeastWrite {
            key_ttl_seconds: 60,
            skip_dedup: false,
        };
        let (views, sources) = writes(&reg, "p", &opts, false);
        let names: Vec<&str> = views.iter().map(|v| v.name.as_str()).collect();
        assert_eq!(names, ["batch_only", "v1", "v2"]);
        let v1 = &views[1];
        assert_eq!(v1.timestamp_field, "ts");
        assert_eq!(v1.entity_keys[0].join_key, "user_id");
        let features: Vec<&str> = v1.features.iter().map(|f| f.name.as_str()).collect();
        assert_eq!(features, ["a", "b"]);
        assert_eq!(v1.feast.map(|f| f.key_ttl_seconds), Some(60));
        assert_eq!(
            sources,
            [v1::PushSource {
                name: "s".into(),
                views: vec!["v1".into(), "v2".into()],
            }]
        );
        assert!(writes(&reg, "other", &opts, false).0.is_empty());
    }
}
