//! docs/coming-from-feast.md's migration steps, run as written (`ferry_integration_tests::book`)
//! with the example's Feast repo standing in for the user's: Feast 0.67 (`FERRY_FEAST_VENV`)
//! applies and materializes it into Redis, and Ferry serves it through Envoy until a model
//! request comes back enriched from Feast's data.

use ferry_integration_tests::feast::feast_venv;
use ferry_integration_tests::{bin, book, envoy_bin, root, wasm};

#[test]
fn the_coming_from_feast_steps_run_as_written_and_enrich_from_feasts_redis() {
    let debug = bin("ferry").parent().unwrap().to_path_buf();
    let wasm_dir = wasm().parent().unwrap().parent().unwrap().to_path_buf();
    let printed = book::run_chapter(
        "docs/coming-from-feast.md",
        &[6379, 8090, 8080, 18000, 8091, 10000, 9901],
        &[
            ("target/release", debug),
            ("target/wasm32-wasip1", wasm_dir),
            (".venv/bin/envoy", envoy_bin()),
            (".venv-feast", feast_venv()),
            ("examples", root().join("examples")),
        ],
    );
    assert_eq!(printed.len(), 1, "the chapter shows one answer");
    let first = &printed[0]["instances"][0];
    assert!(
        first.get("user_profile__age").is_some_and(|a| a.is_i64()),
        "the request was not enriched from Feast's data: {}",
        printed[0]
    );
}
