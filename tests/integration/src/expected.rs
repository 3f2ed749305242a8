//! What the store holds for an entity of the example repo, worked out from the source data
//! ([`crate::data`]) and the repo's TTLs, never from what the filter wrote: each feature's value
//! and the status the filter must report, and each FeatureService's fingerprint as `ferry apply`
//! prints it.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::Value as Json;

use crate::data::{same, KeyedView, Kind, Source, VIEWS};
use crate::{bin, run, Stack};

pub const DAY: f64 = 86_400.0;

/// The TTL of each view of the example repo (examples/banking/ferry.yaml), in seconds.
pub fn ttl(view: &str) -> f64 {
    match view {
        "user_profile" => 365.0 * DAY,
        "transactions" => DAY,
        "user_embedding" | "user_sessions" => 30.0 * DAY,
        "user_merchant" => 14.0 * DAY,
        "merchant_profile" => 90.0 * DAY,
        v => panic!("unknown view {v}"),
    }
}

/// The example's FeatureServices a test compares against the source.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Service {
    /// `realtime_scoring`: user_profile, transactions, user_embedding; keyed by user_id.
    RealtimeScoring,
    /// `user_merchant_scoring`: user_merchant; keyed by (merchant_id, user_id).
    UserMerchantScoring,
}

impl Service {
    pub fn name(self) -> &'static str {
        match self {
            Service::RealtimeScoring => "realtime_scoring",
            Service::UserMerchantScoring => "user_merchant_scoring",
        }
    }
}

/// One entity of a request, as the service's key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Entity {
    User(String),
    Pair { merchant: i64, user: String },
}

/// One feature of one entity as the filter must write it: the output name (`view__feature`),
/// the value (null unless PRESENT) and the status.
#[derive(Clone, Debug)]
pub struct Feature {
    pub name: String,
    pub kind: Kind,
    pub value: Json,
    pub status: &'static str,
}

/// The source data of a stack and the fingerprints of its services.
pub struct Store {
    src: Source,
    pairs: KeyedView,
    fingerprints: BTreeMap<String, String>,
}

fn now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock")
        .as_secs_f64()
}

/// What the store holds for `feature` of a keyed `view` at `key`, by the filter's TTL rule:
/// the value (null unless PRESENT) and the status.
pub fn judge_keyed(
    view: &KeyedView,
    feature: &str,
    key: &[&str],
    ttl: f64,
) -> (Json, &'static str) {
    judged(view.event_time(key), view.value(feature, key), ttl)
}

/// The value and status of one feature given its row's event time and source value, by the
/// filter's rule: no row NOT_FOUND, older than the TTL OUTSIDE_MAX_AGE, an empty cell
/// NULL_VALUE; the value is null unless PRESENT.
fn judged(event_time: Option<f64>, value: Option<Json>, ttl: f64) -> (Json, &'static str) {
    match (event_time, value) {
        (None, _) | (Some(_), None) => (Json::Null, "NOT_FOUND"),
        (Some(t), _) if now() - t > ttl => (Json::Null, "OUTSIDE_MAX_AGE"),
        (Some(_), Some(Json::Null)) => (Json::Null, "NULL_VALUE"),
        (Some(_), Some(v)) => (v, "PRESENT"),
    }
}

impl Store {
    pub fn load(stack: &Stack) -> Store {
        Store::load_repo(&stack.repo)
    }

    /// The store of an example repo (its `data/` and `ferry apply`'s fingerprints).
    pub fn load_repo(repo: &Path) -> Store {
        let dir = repo.join("data");
        Store {
            src: Source::load(&dir),
            pairs: KeyedView::load(&dir, "user_merchant"),
            fingerprints: fingerprints(repo),
        }
    }

    /// The service's fingerprint as `ferry apply` computes it from the repo.
    pub fn fingerprint(&self, service: Service) -> &str {
        self.fingerprints
            .get(service.name())
            .unwrap_or_else(|| panic!("ferry apply printed no fingerprint for {service:?}"))
    }

    /// Every feature of `service` for `entity` (compare by name: this order is not
    /// necessarily the filter's output order).
    pub fn features(&self, service: Service, entity: &Entity) -> Vec<Feature> {
        match (service, entity) {
            (Service::RealtimeScoring, Entity::User(user)) => VIEWS
                .iter()
                .flat_map(|(view, features)| {
                    features.iter().map(move |(feature, kind)| {
                        let (value, status) = judged(
                            self.src.event_time(view, user),
                            self.src.value(view, feature, user),
                            ttl(view),
                        );
                        Feature {
                            name: format!("{view}__{feature}"),
                            kind: *kind,
                            value,
                            status,
                        }
                    })
                })
                .collect(),
            (Service::UserMerchantScoring, Entity::Pair { merchant, user }) => {
                let m = merchant.to_string();
                let key = [m.as_str(), user.as_str()];
                self.pairs
                    .features
                    .iter()
                    .map(|(feature, kind)| {
                        let (value, status) = judged(
                            self.pairs.event_time(&key),
                            self.pairs.value(feature, &key),
                            ttl("user_merchant"),
                        );
                        Feature {
                            name: format!("user_merchant__{feature}"),
                            kind: *kind,
                            value,
                            status,
                        }
                    })
                    .collect()
            }
            (s, e) => panic!("{e:?} is not an entity of {s:?}"),
        }
    }

    /// Checks a `kserve_v1` body the model received for `entities` (one instance each, in
    /// order) on a route of `service` with full names: the ids are the client's, every
    /// feature's value and status (`ferry.statuses`, PRESENT when absent) is what the store
    /// holds. Returns the status counts.
    pub fn check_instances(
        &self,
        service: Service,
        body: &Json,
        entities: &[Entity],
    ) -> BTreeMap<&'static str, usize> {
        let mut counts = BTreeMap::new();
        for (i, entity) in entities.iter().enumerate() {
            let inst = &body["instances"][i];
            match entity {
                Entity::User(u) => assert_eq!(inst["user_id"].as_str(), Some(u.as_str())),
                Entity::Pair { merchant, user } => assert_eq!(
                    (inst["merchant_id"].as_i64(), inst["user_id"].as_str()),
                    (Some(*merchant), Some(user.as_str())),
                    "instance {i}: the client's ids, in order"
                ),
            }
            for f in self.features(service, entity) {
                let got = &inst[&f.name];
                let status = body["ferry"]["statuses"][i]
                    .get(&f.name)
                    .and_then(Json::as_str)
                    .unwrap_or("PRESENT");
                assert_eq!(status, f.status, "{entity:?} {}", f.name);
                assert!(
                    same(got, &f.value, f.kind),
                    "{entity:?} {}: model got {got}, source has {}",
                    f.name,
                    f.value
                );
                *counts.entry(f.status).or_insert(0) += 1;
            }
        }
        counts
    }

    /// Checks a body forwarded degraded (`on_reader_error: forward`) for `users`: every feature
    /// of `realtime_scoring` null and NOT_FOUND, whatever the client sent under its name.
    pub fn check_degraded(&self, body: &Json, users: &[String]) {
        for (i, u) in users.iter().enumerate() {
            let inst = &body["instances"][i];
            assert_eq!(inst["user_id"].as_str(), Some(u.as_str()), "{body}");
            for f in self.features(Service::RealtimeScoring, &Entity::User(u.clone())) {
                assert!(
                    inst[&f.name].is_null(),
                    "{u} {}: degraded but {}",
                    f.name,
                    inst[&f.name]
                );
                assert_eq!(
                    body["ferry"]["statuses"][i][&f.name].as_str(),
                    Some("NOT_FOUND"),
                    "{u} {}",
                    f.name
                );
            }
        }
    }

    /// Whether the store has no vector at all for the entity (no row in any view of the
    /// service): the filter counts it in `x-ferry-missing`.
    pub fn is_missing(&self, service: Service, entity: &Entity) -> bool {
        self.features(service, entity)
            .iter()
            .all(|f| f.status == "NOT_FOUND")
    }

    /// Whether some feature of the entity is older than its view's TTL (`x-ferry-stale`).
    pub fn is_stale(&self, service: Service, entity: &Entity) -> bool {
        self.features(service, entity)
            .iter()
            .any(|f| f.status == "OUTSIDE_MAX_AGE")
    }

    /// The (merchant, user) pairs with a fresh row, sorted.
    pub fn fresh_pairs(&self) -> Vec<Entity> {
        self.pairs
            .keys()
            .into_iter()
            .filter_map(|k| {
                let key = [k[0].as_str(), k[1].as_str()];
                let fresh = self
                    .pairs
                    .event_time(&key)
                    .is_some_and(|t| now() - t < ttl("user_merchant") - DAY);
                let merchant = k[0].parse().ok()?;
                fresh.then(|| Entity::Pair {
                    merchant,
                    user: k[1].clone(),
                })
            })
            .collect()
    }
}

/// `feature service NAME  fingerprint HEX ...` lines of `ferry apply REPO`.
fn fingerprints(repo: &Path) -> BTreeMap<String, String> {
    let out = run(Command::new(bin("ferry")).arg("apply").arg(repo));
    out.lines()
        .filter_map(|l| {
            let rest = l.strip_prefix("feature service ")?;
            let mut words = rest.split_whitespace();
            let name = words.next()?;
            (words.next()? == "fingerprint").then_some(())?;
            Some((name.to_string(), words.next()?.to_string()))
        })
        .collect()
}
