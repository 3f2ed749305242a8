//! Fields of the Feast registry that Ferry's `.proto` does not know. prost skips unknown
//! fields silently, so a newer Feast could add one that changes what a view or service means
//! (as `disabled` and `version_tag` did) and Ferry would not notice. Each message Ferry reads is
//! decoded with our subset (`ferry/feast/feast.proto`) and encoded again: a field number of the
//! original that the re-encoding lacks was dropped. Those Feast 0.67 has and Ferry leaves
//! unread on purpose (tags, descriptions, owners, ...) are listed per message; any other is
//! one `ferry apply` warns about, naming the message and the field numbers.

use std::collections::{BTreeMap, BTreeSet};

use ferry_protos::feast_proto as fp;
use prost::Message;

/// The registry messages Ferry reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Kind {
    Registry,
    Entity,
    EntitySpec,
    FeatureView,
    FeatureViewSpec,
    FeatureViewMeta,
    FeatureSpec,
    FeatureService,
    FeatureServiceSpec,
    Projection,
    OnDemandFeatureView,
    OnDemandFeatureViewSpec,
    OnDemandSourcesEntry,
    OnDemandSource,
    Aggregation,
    DataSource,
    RequestDataOptions,
    StreamFeatureView,
    StreamFeatureViewSpec,
    VersionHistory,
    VersionRecord,
}

/// An entry of `OnDemandFeatureViewSpec.sources` (a `map<string, OnDemandSource>`): on the
/// wire, a message of its own.
#[derive(Clone, PartialEq, prost::Message)]
struct OnDemandSourcesEntry {
    #[prost(string, tag = "1")]
    key: String,
    #[prost(message, optional, tag = "2")]
    value: Option<fp::OnDemandSource>,
}

/// Per message: Feast's name, the fields of Feast 0.67 Ferry leaves unread on purpose, and the
/// fields holding messages Ferry reads (checked in turn).
type Schema = (&'static str, &'static [u32], &'static [(u32, Kind)]);

/// The schema of `kind`: one arm per kind, so a new kind does not build without its own.
fn schema(kind: Kind) -> Schema {
    use Kind as K;
    match kind {
        K::Registry => REGISTRY,
        K::Entity => ENTITY,
        K::EntitySpec => ENTITY_SPEC,
        K::FeatureView => FEATURE_VIEW,
        K::FeatureViewSpec => FEATURE_VIEW_SPEC,
        K::FeatureViewMeta => FEATURE_VIEW_META,
        K::FeatureSpec => FEATURE_SPEC,
        K::FeatureService => FEATURE_SERVICE,
        K::FeatureServiceSpec => FEATURE_SERVICE_SPEC,
        K::Projection => PROJECTION,
        K::VersionHistory => VERSION_HISTORY,
        K::VersionRecord => VERSION_RECORD,
        K::OnDemandFeatureView => ON_DEMAND_FEATURE_VIEW,
        K::OnDemandFeatureViewSpec => ON_DEMAND_FEATURE_VIEW_SPEC,
        K::OnDemandSourcesEntry => ON_DEMAND_SOURCES_ENTRY,
        K::OnDemandSource => ON_DEMAND_SOURCE,
        K::Aggregation => AGGREGATION,
        K::DataSource => DATA_SOURCE,
        K::RequestDataOptions => REQUEST_DATA_OPTIONS,
        K::StreamFeatureView => STREAM_FEATURE_VIEW,
        K::StreamFeatureViewSpec => STREAM_FEATURE_VIEW_SPEC,
    }
}

const REGISTRY: Schema = (
    "feast.core.Registry",
    &[2, 3, 4, 5, 10, 11, 12, 13, 15, 16, 17, 19],
    &[
        (1, Kind::Entity),
        (6, Kind::FeatureView),
        (7, Kind::FeatureService),
        (8, Kind::OnDemandFeatureView),
        (14, Kind::StreamFeatureView),
        (18, Kind::VersionHistory),
    ],
);
const ENTITY: Schema = ("feast.core.Entity", &[2], &[(1, Kind::EntitySpec)]);
const ENTITY_SPEC: Schema = ("feast.core.EntitySpecV2", &[3, 8, 10], &[]);
const FEATURE_VIEW: Schema = (
    "feast.core.FeatureView",
    &[],
    &[(1, Kind::FeatureViewSpec), (2, Kind::FeatureViewMeta)],
);
const FEATURE_VIEW_SPEC: Schema = (
    "feast.core.FeatureViewSpec",
    &[5, 10, 11, 13, 14, 15, 16, 17, 19],
    &[
        (4, Kind::FeatureSpec),
        (7, Kind::DataSource),
        (9, Kind::DataSource),
        (12, Kind::FeatureSpec),
    ],
);
const FEATURE_VIEW_META: Schema = ("feast.core.FeatureViewMeta", &[1, 2, 3, 5], &[]);
const FEATURE_SPEC: Schema = ("feast.core.FeatureSpecV2", &[3, 4, 5, 6, 7], &[]);
const FEATURE_SERVICE: Schema = (
    "feast.core.FeatureService",
    &[2],
    &[(1, Kind::FeatureServiceSpec)],
);
const FEATURE_SERVICE_SPEC: Schema = (
    "feast.core.FeatureServiceSpec",
    &[4, 5, 6, 7],
    &[(3, Kind::Projection)],
);
const PROJECTION: Schema = (
    "feast.core.FeatureViewProjection",
    &[5, 6, 7, 8, 9, 11],
    &[(2, Kind::FeatureSpec)],
);
const VERSION_HISTORY: Schema = (
    "feast.core.FeatureViewVersionHistory",
    &[],
    &[(1, Kind::VersionRecord)],
);
const VERSION_RECORD: Schema = (
    "feast.core.FeatureViewVersionRecord",
    &[6, 7, 8],
    &[(5, Kind::FeatureView)],
);
const ON_DEMAND_FEATURE_VIEW: Schema = (
    "feast.core.OnDemandFeatureView",
    &[2],
    &[(1, Kind::OnDemandFeatureViewSpec)],
);
const ON_DEMAND_FEATURE_VIEW_SPEC: Schema = (
    "feast.core.OnDemandFeatureViewSpec",
    &[5, 6, 7, 8, 10, 13, 14, 15, 17, 18],
    &[
        (3, Kind::FeatureSpec),
        (4, Kind::OnDemandSourcesEntry),
        (16, Kind::Aggregation),
    ],
);
const ON_DEMAND_SOURCES_ENTRY: Schema = (
    "feast.core.OnDemandFeatureViewSpec.SourcesEntry",
    &[],
    &[(2, Kind::OnDemandSource)],
);
const ON_DEMAND_SOURCE: Schema = (
    "feast.core.OnDemandSource",
    &[],
    &[
        (1, Kind::FeatureView),
        (2, Kind::DataSource),
        (3, Kind::Projection),
    ],
);
const AGGREGATION: Schema = ("feast.core.Aggregation", &[3, 4, 5], &[]);
// Options of each kind of source, tags, owner, ...: Ferry reads a source's type, name,
// project, timestamp field, field mapping, request schema and batch source.
const DATA_SOURCE: Schema = (
    "feast.core.DataSource",
    &[
        4, 5, 11, 12, 13, 14, 15, 16, 17, 19, 22, 23, 24, 25, 27, 28, 30, 35, 50,
    ],
    &[(18, Kind::RequestDataOptions), (26, Kind::DataSource)],
);
const REQUEST_DATA_OPTIONS: Schema = (
    "feast.core.DataSource.RequestDataOptions",
    &[2],
    &[(3, Kind::FeatureSpec)],
);
// Ferry reads only a stream view's name and project (it serves none).
const STREAM_FEATURE_VIEW: Schema = (
    "feast.core.StreamFeatureView",
    &[2],
    &[(1, Kind::StreamFeatureViewSpec)],
);
const STREAM_FEATURE_VIEW_SPEC: Schema = (
    "feast.core.StreamFeatureViewSpec",
    &[
        3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23,
    ],
    &[],
);

/// `bytes` decoded as our message of `kind` and encoded again.
fn reencode(kind: Kind, bytes: &[u8]) -> Option<Vec<u8>> {
    fn re<M: Message + Default>(b: &[u8]) -> Option<Vec<u8>> {
        M::decode(b).ok().map(|m| m.encode_to_vec())
    }
    match kind {
        Kind::Registry => re::<fp::Registry>(bytes),
        Kind::Entity => re::<fp::Entity>(bytes),
        Kind::EntitySpec => re::<fp::EntitySpec>(bytes),
        Kind::FeatureView => re::<fp::FeatureView>(bytes),
        Kind::FeatureViewSpec => re::<fp::FeatureViewSpec>(bytes),
        Kind::FeatureViewMeta => re::<fp::FeatureViewMeta>(bytes),
        Kind::FeatureSpec => re::<fp::FeatureSpec>(bytes),
        Kind::FeatureService => re::<fp::FeatureService>(bytes),
        Kind::FeatureServiceSpec => re::<fp::FeatureServiceSpec>(bytes),
        Kind::Projection => re::<fp::FeatureViewProjection>(bytes),
        Kind::OnDemandFeatureView => re::<fp::OnDemandFeatureView>(bytes),
        Kind::OnDemandFeatureViewSpec => re::<fp::OnDemandFeatureViewSpec>(bytes),
        Kind::OnDemandSourcesEntry => re::<OnDemandSourcesEntry>(bytes),
        Kind::OnDemandSource => re::<fp::OnDemandSource>(bytes),
        Kind::Aggregation => re::<fp::Aggregation>(bytes),
        Kind::DataSource => re::<fp::DataSource>(bytes),
        Kind::RequestDataOptions => re::<fp::RequestDataOptions>(bytes),
        Kind::StreamFeatureView => re::<fp::StreamFeatureView>(bytes),
        Kind::StreamFeatureViewSpec => re::<fp::NamedSpec>(bytes),
        Kind::VersionHistory => re::<fp::FeatureViewVersionHistory>(bytes),
        Kind::VersionRecord => re::<fp::FeatureViewVersionRecord>(bytes),
    }
}

/// One warning per registry message with fields Ferry does not know, e.g.
/// `the Feast registry's feast.core.FeatureViewSpec has field(s) 21 that Ferry does not read
/// (written by a newer Feast?); what they mean is ignored`.
pub fn notices(registry: &[u8]) -> Vec<String> {
    let mut unknown: BTreeMap<Kind, BTreeSet<u32>> = BTreeMap::new();
    walk(Kind::Registry, registry, &mut unknown);
    unknown
        .into_iter()
        .map(|(kind, fields)| {
            let list: Vec<String> = fields.iter().map(u32::to_string).collect();
            format!(
                "the Feast registry's {} has field(s) {} that Ferry does not read (written by \
                 a newer Feast?); what they mean is ignored",
                schema(kind).0,
                list.join(", ")
            )
        })
        .collect()
}

fn walk(kind: Kind, bytes: &[u8], unknown: &mut BTreeMap<Kind, BTreeSet<u32>>) {
    let (Some(fields), Some(again)) = (wire_fields(bytes), reencode(kind, bytes)) else {
        return; // not decodable: the registry's decoding reports it
    };
    let kept: BTreeSet<u32> = wire_fields(&again)
        .unwrap_or_default()
        .iter()
        .map(|f| f.0)
        .collect();
    let (_, ignored, children) = schema(kind);
    for (number, payload) in fields {
        if !kept.contains(&number) && !ignored.contains(&number) {
            unknown.entry(kind).or_default().insert(number);
        }
        if let (Some(payload), Some((_, child))) =
            (payload, children.iter().find(|c| c.0 == number))
        {
            walk(*child, payload, unknown);
        }
    }
}

/// A field of a message on the wire: its number and, when length-delimited, its payload.
type WireField<'a> = (u32, Option<&'a [u8]>);

/// The top-level fields of a protobuf message. `None` when the bytes are not a message.
fn wire_fields(mut bytes: &[u8]) -> Option<Vec<WireField<'_>>> {
    let mut out = Vec::new();
    while !bytes.is_empty() {
        let key = varint(&mut bytes)?;
        let number = u32::try_from(key >> 3).ok()?;
        let payload = match key & 7 {
            0 => varint(&mut bytes).map(|_| None)?,
            1 => skip(&mut bytes, 8).map(|_| None)?,
            2 => {
                let len = usize::try_from(varint(&mut bytes)?).ok()?;
                Some(skip(&mut bytes, len)?)
            }
            5 => skip(&mut bytes, 4).map(|_| None)?,
            _ => return None,
        };
        out.push((number, payload));
    }
    Some(out)
}

fn varint(bytes: &mut &[u8]) -> Option<u64> {
    let mut v = 0u64;
    for shift in (0..64).step_by(7) {
        let (&b, rest) = bytes.split_first()?;
        *bytes = rest;
        v |= u64::from(b & 0x7f) << shift;
        if b < 0x80 {
            return Some(v);
        }
    }
    None
}

fn skip<'a>(bytes: &mut &'a [u8], n: usize) -> Option<&'a [u8]> {
    if bytes.len() < n {
        return None;
    }
    let (head, rest) = bytes.split_at(n);
    *bytes = rest;
    Some(head)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A field `number` holding a string, appended to `out`.
    fn string_field(out: &mut Vec<u8>, number: u32, s: &str) {
        prost::encoding::string::encode(number, &s.to_owned(), out);
    }

    #[test]
    fn fields_ferry_reads_or_skips_on_purpose_are_no_notice() {
        let reg = fp::Registry {
            feature_views: vec![fp::FeatureView {
                spec: Some(fp::FeatureViewSpec {
                    name: "v".into(),
                    disabled: true,
                    ..Default::default()
                }),
                meta: None,
            }],
            ..Default::default()
        };
        let mut bytes = reg.encode_to_vec();
        // registry_schema_version (3): Feast 0.67 has it, Ferry leaves it unread.
        string_field(&mut bytes, 3, "1");
        assert_eq!(notices(&bytes), Vec::<String>::new());
    }

    #[test]
    fn unknown_fields_are_named_with_their_message_at_any_depth() {
        let mut spec = fp::FeatureViewSpec {
            name: "v".into(),
            ..Default::default()
        }
        .encode_to_vec();
        string_field(&mut spec, 21, "new meaning");
        string_field(&mut spec, 40, "more");
        let mut view = Vec::new();
        prost::encoding::bytes::encode(1, &spec, &mut view);
        let mut reg = Vec::new();
        prost::encoding::bytes::encode(6, &view, &mut reg);
        string_field(&mut reg, 99, "x");
        let n = notices(&reg);
        assert_eq!(n.len(), 2, "{n:?}");
        assert!(
            n[0].contains("feast.core.Registry has field(s) 99"),
            "{n:?}"
        );
        assert!(
            n[1].contains("feast.core.FeatureViewSpec has field(s) 21, 40"),
            "{n:?}"
        );
    }

    #[test]
    fn a_versioned_views_record_is_checked_as_a_view() {
        let mut spec = Vec::new();
        string_field(&mut spec, 1, "v");
        string_field(&mut spec, 30, "?");
        let mut view = Vec::new();
        prost::encoding::bytes::encode(1, &spec, &mut view);
        let reg = fp::Registry {
            feature_view_version_history: Some(fp::FeatureViewVersionHistory {
                records: vec![fp::FeatureViewVersionRecord {
                    feature_view_proto: view,
                    ..Default::default()
                }],
            }),
            ..Default::default()
        };
        let n = notices(&reg.encode_to_vec());
        assert_eq!(n.len(), 1, "{n:?}");
        assert!(n[0].contains("FeatureViewSpec has field(s) 30"), "{n:?}");
        assert_eq!(wire_fields(&[0x0b]), None, "a group is not read");
    }

    /// `message` with `extra` appended as field `number` (a string), as bytes.
    fn with_field<M: Message>(message: &M, number: u32, extra: &str) -> Vec<u8> {
        let mut bytes = message.encode_to_vec();
        string_field(&mut bytes, number, extra);
        bytes
    }

    fn nested(number: u32, inner: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        prost::encoding::bytes::encode(number, &inner.to_vec(), &mut out);
        out
    }

    #[test]
    fn a_views_data_sources_are_checked_with_what_feast_067_writes_left_unread() {
        let source = fp::DataSource {
            name: "src".into(),
            timestamp_field: "ts".into(),
            ..Default::default()
        };
        // file_options (11) and data_source_class_type (17): Feast 0.67 writes them.
        let mut known = source.encode_to_vec();
        prost::encoding::bytes::encode(11, &b"\x12\x01x".to_vec(), &mut known);
        string_field(
            &mut known,
            17,
            "feast.infra.offline_stores.file_source.FileSource",
        );
        let unknown = with_field(&source, 60, "?");
        // A batch source (7) with what Feast writes; a stream source (9) whose batch source
        // (26) has a field Feast 0.67 has not.
        let mut spec = fp::FeatureViewSpec {
            name: "v".into(),
            ..Default::default()
        }
        .encode_to_vec();
        spec.extend(nested(7, &known));
        let mut stream = source.encode_to_vec();
        stream.extend(nested(26, &unknown));
        spec.extend(nested(9, &stream));
        let reg = nested(6, &nested(1, &spec));
        let n = notices(&reg);
        assert_eq!(n.len(), 1, "{n:?}");
        assert!(
            n[0].contains("feast.core.DataSource has field(s) 60"),
            "{n:?}"
        );
    }

    #[test]
    fn an_on_demand_views_sources_and_aggregations_are_checked_at_any_depth() {
        // sources: {"txn": OnDemandSource{request_data_source: DataSource{request_data_options:
        // RequestDataOptions{schema: [FeatureSpec + field 9]}}}}
        let feature = with_field(
            &fp::FeatureSpec {
                name: "amount".into(),
                value_type: 5,
            },
            9,
            "?",
        );
        let options = nested(3, &feature);
        let request = nested(18, &options);
        let source = nested(2, &request);
        let mut entry = Vec::new();
        string_field(&mut entry, 1, "txn");
        entry.extend(nested(2, &source));
        // An on-demand view with a view source whose spec has an unknown field, and an
        // aggregation with one.
        let view_spec = with_field(
            &fp::FeatureViewSpec {
                name: "v".into(),
                ..Default::default()
            },
            33,
            "?",
        );
        let mut view_entry = Vec::new();
        string_field(&mut view_entry, 1, "v");
        view_entry.extend(nested(2, &nested(1, &nested(1, &view_spec))));
        let aggregation = with_field(&fp::Aggregation::default(), 8, "?");
        let mut spec = fp::OnDemandFeatureViewSpec {
            name: "risk".into(),
            ..Default::default()
        }
        .encode_to_vec();
        spec.extend(nested(4, &entry));
        spec.extend(nested(4, &view_entry));
        spec.extend(nested(16, &aggregation));
        let reg = nested(8, &nested(1, &spec));
        let n = notices(&reg);
        assert_eq!(n.len(), 3, "{n:?}");
        assert!(
            n[0].contains("feast.core.FeatureViewSpec has field(s) 33"),
            "{n:?}"
        );
        assert!(
            n[1].contains("feast.core.FeatureSpecV2 has field(s) 9"),
            "{n:?}"
        );
        assert!(
            n[2].contains("feast.core.Aggregation has field(s) 8"),
            "{n:?}"
        );
    }

    #[test]
    fn a_stream_views_spec_is_checked_beyond_what_feast_067_has() {
        let spec = fp::NamedSpec {
            name: "s".into(),
            project: "p".into(),
        };
        // disabled (23): Feast 0.67 has it; 24: a newer Feast's.
        let mut known = spec.encode_to_vec();
        prost::encoding::bool::encode(23, &true, &mut known);
        assert_eq!(
            notices(&nested(14, &nested(1, &known))),
            Vec::<String>::new()
        );
        let n = notices(&nested(14, &nested(1, &with_field(&spec, 24, "?"))));
        assert_eq!(n.len(), 1, "{n:?}");
        assert!(
            n[0].contains("feast.core.StreamFeatureViewSpec has field(s) 24"),
            "{n:?}"
        );
    }
}
