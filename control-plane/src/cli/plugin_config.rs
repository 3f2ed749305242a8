//! `ferry plugin-config`: the filter's configuration as JSON, carried or pulled.

use std::path::PathBuf;

use anyhow::Result;
use ferry::envoy_config;
use ferry::envoy_config::plugin_pull::{plugin_config_pull_json, PullOptions};
use ferry::serve::signing;

use super::load;

#[derive(clap::Args)]
pub struct PluginConfigArgs {
    /// Feature repo folder (holding ferry.yaml).
    repo: PathBuf,
    /// The reader cluster's name in that Envoy (Istio: outbound|PORT||HOST), instead of the
    /// repo's.
    #[arg(long, value_name = "NAME")]
    reader_cluster: Option<String>,
    /// Have the filter pull the snapshot from this `ferry serve` URL
    /// (https://HOST:8091/v1/snapshot) instead of carrying it; needs --snapshot-cluster, and
    /// --snapshot-key (or --insecure).
    #[arg(long, value_name = "URL", requires = "snapshot_cluster")]
    snapshot_url: Option<String>,
    /// The Envoy cluster that reaches --snapshot-url (Istio: outbound|8091||HOST).
    #[arg(long, value_name = "NAME", requires = "snapshot_url")]
    snapshot_cluster: Option<String>,
    /// How often the filter checks --snapshot-url for a new version (default 5000).
    #[arg(long, value_name = "MS", requires = "snapshot_url")]
    snapshot_poll_ms: Option<u64>,
    /// The read token of that `ferry serve` (its --read-token), sent by the filter as a bearer.
    #[arg(
        long,
        value_name = "TOKEN",
        requires = "snapshot_url",
        env = "FERRY_READ_TOKEN",
        hide_env_values = true
    )]
    snapshot_token: Option<String>,
    /// A public key the pulled snapshots may be signed with (repeatable, for rotation):
    /// `[ID=]` then a key file (PEM, public or private) or the key as base64 (what `ferry
    /// keygen` prints). The id defaults to the one `ferry serve` derives from the key.
    #[arg(long, value_name = "[ID=]FILE_OR_B64", requires = "snapshot_url")]
    snapshot_key: Vec<String>,
    /// Let the filter pull over `http://`, and take unsigned snapshots when no --snapshot-key
    /// is given: for a cluster without TLS (tests, a demo), never across a network.
    #[arg(long, requires = "snapshot_url")]
    insecure: bool,
}

pub fn run(args: PluginConfigArgs) -> Result<()> {
    let reg = load(&args.repo)?;
    let reader = args.reader_cluster.as_deref();
    let json = match (&args.snapshot_url, &args.snapshot_cluster) {
        (Some(url), Some(cluster)) => {
            let keys = args
                .snapshot_key
                .iter()
                .map(|k| signing::public_key(k).map_err(|e| anyhow::anyhow!("--snapshot-key {e}")))
                .collect::<Result<Vec<_>>>()?;
            let opts = PullOptions {
                poll_ms: args.snapshot_poll_ms,
                token: args.snapshot_token.clone(),
                keys,
                insecure: args.insecure,
                reader_cluster: args.reader_cluster.clone(),
            };
            plugin_config_pull_json(url, cluster, &opts)?
        }
        _ => envoy_config::plugin_config_json(&reg, reader)?,
    };
    println!("{json}");
    Ok(())
}
