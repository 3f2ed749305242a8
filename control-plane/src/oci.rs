//! `ferry oci-image`: the filter's `.wasm` as an OCI image layout on disk (`oci-layout`,
//! `index.json`, `blobs/sha256/...`), which Istio (`WasmPlugin.spec.url: oci://...`) and Envoy
//! Gateway (EnvoyExtensionPolicy `wasm.code.image`) pull once it is copied to a registry
//! (e.g. `skopeo copy oci:DIR:TAG docker://REGISTRY/ferry-filter:TAG`, or `crane push DIR`).
//!
//! The image follows the Wasm image specification's *compat* variant, which both accept: one
//! `tar+gzip` layer holding `plugin.wasm`, a standard image config, and the manifest annotation
//! `module.wasm.image/variant: compat`. Standard media types, so any registry and tool takes
//! it. The bytes are reproducible: the same `.wasm` gives the same digests (tar entry times,
//! owners and the gzip header's time are fixed).

use std::io::Write;
use std::path::Path;

use anyhow::{Context as _, Result};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

pub const MANIFEST_MEDIA_TYPE: &str = "application/vnd.oci.image.manifest.v1+json";
pub const INDEX_MEDIA_TYPE: &str = "application/vnd.oci.image.index.v1+json";
pub const CONFIG_MEDIA_TYPE: &str = "application/vnd.oci.image.config.v1+json";
pub const LAYER_MEDIA_TYPE: &str = "application/vnd.oci.image.layer.v1.tar+gzip";
/// The compat variant's manifest annotation.
pub const VARIANT_ANNOTATION: (&str, &str) = ("module.wasm.image/variant", "compat");
/// The file the layer holds, the name Istio and Envoy Gateway look for.
pub const WASM_FILE: &str = "plugin.wasm";
/// The tag `index.json` gives the manifest (`org.opencontainers.image.ref.name`).
const REF_NAME: &str = "org.opencontainers.image.ref.name";

/// What was written.
#[derive(Debug)]
pub struct Image {
    /// `sha256:...` of the manifest: the image's digest (`oci://...@sha256:...`).
    pub manifest_digest: String,
    pub wasm_sha256: String,
    pub layer_size: usize,
}

/// Writes the image of `wasm` into the directory `out` (created; blobs already there are
/// left, the index replaced), its manifest tagged `tag`.
pub fn write_image(wasm: &Path, out: &Path, tag: &str) -> Result<Image> {
    let module = std::fs::read(wasm).with_context(|| format!("reading {}", wasm.display()))?;
    anyhow::ensure!(
        module.starts_with(b"\0asm"),
        "{} is not a WebAssembly module (no \\0asm header)",
        wasm.display()
    );
    let tar = layer_tar(&module)?;
    let layer = gzip(&tar)?;
    let config = json!({
        "architecture": "wasm",
        "os": "wasip1",
        "config": {},
        "rootfs": {"type": "layers", "diff_ids": [digest(&tar)]},
    });
    let config = serde_json::to_vec(&config)?;
    let manifest = json!({
        "schemaVersion": 2,
        "mediaType": MANIFEST_MEDIA_TYPE,
        "config": descriptor(CONFIG_MEDIA_TYPE, &config),
        "layers": [descriptor(LAYER_MEDIA_TYPE, &layer)],
        "annotations": {VARIANT_ANNOTATION.0: VARIANT_ANNOTATION.1},
    });
    let manifest = serde_json::to_vec(&manifest)?;
    let mut entry = descriptor(MANIFEST_MEDIA_TYPE, &manifest);
    entry["annotations"] = json!({ REF_NAME: tag });
    let index = json!({
        "schemaVersion": 2,
        "mediaType": INDEX_MEDIA_TYPE,
        "manifests": [entry],
    });

    let blobs = out.join("blobs").join("sha256");
    std::fs::create_dir_all(&blobs).with_context(|| format!("creating {}", blobs.display()))?;
    for blob in [&layer, &config, &manifest] {
        let name = hex(blob);
        write(&blobs.join(name), blob)?;
    }
    write(
        &out.join("oci-layout"),
        br#"{"imageLayoutVersion":"1.0.0"}"#,
    )?;
    write(&out.join("index.json"), &serde_json::to_vec(&index)?)?;
    Ok(Image {
        manifest_digest: digest(&manifest),
        wasm_sha256: hex(&module),
        layer_size: layer.len(),
    })
}

/// A tar holding only `plugin.wasm`, with fixed metadata.
fn layer_tar(module: &[u8]) -> Result<Vec<u8>> {
    let mut header = tar::Header::new_ustar();
    header.set_size(u64::try_from(module.len())?);
    header.set_mode(0o644);
    header.set_uid(0);
    header.set_gid(0);
    header.set_mtime(0);
    header.set_entry_type(tar::EntryType::Regular);
    let mut builder = tar::Builder::new(Vec::new());
    builder.append_data(&mut header, WASM_FILE, module)?;
    Ok(builder.into_inner()?)
}

fn gzip(data: &[u8]) -> Result<Vec<u8>> {
    // GzBuilder's header has mtime 0 and no file name unless asked: reproducible.
    let mut enc = flate2::GzBuilder::new().write(Vec::new(), flate2::Compression::best());
    enc.write_all(data)?;
    Ok(enc.finish()?)
}

fn hex(data: &[u8]) -> String {
    Sha256::digest(data)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn digest(data: &[u8]) -> String {
    format!("sha256:{}", hex(data))
}

fn descriptor(media_type: &str, blob: &[u8]) -> Value {
    json!({"mediaType": media_type, "digest": digest(blob), "size": blob.len()})
}

fn write(path: &Path, bytes: &[u8]) -> Result<()> {
    std::fs::write(path, bytes).with_context(|| format!("writing {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_module_gives_the_same_digests_and_a_non_module_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let wasm = dir.path().join("f.wasm");
        std::fs::write(&wasm, b"\0asm\x01\0\0\0").unwrap();
        let a = write_image(&wasm, &dir.path().join("a"), "t").unwrap();
        let b = write_image(&wasm, &dir.path().join("b"), "t").unwrap();
        assert_eq!(a.manifest_digest, b.manifest_digest);
        assert_eq!(
            std::fs::read(dir.path().join("a/index.json")).unwrap(),
            std::fs::read(dir.path().join("b/index.json")).unwrap()
        );

        std::fs::write(&wasm, b"not wasm").unwrap();
        let err = write_image(&wasm, &dir.path().join("c"), "t").unwrap_err();
        assert!(
            err.to_string().contains("not a WebAssembly module"),
            "{err}"
        );
        let err = write_image(&dir.path().join("missing"), &dir.path().join("c"), "t");
        assert!(err.unwrap_err().to_string().contains("reading"));
    }
}
