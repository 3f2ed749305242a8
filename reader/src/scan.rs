//! What a `VectorRequest` asks for, counted from its wire bytes before it is decoded: decoding
//! allocates per element (an empty field name is 2 bytes on the wire and 24 in memory), and a
//! Feast lookup's fields are read once per entity, so a request over the limits is refused
//! here, before any large allocation or Redis work.

use ferry_protos::limits::{self, FeastWork};

use crate::error::ReaderError;

/// The counts the limits apply to.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Shape {
    /// Lookups in the request.
    pub lookups: u64,
    /// Entity keys, summed over the lookups.
    pub keys: u64,
    /// Redis work of the Feast lookups.
    pub feast: FeastWork,
}

/// One field of a message: a number (skipped) or a length-delimited payload.
enum Field<'a> {
    Scalar,
    Bytes(&'a [u8]),
}

/// Counts `body` (an encoded `VectorRequest`), refusing it at the first limit it passes.
/// Malformed bytes are a bad request, as prost would say.
pub fn shape(body: &[u8]) -> Result<Shape, ReaderError> {
    let mut shape = Shape::default();
    each_field(body, |number, field| {
        if let (2, Field::Bytes(lookup)) = (number, field) {
            shape.lookups += 1;
            let max = u64::from(limits::MAX_LOOKUPS_PER_CALL);
            limits::check("lookups_per_call", shape.lookups, max)?;
            lookup_shape(lookup, &mut shape)?;
        }
        Ok(())
    })?;
    Ok(shape)
}

/// Adds one `Lookup`: its keys, and the work of its Feast layout once per entity.
fn lookup_shape(lookup: &[u8], shape: &mut Shape) -> Result<(), ReaderError> {
    let (mut keys, mut layout, mut feast) = (0u64, Layout::default(), false);
    each_field(lookup, |number, field| {
        match (number, field) {
            (3, Field::Bytes(_)) => keys += 1,
            (4, Field::Bytes(bytes)) => {
                feast = true;
                layout.add(bytes)?;
            }
            _ => {}
        }
        Ok(())
    })?;
    shape.keys += keys;
    if feast {
        shape.feast.add(keys, layout.fields, layout.name_bytes)?;
    }
    Ok(())
}

/// A `FeastLayout`'s counts (summed over repeated occurrences, which protobuf merges).
#[derive(Default)]
struct Layout {
    join_keys: u64,
    views: u64,
    /// Fields of one entity's `HMGET`: each view's features and its timestamp field.
    fields: u64,
    /// Bytes of those fields' names.
    name_bytes: u64,
}

impl Layout {
    fn add(&mut self, layout: &[u8]) -> Result<(), ReaderError> {
        each_field(layout, |number, field| {
            match (number, field) {
                (2, Field::Bytes(_)) => {
                    self.join_keys += 1;
                    let max = limits::MAX_JOIN_KEYS as u64;
                    limits::check("feast_join_keys", self.join_keys, max)?;
                }
                (3, Field::Bytes(view)) => {
                    self.views += 1;
                    let max = limits::MAX_FEAST_VIEWS as u64;
                    limits::check("feast_views", self.views, max)?;
                    self.fields += 1; // the timestamp field
                    self.view(view)?;
                }
                _ => {}
            }
            Ok(())
        })
    }

    /// One `FeastView`: its feature fields and its timestamp field.
    fn view(&mut self, view: &[u8]) -> Result<(), ReaderError> {
        each_field(view, |number, field| {
            if let Field::Bytes(name) = field {
                if number == 2 {
                    self.fields += 1;
                    let max = limits::MAX_FEAST_FIELDS_PER_ENTITY;
                    limits::check("feast_fields_per_entity", self.fields, max)?;
                }
                if number == 1 || number == 2 {
                    self.name_bytes += name.len() as u64;
                }
            }
            Ok(())
        })
    }
}

/// Calls `visit` with each field of a message, in order.
fn each_field<'a>(
    mut buf: &'a [u8],
    mut visit: impl FnMut(u64, Field<'a>) -> Result<(), ReaderError>,
) -> Result<(), ReaderError> {
    while !buf.is_empty() {
        let key = varint(&mut buf)?;
        let field = match key & 7 {
            0 => varint(&mut buf).map(|_| Field::Scalar)?,
            1 => take(&mut buf, 8).map(|_| Field::Scalar)?,
            5 => take(&mut buf, 4).map(|_| Field::Scalar)?,
            2 => {
                let len = varint(&mut buf)?;
                Field::Bytes(take(&mut buf, len)?)
            }
            wire => return Err(malformed(&format!("wire type {wire}"))),
        };
        visit(key >> 3, field)?;
    }
    Ok(())
}

fn varint(buf: &mut &[u8]) -> Result<u64, ReaderError> {
    let mut value = 0u64;
    for shift in (0..64).step_by(7) {
        let (&byte, rest) = buf
            .split_first()
            .ok_or_else(|| malformed("truncated varint"))?;
        *buf = rest;
        value |= u64::from(byte & 0x7f) << shift;
        if byte < 0x80 {
            return Ok(value);
        }
    }
    Err(malformed("varint over 10 bytes"))
}

fn take<'a>(buf: &mut &'a [u8], len: u64) -> Result<&'a [u8], ReaderError> {
    let len = usize::try_from(len).unwrap_or(usize::MAX);
    if len > buf.len() {
        return Err(malformed("truncated field"));
    }
    let (head, rest) = buf.split_at(len);
    *buf = rest;
    Ok(head)
}

fn malformed(why: &str) -> ReaderError {
    ReaderError::BadRequest(format!("body is not a VectorRequest: {why}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferry_protos::v1::{FeastJoinKey, FeastLayout, FeastView, Lookup, VectorRequest};
    use prost::Message;

    fn feast_request(keys: usize, views: usize, features: usize) -> VectorRequest {
        let view = FeastView {
            timestamp_field: b"_ts:v".to_vec(),
            feature_fields: vec![vec![1, 2, 3, 4]; features],
            ..Default::default()
        };
        VectorRequest {
            project: "p".into(),
            lookups: vec![Lookup {
                service: "s".into(),
                fingerprint: u64::MAX,
                entity_keys: vec!["k".into(); keys],
                feast: Some(FeastLayout {
                    project: "p".into(),
                    join_keys: vec![FeastJoinKey::default()],
                    views: vec![view; views],
                    ..Default::default()
                }),
            }],
        }
    }

    fn limit(request: &VectorRequest) -> &'static str {
        match shape(&request.encode_to_vec()) {
            Err(ReaderError::TooLarge(e)) => e.limit,
            other => panic!("not refused for a limit: {other:?}"),
        }
    }

    #[test]
    fn counts_what_decoding_would_build() {
        let request = feast_request(3, 2, 5);
        let counted = shape(&request.encode_to_vec()).unwrap();
        assert_eq!((counted.lookups, counted.keys), (1, 3));
        // Per entity: 2 × (5 features + 1 timestamp) fields, 2 × (5 × 4 + 5) name bytes.
        let per_entity = FeastWork {
            fields: 12,
            name_bytes: 50,
        };
        assert_eq!(counted.feast.fields, 3 * per_entity.fields);
        assert_eq!(counted.feast.name_bytes, 3 * per_entity.name_bytes);
        let plain = ferry_test_support::reader::request("p", &[("s", 1, &["a", "b"])]);
        let counted = shape(&plain.encode_to_vec()).unwrap();
        assert_eq!((counted.lookups, counted.keys), (1, 2));
        assert_eq!(counted.feast, FeastWork::default());
    }

    #[test]
    fn the_bomb_and_its_variants_are_refused_by_name() {
        // #22's bomb: 50 keys × 1,000,000 empty field names.
        let mut bomb = feast_request(50, 1, 0);
        bomb.lookups[0].feast.as_mut().unwrap().views[0].feature_fields = vec![vec![]; 1_000_000];
        assert_eq!(limit(&bomb), "feast_fields_per_entity");
        assert_eq!(limit(&feast_request(1, 300, 1)), "feast_views");
        assert_eq!(
            limit(&feast_request(10_000, 1, 30)),
            "feast_fields_per_call"
        );
        let mut wide = feast_request(1_000, 1, 1);
        wide.lookups[0].feast.as_mut().unwrap().views[0].timestamp_field = vec![b'x'; 5_000];
        assert_eq!(limit(&wide), "feast_name_bytes_per_call");
        let mut keys = feast_request(1, 1, 1);
        keys.lookups[0].feast.as_mut().unwrap().join_keys = vec![FeastJoinKey::default(); 5];
        assert_eq!(limit(&keys), "feast_join_keys");
        let lookups = VectorRequest {
            project: "p".into(),
            lookups: vec![Lookup::default(); 10_001],
        };
        assert_eq!(limit(&lookups), "lookups_per_call");
        // Just under the limits is accepted.
        assert!(shape(&feast_request(10_000, 1, 25).encode_to_vec()).is_ok());
        assert!(shape(&feast_request(1, 256, 7).encode_to_vec()).is_ok());
    }

    #[test]
    fn malformed_bytes_are_bad_requests() {
        for body in [
            &b"\x12\x05ab"[..],
            b"\xff",
            b"\x0b",
            b"\x12\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01",
        ] {
            let err = shape(body).unwrap_err();
            assert_eq!(err.code(), "bad_request", "{body:?}: {err}");
        }
    }
}
