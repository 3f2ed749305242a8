//! docs/ferry-yaml.md against the config model: each of its tables lists exactly the keys serde
//! accepts at that place of `ferry.yaml` (asked of the model itself: an unknown key's error
//! names every accepted one), and the numeric settings carry the code's defaults and bounds.

use std::collections::{BTreeMap, BTreeSet};

use super::ferry_yaml::{RawNearCache, RawReader, RawRepo};

/// Each struct of the model, by its path in the reference, and a document that puts an unknown
/// key `__x` there. (`routes[].extra_services[].entity` is `routes[].entity`'s type, documented
/// once.)
const PLACES: &[(&str, &str)] = &[
    ("", "project: p\n__x: 1"),
    ("entities[]", "entities: [{__x: 1}]"),
    ("feature_views[]", "feature_views: [{__x: 1}]"),
    (
        "feature_views[].source",
        "feature_views: [{source: {__x: 1}}]",
    ),
    (
        "feature_views[].features[]",
        "feature_views: [{features: [{__x: 1}]}]",
    ),
    ("feature_services[]", "feature_services: [{__x: 1}]"),
    ("routes[]", "routes: [{__x: 1}]"),
    ("routes[].match", "routes: [{match: {__x: 1}}]"),
    (
        "routes[].match.headers[]",
        "routes: [{match: {headers: [{__x: 1}]}}]",
    ),
    ("routes[].entity", "routes: [{entity: {__x: 1}}]"),
    (
        "routes[].extra_services[]",
        "routes: [{extra_services: [{__x: 1}]}]",
    ),
    ("routes[].log", "routes: [{log: {__x: 1}}]"),
    ("reader", "reader: {__x: 1}"),
    ("near_cache", "near_cache: {__x: 1}"),
    ("on_demand_views[]", "on_demand_views: [{__x: 1}]"),
    (
        "on_demand_views[].request[]",
        "on_demand_views: [{request: [{__x: 1}]}]",
    ),
    (
        "on_demand_views[].features[]",
        "on_demand_views: [{features: [{__x: 1}]}]",
    ),
    ("feast", "feast: {__x: 1}"),
    ("feast.on_demand[]", "feast: {on_demand: [{__x: 1}]}"),
    (
        "feast.on_demand[].features[]",
        "feast: {on_demand: [{features: [{__x: 1}]}]}",
    ),
    ("push_sources[]", "push_sources: [{__x: 1}]"),
];

/// The keys the model accepts where `doc` puts `__x`, from serde's refusal.
fn accepted(doc: &str) -> BTreeSet<String> {
    let e = match serde_norway::from_str::<RawRepo>(doc) {
        Ok(_) => panic!("the model accepted an unknown key: {doc}"),
        Err(e) => e.to_string(),
    };
    let (_, list) = e
        .split_once("expected")
        .unwrap_or_else(|| panic!("{doc}: not an unknown-field error: {e}"));
    assert!(e.contains("unknown field `__x`"), "{doc}: {e}");
    list.split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_owned)
        .collect()
}

/// The page's rows: key path → its cells.
fn documented() -> BTreeMap<String, Vec<String>> {
    let page = include_str!("../../../docs/ferry-yaml.md");
    let mut rows = BTreeMap::new();
    for line in page.lines() {
        let cells: Vec<String> = line.split('|').map(|c| c.trim().to_owned()).collect();
        let Some(key) = cells
            .get(1)
            .and_then(|k| k.strip_prefix('`')?.strip_suffix('`'))
        else {
            continue;
        };
        assert!(
            rows.insert(key.to_owned(), cells.clone()).is_none(),
            "docs/ferry-yaml.md lists `{key}` twice"
        );
    }
    rows
}

/// `a.b[].c` → (`a.b[]`, `c`).
fn split(key: &str) -> (&str, &str) {
    key.rsplit_once('.').unwrap_or(("", key))
}

#[test]
fn the_ferry_yaml_reference_lists_every_key_the_model_accepts() {
    let rows = documented();
    let mut problems = Vec::new();
    for (place, doc) in PLACES {
        let model = accepted(doc);
        let page: BTreeSet<String> = rows
            .keys()
            .filter(|k| split(k).0 == *place)
            .map(|k| split(k).1.to_owned())
            .collect();
        for k in model.difference(&page) {
            problems.push(format!(
                "`{place}`: the model accepts `{k}`, the page does not list it"
            ));
        }
        for k in page.difference(&model) {
            problems.push(format!(
                "`{place}`: the page lists `{k}`, the model refuses it"
            ));
        }
    }
    for key in rows.keys() {
        if !PLACES.iter().any(|(p, _)| *p == split(key).0) {
            problems.push(format!(
                "`{key}`: in no part of the model this test knows (PLACES)"
            ));
        }
    }
    assert!(
        problems.is_empty(),
        "docs/ferry-yaml.md differs from the config model (control-plane/repo/src/ferry_yaml.rs):\n{}",
        problems.join("\n")
    );
}

#[test]
fn the_ferry_yaml_reference_gives_the_codes_defaults_and_bounds() {
    use ferry_core::rules;
    let rows = documented();
    let cell = |key: &str, i: usize| -> String {
        rows.get(key)
            .unwrap_or_else(|| panic!("docs/ferry-yaml.md has no row `{key}`"))[i]
            .clone()
    };
    // Columns: 1 key, 2 type, 3 default, 4 values.
    for b in [
        rules::MAX_BODY_BYTES,
        rules::MAX_ENTITIES,
        rules::READER_TIMEOUT_MS,
        rules::MAX_HEADER_BYTES,
        rules::CACHE_MAX_AGE_MS,
    ] {
        let key = format!("routes[].{}", b.name);
        assert_eq!(
            (cell(&key, 3), cell(&key, 4)),
            (b.default.to_string(), format!("{}..={}", b.min, b.max)),
            "docs/ferry-yaml.md `{key}`: (default, values) differ from core/src/rules.rs"
        );
    }
    let near = RawNearCache::default().max_bytes;
    let range = rules::NEAR_CACHE_BYTES;
    assert_eq!(
        (
            cell("near_cache.max_bytes", 3),
            cell("near_cache.max_bytes", 4)
        ),
        (
            near.to_string(),
            format!("{}..={}", range.start(), range.end())
        ),
        "docs/ferry-yaml.md `near_cache.max_bytes`: (default, values) differ from the code"
    );
    let reader = RawReader::default();
    assert_eq!(cell("reader.cluster", 3), format!("`{}`", reader.cluster));
    assert_eq!(
        cell("reader.authority", 3),
        format!("`{}`", reader.authority)
    );
    assert_eq!(
        cell("routes[].features_header", 3),
        format!("`{}`", rules::DEFAULT_FEATURES_HEADER)
    );
}

/// A repo with every word-valued key set; `zzz` in one place makes `ferry apply` list that key's
/// accepted words.
const WORDS_REPO: &str = r#"
project: p
entities:
  - {name: user, join_key: user_id, type: ENTITY_TYPE}
feature_views:
  - name: v
    entities: [user]
    source: {path: data/v.csv, timestamp_field: ts, timestamp_unit: UNIT}
    features:
      - {name: a, type: FEATURE_TYPE}
feature_services:
  - {name: s, features: [v]}
routes:
  - match: {path_prefix: /x}
    service: s
    format: FORMAT
    entity: {field: user_id}
    feature_names: NAMES
    on_missing_entity: MISSING
    on_stale: STALE
    on_reader_error: READER
  - match: {path_prefix: /h}
    service: s
    format: header
    entity: {field: user_id}
    features_encoding: ENCODING
"#;

/// (placeholder, a valid word, the page's key, whether the code's first word is the default).
const WORDS: &[(&str, &str, &str, bool)] = &[
    ("ENTITY_TYPE", "string", "entities[].type", false),
    ("UNIT", "s", "feature_views[].source.timestamp_unit", false),
    (
        "FEATURE_TYPE",
        "int64",
        "feature_views[].features[].type",
        false,
    ),
    ("FORMAT", "kserve_v1", "routes[].format", false),
    ("NAMES", "full", "routes[].feature_names", true),
    ("MISSING", "reject", "routes[].on_missing_entity", true),
    ("STALE", "null", "routes[].on_stale", true),
    ("READER", "reject", "routes[].on_reader_error", true),
    ("ENCODING", "json", "routes[].features_encoding", true),
];

/// The backquoted words of a cell, in order (`` `full` (`view__feature`) `` → full, view__feature).
fn quoted(cell: &str) -> Vec<String> {
    cell.split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_owned)
        .collect()
}

#[test]
fn the_ferry_yaml_reference_lists_the_words_apply_accepts() {
    let rows = documented();
    let mut problems = Vec::new();
    for (hole, _, key, first_is_default) in WORDS {
        let mut yaml = WORDS_REPO.replace(hole, "zzz");
        for (other, word, _, _) in WORDS {
            yaml = yaml.replace(other, word);
        }
        let files = [("data/v.csv", "user_id,ts,a\n")];
        let (_dir, reg) = crate::test_support::load_repo(&yaml, &files);
        let e = match reg {
            Ok(_) => panic!("`{key}`: apply accepted zzz"),
            Err(e) => format!("{e:#}"),
        };
        // "(expected one of a, b, c)", "(expected a, b or c)", "(expected a or b)".
        let Some(list) = e
            .split("(expected ")
            .nth(1)
            .map(|l| l.split(')').next().unwrap_or_default())
        else {
            problems.push(format!("`{key}`: no list of words in: {e}"));
            continue;
        };
        let list = list.trim_start_matches("one of ").replace(" or ", ", ");
        let code: Vec<String> = list.split(", ").map(|w| w.trim().to_owned()).collect();
        let row = &rows[*key];
        let page: BTreeSet<String> = quoted(&row[4]).into_iter().collect();
        for w in &code {
            if !page.contains(w) {
                problems.push(format!(
                    "`{key}`: apply accepts `{w}`, the page does not list it"
                ));
            }
        }
        if *first_is_default && quoted(&row[3]) != [code[0].clone()] {
            problems.push(format!(
                "`{key}`: the default is `{}`, the page says {}",
                code[0], row[3]
            ));
        }
    }
    assert!(
        problems.is_empty(),
        "docs/ferry-yaml.md differs from the words ferry apply accepts:\n{}",
        problems.join("\n")
    );
}
