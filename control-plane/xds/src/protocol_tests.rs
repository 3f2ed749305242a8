//! The protocol core driven directly: ACK, NACK, stale nonce, reconnect, updates.

use super::*;
use envoy_types::pb::envoy::service::discovery::v3::DiscoveryResponse;
use envoy_types::pb::google::rpc::Status;

const ECDS_TYPE: ResourceType = ResourceType::ExtensionConfig;
/// What Envoy writes in requests.
const ECDS: &str = ECDS_TYPE.type_url();
const CDS: &str = ResourceType::Cluster.type_url();

fn snap(version: &str) -> Arc<XdsSnapshot> {
    let mut resources = BTreeMap::new();
    resources.insert(
        ECDS_TYPE,
        vec![Resource {
            name: "ferry".into(),
            body: Any {
                type_url: ECDS.into(),
                value: version.as_bytes().to_vec(),
            },
        }],
    );
    Arc::new(XdsSnapshot::new(version.into(), resources))
}

fn req(version: &str, nonce: &str, error: Option<&str>) -> DiscoveryRequest {
    DiscoveryRequest {
        version_info: version.into(),
        resource_names: vec!["ferry".into()],
        type_url: ECDS.into(),
        response_nonce: nonce.into(),
        error_detail: error.map(|e| Status {
            code: 3,
            message: e.into(),
            details: vec![],
        }),
        ..Default::default()
    }
}

fn one(out: &Outcome) -> DiscoveryResponse {
    assert_eq!(out.responses.len(), 1, "{out:?}");
    out.responses[0].decode()
}

#[test]
fn first_request_gets_the_current_snapshot_and_ack_is_recorded() {
    let v1 = snap("v1");
    let mut s = StreamState::new(7, None);
    let out = s.on_request(&req("", "", None), Some(&v1));
    let r = one(&out);
    assert_eq!(
        (
            r.version_info.as_str(),
            r.type_url.as_str(),
            r.nonce.as_str()
        ),
        ("v1", ECDS, "7-1")
    );
    assert_eq!(r.resources[0].value, b"v1");
    assert_eq!(
        out.events,
        [Event::Subscribed {
            resource_type: ECDS_TYPE
        }]
    );

    let out = s.on_request(&req("v1", "7-1", None), Some(&v1));
    assert!(out.responses.is_empty(), "an ACK needs no answer");
    assert_eq!(
        out.events,
        [Event::Ack {
            resource_type: ECDS_TYPE,
            version: "v1".into()
        }]
    );
    let t = &s.types[&ECDS_TYPE];
    assert_eq!(t.acked_version.as_deref(), Some("v1"));
    assert_eq!(t.sent_version.as_deref(), Some("v1"));
    assert_eq!(t.responses_sent, 1);
}

#[test]
fn no_snapshot_yet_means_no_answer_until_one_arrives() {
    let mut s = StreamState::new(1, None);
    assert!(s.on_request(&req("", "", None), None).responses.is_empty());
    let out = s.on_snapshot(&snap("v1"));
    assert_eq!(one(&out).version_info, "v1");
}

#[test]
fn new_snapshot_is_pushed_once_and_the_same_version_is_not_resent() {
    let mut s = StreamState::new(1, None);
    s.on_request(&req("", "", None), Some(&snap("v1")));
    s.on_request(&req("v1", "1-1", None), Some(&snap("v1")));
    let out = s.on_snapshot(&snap("v2"));
    assert_eq!(
        (one(&out).version_info.as_str(), one(&out).nonce.as_str()),
        ("v2", "1-2")
    );
    assert!(s.on_snapshot(&snap("v2")).responses.is_empty());
    s.on_request(&req("v2", "1-2", None), Some(&snap("v2")));
    assert_eq!(s.types[&ECDS_TYPE].acked_version.as_deref(), Some("v2"));
}

#[test]
fn nack_is_recorded_and_the_rejected_version_is_not_resent() {
    let mut s = StreamState::new(1, None);
    let v1 = snap("v1");
    s.on_request(&req("", "", None), Some(&v1));
    s.on_request(&req("v1", "1-1", None), Some(&v1));
    let bad = snap("bad");
    assert_eq!(s.on_snapshot(&bad).responses.len(), 1);

    // Envoy refuses: previous version + error_detail, answering our nonce.
    let out = s.on_request(&req("v1", "1-2", Some("on_configure failed")), Some(&bad));
    assert!(out.responses.is_empty(), "no resend loop: {out:?}");
    let nack = Nack {
        version: "bad".into(),
        error: "on_configure failed".into(),
    };
    assert_eq!(
        out.events,
        [Event::Nack {
            resource_type: ECDS_TYPE,
            nack: nack.clone()
        }]
    );
    let t = &s.types[&ECDS_TYPE];
    assert_eq!(t.acked_version.as_deref(), Some("v1"), "last good stays");
    assert_eq!(t.last_nack.as_ref(), Some(&nack));

    // The same snapshot again (pushed twice, or a resubscription) is withheld.
    assert!(s.on_snapshot(&bad).responses.is_empty());
    let out = s.on_request(&req("v1", "", None), Some(&bad));
    assert!(out.responses.is_empty());
    assert!(out.events.contains(&Event::Withheld {
        resource_type: ECDS_TYPE,
        version: "bad".into()
    }));

    // A fixed snapshot goes out.
    let out = s.on_snapshot(&snap("v3"));
    assert_eq!(one(&out).version_info, "v3");
    s.on_request(&req("v3", &one(&out).nonce.clone(), None), None);
    assert_eq!(s.types[&ECDS_TYPE].acked_version.as_deref(), Some("v3"));
}

#[test]
fn stale_nonces_are_ignored() {
    let mut s = StreamState::new(1, None);
    s.on_request(&req("", "", None), Some(&snap("v1")));
    s.on_snapshot(&snap("v2")); // sent 1-2 before Envoy answered 1-1
    let out = s.on_request(&req("v1", "1-1", None), Some(&snap("v2")));
    assert!(out.responses.is_empty());
    assert_eq!(
        out.events,
        [Event::StaleNonce {
            resource_type: ECDS_TYPE,
            nonce: "1-1".into()
        }]
    );
    assert_eq!(
        s.types[&ECDS_TYPE].acked_version, None,
        "a stale ACK is not an ACK"
    );
    // A stale NACK is not a NACK either.
    let out = s.on_request(&req("", "1-1", Some("old")), Some(&snap("v2")));
    assert!(matches!(out.events[0], Event::StaleNonce { .. }));
    assert_eq!(s.types[&ECDS_TYPE].last_nack, None);
    // A nonce from another stream is never ours.
    let out = s.on_request(&req("v2", "9-2", None), Some(&snap("v2")));
    assert!(matches!(out.events[0], Event::StaleNonce { .. }));
    s.on_request(&req("v2", "1-2", None), Some(&snap("v2")));
    assert_eq!(s.types[&ECDS_TYPE].acked_version.as_deref(), Some("v2"));
}

#[test]
fn reconnect_gets_the_current_snapshot_but_not_one_this_node_refused() {
    // A new stream after a control plane restart: Envoy says which version it has.
    let mut s = StreamState::new(2, None);
    let out = s.on_request(&req("v1", "", None), Some(&snap("v2")));
    assert_eq!(one(&out).version_info, "v2");
    assert_eq!(s.types[&ECDS_TYPE].acked_version, None, "only ACKs count");

    // The node refused "bad" on its previous stream: seeded, then withheld.
    let mut s = StreamState::new(3, None);
    s.remember_rejected(ECDS_TYPE, "bad");
    let out = s.on_request(&req("v1", "", None), Some(&snap("bad")));
    assert!(out.responses.is_empty());
    let out = s.on_snapshot(&snap("v4"));
    assert_eq!(one(&out).version_info, "v4");
}

#[test]
fn only_requested_resources_and_allowed_types_are_served() {
    // ECDS service: one type only.
    let mut s = StreamState::new(1, Some(vec![ECDS_TYPE]));
    let mut r = req("", "", None);
    r.type_url = CDS.into();
    assert!(s.on_request(&r, Some(&snap("v1"))).responses.is_empty());
    assert!(s.on_snapshot(&snap("v2")).responses.is_empty());

    // A name we do not have: no (empty) answer.
    let mut s = StreamState::new(1, None);
    let mut r = req("", "", None);
    r.resource_names = vec!["other".into()];
    assert!(s.on_request(&r, Some(&snap("v1"))).responses.is_empty());
    // Envoy then asks for ours (ACK-less re-request with the new names): answered.
    let out = s.on_request(&req("", "", None), Some(&snap("v1")));
    assert_eq!(one(&out).resources.len(), 1);

    let mut r = req("", "", None);
    r.type_url = String::new();
    assert_eq!(
        s.on_request(&r, Some(&snap("v1"))).events,
        [Event::NoTypeUrl]
    );
    // A type this server does not know: ignored, not tracked.
    r.type_url = "type.googleapis.com/google.protobuf.Empty".into();
    let out = s.on_request(&r, Some(&snap("v1")));
    assert!(out.responses.is_empty());
    assert_eq!(
        out.events,
        [Event::UnknownType {
            type_url: r.type_url.clone()
        }]
    );
    assert_eq!(s.types.keys().collect::<Vec<_>>(), [&ECDS_TYPE]);
}

#[test]
fn ack_with_new_resource_names_resends_the_current_version() {
    let mut s = StreamState::new(1, None);
    let v1 = snap("v1");
    let mut r = req("", "", None);
    r.resource_names = vec![];
    s.on_request(&r, Some(&v1)); // wildcard
    let out = s.on_request(&req("v1", "1-1", None), Some(&v1)); // now names ["ferry"]
    assert_eq!(one(&out).nonce, "1-2");
}

#[test]
fn a_nack_detail_is_kept_truncated_and_a_request_over_a_bound_is_refused_unkept() {
    use super::bounds::{Refusal, MAX_NACK_DETAIL_BYTES, MAX_NODE_ID_BYTES, MAX_RESOURCE_NAMES};
    let mut s = StreamState::new(1, None);
    let v1 = snap("v1");
    s.on_request(&req("", "", None), Some(&v1));
    // A 4 MiB error_detail: the head is kept, marked as cut.
    let huge = "x".repeat(4 << 20);
    s.on_request(&req("", "1-1", Some(&huge)), Some(&v1));
    let kept = &s.types[&ECDS_TYPE].last_nack.as_ref().unwrap().error;
    assert!(kept.len() < MAX_NACK_DETAIL_BYTES + 64, "{}", kept.len());
    assert!(kept.ends_with("(4194304 bytes, truncated)"), "{kept}");

    // Too many resource names: refused, nothing of the request kept, no answer.
    let mut s = StreamState::new(2, None);
    let mut many = req("", "", None);
    many.resource_names = (0..=MAX_RESOURCE_NAMES).map(|i| format!("r{i}")).collect();
    let out = s.on_request(&many, Some(&v1));
    assert!(out.responses.is_empty());
    assert_eq!(out.refusal().map(|r| r.0), Some(Refusal::ResourceNames));
    assert!(s.types.is_empty(), "nothing subscribed");
    // A node id over the bound: refused the same way.
    let mut long = req("", "", None);
    long.node = Some(envoy_types::pb::envoy::config::core::v3::Node {
        id: "n".repeat(MAX_NODE_ID_BYTES + 1),
        ..Default::default()
    });
    let out = s.on_request(&long, Some(&v1));
    assert_eq!(out.refusal().map(|r| r.0), Some(Refusal::NodeId));
    // Within the bounds the same stream is served as usual.
    assert_eq!(
        one(&s.on_request(&req("", "", None), Some(&v1))).version_info,
        "v1"
    );
}
