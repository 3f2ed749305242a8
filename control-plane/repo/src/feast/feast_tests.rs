use std::collections::HashMap;

use ferry_protos::feast_proto as fp;
use prost::Message;

use super::*;
use crate::snapshot;
use crate::{self as repo, Registry, RepoError};

const STORE_YAML: &str = "project: shop\nregistry: data/registry.db\n\
    online_store:\n  type: redis\n  connection_string: localhost:6379\n\
    entity_key_serialization_version: 3\n";

const FERRY_YAML: &str = "project: shop\nfeast: {repo: feast}\nroutes:\n\
    - {match: {path_prefix: /m}, service: scoring, format: kserve_v1, entity: {field: user_id}}\n";

fn feature(name: &str, t: Fvt) -> fp::FeatureSpec {
    fp::FeatureSpec {
        name: name.into(),
        value_type: t as i32,
    }
}

fn view(name: &str, entities: &[&str], features: Vec<fp::FeatureSpec>) -> fp::FeatureView {
    fp::FeatureView {
        spec: Some(fp::FeatureViewSpec {
            name: name.into(),
            project: "shop".into(),
            entities: entities.iter().map(|e| e.to_string()).collect(),
            features,
            ttl: Some(fp::Duration {
                seconds: 3600,
                nanos: 0,
            }),
            online: true,
            entity_columns: Vec::new(),
            batch_source: Some(fp::DataSource {
                r#type: fp::data_source::SourceType::BatchFile as i32,
                timestamp_field: "event_timestamp".into(),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn projection(view: &str, features: Vec<fp::FeatureSpec>) -> fp::FeatureViewProjection {
    fp::FeatureViewProjection {
        feature_view_name: view.into(),
        feature_columns: features,
        feature_view_name_alias: String::new(),
        join_key_map: HashMap::new(),
        ..Default::default()
    }
}

fn entity(name: &str, join_key: &str, t: Fvt, project: &str) -> fp::Entity {
    fp::Entity {
        spec: Some(fp::EntitySpec {
            name: name.into(),
            value_type: t as i32,
            join_key: join_key.into(),
            project: project.into(),
        }),
    }
}

/// A registry as `feast apply` would write it: one service over two views of one entity,
/// plus another project's objects (ignored).
fn registry() -> fp::Registry {
    let profile = vec![feature("age", Fvt::Int64), feature("score", Fvt::Float)];
    fp::Registry {
        entities: vec![
            entity("user", "user_id", Fvt::String, "shop"),
            entity("user", "uid", Fvt::Int64, "other"),
        ],
        feature_views: vec![
            view("profile", &["user"], profile.clone()),
            view("recent", &["user"], vec![feature("clicks", Fvt::Int64)]),
        ],
        feature_services: vec![fp::FeatureService {
            spec: Some(fp::FeatureServiceSpec {
                name: "scoring".into(),
                project: "shop".into(),
                features: vec![
                    projection("profile", profile),
                    projection("recent", vec![feature("clicks", Fvt::Int64)]),
                ],
                precompute_online: true,
            }),
        }],
        on_demand_feature_views: Vec::new(),
        stream_feature_views: Vec::new(),
        ..Default::default()
    }
}

fn load(reg: &fp::Registry, store_yaml: &str) -> (tempfile::TempDir, Result<Registry, RepoError>) {
    load_with(reg, store_yaml, FERRY_YAML)
}

fn load_with(
    reg: &fp::Registry,
    store_yaml: &str,
    ferry_yaml: &str,
) -> (tempfile::TempDir, Result<Registry, RepoError>) {
    let dir = tempfile::tempdir().unwrap();
    let feast = dir.path().join("feast");
    std::fs::create_dir_all(feast.join("data")).unwrap();
    std::fs::write(feast.join(FEATURE_STORE_FILE), store_yaml).unwrap();
    std::fs::write(feast.join("data/registry.db"), reg.encode_to_vec()).unwrap();
    std::fs::write(dir.path().join(repo::REPO_FILE), ferry_yaml).unwrap();
    let loaded = repo::load(dir.path());
    (dir, loaded)
}

fn problems(reg: &fp::Registry, store_yaml: &str) -> String {
    match load(reg, store_yaml).1 {
        Err(e) => e.to_string(),
        Ok(_) => panic!("expected the repo to be refused"),
    }
}

#[test]
fn a_feast_registry_becomes_the_repos_entities_views_and_services() {
    let (_dir, loaded) = load(&registry(), STORE_YAML);
    let reg = loaded.unwrap();
    assert_eq!(reg.feast.as_ref().unwrap().project, "shop");
    assert_eq!(reg.entities.len(), 1);
    assert_eq!(reg.entities[0].join_key, "user_id");
    let service = reg.service("scoring").unwrap();
    let names: Vec<&str> = service
        .views
        .iter()
        .map(|sv| reg.views[sv.view].name.as_str())
        .collect();
    assert_eq!(names, ["profile", "recent"]);
    assert!(reg
        .views
        .iter()
        .all(|v| v.ttl_seconds == 3600 && v.source.is_none()));

    // The snapshot carries Feast's layout: join keys, `_ts:` fields, murmur3 feature fields.
    let snap = snapshot::build(&reg);
    let layout = snap.services[0].feast.as_ref().unwrap();
    assert_eq!(layout.project, "shop");
    assert_eq!(layout.join_keys[0].name, "user_id");
    assert!(!layout.join_keys[0].int64);
    assert_eq!(layout.views[0].timestamp_field, b"_ts:profile");
    assert_eq!(
        layout.views[0].feature_fields,
        [
            ferry_protos::feast::feature_field("profile", "age"),
            ferry_protos::feast::feature_field("profile", "score"),
        ]
    );
    ferry_core::config::Config::from_snapshot(snap).unwrap();
}

#[test]
fn ferry_materialize_has_nothing_to_write_for_a_feast_backed_repo() {
    let (_dir, loaded) = load(&registry(), STORE_YAML);
    let Err(err) = crate::tables::load_tables(&loaded.unwrap()) else {
        panic!("materialize must refuse a Feast-backed repo");
    };
    assert!(err.to_string().contains("feast materialize"), "{err}");
}

#[test]
fn unsupported_feast_configurations_are_refused_by_name() {
    let sqlite = STORE_YAML.replace("type: redis", "type: sqlite");
    assert!(problems(&registry(), &sqlite).contains("online store 'sqlite' is not supported"));
    let v2 = STORE_YAML.replace("version: 3", "version: 2");
    assert!(problems(&registry(), &v2).contains("entity_key_serialization_version"));
    let remote = STORE_YAML.replace("data/registry.db", "s3://bucket/registry.db");
    assert!(problems(&registry(), &remote).contains("(type file) is not supported"));
    let sentinel = STORE_YAML.replace("type: redis", "type: redis\n  redis_type: redis_sentinel");
    assert!(problems(&registry(), &sentinel).contains("redis_sentinel"));
}

fn service_of(reg: &mut fp::Registry) -> &mut fp::FeatureServiceSpec {
    reg.feature_services[0].spec.as_mut().unwrap()
}

#[test]
fn unsupported_registry_objects_are_refused_by_name() {
    let named = |name: &str| fp::NamedSpec {
        name: name.into(),
        project: "shop".into(),
    };

    let mut stream = registry();
    stream.stream_feature_views.push(fp::StreamFeatureView {
        spec: Some(named("clicks_stream")),
    });
    service_of(&mut stream)
        .features
        .push(projection("clicks_stream", Vec::new()));
    assert!(problems(&stream, STORE_YAML).contains("stream feature views are not supported"));

    let mut alias = registry();
    service_of(&mut alias).features[0].feature_view_name_alias = "p2".into();
    assert!(problems(&alias, STORE_YAML).contains("aliases"));

    let mut map = registry();
    service_of(&mut map).features[0]
        .join_key_map
        .insert("user_id".into(), "customer_id".into());
    assert!(problems(&map, STORE_YAML).contains("join key maps"));

    let mut offline = registry();
    offline.feature_views[1].spec.as_mut().unwrap().online = false;
    assert!(problems(&offline, STORE_YAML).contains("'recent': is not online"));

    let mut list = registry();
    let strings = feature("tags", Fvt::StringList);
    list.feature_views[1]
        .spec
        .as_mut()
        .unwrap()
        .features
        .push(strings.clone());
    service_of(&mut list).features[1]
        .feature_columns
        .push(strings);
    assert!(problems(&list, STORE_YAML)
        .contains("feature 'tags': Feast type STRING_LIST is not supported"));

    let mut int32_key = registry();
    int32_key.entities[0] = entity("user", "user_id", Fvt::Int32, "shop");
    assert!(problems(&int32_key, STORE_YAML).contains("join key type INT32 is not supported"));
}

#[test]
fn a_missing_or_foreign_registry_file_is_explained() {
    let (dir, _) = load(&registry(), STORE_YAML);
    std::fs::write(dir.path().join("feast/data/registry.db"), b"\xff\xff").unwrap();
    let err = repo::load(dir.path()).unwrap_err().to_string();
    assert!(err.contains("not a Feast registry"), "{err}");
    std::fs::remove_file(dir.path().join("feast/data/registry.db")).unwrap();
    let err = repo::load(dir.path()).unwrap_err().to_string();
    assert!(err.contains("has `feast apply` been run"), "{err}");
}

#[test]
fn the_watcher_also_watches_the_feast_repos_files() {
    let (files, stamp) = watched(Path::new("/r"), FERRY_YAML);
    assert_eq!(files[0], Path::new("/r/feast/feature_store.yaml"));
    assert!(stamp.is_none());
    assert!(watched(Path::new("/r"), "project: p\n").0.is_empty());
}

#[test]
fn environment_variables_are_expanded_as_feast_does() {
    let var = |name: &str| (name == "REG").then(|| "data/r.db".to_owned());
    assert_eq!(expand_vars("registry: ${REG}", var), "registry: data/r.db");
    assert_eq!(expand_vars("a $REG b", var), "a data/r.db b");
    assert_eq!(expand_vars("${NOPE} $NOPE $ ${", var), "${NOPE} $NOPE $ ${");
    assert_eq!(expand_vars("x$REG$REG", var), "xdata/r.dbdata/r.db");
}

#[test]
fn push_sources_and_write_schemas_come_from_the_feast_registry() {
    let mut reg = registry();
    let spec = reg.feature_views[0].spec.as_mut().unwrap();
    spec.stream_source = Some(fp::DataSource {
        r#type: fp::data_source::SourceType::PushSource as i32,
        name: "profile_push".into(),
        ..Default::default()
    });
    let store = STORE_YAML.replace(
        "connection_string: localhost:6379\n",
        "connection_string: localhost:6379\n  key_ttl_seconds: 600\n",
    );
    let (_dir, loaded) = load(&reg, &store);
    let snap = snapshot::build(&loaded.unwrap());
    assert_eq!(snap.push_sources.len(), 1);
    assert_eq!(snap.push_sources[0].name, "profile_push");
    assert_eq!(snap.push_sources[0].views, ["profile"]);
    let names: Vec<&str> = snap.write_views.iter().map(|w| w.name.as_str()).collect();
    assert_eq!(names, ["profile", "recent"]);
    let profile = &snap.write_views[0];
    assert_eq!(profile.timestamp_field, "event_timestamp");
    assert_eq!(profile.feast.unwrap().key_ttl_seconds, 600);

    // ferry.yaml may not declare its own push sources beside the registry's.
    let yaml = format!("{FERRY_YAML}push_sources:\n  - {{name: mine, views: [profile]}}\n");
    let (_dir, loaded) = load_with(&reg, STORE_YAML, &yaml);
    let text = loaded.err().unwrap().to_string();
    assert!(
        text.contains("from the Feast registry (PushSource)"),
        "{text}"
    );
}

#[path = "odfv_tests.rs"]
mod odfv;

fn versioning_on() -> String {
    STORE_YAML.replace(
        "registry: data/registry.db\n",
        "registry:\n  path: data/registry.db\n  enable_online_feature_view_versioning: true\n",
    )
}

/// `registry()` with `profile` at version 2 (its version 1 held `age` only, in the history)
/// and a service `scoring_v1` pinned to `profile@v1`.
fn versioned_registry() -> fp::Registry {
    let mut reg = registry();
    reg.feature_views[0].meta = Some(fp::FeatureViewMeta {
        current_version_number: 2,
        ..Default::default()
    });
    let v1 = view("profile", &["user"], vec![feature("age", Fvt::Int64)]);
    reg.feature_view_version_history = Some(fp::FeatureViewVersionHistory {
        records: vec![fp::FeatureViewVersionRecord {
            feature_view_name: "profile".into(),
            project_id: "shop".into(),
            version_number: 1,
            feature_view_type: "feature_view".into(),
            feature_view_proto: v1.encode_to_vec(),
        }],
    });
    let mut pinned = projection("profile", vec![feature("age", Fvt::Int64)]);
    pinned.version_tag = Some(1);
    reg.feature_services.push(fp::FeatureService {
        spec: Some(fp::FeatureServiceSpec {
            name: "scoring_v1".into(),
            project: "shop".into(),
            features: vec![pinned],
            ..Default::default()
        }),
    });
    reg
}

#[test]
fn versioned_views_pinned_services_and_precomputed_vectors_shape_the_layout() {
    use ferry_protos::feast::{feature_field, precomputed_field};
    let (_dir, loaded) = load(&versioned_registry(), &versioning_on());
    let reg = loaded.unwrap();
    let snap = snapshot::build(&reg);
    let layout = |name: &str| {
        let s = snap.services.iter().find(|s| s.name == name).unwrap();
        s.feast.clone().unwrap()
    };
    // The latest view is stored as profile_v2; `scoring` (precompute_online) reads its vector.
    let scoring = layout("scoring");
    assert_eq!(scoring.precomputed_field, precomputed_field("scoring"));
    assert_eq!(scoring.views[0].timestamp_field, b"_ts:profile_v2");
    assert_eq!(
        scoring.views[0].feature_fields[0],
        feature_field("profile_v2", "age")
    );
    assert_eq!(scoring.views[0].precomputed_view, "profile");
    assert_eq!(
        scoring.views[0].precomputed_names,
        ["profile__age", "profile__score"]
    );
    assert_eq!(scoring.views[1].timestamp_field, b"_ts:recent");
    // The pinned service reads version 1 as it was: Ferry view profile_v1, fields profile_v1.
    let pinned = layout("scoring_v1");
    assert!(pinned.precomputed_field.is_empty());
    assert_eq!(pinned.views[0].timestamp_field, b"_ts:profile_v1");
    assert_eq!(
        pinned.views[0].feature_fields,
        [feature_field("profile_v1", "age")]
    );
    let v1 = reg.views.iter().find(|v| v.name == "profile_v1").unwrap();
    assert_eq!(v1.features.len(), 1);
    ferry_core::config::Config::from_snapshot(snap).unwrap();

    // Without versioning on, Feast refuses a pin; so does Ferry.
    let p = problems(&versioned_registry(), STORE_YAML);
    assert!(
        p.contains("'scoring_v1': feature view 'profile@v1': is pinned"),
        "{p}"
    );
}

#[test]
fn a_disabled_view_is_refused_by_name_and_a_materializing_one_is_served() {
    let mut reg = registry();
    reg.feature_views[1].meta = Some(fp::FeatureViewMeta {
        state: fp::FeatureViewState::Materializing as i32,
        ..Default::default()
    });
    assert!(load(&reg, STORE_YAML).1.is_ok());
    reg.feature_views[1].spec.as_mut().unwrap().disabled = true;
    let p = problems(&reg, STORE_YAML);
    assert!(
        p.contains("feast feature service 'scoring': feature view 'recent': is disabled"),
        "{p}"
    );
}

#[test]
fn a_registry_field_ferry_does_not_know_is_a_notice() {
    let mut bytes = registry().encode_to_vec();
    // Field 99 of the Registry: not Feast 0.67's.
    prost::encoding::string::encode(99, &"x".to_owned(), &mut bytes);
    let dir = tempfile::tempdir().unwrap();
    let feast = dir.path().join("feast");
    std::fs::create_dir_all(feast.join("data")).unwrap();
    std::fs::write(feast.join(FEATURE_STORE_FILE), STORE_YAML).unwrap();
    std::fs::write(feast.join("data/registry.db"), bytes).unwrap();
    std::fs::write(dir.path().join(repo::REPO_FILE), FERRY_YAML).unwrap();
    let reg = repo::load(dir.path()).unwrap();
    let notices = &reg.feast.as_ref().unwrap().notices;
    assert_eq!(notices.len(), 1, "{notices:?}");
    assert!(notices[0].contains("feast.core.Registry has field(s) 99"));
    let (_dir, plain) = load(&registry(), STORE_YAML);
    assert!(plain.unwrap().feast.unwrap().notices.is_empty());
}
