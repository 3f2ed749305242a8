//! The sink's files: Feast's column layout read back, the partition path, the row and memory
//! bounds, and a directory that cannot be written.

use std::time::{Duration, Instant};

use ferry_protos::v1::{
    self as pb, value::Kind, FeatureStatus, FloatList, ServedInstance, ServedLog, ServedService,
    ValueType,
};
use parquet::file::reader::{FileReader, SerializedFileReader};
use parquet::record::Field;

use super::files::{partition, FileOptions, Files};
use super::metrics::{SinkMetrics, BUFFER_FULL, WRITE_ERROR};
use super::retention::RetentionOptions;

/// 2026-11-26T10:00:00Z.
const T: i64 = 1_795_687_200_000_000;

fn log(id: &str, users: &[&str]) -> ServedLog {
    let v = |k: Option<Kind>| pb::Value { kind: k };
    ServedLog {
        request_id: id.into(),
        time_us: T,
        route: "fraud".into(),
        status: "partial".into(),
        services: vec![ServedService {
            name: "scoring".into(),
            fingerprint: 0x1234,
            derived_version: "dv1".into(),
            join_keys: vec!["user_id".into()],
            join_key_types: vec![ValueType::String as i32],
            feature_names: vec!["p__age".into(), "p__emb".into(), "p__name".into()],
            feature_types: vec![
                ValueType::Int64 as i32,
                ValueType::Float32List as i32,
                ValueType::String as i32,
            ],
            instances: users
                .iter()
                .enumerate()
                .map(|(i, u)| ServedInstance {
                    entity_values: vec![(*u).into()],
                    values: if i == 0 {
                        vec![
                            v(Some(Kind::Int64Val(41))),
                            v(Some(Kind::FloatListVal(FloatList {
                                values: vec![0.5, 1.5],
                            }))),
                            v(Some(Kind::StringVal("ann".into()))),
                        ]
                    } else {
                        vec![v(None), v(None), v(None)]
                    },
                    statuses: if i == 0 {
                        vec![FeatureStatus::Present as i32; 3]
                    } else {
                        vec![FeatureStatus::NotFound as i32; 3]
                    },
                    event_times_us: vec![if i == 0 { T - 5 } else { 0 }; 3],
                })
                .collect(),
        }],
    }
}

fn options(dir: &std::path::Path) -> FileOptions {
    FileOptions {
        dir: dir.to_path_buf(),
        window: Duration::from_secs(3600),
        max_rows: 1000,
        max_buffered_rows: 1000,
        error_log_interval: Duration::from_secs(60),
        retention: RetentionOptions::default(),
    }
}

fn parquet_files(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in walk(dir) {
        if e.extension().is_some_and(|x| x == "parquet") {
            out.push(e);
        }
    }
    out
}

fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}

#[test]
fn a_file_holds_feast_s_columns_in_order_with_every_value() {
    let dir = tempfile::tempdir().unwrap();
    let metrics = SinkMetrics::new();
    let mut files = Files::new(options(dir.path()), metrics.clone());
    files.add(log("r1", &["u1", "u2"]));
    assert!(parquet_files(dir.path()).is_empty(), "the window is open");
    files.write_due(Instant::now() + Duration::from_secs(3601));
    let written = parquet_files(dir.path());
    assert_eq!(written.len(), 1);
    assert_eq!(
        written[0].parent().unwrap(),
        partition(dir.path(), "scoring", 20_783)
    );
    assert!(written[0]
        .parent()
        .unwrap()
        .ends_with("scoring/log_date=2026-11-26"));
    assert_eq!(walk(dir.path()).len(), 1, "no temporary file left");
    assert_eq!(metrics.written.get(), 2);
    assert_eq!(metrics.files.get(), 1);

    let reader = SerializedFileReader::new(std::fs::File::open(&written[0]).unwrap()).unwrap();
    let names: Vec<String> = reader
        .metadata()
        .file_metadata()
        .schema()
        .get_fields()
        .iter()
        .map(|f| f.name().to_owned())
        .collect();
    assert_eq!(
        names,
        [
            "user_id",
            "p__age",
            "p__age__timestamp",
            "p__age__status",
            "p__emb",
            "p__emb__timestamp",
            "p__emb__status",
            "p__name",
            "p__name__timestamp",
            "p__name__status",
            "__log_timestamp",
            "__log_date",
            "__request_id",
            "__route",
            "__fingerprint",
            "__derived_version",
            "__request_status",
        ]
    );
    let rows: Vec<_> = reader
        .get_row_iter(None)
        .unwrap()
        .map(|r| r.unwrap())
        .collect();
    assert_eq!(rows.len(), 2);
    let get = |r: usize, name: &str| {
        rows[r]
            .get_column_iter()
            .find(|(n, _)| *n == name)
            .map(|(_, f)| f.clone())
            .unwrap()
    };
    assert_eq!(get(0, "user_id"), Field::Str("u1".into()));
    assert_eq!(get(0, "p__age"), Field::Long(41));
    assert_eq!(get(0, "p__name"), Field::Str("ann".into()));
    assert_eq!(get(0, "p__age__timestamp"), Field::TimestampMicros(T - 5));
    // Feast's FieldStatus numbers: PRESENT 1, NOT_FOUND 3.
    assert_eq!(get(0, "p__age__status"), Field::Int(1));
    assert_eq!(get(1, "p__age__status"), Field::Int(3));
    assert_eq!(get(1, "p__age"), Field::Null);
    assert_eq!(get(1, "p__emb"), Field::Null);
    assert_eq!(get(1, "p__age__timestamp"), Field::Null);
    let Field::ListInternal(list) = get(0, "p__emb") else {
        panic!("a list")
    };
    assert_eq!(list.elements(), &[Field::Float(0.5), Field::Float(1.5)]);
    assert_eq!(get(1, "__request_id"), Field::Str("r1".into()));
    assert_eq!(get(0, "__log_timestamp"), Field::TimestampMicros(T));
    assert_eq!(get(0, "__log_date"), Field::Date(20_783));
    assert_eq!(
        get(0, "__fingerprint"),
        Field::Str("0000000000001234".into())
    );
    assert_eq!(get(0, "__derived_version"), Field::Str("dv1".into()));
    assert_eq!(get(0, "__request_status"), Field::Str("partial".into()));
}

#[test]
fn a_group_at_its_row_bound_is_written_and_memory_is_bounded() {
    let dir = tempfile::tempdir().unwrap();
    let metrics = SinkMetrics::new();
    let mut opts = options(dir.path());
    opts.max_rows = 4;
    opts.max_buffered_rows = 5;
    let mut files = Files::new(opts, metrics.clone());
    files.add(log("r1", &["a", "b", "c"]));
    files.add(log("r2", &["d", "e"]));
    assert_eq!(parquet_files(dir.path()).len(), 1, "5 rows >= 4: written");
    files.add(log("r3", &["f", "g", "h"]));
    files.add(log("r4", &["i", "j", "k"]));
    assert_eq!(metrics.dropped(BUFFER_FULL), 3, "3 + 3 > 5 buffered");
    assert_eq!(metrics.written.get(), 5);
}

#[test]
fn an_unwritable_directory_is_an_error_counted_not_a_crash() {
    let dir = tempfile::tempdir().unwrap();
    let blocked = dir.path().join("not-a-dir");
    std::fs::write(&blocked, b"a file where the sink wants a folder").unwrap();
    let metrics = SinkMetrics::new();
    let mut files = Files::new(options(&blocked), metrics.clone());
    files.add(log("r1", &["u1", "u2"]));
    files.write_due(Instant::now() + Duration::from_secs(3601));
    files.add(log("r2", &["u3"]));
    files.write_due(Instant::now() + Duration::from_secs(3601));
    assert_eq!(metrics.errors.get(), 2);
    assert_eq!(metrics.dropped(WRITE_ERROR), 3);
    assert_eq!(metrics.written.get(), 0);
    let text = metrics.text();
    assert!(
        text.contains("ferry_log_sink_write_errors_total 2"),
        "{text}"
    );
    assert!(
        text.contains(r#"ferry_log_sink_records_dropped_total{reason="write_error"} 3"#),
        "{text}"
    );
}

#[test]
fn files_and_folders_are_not_world_readable() {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = tempfile::tempdir().unwrap();
    let mut files = Files::new(options(dir.path()), SinkMetrics::new());
    files.add(log("r1", &["u1"]));
    files.write_due(Instant::now() + Duration::from_secs(3601));
    let written = parquet_files(dir.path());
    let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    // 0640 and 0750 at most: a umask may narrow them, never widen them.
    assert_eq!(mode(&written[0]) & !0o640, 0, "{:o}", mode(&written[0]));
    assert_eq!(mode(&written[0]) & 0o600, 0o600);
    for folder in [
        written[0].parent().unwrap(),
        written[0].parent().unwrap().parent().unwrap(),
    ] {
        assert_eq!(
            mode(folder) & !0o750,
            0,
            "{}: {:o}",
            folder.display(),
            mode(folder)
        );
    }
}

#[test]
fn services_without_instances_make_no_group_file_or_folder() {
    let dir = tempfile::tempdir().unwrap();
    let metrics = SinkMetrics::new();
    let mut files = Files::new(options(dir.path()), metrics.clone());
    let mut empty = log("r1", &[]);
    // Many services, none with an instance: once counted against no row budget.
    empty.services = (0..100)
        .map(|i| pb::ServedService {
            name: format!("svc{i}"),
            ..empty.services[0].clone()
        })
        .collect();
    files.add(empty);
    files.write_due(Instant::now() + Duration::from_secs(3601));
    assert!(walk(dir.path()).is_empty() && std::fs::read_dir(dir.path()).unwrap().count() == 0);
    assert_eq!((metrics.files.get(), metrics.buffered.get()), (0, 0));
}

#[test]
fn a_record_naming_no_instance_is_rejected_before_the_writer_and_counted() {
    use envoy_types::pb::envoy::data::accesslog::v3::{AccessLogCommon, HttpAccessLogEntry};
    use envoy_types::pb::envoy::service::accesslog::v3::stream_access_logs_message::{
        HttpAccessLogEntries, LogEntries,
    };
    use envoy_types::pb::envoy::service::accesslog::v3::StreamAccessLogsMessage;
    use envoy_types::pb::google::protobuf::Any;
    use prost::Message as _;
    let entry = |record: ServedLog| {
        let mut common = AccessLogCommon::default();
        common.filter_state_objects.insert(
            "wasm.ferry.log".into(),
            Any {
                type_url: "type.googleapis.com/google.protobuf.BytesValue".into(),
                value: record.encode_to_vec().encode_to_vec(),
            },
        );
        HttpAccessLogEntry {
            common_properties: Some(common),
            ..Default::default()
        }
    };
    let (tx, rx) = std::sync::mpsc::sync_channel(8);
    let metrics = SinkMetrics::new();
    let sink = super::service::Sink {
        records: tx,
        metrics: metrics.clone(),
        open: Default::default(),
        max_streams: 1,
    };
    let message = StreamAccessLogsMessage {
        log_entries: Some(LogEntries::HttpLogs(HttpAccessLogEntries {
            log_entry: vec![entry(log("empty", &[])), entry(log("full", &["u1"]))],
        })),
        ..Default::default()
    };
    sink.take(message);
    let handed: Vec<ServedLog> = rx.try_iter().collect();
    assert_eq!(handed.len(), 1);
    assert_eq!(handed[0].request_id, "full");
    assert_eq!(metrics.rejected(super::metrics::NO_INSTANCES), 1);
    assert!(metrics
        .text()
        .contains(r#"ferry_log_sink_requests_rejected_total{reason="no_instances"} 1"#));
}
