//! A route's rules, each written once. `ferry apply` reports a broken one with its place in
//! `ferry.yaml` (every problem at once); the filter refuses a snapshot that breaks one (Envoy
//! then keeps the last good config). Each rule returns a neutral message that the caller wraps.

use std::collections::HashMap;

use ferry_protos::limits;
use ferry_protos::v1::ValueType;

/// The header a header route writes its features to when it names none.
pub const DEFAULT_FEATURES_HEADER: &str = "x-ferry-features";

/// A numeric route setting: the default `ferry apply` writes when the repo says nothing, and the
/// range it accepts. The filter checks the same table, less strictly: a value the filter
/// receives must be within `1..=max` (`0..=max` when the minimum is 0) — the bounds that keep a
/// request bounded — while the minimum is the repo's policy.
#[derive(Debug, Clone, Copy)]
pub struct Bound {
    pub name: &'static str,
    pub default: u32,
    pub min: u32,
    pub max: u32,
}

pub const MAX_BODY_BYTES: Bound = Bound {
    name: "max_body_bytes",
    default: 1 << 20,
    min: limits::MIN_ROUTE_BODY_BYTES,
    max: limits::MAX_ROUTE_BODY_BYTES,
};
pub const MAX_ENTITIES: Bound = Bound {
    name: "max_entities",
    default: 1000,
    min: 1,
    max: limits::MAX_ENTITIES_PER_REQUEST,
};
pub const READER_TIMEOUT_MS: Bound = Bound {
    name: "reader_timeout_ms",
    default: 200,
    min: 1,
    max: 60_000,
};
pub const MAX_HEADER_BYTES: Bound = Bound {
    name: "max_header_bytes",
    default: 8192,
    min: 256,
    max: 65_536,
};
/// A near-cache entry older than an hour is not "near" any more: refresh from Redis.
pub const CACHE_MAX_AGE_MS: Bound = Bound {
    name: "cache_max_age_ms",
    default: 0,
    min: 0,
    max: 3_600_000,
};

impl Bound {
    /// A repo's value (or the default), within `min..=max`.
    pub fn repo_value(&self, value: Option<u64>) -> Result<u32, String> {
        let v = value.unwrap_or(u64::from(self.default));
        if v < u64::from(self.min) || v > u64::from(self.max) {
            return Err(format!(
                "{} {v} is outside {}..={}",
                self.name, self.min, self.max
            ));
        }
        u32::try_from(v).map_err(|_| format!("{} {v} is too large", self.name))
    }

    /// A snapshot's value, within the bounds that keep a request bounded.
    pub fn snapshot_value(&self, v: u32) -> Result<u32, String> {
        if (self.min > 0 && v == 0) || v > self.max {
            let low = self.min.min(1);
            return Err(format!("{} {v} is outside {low}..={}", self.name, self.max));
        }
        Ok(v)
    }
}

/// The near cache's byte budget a repo may give (`near_cache.max_bytes`): each proxy holds it
/// in shared data, so a snapshot cannot ask for more than the upper end.
pub const NEAR_CACHE_BYTES: std::ops::RangeInclusive<u64> = (1 << 20)..=(1 << 30);

/// A repo's near-cache budget, within [`NEAR_CACHE_BYTES`].
pub fn near_cache_bytes(max_bytes: u64) -> Result<(), String> {
    if NEAR_CACHE_BYTES.contains(&max_bytes) {
        return Ok(());
    }
    Err(format!(
        "max_bytes {max_bytes} is outside 1 MiB..=1 GiB ({}..={})",
        NEAR_CACHE_BYTES.start(),
        NEAR_CACHE_BYTES.end()
    ))
}

/// A snapshot's near-cache budget: at most a repo's largest, so a pushed snapshot cannot make
/// a proxy hold more than one `ferry apply` built could. Smaller ones stay valid (0 is a one-set
/// cache; the ABI tests use a few sets to watch evictions).
pub fn near_cache_bytes_in_snapshot(max_bytes: u64) -> Result<(), String> {
    if max_bytes <= *NEAR_CACHE_BYTES.end() {
        return Ok(());
    }
    Err(format!(
        "near_cache_max_bytes {max_bytes} is over the repo's limit of 1 GiB ({})",
        NEAR_CACHE_BYTES.end()
    ))
}

/// One reader call holds every key of a request: `max_entities` × the route's services.
pub fn keys_per_call(max_entities: u32, services: usize) -> Result<(), String> {
    let keys = u64::from(max_entities) * services as u64;
    if keys > u64::from(limits::MAX_KEYS_PER_CALL) {
        return Err(format!(
            "max_entities {max_entities} × {services} services = {keys} keys in one reader \
             call, over the reader's {}",
            limits::MAX_KEYS_PER_CALL
        ));
    }
    Ok(())
}

/// A reader call of `entities` entities over Feast-backed services (a route's `max_entities`
/// when its snapshot is compiled; a `feast_rest` request's own count and services when it is
/// parsed) must stay within what the reader reads for one call (`limits::FeastWork`).
pub fn feast_work<'a>(
    entities: u32,
    layouts: impl IntoIterator<Item = &'a ferry_protos::v1::FeastLayout>,
) -> Result<(), String> {
    let mut work = limits::FeastWork::default();
    for layout in layouts {
        work.add_layout(u64::from(entities), layout).map_err(|e| {
            format!(
                "{entities} entities of the Feast-backed services read {} {} in one \
                     reader call, over the reader's {} (fewer entities, or split the service)",
                e.value, e.limit, e.max
            )
        })?;
    }
    Ok(())
}

/// The features header of a header route: the given name lowercased, or the default.
pub fn features_header(name: Option<&str>) -> Result<String, String> {
    let name = name.unwrap_or(DEFAULT_FEATURES_HEADER).to_ascii_lowercase();
    if name.is_empty() || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-') {
        return Err(format!("features_header '{name}' is not a header name"));
    }
    Ok(name)
}

/// A packed KServe v2 tensor is FP32: every feature of the route must be a number or a bool.
pub fn packable(view: &str, feature: &str, t: ValueType) -> Result<(), String> {
    use ValueType as T;
    if matches!(t, T::Int32 | T::Int64 | T::Float32 | T::Float64 | T::Bool) {
        return Ok(());
    }
    Err(format!(
        "packed: feature '{view}:{feature}' is {}, not numeric",
        format!("{t:?}").to_ascii_lowercase()
    ))
}

/// `what` (entity_pointer, inject_pointer) is an RFC 6901 pointer: "" or starting with `/`.
pub fn json_pointer(what: &str, p: &str) -> Result<(), String> {
    if p.is_empty() || p.starts_with('/') {
        return Ok(());
    }
    Err(format!(
        "{what} '{p}' is not a JSON pointer (\"\" or starting with /)"
    ))
}

/// A route names one request field per join key of each service, in the key order.
pub fn entity_fields(given: usize, service: &str, join_keys: &[&str]) -> Result<(), String> {
    if given == join_keys.len() {
        return Ok(());
    }
    Err(format!(
        "entity names {given} field(s) but feature service '{service}' has {} entity key(s) \
         ({}), given in this order",
        join_keys.len(),
        join_keys.join(", ")
    ))
}

/// The field names a route writes its features under, over every service of the route: they
/// must be unambiguous and must not overwrite an entity id.
#[derive(Debug, Default)]
pub struct OutputNames {
    /// In feature order.
    pub names: Vec<String>,
    /// Output name → the view that gave it.
    by_name: HashMap<String, String>,
}

impl OutputNames {
    /// Adds `view`'s `feature` (`view__feature`, or `feature` with short names); says why not
    /// when the name is taken or is an entity field. The name is added either way, so that the
    /// names stay in feature order.
    pub fn add(
        &mut self,
        view: &str,
        feature: &str,
        short: bool,
        entity_fields: &[&str],
    ) -> Result<(), String> {
        let name = if short {
            feature.to_owned()
        } else {
            format!("{view}__{feature}")
        };
        let problem = if let Some(other) = self.by_name.get(&name) {
            Some(format!(
                "feature name '{name}' is given by views '{other}' and '{view}'; use \
                 feature_names: full"
            ))
        } else if entity_fields.contains(&name.as_str()) {
            Some(format!("feature name '{name}' is also an entity field"))
        } else {
            None
        };
        self.by_name.insert(name.clone(), view.to_owned());
        self.names.push(name);
        problem.map_or(Ok(()), Err)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounds_are_strict_for_repos_and_safe_for_snapshots() {
        assert_eq!(MAX_HEADER_BYTES.repo_value(None), Ok(8192));
        assert!(MAX_HEADER_BYTES.repo_value(Some(40)).is_err());
        assert_eq!(MAX_HEADER_BYTES.snapshot_value(40), Ok(40));
        assert!(MAX_HEADER_BYTES.snapshot_value(0).is_err());
        assert!(MAX_BODY_BYTES
            .snapshot_value(limits::MAX_ROUTE_BODY_BYTES + 1)
            .is_err());
        assert_eq!(CACHE_MAX_AGE_MS.snapshot_value(0), Ok(0));
        assert_eq!(
            MAX_ENTITIES.repo_value(Some(0)).unwrap_err(),
            "max_entities 0 is outside 1..=10000"
        );
        assert!(keys_per_call(5000, 2).is_ok());
        assert!(keys_per_call(5001, 2).is_err());
    }

    #[test]
    fn near_cache_budgets_are_bounded_for_repos_and_snapshots() {
        assert!(near_cache_bytes(64 << 20).is_ok());
        assert!(near_cache_bytes(0).is_err());
        assert!(near_cache_bytes((1 << 30) + 1)
            .unwrap_err()
            .contains("outside 1 MiB..=1 GiB"));
        assert!(near_cache_bytes_in_snapshot(0).is_ok());
        assert!(near_cache_bytes_in_snapshot(8 << 10).is_ok());
        assert!(near_cache_bytes_in_snapshot(1 << 30).is_ok());
        assert!(near_cache_bytes_in_snapshot((1 << 30) + 1).is_err());
        let e = near_cache_bytes_in_snapshot(u64::MAX).unwrap_err();
        assert!(e.starts_with("near_cache_max_bytes"), "{e}");
    }

    #[test]
    fn a_routes_largest_feast_call_fits_the_reader() {
        use ferry_protos::v1::{FeastLayout, FeastView};
        let layout = |features: usize| FeastLayout {
            views: vec![FeastView {
                timestamp_field: b"_ts:v".to_vec(),
                feature_fields: vec![vec![0; 4]; features],
                ..Default::default()
            }],
            ..Default::default()
        };
        let (l299, l1) = (layout(299), layout(1));
        // 300 fields per entity: 800 entities read 240,000 fields, 1,000 read 300,000.
        assert!(feast_work(800, [&l299]).is_ok());
        let e = feast_work(1_000, [&l299]).unwrap_err();
        assert!(e.contains("feast_fields_per_call"), "{e}");
        assert!(e.contains("1000 entities"), "{e}");
        // Summed over the route's services.
        assert!(feast_work(800, [&l299, &l1]).is_ok());
        assert!(feast_work(870, [&l299, &l1]).is_err());
        let wide = layout(2_048);
        let e = feast_work(1, [&wide]).unwrap_err();
        assert!(e.contains("feast_fields_per_entity"), "{e}");
    }

    #[test]
    fn output_names_must_be_unambiguous() {
        let mut n = OutputNames::default();
        assert!(n.add("profile", "age", true, &["user_id"]).is_ok());
        assert!(n
            .add("txn", "age", true, &["user_id"])
            .unwrap_err()
            .contains("views 'profile' and 'txn'"));
        assert!(n
            .add("p", "user_id", true, &["user_id"])
            .unwrap_err()
            .contains("also an entity field"));
        assert_eq!(n.names, ["age", "age", "user_id"]);
        let mut full = OutputNames::default();
        assert!(full.add("profile", "age", false, &[]).is_ok());
        assert_eq!(full.names, ["profile__age"]);
    }

    #[test]
    fn small_rules() {
        assert_eq!(features_header(None).unwrap(), "x-ferry-features");
        assert_eq!(features_header(Some("X-Feat")).unwrap(), "x-feat");
        assert!(features_header(Some("a b")).is_err());
        assert!(json_pointer("entity_pointer", "/a").is_ok());
        assert!(json_pointer("entity_pointer", "a").is_err());
        assert!(packable("v", "f", ValueType::Bool).is_ok());
        assert_eq!(
            packable("v", "f", ValueType::String).unwrap_err(),
            "packed: feature 'v:f' is string, not numeric"
        );
        assert!(entity_fields(1, "s", &["a", "b"]).is_err());
    }
}
