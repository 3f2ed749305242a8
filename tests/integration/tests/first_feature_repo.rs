//! docs/first-feature-repo.md, run as written (`ferry_integration_tests::book`): from a CSV file
//! to an enriched request, on the binaries `make test` built (`target/release` in the chapter is
//! a link to them), the chapter's ports moved to free ones.

use ferry_integration_tests::{bin, book, envoy_bin, wasm};

#[test]
fn the_first_feature_repo_chapter_runs_as_written_and_enriches_the_request() {
    let debug = bin("ferry").parent().unwrap().to_path_buf();
    let wasm_dir = wasm().parent().unwrap().parent().unwrap().to_path_buf();
    let printed = book::run_chapter(
        "docs/first-feature-repo.md",
        &[6379, 8090, 8080, 18000, 8091, 10000, 9901],
        &[
            ("target/release", debug),
            ("target/wasm32-wasip1", wasm_dir),
            (".venv/bin/envoy", envoy_bin()),
        ],
    );
    assert_eq!(printed.len(), 1, "the chapter shows one answer");
    assert_eq!(
        printed[0]["instances"][0]["users__age"], 35,
        "the request was not enriched: {}",
        printed[0]
    );
}
