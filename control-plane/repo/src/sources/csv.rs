//! CSV sources: a header line naming the columns, then one row per (entity, event time). Rows are
//! read into one reused record; values are parsed only for rows that win (latest so far).

use std::path::Path;

use csv::{ByteRecord, ReaderBuilder};

use super::cell::{parse_timestamp, parse_value, push_key_part};
use super::{column_indexes, LatestRows, SourceError, ViewRow, ViewSpec};

fn file_name(file: &Path) -> String {
    file.display().to_string()
}

fn open(file: &Path) -> Result<csv::Reader<std::fs::File>, SourceError> {
    let f = std::fs::File::open(file).map_err(|source| SourceError::Io {
        file: file_name(file),
        source,
    })?;
    Ok(ReaderBuilder::new().has_headers(true).from_reader(f))
}

fn csv_error(file: &Path, e: csv::Error) -> SourceError {
    let line = e.position().map_or(0, |p| p.line());
    let reason = match e.kind() {
        csv::ErrorKind::Utf8 { .. } => "invalid UTF-8".to_owned(),
        csv::ErrorKind::UnequalLengths {
            expected_len, len, ..
        } => format!("{len} fields, but the header has {expected_len}"),
        _ => e.to_string(),
    };
    if let csv::ErrorKind::Io(_) = e.kind() {
        return SourceError::Io {
            file: file_name(file),
            source: std::io::Error::other(e.to_string()),
        };
    }
    SourceError::Malformed {
        file: file_name(file),
        line,
        reason,
    }
}

pub(super) fn read_header(file: &Path) -> Result<Vec<String>, SourceError> {
    let mut rdr = open(file)?;
    let headers = rdr.headers().map_err(|e| csv_error(file, e))?;
    Ok(headers.iter().map(str::to_owned).collect())
}

pub(super) fn load_latest(spec: &ViewSpec<'_>) -> Result<LatestRows, SourceError> {
    let file = spec.file;
    let mut rdr = open(file)?;
    let header: Vec<String> = rdr
        .headers()
        .map_err(|e| csv_error(file, e))?
        .iter()
        .map(str::to_owned)
        .collect();
    let ts_col = column_indexes(file, &header, &[spec.timestamp_field])?[0];
    let key_names: Vec<&str> = spec.keys.iter().map(|(n, _)| n.as_str()).collect();
    let key_cols = column_indexes(file, &header, &key_names)?;
    let feature_names: Vec<&str> = spec.features.iter().map(|(n, _)| n.as_str()).collect();
    let feature_cols = column_indexes(file, &header, &feature_names)?;

    let cell_err = |line: u64, col: usize, reason: String| SourceError::Cell {
        file: file_name(file),
        line,
        column: header.get(col).cloned().unwrap_or_default(),
        reason,
    };
    let mut latest = LatestRows::default();
    let mut record = ByteRecord::new();
    let mut key = String::new();
    let mut key_part = String::new();
    loop {
        match rdr.read_byte_record(&mut record) {
            Ok(true) => {}
            Ok(false) => break,
            Err(e) => return Err(csv_error(file, e)),
        }
        latest.rows_read += 1;
        let line = record.position().map_or(0, |p| p.line());
        let cell = |col: usize| -> Result<&str, SourceError> {
            std::str::from_utf8(record.get(col).unwrap_or_default())
                .map_err(|_| cell_err(line, col, "invalid UTF-8".to_owned()))
        };

        key.clear();
        for (i, (&col, (_, ty))) in key_cols.iter().zip(spec.keys).enumerate() {
            if i > 0 {
                key.push(ferry_protos::ENTITY_KEY_SEPARATOR);
            }
            key_part.clear();
            push_key_part(*ty, cell(col)?, &mut key_part).map_err(|r| cell_err(line, col, r))?;
            key.push_str(&key_part);
        }
        let event_time_us = parse_timestamp(cell(ts_col)?)
            .and_then(|t| spec.timestamps.resolve(t))
            .map_err(|r| cell_err(line, ts_col, r))?;
        if !latest.wants(&key, event_time_us) {
            continue;
        }
        let mut values = Vec::with_capacity(feature_cols.len());
        for (&col, (_, ty)) in feature_cols.iter().zip(spec.features) {
            values.push(parse_value(*ty, cell(col)?).map_err(|r| cell_err(line, col, r))?);
        }
        latest.put(&key, ViewRow::new(event_time_us, &values));
    }
    Ok(latest)
}

#[cfg(test)]
mod tests {
    use super::super::{load_latest, SourceFormat};
    use super::*;
    use crate::types::{FeatureType, KeyType};
    use ferry_protos::v1::value::Kind;

    fn spec_for<'a>(
        file: &'a Path,
        keys: &'a [(String, KeyType)],
        features: &'a [(String, FeatureType)],
    ) -> ViewSpec<'a> {
        ViewSpec {
            file,
            format: SourceFormat::Csv,
            timestamp_field: "ts",
            timestamps: crate::sources::TimestampRules::now(None),
            keys,
            features,
        }
    }

    type Keys = [(String, KeyType); 1];
    type Features = [(String, FeatureType); 1];

    /// The view most tests read: a string key `id` and an int64 feature `n`.
    fn id_key_and_n() -> (Keys, Features) {
        (
            [("id".to_owned(), KeyType::String)],
            [("n".to_owned(), FeatureType::Int64)],
        )
    }

    fn write(dir: &tempfile::TempDir, body: &str) -> std::path::PathBuf {
        let p = dir.path().join("v.csv");
        std::fs::write(&p, body).unwrap();
        p
    }

    #[test]
    fn latest_row_per_entity_wins_and_ties_go_to_the_later_line() {
        let dir = tempfile::tempdir().unwrap();
        let p = write(
            &dir,
            "id,ts,n\n\
             a,2026-01-02T00:00:00Z,2\n\
             a,2026-01-03T00:00:00Z,3\n\
             a,2026-01-01T00:00:00Z,1\n\
             b,1767225600,7\n\
             b,1767225600,8\n",
        );
        let (keys, feats) = id_key_and_n();
        let got = load_latest(&spec_for(&p, &keys, &feats)).unwrap();
        assert_eq!(got.rows_read, 5);
        assert_eq!(got.rows.len(), 2);
        let a = &got.rows["a"];
        assert_eq!(a.values()[0].kind, Some(Kind::Int64Val(3)));
        assert_eq!(
            a.event_time_us,
            1_767_398_400_000_000 // 2026-01-03T00:00:00Z
        );
        assert_eq!(got.rows["b"].values()[0].kind, Some(Kind::Int64Val(8)));
        assert_eq!(got.rows["b"].event_time_us, 1_767_225_600_000_000);
    }

    #[test]
    fn composite_keys_follow_the_given_key_order_and_int_keys_are_canonical() {
        let dir = tempfile::tempdir().unwrap();
        let p = write(&dir, "user_id,merchant_id,ts,n\nu1,0042,1767225600,5\n");
        let keys = [
            ("merchant_id".to_owned(), KeyType::Int64),
            ("user_id".to_owned(), KeyType::String),
        ];
        let feats = [("n".to_owned(), FeatureType::Int32)];
        let got = load_latest(&spec_for(&p, &keys, &feats)).unwrap();
        assert!(got.rows.contains_key("42\u{1f}u1"), "{:?}", got.rows.keys());
    }

    #[test]
    fn a_bad_cell_names_file_line_column_and_reason() {
        let dir = tempfile::tempdir().unwrap();
        let p = write(&dir, "id,ts,n\na,1767225600,1\nb,1767225600,x\n");
        let (keys, feats) = id_key_and_n();
        let err = load_latest(&spec_for(&p, &keys, &feats)).unwrap_err();
        assert_eq!(
            err.to_string(),
            format!("{}: line 3, column 'n': invalid int64 'x'", p.display())
        );
    }

    #[test]
    fn integer_epochs_follow_the_declared_or_detected_unit() {
        let dir = tempfile::tempdir().unwrap();
        let (keys, feats) = id_key_and_n();
        // 2026-01-01T00:00:00Z in ms, us, and s (+1 s): undeclared, each detected.
        let p = write(
            &dir,
            "id,ts,n\na,1767225600000,1\nb,1767225600000000,2\nc,1767225601,3\n",
        );
        let mut spec = spec_for(&p, &keys, &feats);
        let got = load_latest(&spec).unwrap();
        let t = 1_767_225_600_000_000;
        assert_eq!(got.rows["a"].event_time_us, t);
        assert_eq!(got.rows["b"].event_time_us, t);
        assert_eq!(got.rows["c"].event_time_us, t + 1_000_000);
        // Declared ms: the ms row reads, the next (us) row is a unit mistake, named.
        spec.timestamps.declared = Some(crate::sources::TimeUnit::Millis);
        let err = load_latest(&spec).unwrap_err().to_string();
        assert_eq!(
            err,
            format!(
                "{}: line 3, column 'ts': integer timestamp 1767225600000000 in milliseconds \
                 (timestamp_unit: ms) is 57971-02-25T00:00:00Z, outside 2000-01-01 .. now + 5 \
                 min: is the unit right? In microseconds it would be 2026-01-01T00:00:00Z.",
                p.display()
            )
        );
    }

    #[test]
    fn future_and_unplaceable_timestamps_name_file_line_and_column() {
        let dir = tempfile::tempdir().unwrap();
        let (keys, feats) = id_key_and_n();
        let p = write(
            &dir,
            "id,ts,n\na,2026-01-01T00:00:00Z,1\nb,2999-01-01T00:00:00Z,2\n",
        );
        let err = load_latest(&spec_for(&p, &keys, &feats))
            .unwrap_err()
            .to_string();
        let want = format!(
            "{}: line 3, column 'ts': timestamp 2999-01-01T00:00:00Z is in the future (now is ",
            p.display()
        );
        assert!(err.starts_with(&want), "{err}");
        let p = write(&dir, "id,ts,n\na,100,1\n");
        let err = load_latest(&spec_for(&p, &keys, &feats))
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with(&format!(
                "{}: line 2, column 'ts': integer timestamp 100 is no epoch between 2000-01-01",
                p.display()
            )),
            "{err}"
        );
    }

    #[test]
    fn bad_timestamps_keys_and_row_lengths_are_errors() {
        let dir = tempfile::tempdir().unwrap();
        let (keys, feats) = id_key_and_n();
        let cases = [
            (
                "id,ts,n\na,yesterday,1\n",
                "line 2, column 'ts': invalid timestamp 'yesterday'",
            ),
            ("id,ts,n\n,1,1\n", "line 2, column 'id': empty entity key"),
            (
                "id,ts,n\na,1767225600,1\nb,1\n",
                "line 3: 2 fields, but the header has 3",
            ),
            ("id,n\na,1\n", "missing column(s) ts"),
        ];
        for (body, want) in cases {
            let p = write(&dir, body);
            let err = load_latest(&spec_for(&p, &keys, &feats))
                .unwrap_err()
                .to_string();
            assert!(err.contains(want), "{err} should contain {want}");
        }
    }
}
