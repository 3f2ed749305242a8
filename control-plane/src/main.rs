//! The `ferry` command line: parses the arguments and hands each subcommand to its file under
//! `cli/`; errors become one message on stderr and exit code 1.

mod cli;

use std::process::ExitCode;

use anyhow::Result;
use clap::{Parser, Subcommand};

/// Ferry: feature vectors injected into ML inference requests by Envoy.
#[derive(Parser)]
#[command(name = "ferry", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Validate a feature repo and print its snapshot: services, fingerprints, views, routes.
    ///
    /// With --push, the snapshot is sent to a running control plane (`ferry serve`), which
    /// hands it to every Envoy. With --materialize too, the services whose fingerprint the
    /// control plane does not serve yet are materialized first: the zero-downtime schema change.
    Apply(cli::apply::ApplyArgs),
    /// Run the control plane: serve the repo's snapshot to Envoy over xDS (ADS and ECDS),
    /// follow repo changes and pushes, and answer /status, /metrics and pushes over HTTP.
    Serve(cli::serve::ServeArgs),
    /// Write one vector per entity per FeatureService from the views' sources into Redis.
    Materialize(cli::materialize::MaterializeArgs),
    /// Write one view's rows from a file (Parquet, CSV or JSON lines) into Redis through the
    /// write path of /push: the whole file is checked first (a bad row writes nothing), then
    /// written under the merge rule (an older row never replaces a newer one).
    Backfill(cli::backfill::BackfillArgs),
    /// Render a static Envoy bootstrap with the ferry filter and this repo's snapshot.
    EnvoyConfig(cli::envoy_config::EnvoyConfigArgs),
    /// Print the filter's configuration as JSON, for Istio's WasmPlugin or Envoy Gateway's
    /// EnvoyExtensionPolicy (`pluginConfig`); the filter then runs without
    /// allow_on_headers_stop_iteration (docs/kubernetes.md).
    PluginConfig(cli::plugin_config::PluginConfigArgs),
    /// Write the filter's .wasm as an OCI image layout (Wasm image spec, compat variant: one
    /// tar+gzip layer holding plugin.wasm), for Istio's WasmPlugin and Envoy Gateway to pull
    /// once copied to a registry (e.g. `skopeo copy oci:DIR:TAG docker://REGISTRY/NAME:TAG`).
    OciImage(cli::oci_image::OciImageArgs),
    /// Make an Ed25519 key pair for signed snapshots: the private key (PKCS#8 PEM) into --out
    /// for `ferry serve --signing-key`, the public key printed as the filter's
    /// `snapshot_keys` entry (`{"id": ..., "ed25519": ...}`).
    Keygen(cli::keygen::KeygenArgs),
    /// Receive served-feature records from Envoy's gRPC access-log service (routes with
    /// `log:`) and write them as Parquet files in Feast's feature-logging layout, partitioned
    /// by FeatureService and date.
    LogSink(cli::log_sink::LogSinkArgs),
}

fn main() -> ExitCode {
    match run(Cli::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> Result<()> {
    match cli.command {
        Command::Apply(args) => cli::apply::run(args),
        Command::Serve(args) => cli::serve::run(args),
        Command::Materialize(args) => cli::materialize::run(args),
        Command::Backfill(args) => cli::backfill::run(args),
        Command::EnvoyConfig(args) => cli::envoy_config::run(args),
        Command::OciImage(args) => cli::oci_image::run(args),
        Command::PluginConfig(args) => cli::plugin_config::run(args),
        Command::Keygen(args) => cli::keygen::run(args),
        Command::LogSink(args) => cli::log_sink::run(args),
    }
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    /// docs/cli.md's table of each subcommand is clap's own definition of it: a flag, a
    /// default or an environment variable changed here and not there fails.
    #[test]
    fn the_cli_page_lists_every_flag_with_its_default() {
        let cli = super::Cli::command();
        for sub in cli.get_subcommands() {
            let name = format!("ferry {}", sub.get_name());
            ferry_test_support::docs::check_block(
                "docs/cli.md",
                &name,
                &ferry_test_support::docs::cli_table(sub),
            );
        }
    }

    /// docs/cli.md's prose, where it states a default (`[--max-streams 16384]`, `--flag`
    /// (default N)), states clap's.
    #[test]
    fn the_cli_page_prose_states_the_defaults_clap_has() {
        let cli = super::Cli::command();
        let mut wrong = Vec::new();
        for sub in cli.get_subcommands() {
            let title = format!("ferry {}", sub.get_name());
            wrong.extend(ferry_test_support::docs::prose_defaults(
                "docs/cli.md",
                &title,
                sub,
            ));
        }
        assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    }

    /// The other chapters' `--flag` (default N), against the defaults of the commands that
    /// have the flag (ferry's and the reader's).
    #[test]
    fn the_chapters_state_the_defaults_clap_has() {
        use clap::CommandFactory;
        let cmds = [
            super::Cli::command(),
            ferry_reader::config::Config::command(),
        ];
        let wrong = ferry_test_support::docs::chapter_defaults(&cmds);
        assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    }

    /// docs/environment.md's tables of ports and variables: clap's defaults and `env`s.
    #[test]
    fn the_ports_and_environment_pages_hold_every_default_port_and_variable() {
        let cli = super::Cli::command();
        let docs = "docs/environment.md";
        let ports = ferry_test_support::docs::ports_table("ferry", &cli);
        ferry_test_support::docs::check_block(docs, "ports: ferry", &ports);
        let env = ferry_test_support::docs::env_table("ferry", &cli);
        ferry_test_support::docs::check_block(docs, "environment: ferry", &env);
    }
}
