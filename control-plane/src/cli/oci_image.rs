//! `ferry oci-image`: the filter's .wasm as an OCI image layout.

use std::path::PathBuf;

use anyhow::Result;

#[derive(clap::Args)]
pub struct OciImageArgs {
    /// The built filter.
    #[arg(long, default_value = "target/wasm32-wasip1/release/ferry_filter.wasm")]
    wasm: PathBuf,
    /// The image layout's directory.
    #[arg(short, long, default_value = "target/oci/ferry-filter")]
    output: PathBuf,
    /// The manifest's tag in index.json.
    #[arg(long, default_value = env!("CARGO_PKG_VERSION"))]
    tag: String,
}

pub fn run(args: OciImageArgs) -> Result<()> {
    let image = ferry::oci::write_image(&args.wasm, &args.output, &args.tag)?;
    println!(
        "wrote {} ({}:{}, manifest {}, plugin.wasm sha256:{}, layer {} bytes)",
        args.output.display(),
        args.output.display(),
        args.tag,
        image.manifest_digest,
        image.wasm_sha256,
        image.layer_size
    );
    Ok(())
}
