//! One request's worth of work: validate a `VectorRequest`, turn every entity key of every lookup
//! into one Redis `MGET` (one round trip for the whole batch), and split Redis's answer back into
//! one `LookupResult` per lookup, in order.

use bytes::Buf;
use ferry_protos::limits::MAX_ENTITY_KEY_BYTES;
use ferry_protos::v1::{FeastLayout, LookupResult, VectorRequest, VectorResponse};
use ferry_protos::{entity_key_problem, is_valid_name, redis_key};
use prost::Message;
use redis::Value;

use crate::error::ReaderError;
use crate::{feast, scan};

/// A validated request, ready to be sent to Redis.
#[derive(Debug)]
pub struct Batch {
    /// `MGET` over every key of the request, lookups concatenated in request order. `None` when
    /// the request names no key at all, so Redis is not bothered (`MGET` needs at least one).
    command: Option<redis::Cmd>,
    /// Entity keys per lookup, in order: how to cut Redis's flat answer back into lookups.
    counts: Vec<usize>,
    /// Sum of `counts`: the length Redis's answer must have.
    keys: usize,
    /// For a request whose lookups are all of Feast-backed services: one `HMGET` per entity
    /// key, pipelined, instead of the `MGET` (see `feast`).
    feast: Option<FeastBatch>,
}

/// The Feast part of a batch: the pipeline and what each lookup needs to read its answers.
#[derive(Debug)]
struct FeastBatch {
    pipeline: redis::Pipeline,
    /// Per lookup: its layout and fingerprint.
    lookups: Vec<(FeastLayout, u64)>,
}

impl Batch {
    /// Decodes and validates a request body. Everything the reader puts into a Redis key is
    /// checked here, so the reader only ever reads Ferry's own key space. The body's counts
    /// are checked against the limits first (`scan`), so decoding and the Redis work are
    /// bounded by them.
    pub fn decode(mut body: impl Buf, max_batch: u32) -> Result<Self, ReaderError> {
        let body = body.copy_to_bytes(body.remaining());
        let shape = scan::shape(&body)?;
        if shape.keys > u64::from(max_batch) {
            return Err(ReaderError::BatchTooLarge {
                keys: usize::try_from(shape.keys).unwrap_or(usize::MAX),
                max: max_batch,
            });
        }
        let request = VectorRequest::decode(body)
            .map_err(|e| ReaderError::BadRequest(format!("body is not a VectorRequest: {e}")))?;
        Self::from_request(&request, max_batch)
    }

    /// Validates a decoded request and builds its single `MGET`.
    pub fn from_request(request: &VectorRequest, max_batch: u32) -> Result<Self, ReaderError> {
        if request.lookups.is_empty() {
            return Err(ReaderError::BadRequest("request has no lookups".into()));
        }
        // Refuse an oversized batch before spending any work on its keys.
        let keys: usize = request.lookups.iter().map(|l| l.entity_keys.len()).sum();
        if keys > max_batch as usize {
            return Err(ReaderError::BatchTooLarge {
                keys,
                max: max_batch,
            });
        }
        check_name("project", &request.project)?;
        let feast_lookups = request.lookups.iter().filter(|l| l.feast.is_some()).count();
        if feast_lookups > 0 {
            if feast_lookups < request.lookups.len() {
                return Err(ReaderError::BadRequest(
                    "a request mixes Feast-backed and Ferry-layout lookups".into(),
                ));
            }
            return Self::feast(request, keys);
        }

        let mut counts = Vec::with_capacity(request.lookups.len());
        let mut command = redis::Cmd::with_capacity(keys + 1, estimate_bytes(request));
        command.arg("MGET");
        // One key buffer reused for every key: the command copies each argument in anyway.
        let mut key = String::with_capacity(128 + MAX_ENTITY_KEY_BYTES);
        for (i, lookup) in request.lookups.iter().enumerate() {
            check_name(&format!("lookups[{i}].service"), &lookup.service)?;
            // `redis_key` with an empty entity key is the prefix shared by the whole lookup
            // (a unit test pins that `prefix + entity key == redis_key(..)`).
            let prefix = redis_key(&request.project, &lookup.service, lookup.fingerprint, "");
            for (j, entity_key) in lookup.entity_keys.iter().enumerate() {
                // The same rule the filter applies before calling: a key it could have sent.
                if let Some(why) = entity_key_problem(entity_key) {
                    return Err(ReaderError::BadRequest(format!(
                        "lookups[{i}].entity_keys[{j}]: {why}"
                    )));
                }
                key.clear();
                key.push_str(&prefix);
                key.push_str(entity_key);
                command.arg(key.as_str());
            }
            counts.push(lookup.entity_keys.len());
        }
        Ok(Self {
            command: (keys > 0).then_some(command),
            counts,
            keys,
            feast: None,
        })
    }

    /// A request of Feast-backed lookups: one pipelined `HMGET` per entity key.
    fn feast(request: &VectorRequest, keys: usize) -> Result<Self, ReaderError> {
        let mut pipeline = redis::pipe();
        let mut lookups = Vec::with_capacity(request.lookups.len());
        for (i, lookup) in request.lookups.iter().enumerate() {
            check_name(&format!("lookups[{i}].service"), &lookup.service)?;
            let layout = lookup.feast.clone().unwrap_or_default();
            for (j, entity_key) in lookup.entity_keys.iter().enumerate() {
                if let Some(why) = entity_key_problem(entity_key) {
                    return Err(ReaderError::BadRequest(format!(
                        "lookups[{i}].entity_keys[{j}]: {why}"
                    )));
                }
            }
            feast::add_lookup(&mut pipeline, i, lookup, &layout)?;
            lookups.push((layout, lookup.fingerprint));
        }
        Ok(Self {
            command: None,
            counts: request
                .lookups
                .iter()
                .map(|l| l.entity_keys.len())
                .collect(),
            keys,
            feast: Some(FeastBatch { pipeline, lookups }),
        })
    }

    /// The pipeline of `HMGET`s to send for a Feast-backed request with keys.
    pub fn pipeline(&self) -> Option<&redis::Pipeline> {
        self.feast
            .as_ref()
            .filter(|_| self.keys > 0)
            .map(|f| &f.pipeline)
    }

    /// Number of entity keys in the request.
    pub fn keys(&self) -> usize {
        self.keys
    }

    /// The `MGET` to send, or `None` if the request names no key.
    pub fn command(&self) -> Option<&redis::Cmd> {
        self.command.as_ref()
    }

    /// Cuts Redis's `MGET` answer into one `LookupResult` per lookup. The stored bytes are moved,
    /// not copied. Returns the response, how many keys were found, and how many Feast
    /// precomputed vectors were refused for their schema (answered as not found).
    pub fn respond(
        &self,
        values: Vec<Value>,
    ) -> Result<(VectorResponse, usize, usize), ReaderError> {
        if values.len() != self.keys {
            return Err(ReaderError::Internal(format!(
                "redis answered {} keys with {} values",
                self.keys,
                values.len()
            )));
        }
        let (mut found, mut refused) = (0, 0);
        let mut values = values.into_iter();
        let mut results = Vec::with_capacity(self.counts.len());
        for &count in &self.counts {
            let mut vectors = Vec::with_capacity(count);
            // Once per lookup: a precomputed service's names are matched once, not per entity.
            let mut feast = self
                .feast
                .as_ref()
                .and_then(|f| f.lookups.get(results.len()))
                .map(|(layout, fingerprint)| feast::Reading::new(layout, *fingerprint));
            for value in values.by_ref().take(count) {
                let value = match feast.as_mut() {
                    Some(reading) => {
                        let read = reading.vector(value)?;
                        refused += usize::from(read.refused);
                        Value::BulkString(read.vector)
                    }
                    None => value,
                };
                match value {
                    Value::BulkString(bytes) => {
                        found += usize::from(!bytes.is_empty());
                        vectors.push(bytes);
                    }
                    Value::Nil => vectors.push(Vec::new()),
                    other => {
                        return Err(ReaderError::Internal(format!(
                            "redis answered MGET with an unexpected value: {other:?}"
                        )))
                    }
                }
            }
            results.push(LookupResult { vectors });
        }
        Ok((VectorResponse { results }, found, refused))
    }
}

/// Project and service names go into Redis keys verbatim, so they must be key-safe.
fn check_name(what: &str, name: &str) -> Result<(), ReaderError> {
    if is_valid_name(name) {
        Ok(())
    } else {
        Err(ReaderError::BadRequest(format!(
            "{what} {name:?} is not a valid name ([A-Za-z0-9_-], 1..=128 characters, not starting with '-')"
        )))
    }
}

/// Bytes of all keys of a request, so the command buffer is allocated once.
fn estimate_bytes(request: &VectorRequest) -> usize {
    // "ferry:" + ":" + ":" + 16 hex digits + ":" = 25 bytes around project and service.
    request
        .lookups
        .iter()
        .map(|l| {
            let prefix = 25 + request.project.len() + l.service.len();
            l.entity_keys
                .iter()
                .map(|k| prefix + k.len())
                .sum::<usize>()
        })
        .sum::<usize>()
        + 4
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferry_protos::limits::{MAX_JOIN_KEYS, MAX_KEY_PART_BYTES};
    use ferry_test_support::reader::request;

    fn args(batch: &Batch) -> Vec<String> {
        batch
            .command()
            .unwrap()
            .args_iter()
            .map(|a| match a {
                redis::Arg::Simple(b) => String::from_utf8(b.to_vec()).unwrap(),
                other => panic!("unexpected argument {other:?}"),
            })
            .collect()
    }

    #[test]
    fn all_keys_of_all_lookups_go_into_one_mget_in_order() {
        let composite = ferry_protos::entity_key(&["u1", "m2"]);
        let req = request(
            "bank",
            &[
                ("scoring", 0xab, &["u1", "u2"]),
                ("fraud", 7, &[composite.as_str()]),
            ],
        );
        let batch = Batch::from_request(&req, 10).unwrap();
        assert_eq!(batch.keys(), 3);
        assert_eq!(
            args(&batch),
            vec![
                "MGET".to_string(),
                redis_key("bank", "scoring", 0xab, "u1"),
                redis_key("bank", "scoring", 0xab, "u2"),
                redis_key("bank", "fraud", 7, &composite),
            ]
        );
    }

    #[test]
    fn prefix_plus_entity_key_is_the_redis_key() {
        for (p, s, f, e) in [("a", "b", 0, "x"), ("bank", "svc-2", u64::MAX, "u\u{1f}9")] {
            assert_eq!(redis_key(p, s, f, "") + e, redis_key(p, s, f, e));
        }
    }

    #[test]
    fn answer_is_cut_back_into_lookups_with_missing_as_empty() {
        let req = request("p", &[("s", 1, &["a", "b"]), ("t", 2, &["c"])]);
        let batch = Batch::from_request(&req, 10).unwrap();
        let (response, found, _) = batch
            .respond(vec![
                Value::BulkString(b"va".to_vec()),
                Value::Nil,
                Value::BulkString(b"vc".to_vec()),
            ])
            .unwrap();
        assert_eq!(found, 2);
        assert_eq!(response.results.len(), 2);
        assert_eq!(
            response.results[0].vectors,
            vec![b"va".to_vec(), Vec::new()]
        );
        assert_eq!(response.results[1].vectors, vec![b"vc".to_vec()]);
    }

    #[test]
    fn an_answer_of_the_wrong_length_is_an_internal_error() {
        let batch = Batch::from_request(&request("p", &[("s", 1, &["a"])]), 10).unwrap();
        let err = batch.respond(vec![]).unwrap_err();
        assert_eq!(err.code(), "internal");
    }

    #[test]
    fn lookups_without_keys_need_no_redis() {
        let batch = Batch::from_request(&request("p", &[("s", 1, &[])]), 10).unwrap();
        assert!(batch.command().is_none());
        let (response, found, _) = batch.respond(vec![]).unwrap();
        assert_eq!((response.results.len(), found), (1, 0));
        assert!(response.results[0].vectors.is_empty());
    }

    #[test]
    fn bad_requests_are_refused_with_the_reason() {
        let cases: Vec<(VectorRequest, &str)> = vec![
            (request("p", &[]), "request has no lookups"),
            (request("a:b", &[("s", 1, &["k"])]), "project \"a:b\""),
            (
                request("p", &[("s", 1, &["k"]), ("*", 1, &["k"])]),
                "lookups[1].service \"*\"",
            ),
            (
                request("p", &[("s", 1, &[""])]),
                "lookups[0].entity_keys[0]: id must be 1 to 256 bytes, got 0",
            ),
            (
                request("p", &[("s", 1, &["k", "a\nb"])]),
                "entity_keys[1]: id contains the control character U+000A",
            ),
        ];
        for (req, expected) in cases {
            let err = Batch::from_request(&req, 10).unwrap_err();
            assert_eq!(err.code(), "bad_request");
            assert!(
                err.to_string().contains(expected),
                "{err} does not contain {expected}"
            );
        }
        // Limits shared with the filter: a part of 257 bytes is refused, the widest composite
        // key the filter can build (every part at its longest) is accepted.
        let long = "k".repeat(MAX_KEY_PART_BYTES + 1);
        let err =
            Batch::from_request(&request("p", &[("s", 1, &[long.as_str()])]), 10).unwrap_err();
        assert!(err.to_string().contains("got 257"), "{err}");
        let part = "k".repeat(MAX_KEY_PART_BYTES);
        let widest = ferry_protos::entity_key(&[part.as_str(); MAX_JOIN_KEYS]);
        assert_eq!(widest.len(), MAX_ENTITY_KEY_BYTES);
        assert!(Batch::from_request(&request("p", &[("s", 1, &[widest.as_str()])]), 10).is_ok());
    }

    #[test]
    fn too_many_keys_is_batch_too_large_even_across_lookups() {
        let req = request("p", &[("s", 1, &["a", "b"]), ("t", 1, &["c"])]);
        assert_eq!(
            Batch::from_request(&req, 2).unwrap_err().code(),
            "batch_too_large"
        );
        assert!(Batch::from_request(&req, 3).is_ok());
    }

    #[test]
    fn feast_lookups_are_pipelined_hmgets_and_never_mixed_with_ferry_keys() {
        let layout = ferry_protos::v1::FeastLayout {
            project: "p".into(),
            join_keys: vec![ferry_protos::v1::FeastJoinKey {
                name: "user_id".into(),
                int64: false,
            }],
            views: vec![ferry_protos::v1::FeastView {
                timestamp_field: b"_ts:v".to_vec(),
                feature_fields: vec![vec![1, 2, 3, 4]],
                ..Default::default()
            }],
            ..Default::default()
        };
        let mut req = request("p", &[("s", 1, &["a", "b"]), ("t", 2, &["c"])]);
        req.lookups[0].feast = Some(layout.clone());
        let err = Batch::from_request(&req, 10).unwrap_err();
        assert!(err.to_string().contains("mixes"), "{err}");
        req.lookups[1].feast = Some(layout);
        let batch = Batch::from_request(&req, 10).unwrap();
        assert!(batch.command().is_none());
        assert_eq!(batch.pipeline().unwrap().cmd_iter().count(), 3);
        // Entities Feast has nothing for come back empty, per lookup, like missing vectors.
        let nothing = || Value::Array(vec![Value::Nil, Value::Nil]);
        let (response, found, _) = batch
            .respond(vec![nothing(), nothing(), nothing()])
            .unwrap();
        assert_eq!(found, 0);
        assert_eq!(response.results[0].vectors, vec![Vec::<u8>::new(); 2]);
        assert_eq!(response.results[1].vectors.len(), 1);
    }

    #[test]
    fn undecodable_bodies_are_bad_requests() {
        let err = Batch::decode(&b"\xff\xff\xff"[..], 10).unwrap_err();
        assert_eq!(err.code(), "bad_request");
    }
}
