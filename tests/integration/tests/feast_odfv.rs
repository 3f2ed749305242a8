//! A Feast on-demand feature view computed two ways over the same data: by Feast itself (its
//! `python` mode, `feast_repo_odfv/features.py`, through `get_online_features` with the request
//! data in the entity rows) and by Ferry inside a real Envoy from the CEL `ferry.yaml` gives for
//! it (a `feast_rest` route, asked with the JSON Feast's REST server takes). Feast applies and
//! materializes the repo into Redis; Ferry reads Feast's registry and Redis in place. Every value
//! and status is compared; where the languages differ on purpose (integer division and modulo of
//! a negative number; the status of a feature computed from a null or missing input) the
//! documented difference is asserted.

use std::process::Command;

use ferry_integration_tests::feast::{feature_names, fixture_named, FeastStack};
use ferry_integration_tests::http::post;
use ferry_integration_tests::{bin, run};
use serde_json::{json, Value as Json};

/// The `feast:` block of `ferry.yaml`: the CEL of each feature of Feast's `txn_features`.
const FEAST_YAML: &str = "feast:
  repo: ../feast
  on_demand:
    - view: txn_features
      features:
        - {name: amount_ratio, expr: \"request.amount / user_stats.avg_amount\"}
        - {name: big_spender, expr: \"request.amount > 100.0\"}
        - {name: delta_per_txn, expr: \"request.delta / user_stats.txn_count\"}
        - {name: delta_mod_txn, expr: \"request.delta % user_stats.txn_count\"}
        - name: delta_per_txn_floor
          expr: \"request.delta / user_stats.txn_count - (request.delta % user_stats.txn_count < 0 ? 1 : 0)\"
        - name: delta_mod_txn_floor
          expr: \"(request.delta % user_stats.txn_count + user_stats.txn_count) % user_stats.txn_count\"
";

const ROUTES: &str = "  - match: {path_exact: /get-online-features}
    service: txn_scoring
    format: feast_rest
    entity: {field: user_id}
    on_missing_entity: null
";

/// Entity rows with their request data. u1: a negative delta that Python floors and CEL
/// truncates; u2: positive inputs, where both agree; u3: a null `avg_amount` (and a negative
/// delta); `nobody`: an unknown entity, whose stored inputs are missing.
fn rows() -> Json {
    json!([
        {"user_id": "u1", "amount": 250.5, "delta": -7},
        {"user_id": "u2", "amount": 12.25, "delta": 9},
        {"user_id": "u3", "amount": 50.75, "delta": -1},
        {"user_id": "nobody", "amount": 1.5, "delta": 1},
    ])
}

/// The stored features each on-demand feature reads (the CEL above and the Python alike).
fn stored_inputs(feature: &str) -> &'static [&'static str] {
    match feature {
        "amount_ratio" => &["avg_amount"],
        "delta_per_txn" | "delta_mod_txn" | "delta_per_txn_floor" | "delta_mod_txn_floor" => {
            &["txn_count"]
        }
        _ => &[],
    }
}

/// Feast's answer by name: (values, statuses) per column.
struct Feast(Json);

impl Feast {
    fn column(&self, name: &str) -> usize {
        let names = self.0["names"].as_array().expect("names");
        names
            .iter()
            .position(|n| n == name)
            .unwrap_or_else(|| panic!("Feast has no column {name}: {names:?}"))
    }

    fn value(&self, name: &str, i: usize) -> &Json {
        &self.0["values"][self.column(name)][i]
    }

    fn present(&self, name: &str, i: usize) -> bool {
        self.0["event_seconds"][self.column(name)][i].as_i64() != Some(0)
    }
}

/// The status Ferry must give a stored feature: Feast's event time says whether the row
/// exists (Feast 0.67 says PRESENT for an unknown entity and a null value).
fn stored_status(feast: &Feast, name: &str, i: usize) -> &'static str {
    if !feast.present(name, i) {
        "NOT_FOUND"
    } else if feast.value(name, i).is_null() {
        "NULL_VALUE"
    } else {
        "PRESENT"
    }
}

/// The status Ferry must give a derived feature: its first absent stored input's, else
/// PRESENT (Feast says PRESENT for every on-demand value, null or not).
fn derived_status(feast: &Feast, feature: &str, i: usize) -> &'static str {
    stored_inputs(feature)
        .iter()
        .map(|input| stored_status(feast, input, i))
        .find(|s| *s != "PRESENT")
        .unwrap_or("PRESENT")
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * a.abs().max(b.abs())
}

/// Ferry's answer over the same rows, asked as Feast's REST client asks.
async fn ferry_answer(stack: &FeastStack) -> Json {
    let rows = rows();
    let column = |key: &str| -> Json {
        rows.as_array()
            .unwrap()
            .iter()
            .map(|r| r[key].clone())
            .collect()
    };
    let body = json!({
        "feature_service": "txn_scoring",
        "entities": {"user_id": column("user_id"), "amount": column("amount"), "delta": column("delta")},
        "full_feature_names": false,
    });
    let resp = post(stack.listen_port, "/get-online-features", body.to_string()).await;
    assert_eq!(resp.status, 200, "{}", String::from_utf8_lossy(&resp.body));
    resp.json()
}

/// One integer feature: Feast's value is Python's (floor), Ferry's CEL's (truncation). Both are
/// checked against the inputs; returns whether they differ for this row.
fn integer_division(name: &str, feast: &Json, ferry: &Json, delta: i64, count: i64) -> bool {
    let (python, cel) = match name {
        "delta_per_txn" => (delta.div_euclid(count), delta / count),
        _ => (delta.rem_euclid(count), delta % count),
    };
    assert_eq!(
        feast.as_i64(),
        Some(python),
        "{name}: Feast floors ({delta}, {count})"
    );
    assert_eq!(
        ferry.as_i64(),
        Some(cel),
        "{name}: Ferry truncates ({delta}, {count})"
    );
    python != cel
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ferrys_cel_and_feasts_python_odfv_give_the_same_features() {
    let stack = FeastStack::start_fixture(&fixture_named("feast_repo_odfv"), FEAST_YAML, ROUTES);
    let rows = rows();
    // Short names: Feast 0.67 drops a python-mode ODFV's outputs under full feature names.
    let feast = Feast(stack.feast_online_named("txn_scoring", &rows, false));
    let got = ferry_answer(&stack).await;
    let names = feature_names(&got);
    let feast_names: Vec<&str> = feast.0["names"]
        .as_array()
        .expect("names")
        .iter()
        .map(|n| n.as_str().expect("name"))
        .collect();
    let mut sorted = (names.clone(), feast_names.clone());
    sorted.0.sort_unstable();
    sorted.1.sort_unstable();
    assert_eq!(
        sorted.0, sorted.1,
        "the same columns (Ferry's order is its own)"
    );

    let (mut compared, mut differ) = (0, 0);
    for (col, name) in names.iter().enumerate().filter(|(_, n)| **n != "user_id") {
        let derived = !["avg_amount", "txn_count"].contains(name);
        for (i, row) in rows.as_array().expect("rows").iter().enumerate() {
            let at = format!("{name} of {row}");
            let ferry_value = &got["results"][col]["values"][i];
            let ferry_status = got["results"][col]["statuses"][i].as_str().expect("status");
            let feast_value = feast.value(name, i);
            let expected = if derived {
                derived_status(&feast, name, i)
            } else {
                stored_status(&feast, name, i)
            };
            assert_eq!(ferry_status, expected, "{at}: Ferry {ferry_value}");
            if derived {
                let feast_status = &feast.0["statuses"][feast.column(name)][i];
                assert_eq!(
                    feast_status, 1,
                    "{at}: Feast says PRESENT for on-demand values"
                );
            }
            let int_division = ["delta_per_txn", "delta_mod_txn"].contains(name);
            match (feast_value.as_f64(), ferry_value.as_f64()) {
                _ if int_division && !feast_value.is_null() => {
                    let delta = row["delta"].as_i64().expect("delta");
                    let count = feast.value("txn_count", i).as_i64().expect("count");
                    if integer_division(name, feast_value, ferry_value, delta, count) {
                        differ += 1;
                    }
                }
                (Some(a), Some(b)) => assert!(close(a, b), "{at}: Feast {a} vs Ferry {b}"),
                _ => assert_eq!(ferry_value, feast_value, "{at}"),
            }
            if expected != "PRESENT" {
                assert!(ferry_value.is_null(), "{at}: an absent input gives null");
            }
            compared += 1;
        }
    }
    assert_eq!(compared, 8 * 4, "every value of every feature and entity");
    // u1 (-7 by 3) and u3 (-1 by 2): Python's -3, 2 and -1, 1 against CEL's -2, -1 and 0, -1;
    // the `_floor` features, CEL written to floor, equal Python's everywhere (compared above).
    assert_eq!(
        differ, 4,
        "the documented integer division and modulo differences"
    );
    // The null input and the unknown entity, as the issue asks.
    assert_eq!(feast.value("amount_ratio", 2), &Json::Null);
    assert_eq!(derived_status(&feast, "amount_ratio", 2), "NULL_VALUE");
    assert_eq!(derived_status(&feast, "amount_ratio", 3), "NOT_FOUND");
    refused_without_cel(&stack);
}

/// `ferry apply` on Feast's own registry of the fixture, with no CEL for one feature of the
/// ODFV the service lists (a copy of the Ferry repo beside the one `ferry serve` watches).
fn refused_without_cel(stack: &FeastStack) {
    let text = std::fs::read_to_string(stack.repo.join("ferry.yaml")).expect("ferry.yaml");
    let repo = stack.dir.path().join("refused");
    std::fs::create_dir_all(&repo).expect("repo dir");
    let kept: Vec<&str> = text
        .lines()
        .filter(|l| !l.contains("{name: delta_mod_txn,"))
        .collect();
    std::fs::write(repo.join("ferry.yaml"), kept.join("\n") + "\n").expect("ferry.yaml");
    let out = Command::new(bin("ferry"))
        .arg("apply")
        .arg(&repo)
        .output()
        .expect("ferry apply");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains(
            "feast feature service 'txn_scoring': feature view 'txn_features': on-demand \
             feature view without CEL for delta_mod_txn: Feast's transformation cannot run in \
             Envoy; give its CEL in ferry.yaml"
        ),
        "{stderr}"
    );
    // With the CEL, the same registry applies.
    std::fs::write(repo.join("ferry.yaml"), text).expect("ferry.yaml");
    run(Command::new(bin("ferry")).arg("apply").arg(&repo));
}
