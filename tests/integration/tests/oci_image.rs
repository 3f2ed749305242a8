//! `ferry oci-image`: the filter as an OCI image layout, checked with tools other than the
//! code that wrote it (`sha256sum`, `gzip`, `tar`, and skopeo, which verifies every digest
//! while it copies): each descriptor's digest and size match its blob, the media types are the
//! Wasm image spec's compat variant, and the `plugin.wasm` in the layer is the built filter,
//! byte for byte. No registry here: what Istio or Envoy Gateway pull from one is not run.

use std::path::Path;
use std::process::Command;

use ferry_integration_tests::{bin, run, wasm};
use serde_json::Value as Json;

fn sha256sum(path: &Path) -> String {
    let out = run(Command::new("sha256sum").arg(path));
    out.split_whitespace().next().unwrap().to_owned()
}

fn read_json(path: &Path) -> Json {
    let text = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_slice(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The blob a descriptor names, checked against its digest and size.
fn blob(layout: &Path, desc: &Json, media_type: &str) -> std::path::PathBuf {
    assert_eq!(desc["mediaType"], media_type, "{desc}");
    let digest = desc["digest"].as_str().unwrap();
    let hex = digest
        .strip_prefix("sha256:")
        .unwrap_or_else(|| panic!("{digest}"));
    let path = layout.join("blobs/sha256").join(hex);
    assert_eq!(sha256sum(&path), hex, "{}", path.display());
    let size = std::fs::metadata(&path).unwrap().len();
    assert_eq!(desc["size"].as_u64(), Some(size), "{desc}");
    path
}

#[test]
fn the_oci_image_layout_holds_the_built_filter_as_the_compat_variant() {
    let dir = tempfile::tempdir().unwrap();
    let layout = dir.path().join("ferry-filter");
    let out = run(Command::new(bin("ferry"))
        .arg("oci-image")
        .arg("--wasm")
        .arg(wasm())
        .arg("-o")
        .arg(&layout)
        .args(["--tag", "test"]));
    assert!(out.contains("manifest sha256:"), "{out}");

    assert_eq!(
        read_json(&layout.join("oci-layout")),
        serde_json::json!({"imageLayoutVersion": "1.0.0"})
    );
    let index = read_json(&layout.join("index.json"));
    assert_eq!(index["schemaVersion"], 2);
    assert_eq!(
        index["mediaType"],
        "application/vnd.oci.image.index.v1+json"
    );
    let manifests = index["manifests"].as_array().unwrap();
    assert_eq!(manifests.len(), 1);
    assert_eq!(
        manifests[0]["annotations"]["org.opencontainers.image.ref.name"],
        "test"
    );
    let manifest_path = blob(
        &layout,
        &manifests[0],
        "application/vnd.oci.image.manifest.v1+json",
    );
    let manifest = read_json(&manifest_path);
    assert_eq!(manifest["schemaVersion"], 2);
    assert_eq!(
        manifest["annotations"]["module.wasm.image/variant"],
        "compat"
    );
    let config = read_json(&blob(
        &layout,
        &manifest["config"],
        "application/vnd.oci.image.config.v1+json",
    ));
    let layers = manifest["layers"].as_array().unwrap();
    assert_eq!(layers.len(), 1, "the compat variant has exactly one layer");
    let layer = blob(
        &layout,
        &layers[0],
        "application/vnd.oci.image.layer.v1.tar+gzip",
    );

    // The config's diff id is the digest of the uncompressed layer.
    let tar = dir.path().join("layer.tar");
    let plain = Command::new("gzip")
        .arg("-dc")
        .arg(&layer)
        .output()
        .unwrap();
    assert!(plain.status.success());
    std::fs::write(&tar, &plain.stdout).unwrap();
    assert_eq!(
        config["rootfs"]["diff_ids"][0],
        format!("sha256:{}", sha256sum(&tar))
    );
    assert_eq!(config["rootfs"]["type"], "layers");

    // The layer holds plugin.wasm only: the built filter, byte for byte.
    let listing = run(Command::new("tar").arg("-tf").arg(&tar));
    assert_eq!(listing.trim(), "plugin.wasm");
    let unpacked = dir.path().join("unpacked");
    std::fs::create_dir(&unpacked).unwrap();
    run(Command::new("tar")
        .arg("-xf")
        .arg(&tar)
        .arg("-C")
        .arg(&unpacked));
    let built = std::fs::read(wasm()).unwrap();
    assert!(std::fs::read(unpacked.join("plugin.wasm")).unwrap() == built);

    // skopeo reads the layout by its tag and verifies every blob's digest while copying.
    let copy = dir.path().join("copy");
    run(Command::new("skopeo")
        .arg("copy")
        .arg(format!("oci:{}:test", layout.display()))
        .arg(format!("dir:{}", copy.display())));
    let layer_hex = layers[0]["digest"]
        .as_str()
        .unwrap()
        .trim_start_matches("sha256:");
    assert!(std::fs::read(copy.join(layer_hex)).unwrap() == std::fs::read(&layer).unwrap());
}

#[test]
fn a_file_that_is_not_a_wasm_module_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("x.wasm");
    std::fs::write(&bad, "not wasm").unwrap();
    let out = Command::new(bin("ferry"))
        .arg("oci-image")
        .arg("--wasm")
        .arg(&bad)
        .arg("-o")
        .arg(dir.path().join("img"))
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("is not a WebAssembly module"), "{err}");
    assert!(!dir.path().join("img").exists(), "nothing written");
}
