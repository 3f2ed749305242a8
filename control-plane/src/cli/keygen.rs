//! `ferry keygen`: a new Ed25519 key pair for signed snapshots. The private key (PKCS#8 PEM) is
//! written to `--out` for `ferry serve --signing-key`; the public key is printed as the entry of
//! the filter's `snapshot_keys` (`ferry plugin-config --snapshot-key` takes the file or the
//! base64 too).

use std::io::Write as _;
use std::path::PathBuf;

use anyhow::{Context as _, Result};
use ferry::serve::signing;

#[derive(clap::Args)]
pub struct KeygenArgs {
    /// Where to write the private key (created; an existing file is not overwritten).
    #[arg(long, value_name = "FILE")]
    out: PathBuf,
}

pub fn run(args: KeygenArgs) -> Result<()> {
    let (key, pem) = signing::generate()?;
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let mut file = options
        .open(&args.out)
        .with_context(|| format!("creating {}", args.out.display()))?;
    file.write_all(pem.as_bytes())
        .and_then(|()| file.sync_all())
        .with_context(|| format!("writing {}", args.out.display()))?;
    let public = key.verifying_key();
    println!(
        "{}",
        signing::plugin_key(&signing::key_id(&public), &public)
    );
    Ok(())
}
