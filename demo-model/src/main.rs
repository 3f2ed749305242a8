//! `ferry-demo-model`: the echoing stand-in model server (see the library docs).

use std::net::SocketAddr;

use clap::Parser;

/// A stand-in model server: answers every request with the request it received.
#[derive(Debug, Parser)]
#[command(name = "ferry-demo-model", version)]
struct Args {
    /// Address to listen on.
    #[arg(
        long,
        env = "FERRY_DEMO_MODEL_LISTEN",
        default_value = "127.0.0.1:8080"
    )]
    listen: SocketAddr,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    ferry_http_serve::logging::init(ferry_http_serve::logging::LogTo::Stdout);
    let args = Args::parse();
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .map_err(|e| anyhow::anyhow!("cannot listen on {}: {e}", args.listen))?;
    tracing::info!(listen = %listener.local_addr()?, "ferry demo model listening");
    ferry_demo_model::serve(listener, async {
        let _ = tokio::signal::ctrl_c().await;
    })
    .await;
    Ok(())
}

#[cfg(test)]
mod tests {
    /// docs/cli.md's table of `ferry-demo-model` is clap's own definition of it.
    #[test]
    fn the_cli_page_lists_every_flag_with_its_default() {
        use clap::CommandFactory;
        ferry_test_support::docs::check_block(
            "docs/cli.md",
            "ferry-demo-model",
            &ferry_test_support::docs::cli_table(&super::Args::command()),
        );
    }

    /// docs/environment.md's tables of the model's port and variable.
    #[test]
    fn the_ports_and_environment_pages_hold_every_default_port_and_variable() {
        use clap::CommandFactory;
        use ferry_test_support::docs::{check_block, env_table, ports_table};
        let cmd = super::Args::command();
        let (docs, name) = ("docs/environment.md", "ferry-demo-model");
        check_block(docs, "ports: ferry-demo-model", &ports_table(name, &cmd));
        check_block(
            docs,
            "environment: ferry-demo-model",
            &env_table(name, &cmd),
        );
    }
}
