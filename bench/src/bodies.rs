//! Request bodies of the three protocols under test, each for a batch of random entity ids drawn
//! from a seeded generator, so that every scenario asks for the same kind of work.

use bytes::Bytes;
use prost::Message;

/// What the load generator speaks to the target.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Protocol {
    /// KServe v1 `{"instances": [...]}` to Envoy (with or without the ferry filter).
    Kserve,
    /// Feast's REST `/get-online-features` with a feature service.
    Feast,
    /// Ferry's reader `POST /v1/vectors` (protobuf), called directly.
    Reader,
}

/// Everything needed to build one request body.
#[derive(Debug, Clone)]
pub struct BodySpec {
    pub protocol: Protocol,
    pub batch: usize,
    /// Ids are `u000001` ..= this (the generator's spelling).
    pub id_space: u64,
    /// Feast: the FeatureService to ask for.
    pub feature_service: String,
    /// Feast: send each row's request data too (`amount`, `request_channel`: the values a
    /// KServe v1 body of the same seed carries as `amount` and `channel`), for an on-demand
    /// feature view, and ask for short feature names.
    pub request_data: bool,
    /// Reader: project, service and fingerprint of the lookup.
    pub project: String,
    pub service: String,
    pub fingerprint: u64,
}

/// SplitMix64: tiny, seedable and good enough to pick ids uniformly.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in 1..=n.
    pub fn id(&mut self, n: u64) -> u64 {
        1 + self.next_u64() % n.max(1)
    }
}

pub fn user_id(i: u64) -> String {
    format!("u{i:06}")
}

/// One instance's request-time fields: an amount (0.00 to 4,999.99) and a merchant id.
fn request_fields(rng: &mut Rng) -> (f64, String) {
    let cents = rng.next_u64() % 500_000;
    (
        cents as f64 / 100.0,
        format!("m{:05}", rng.next_u64() % 20_000),
    )
}

impl BodySpec {
    pub fn content_type(&self) -> &'static str {
        match self.protocol {
            Protocol::Kserve | Protocol::Feast => "application/json",
            Protocol::Reader => ferry_protos::PROTOBUF_CONTENT_TYPE,
        }
    }

    pub fn build(&self, rng: &mut Rng) -> Bytes {
        let ids: Vec<String> = (0..self.batch)
            .map(|_| user_id(rng.id(self.id_space)))
            .collect();
        match self.protocol {
            Protocol::Kserve => {
                // What a scoring client sends: the entity id plus a few request-time fields.
                let instances: Vec<serde_json::Value> = ids
                    .into_iter()
                    .map(|id| {
                        let (amount, merchant_id) = request_fields(rng);
                        serde_json::json!({
                            "user_id": id,
                            "amount": amount,
                            "merchant_id": merchant_id,
                            "channel": "web",
                        })
                    })
                    .collect();
                Bytes::from(serde_json::json!({ "instances": instances }).to_string())
            }
            Protocol::Feast => {
                let mut entities = serde_json::json!({ "user_id": ids });
                if self.request_data {
                    let amounts: Vec<f64> =
                        (0..self.batch).map(|_| request_fields(rng).0).collect();
                    entities["amount"] = amounts.into();
                    entities["request_channel"] = vec!["web"; self.batch].into();
                }
                // Short names with request data: Feast 0.67 answers a python-mode ODFV's
                // columns only then (it matches the function's short output names against
                // the requested references, which full_feature_names prefixes).
                Bytes::from(
                    serde_json::json!({
                        "feature_service": self.feature_service,
                        "entities": entities,
                        "full_feature_names": !self.request_data,
                    })
                    .to_string(),
                )
            }
            Protocol::Reader => Bytes::from(
                ferry_protos::v1::VectorRequest {
                    project: self.project.clone(),
                    lookups: vec![ferry_protos::v1::Lookup {
                        feast: None,
                        service: self.service.clone(),
                        fingerprint: self.fingerprint,
                        entity_keys: ids,
                    }],
                }
                .encode_to_vec(),
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(protocol: Protocol, batch: usize) -> BodySpec {
        BodySpec {
            protocol,
            batch,
            id_space: 100,
            feature_service: "scoring_precomputed".into(),
            request_data: false,
            project: "bench".into(),
            service: "scoring".into(),
            fingerprint: 7,
        }
    }

    #[test]
    fn ids_stay_in_the_id_space_and_are_reproducible() {
        let (mut a, mut b) = (Rng::new(1), Rng::new(1));
        for _ in 0..1000 {
            let x = a.id(100);
            assert!((1..=100).contains(&x));
            assert_eq!(x, b.id(100));
        }
        assert_eq!(user_id(42), "u000042");
    }

    #[test]
    fn kserve_bodies_carry_one_instance_per_entity() {
        let body = spec(Protocol::Kserve, 5).build(&mut Rng::new(3));
        let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
        let instances = v["instances"].as_array().unwrap();
        assert_eq!(instances.len(), 5);
        assert!(instances[0]["user_id"].as_str().unwrap().starts_with('u'));
    }

    #[test]
    fn feast_bodies_name_the_service_and_list_the_ids() {
        let body = spec(Protocol::Feast, 3).build(&mut Rng::new(3));
        let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(v["feature_service"], "scoring_precomputed");
        assert_eq!(v["entities"]["user_id"].as_array().unwrap().len(), 3);
        assert_eq!(v["full_feature_names"], true);
    }

    #[test]
    fn feast_request_data_carries_the_kserve_bodys_amounts() {
        let kserve = spec(Protocol::Kserve, 3).build(&mut Rng::new(9));
        let feast = BodySpec {
            request_data: true,
            ..spec(Protocol::Feast, 3)
        }
        .build(&mut Rng::new(9));
        let k: serde_json::Value = serde_json::from_slice(&kserve).unwrap();
        let f: serde_json::Value = serde_json::from_slice(&feast).unwrap();
        for i in 0..3 {
            let inst = &k["instances"][i];
            assert_eq!(f["entities"]["user_id"][i], inst["user_id"]);
            assert_eq!(f["entities"]["amount"][i], inst["amount"]);
            assert_eq!(f["entities"]["request_channel"][i], inst["channel"]);
        }
        assert_eq!(f["full_feature_names"], false);
        let plain = spec(Protocol::Feast, 3).build(&mut Rng::new(9));
        let p: serde_json::Value = serde_json::from_slice(&plain).unwrap();
        assert!(p["entities"].get("amount").is_none());
    }

    #[test]
    fn reader_bodies_are_one_lookup() {
        let body = spec(Protocol::Reader, 4).build(&mut Rng::new(3));
        let req = ferry_protos::v1::VectorRequest::decode(body).unwrap();
        assert_eq!(req.lookups.len(), 1);
        assert_eq!(req.lookups[0].entity_keys.len(), 4);
        assert_eq!(req.lookups[0].fingerprint, 7);
    }
}
