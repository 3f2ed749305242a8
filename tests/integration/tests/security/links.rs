//! The matrix's cases on who may speak on each control link: certificates (none, another CA's,
//! another identity's node id, a forged NACK) and credentials (none, one without the role).

use ferry::serve::api::Status;
use ferry_integration_tests::control_plane::READ_TOKEN;
use ferry_integration_tests::secure::{CP_NAME, ENVOY, READER_NAME};
use ferry_integration_tests::tls;
use ferry_protos::{PROTOBUF_CONTENT_TYPE, READER_PATH};
use ferry_test_support::certs::LeafFiles;
use prost::Message;

use super::xds::ads_once;
use super::{Ctx, Fut};

/// A request that must end without an answer: the handshake (or the first read after it,
/// where TLS 1.3 servers refuse a client certificate) fails.
async fn no_handshake(
    c: &Ctx,
    (port, name): (u16, &str),
    client: Option<&LeafFiles>,
    (method, path): (&str, &str),
) -> Result<String, String> {
    let body = match path {
        READER_PATH => {
            ferry_test_support::reader::request("banking", &[("realtime_scoring", 1, &["u000001"])])
                .encode_to_vec()
        }
        _ => Vec::new(),
    };
    let headers = [("content-type", PROTOBUF_CONTENT_TYPE)];
    let answer = tls::request(
        port,
        name,
        (&c.stack.ca, client),
        (method, path, &headers),
        body,
    )
    .await;
    match answer {
        Err(e) => Ok(format!(
            "no connection ({})",
            e.chars().take(80).collect::<String>()
        )),
        Ok((code, body)) => Err(format!("answered {code}: {body}")),
    }
}

/// An ADS request (gRPC over HTTP/2, ALPN h2, Envoy's own node id) as `client`: it must not
/// get through the handshake.
async fn xds_refused(c: &Ctx, client: Option<&LeafFiles>) -> Result<String, String> {
    match ads_once(c.stack.xds_port, (&c.stack.ca, client), ENVOY, None).await {
        Err(e) => Ok(format!(
            "no connection ({})",
            e.chars().take(80).collect::<String>()
        )),
        Ok(code) => Err(format!("the stream got to grpc-status {code}")),
    }
}

pub fn xds_no_certificate(c: &mut Ctx) -> Fut<'_> {
    Box::pin(async move { xds_refused(c, None).await })
}

pub fn xds_another_ca(c: &mut Ctx) -> Fut<'_> {
    Box::pin(async move { xds_refused(c, Some(&c.stranger)).await })
}

pub fn reader_no_certificate(c: &mut Ctx) -> Fut<'_> {
    Box::pin(async move {
        let target = (c.stack.reader_port, READER_NAME);
        no_handshake(c, target, None, ("POST", READER_PATH)).await
    })
}

pub fn reader_another_ca(c: &mut Ctx) -> Fut<'_> {
    Box::pin(async move {
        let target = (c.stack.reader_port, READER_NAME);
        no_handshake(c, target, Some(&c.stranger), ("POST", READER_PATH)).await
    })
}

pub fn api_another_ca(c: &mut Ctx) -> Fut<'_> {
    Box::pin(async move {
        let target = (c.stack.http_port, CP_NAME);
        no_handshake(c, target, Some(&c.stranger), ("GET", "/status")).await
    })
}

/// The endpoints that need a credential: a status read, a snapshot read, a push.
const GUARDED: [(&str, &str); 3] = [
    ("GET", "/status"),
    ("GET", "/v1/snapshot"),
    ("POST", "/v1/snapshot"),
];

/// Each guarded endpoint as `client` with `headers`: every one must answer `want` with `code`.
async fn each_guarded(
    c: &Ctx,
    client: Option<&LeafFiles>,
    headers: &[(&str, &str)],
    (want, code): (u16, &str),
) -> Result<String, String> {
    for (method, path) in GUARDED {
        let (got, body) = c
            .stack
            .api(client, (method, path, headers), Vec::new())
            .await?;
        if got != want || !body.contains(&format!("\"{code}\"")) {
            return Err(format!("{method} {path}: {got} {body}"));
        }
    }
    Ok(format!("{want} {code} (status read, snapshot read, push)"))
}

pub fn api_no_credential(c: &mut Ctx) -> Fut<'_> {
    Box::pin(async move { each_guarded(c, None, &[], (401, "unauthorized")).await })
}

pub fn api_without_the_role(c: &mut Ctx) -> Fut<'_> {
    Box::pin(async move {
        let web = each_guarded(c, Some(&c.stack.web), &[], (403, "forbidden")).await?;
        let read = format!("Bearer {READ_TOKEN}");
        let auth = [("authorization", read.as_str())];
        let (code, body) = c
            .stack
            .api(None, ("POST", "/v1/snapshot", &auth), Vec::new())
            .await?;
        if code != 403 {
            return Err(format!("the read token pushing: {code} {body}"));
        }
        Ok(format!(
            "a certificate without a role: {web}; the read token pushing: 403"
        ))
    })
}

/// `/status` as read by the read token.
pub async fn status(c: &Ctx) -> Result<Status, String> {
    let read = format!("Bearer {READ_TOKEN}");
    let req = ("GET", "/status", &[("authorization", read.as_str())][..]);
    let (code, body) = c.stack.api(None, req, Vec::new()).await?;
    match code {
        200 => serde_json::from_str(&body).map_err(|e| format!("{e}: {body}")),
        _ => Err(format!("/status: {code} {body}")),
    }
}

/// `ferry_xds_refused_total{reason}` on the open `/metrics`.
async fn refused_total(c: &Ctx, reason: &str) -> Result<u64, String> {
    let (_, text) = c
        .stack
        .api(None, ("GET", "/metrics", &[]), Vec::new())
        .await?;
    let prefix = format!("ferry_xds_refused_total{{reason=\"{reason}\"}} ");
    Ok(text
        .lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .map_or(0, |n| n.trim().parse().unwrap_or(0)))
}

/// One ADS request from the `web` identity under Envoy's node id (a NACK when `nack`): must
/// end with PERMISSION_DENIED, be counted, and leave Envoy's entry on `/status` as it was.
async fn under_envoys_node_id(c: &Ctx, nack: bool) -> Result<String, String> {
    let before = status(c).await?;
    let node = before
        .nodes
        .iter()
        .find(|n| n.node == ENVOY)
        .ok_or("Envoy is not connected")?
        .clone();
    let acked = node.acked_version.clone().unwrap_or_default();
    let counted = refused_total(c, "node_identity").await?;
    let web = &c.stack.web;
    let forged = nack.then_some((acked.as_str(), "1"));
    let code = ads_once(c.stack.xds_port, (&c.stack.ca, Some(web)), ENVOY, forged).await?;
    if code != 7 {
        return Err(format!("grpc-status {code}, not PERMISSION_DENIED (7)"));
    }
    if refused_total(c, "node_identity").await? != counted + 1 {
        return Err("the refusal was not counted".into());
    }
    let after = status(c).await?;
    let now = after
        .nodes
        .iter()
        .find(|n| n.node == ENVOY)
        .ok_or("Envoy gone")?;
    let entries = after.nodes.iter().filter(|n| n.node == ENVOY).count();
    if now.last_nack.is_some() || now.acked_version != node.acked_version || entries != 1 {
        return Err(format!("Envoy's entry changed: {now:?}"));
    }
    Ok("PERMISSION_DENIED, counted (node_identity); Envoy's entry untouched".into())
}

pub fn xds_another_identitys_node_id(c: &mut Ctx) -> Fut<'_> {
    Box::pin(async move { under_envoys_node_id(c, false).await })
}

pub fn xds_forged_nack(c: &mut Ctx) -> Fut<'_> {
    Box::pin(async move { under_envoys_node_id(c, true).await })
}
