//! The bounds every part of Ferry agrees on: the filter refuses a request over them with a 4xx
//! before any reader call, `ferry apply` refuses a route that could exceed them, and the reader
//! accepts everything within them and refuses the rest before any Redis work. Written once, here.

use std::fmt;

/// Longest value of one join key (one part of an entity key), in bytes.
pub const MAX_KEY_PART_BYTES: usize = 256;
/// Most join keys in a FeatureService's entity key.
pub const MAX_JOIN_KEYS: usize = 4;
/// Longest entity key: every part at its longest, joined by the one-byte separator.
pub const MAX_ENTITY_KEY_BYTES: usize = MAX_JOIN_KEYS * (MAX_KEY_PART_BYTES + 1) - 1;
/// Most entity keys in one reader call (a route's max_entities × its services).
pub const MAX_KEYS_PER_CALL: u32 = 10_000;
/// Most entities a route may allow in one request.
pub const MAX_ENTITIES_PER_REQUEST: u32 = MAX_KEYS_PER_CALL;
/// Largest request body a route may allow (`max_body_bytes`), in bytes.
pub const MAX_ROUTE_BODY_BYTES: u32 = 8 * 1024 * 1024;
/// Smallest `max_body_bytes` a route may set.
pub const MIN_ROUTE_BODY_BYTES: u32 = 1024;
/// Most lookups in one reader call: one per FeatureService of a route, and a route's
/// `max_entities` (at least 1) × its services is within [`MAX_KEYS_PER_CALL`].
pub const MAX_LOOKUPS_PER_CALL: u32 = MAX_KEYS_PER_CALL;
/// Most views of one Feast-backed FeatureService.
pub const MAX_FEAST_VIEWS: usize = 256;
/// Most hash fields one entity's `HMGET` reads (its service's features plus one timestamp
/// field per view).
pub const MAX_FEAST_FIELDS_PER_ENTITY: u64 = 2_048;
/// Most hash fields one reader call reads, summed over its lookups: entities (at least 1, the
/// layout is sent anyway) × fields per entity. What bounds the reader's memory and Redis's time
/// for a Feast call: the field names travel once per lookup but are read once per entity.
pub const MAX_FEAST_FIELDS_PER_CALL: u64 = 262_144;
/// Most bytes of hash field names one reader call sends to Redis, summed as above.
pub const MAX_FEAST_NAME_BYTES_PER_CALL: u64 = 4 << 20;
/// Largest reader request: every key at its longest, each with its protobuf framing (tag
/// and a length of up to 2 bytes), plus room for the lookups' service names and
/// fingerprints, plus the Feast layouts (each field name read at least once, framed).
pub const MAX_READER_REQUEST_BYTES: u64 = MAX_KEYS_PER_CALL as u64
    * (MAX_ENTITY_KEY_BYTES as u64 + 3)
    + 64 * 1024
    + 2 * MAX_FEAST_NAME_BYTES_PER_CALL;

/// Largest snapshot `ferry serve` accepts (a push's body), in bytes.
pub const MAX_SNAPSHOT_BYTES: usize = 8 << 20;
/// Largest signed snapshot: the snapshot plus the envelope (a signature, a key id, framing).
pub const MAX_SIGNED_SNAPSHOT_BYTES: usize = MAX_SNAPSHOT_BYTES + 4096;

/// Most rows one feature write (`POST /push`, `/write-to-online-store`) holds.
pub const MAX_WRITE_ROWS: usize = 100_000;
/// Longest string or bytes cell of a feature write, as JSON text (bytes arrive as base64).
pub const MAX_WRITE_CELL_BYTES: usize = 64 * 1024;
/// Most items of a list cell (`float32_list`) of a feature write.
pub const MAX_WRITE_LIST_ITEMS: usize = 4096;
/// Largest stored vector (one entity's features of one service, every view) a write produces:
/// the reader sends it whole on every lookup of that entity.
pub const MAX_VECTOR_BYTES: usize = 256 * 1024;

/// A count over its limit, named as the reader's JSON error names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Exceeded {
    /// The limit's name (`feast_fields_per_call`, ...).
    pub limit: &'static str,
    /// What the call would need.
    pub value: u64,
    /// The limit.
    pub max: u64,
}

impl fmt::Display for Exceeded {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} {} is over the limit of {}",
            self.limit, self.value, self.max
        )
    }
}

/// `Err` naming `limit` when `value > max`.
pub fn check(limit: &'static str, value: u64, max: u64) -> Result<(), Exceeded> {
    if value > max {
        return Err(Exceeded { limit, value, max });
    }
    Ok(())
}

/// The Redis work of one call's Feast lookups, summed service by service. The reader adds each
/// lookup of a request; `ferry apply` can add each Feast-backed service of a route at its
/// `max_entities` to know the route's largest call stays within the limits.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FeastWork {
    /// Hash fields read: Σ entities × fields per entity.
    pub fields: u64,
    /// Bytes of field names sent: Σ entities × name bytes per entity.
    pub name_bytes: u64,
}

impl FeastWork {
    /// Adds a lookup of `entities` entities (counted as at least 1) whose every `HMGET` reads
    /// `fields` fields named in `name_bytes` bytes; refuses a layout over the per-entity limit.
    pub fn add(&mut self, entities: u64, fields: u64, name_bytes: u64) -> Result<(), Exceeded> {
        check(
            "feast_fields_per_entity",
            fields,
            MAX_FEAST_FIELDS_PER_ENTITY,
        )?;
        let entities = entities.max(1);
        self.fields = self.fields.saturating_add(entities.saturating_mul(fields));
        self.name_bytes = (self.name_bytes).saturating_add(entities.saturating_mul(name_bytes));
        self.check()
    }

    /// Adds a lookup of `entities` entities of a Feast-backed service: its `HMGET` reads each
    /// view's features and timestamp field, as the reader counts them.
    pub fn add_layout(
        &mut self,
        entities: u64,
        layout: &crate::v1::FeastLayout,
    ) -> Result<(), Exceeded> {
        let views = layout.views.len() as u64;
        check("feast_views", views, MAX_FEAST_VIEWS as u64)?;
        let (mut fields, mut name_bytes) = (views, 0u64);
        for view in &layout.views {
            fields += view.feature_fields.len() as u64;
            name_bytes += view.timestamp_field.len() as u64;
            name_bytes += view
                .feature_fields
                .iter()
                .map(|f| f.len() as u64)
                .sum::<u64>();
        }
        self.add(entities, fields, name_bytes)
    }

    /// Whether the sum so far is within the per-call limits.
    pub fn check(&self) -> Result<(), Exceeded> {
        check(
            "feast_fields_per_call",
            self.fields,
            MAX_FEAST_FIELDS_PER_CALL,
        )?;
        check(
            "feast_name_bytes_per_call",
            self.name_bytes,
            MAX_FEAST_NAME_BYTES_PER_CALL,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_layout_counts_its_features_and_timestamp_fields() {
        let view = |n: usize| crate::v1::FeastView {
            timestamp_field: b"_ts:v".to_vec(),
            feature_fields: vec![vec![0; 4]; n],
            ..Default::default()
        };
        let layout = crate::v1::FeastLayout {
            views: vec![view(3), view(2)],
            ..Default::default()
        };
        let mut work = FeastWork::default();
        work.add_layout(10, &layout).unwrap();
        assert_eq!(
            work,
            FeastWork {
                fields: 10 * (5 + 2),
                name_bytes: 10 * (5 * 4 + 2 * 5),
            }
        );
        let wide = crate::v1::FeastLayout {
            views: vec![view(2_048)],
            ..Default::default()
        };
        let e = FeastWork::default().add_layout(1, &wide).unwrap_err();
        assert_eq!(e.limit, "feast_fields_per_entity");
        let many = crate::v1::FeastLayout {
            views: vec![view(1); MAX_FEAST_VIEWS + 1],
            ..Default::default()
        };
        let e = FeastWork::default().add_layout(1, &many).unwrap_err();
        assert_eq!(e.limit, "feast_views");
        let big = crate::v1::FeastLayout {
            views: vec![view(1_000)],
            ..Default::default()
        };
        let e = FeastWork::default().add_layout(1_000, &big).unwrap_err();
        assert_eq!(e.limit, "feast_fields_per_call");
    }

    #[test]
    fn feast_work_is_entities_times_fields_and_refused_over_the_limits() {
        let mut work = FeastWork::default();
        work.add(0, 10, 40).unwrap();
        work.add(100, 10, 40).unwrap();
        assert_eq!(
            work,
            FeastWork {
                fields: 1010,
                name_bytes: 4040
            }
        );
        // The bomb of #22: 50 entities × 1,000,000 fields.
        let err = FeastWork::default().add(50, 1_000_000, 0).unwrap_err();
        assert_eq!(err.limit, "feast_fields_per_entity");
        let err = FeastWork::default().add(10_000, 2_048, 8_192).unwrap_err();
        assert_eq!(err.limit, "feast_fields_per_call");
        assert_eq!(err.value, 20_480_000);
        let err = FeastWork::default().add(1_000, 100, 5_000).unwrap_err();
        assert_eq!(err.limit, "feast_name_bytes_per_call");
        assert_eq!(
            err.to_string(),
            "feast_name_bytes_per_call 5000000 is over the limit of 4194304"
        );
        // The largest call at the per-call limit still fits.
        let mut at_limit = FeastWork::default();
        at_limit.add(MAX_KEYS_PER_CALL.into(), 26, 26 * 4).unwrap();
    }
}
