//! Feast's SQL registry on a real PostgreSQL, written by Feast itself (`feast apply` with
//! `registry_type: sql`): `ferry apply` reads the same services and views from it as from the
//! file registry of the same Feast repo; a second `feast apply` reaches a running Envoy through
//! `ferry serve` (which polls the database) without a restart; a database that is down, a wrong
//! password or a bad URL give an error that names the registry (password hidden).

use std::time::Duration;

use ferry_integration_tests::feast::{FeastSetup, FeastStack};
use ferry_integration_tests::feast_registry::ROUTES;
use ferry_integration_tests::feast_registry::{applied_repo, blocks, ferry_apply, sql_registry};
use ferry_integration_tests::http::post;
use ferry_integration_tests::postgres::{Postgres, PASSWORD};
use ferry_test_support::redis::make_tls_files;
use serde_json::json;

#[test]
fn ferry_apply_reads_the_same_repo_from_feasts_sql_registry_as_from_its_file() {
    let pg = Postgres::start();
    let (file_dir, sql_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let from_file = ferry_apply(&applied_repo(file_dir.path(), "data/registry.db")).unwrap();
    let sql_repo = applied_repo(sql_dir.path(), &sql_registry(&pg.url()));
    assert!(
        !sql_dir.path().join("feast/data/registry.db").exists(),
        "Feast wrote a registry file: the SQL registry was not used"
    );
    let from_sql = ferry_apply(&sql_repo).unwrap();
    // Services with their fingerprints and views, and routes: the same. Only their order may
    // differ (the file lists services in Feast's order, the database by name), and with it the
    // snapshot's version.
    assert_eq!(blocks(&from_sql), blocks(&from_file));
    for service in ["scoring", "merchant_risk", "pair"] {
        assert!(from_sql.contains(service), "{service} missing: {from_sql}");
    }
}

#[test]
fn a_registry_that_cannot_be_read_is_an_error_naming_it() {
    let pg = Postgres::start();
    let dir = tempfile::tempdir().unwrap();
    let repo = applied_repo(dir.path(), &sql_registry(&pg.url()));
    let store = dir.path().join("feast/feature_store.yaml");
    let good = std::fs::read_to_string(&store).unwrap();
    let shown = format!(
        "feast registry postgresql+psycopg://ferry:***@127.0.0.1:{}/postgres",
        pg.port
    );

    // A wrong password: PostgreSQL's own refusal, the password never printed.
    std::fs::write(&store, good.replace(PASSWORD, "wrong-pw")).unwrap();
    let err = ferry_apply(&repo).unwrap_err();
    assert!(err.contains(&shown), "{err}");
    assert!(err.contains("password authentication failed"), "{err}");
    assert!(
        !err.contains("wrong-pw") && !err.contains(PASSWORD),
        "{err}"
    );

    // A database without Feast's tables.
    let other = pg.url().replace("/postgres?", "/template1?");
    std::fs::write(&store, good.replace(&pg.url(), &other)).unwrap();
    let err = ferry_apply(&repo).unwrap_err();
    assert!(err.contains("no Feast registry tables"), "{err}");

    // Not a URL Ferry can read.
    let mysql = good.replace("postgresql+psycopg://", "mysql+pymysql://");
    std::fs::write(&store, mysql).unwrap();
    let err = ferry_apply(&repo).unwrap_err();
    assert!(
        err.contains("the mysql SQL registry is not supported"),
        "{err}"
    );

    // The database down.
    std::fs::write(&store, &good).unwrap();
    assert!(ferry_apply(&repo).is_ok());
    pg.stop();
    let err = ferry_apply(&repo).unwrap_err();
    assert!(err.contains(&shown), "{err}");
    assert!(err.to_lowercase().contains("connection refused"), "{err}");
}

#[test]
fn the_sql_registry_is_read_over_tls_with_the_ca_from_the_url() {
    let dir = tempfile::tempdir().unwrap();
    let tls = make_tls_files(&dir.path().join("tls"));
    let pg = Postgres::start_tls(&tls);
    // Feast (psycopg) writes without checking the certificate; Ferry reads checking it.
    let feast_url = pg.url().replace("sslmode=disable", "sslmode=require");
    let repo = applied_repo(dir.path(), &sql_registry(&feast_url));
    let store = dir.path().join("feast/feature_store.yaml");
    let text = std::fs::read_to_string(&store).unwrap();
    let verify = |ca: &std::path::Path| {
        let url = feast_url.replace(
            "sslmode=require",
            &format!("sslmode=verify-full&sslrootcert={}", ca.display()),
        );
        std::fs::write(&store, text.replace(&feast_url, &url)).unwrap();
        ferry_apply(&repo)
    };
    let report = verify(&tls.ca_cert).unwrap();
    assert!(report.contains("feature service scoring"), "{report}");
    // Another CA: refused, and the error says why.
    let other = make_tls_files(&dir.path().join("other"));
    let err = verify(&other.ca_cert).unwrap_err();
    assert!(
        err.contains("feast registry postgresql+psycopg://"),
        "{err}"
    );
    assert!(err.to_lowercase().contains("certificate"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_feast_apply_into_postgres_reaches_envoy_through_ferry_serve() {
    let pg = Postgres::start();
    let registry = sql_registry(&pg.url());
    let setup = FeastSetup {
        registry: &registry,
        ..FeastSetup::default()
    };
    let stack = FeastStack::start_setup(ROUTES, setup);
    assert!(!stack.feast_repo.join("data/registry.db").exists());
    // Feast's second apply changes only rows in PostgreSQL: no file of the repo changes.
    let path = "/v1/models/scoring:predict";
    stack
        .a_feast_apply_adding_a_feature_reaches_envoy(path)
        .await;

    // The database going away is reported, and the last good snapshot keeps serving.
    let served = stack.control_plane.version();
    pg.stop();
    let status = stack
        .control_plane
        .wait_status("refused", Duration::from_secs(30), |s| {
            s.last_refused.is_some()
        });
    let refused = status.last_refused.unwrap().error;
    assert!(
        refused.contains("feast registry postgresql+psycopg://"),
        "{refused}"
    );
    assert_eq!(stack.control_plane.version(), served);
    let still = post(
        stack.listen_port,
        path,
        json!({"instances": [{"user_id": "u3"}]}).to_string(),
    )
    .await
    .json();
    assert_eq!(still["instances"][0]["user_profile__tier"], json!(3));
}
