//! The merge rule of Ferry's layout, one function: a stored vector (or none) and the pushed
//! rows of some of its views in, the new vector (or why not) out. A view's part is replaced
//! only by a row at least as new (equal event times overwrite, so a re-push is idempotent);
//! a vector of another fingerprint or layout is refused, never merged; a new vector leaves
//! every other view empty (NOT_FOUND to the filter), never zero. The bytes are the
//! materialize encoder's ([`crate::encode`]).
//!
//! [`merge_rows`] is the write path's (pushed rows into a stored vector); [`merge_vector`] is
//! `ferry materialize`'s (the files' whole vector beside a stored one that pushes may have
//! made newer).

use ferry_protos::v1::StoredVector;

use ferry_protos::limits::MAX_VECTOR_BYTES;
use ferry_protos::v1::Value;
use ferry_repo::sources::ViewRow;
use prost::Message as _;

use crate::encode::{self, Part};

/// One view's row for one vector.
#[derive(Clone, Copy, Debug)]
pub struct Update<'a> {
    /// Where the view's part sits in the vector.
    pub slot: usize,
    /// The vector's features of the view, as indexes into `values`, in the vector's order.
    pub selected: &'a [usize],
    /// The layout cannot take the view's rows (a held-back snapshot with a feature the served
    /// schema does not have).
    pub unfit: bool,
    pub event_time_us: i64,
    /// Every feature of the view, in declared order.
    pub values: &'a [Value],
}

/// What happened to one update.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    Written,
    /// The stored part is newer.
    SkippedOlder,
    Refused(Refusal),
}

/// Why a vector did not take a row.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Refusal {
    /// The stored vector carries another fingerprint (or another number of views).
    FingerprintMismatch,
    /// The stored bytes are no `StoredVector`.
    Undecodable,
    /// The layout (a held-back snapshot's) holds features the served schema lacks.
    SchemaMismatch,
    /// The merged vector would be over `MAX_VECTOR_BYTES` (each row is within it alone; the
    /// views of one vector together are not).
    VectorTooLarge,
}

impl Refusal {
    pub const ALL: [Refusal; 4] = [
        Refusal::FingerprintMismatch,
        Refusal::Undecodable,
        Refusal::SchemaMismatch,
        Refusal::VectorTooLarge,
    ];

    /// The `reason` label of `ferry_write_refusals_total`.
    pub fn label(self) -> &'static str {
        match self {
            Refusal::FingerprintMismatch => "fingerprint_mismatch",
            Refusal::Undecodable => "undecodable_vector",
            Refusal::SchemaMismatch => "schema_mismatch",
            Refusal::VectorTooLarge => "vector_too_large",
        }
    }
}

/// The result of merging: the bytes to store (None: nothing changes) and each update's outcome.
#[derive(Debug, PartialEq)]
pub struct Merged {
    pub bytes: Option<Vec<u8>>,
    pub outcomes: Vec<Outcome>,
}

/// Merges `updates` (all for one key: one service at one fingerprint, distinct views) into
/// `stored`.
pub fn merge_rows(
    stored: Option<&[u8]>,
    fingerprint: u64,
    views: usize,
    updates: &[Update<'_>],
) -> Merged {
    let refuse_all = |r| Merged {
        bytes: None,
        outcomes: vec![Outcome::Refused(r); updates.len()],
    };
    let mut parts: Vec<Option<ViewRow>> = match stored.map(encode::decode) {
        None => vec![None; views],
        Some(Err(_)) => return refuse_all(Refusal::Undecodable),
        Some(Ok(v)) if v.fingerprint != fingerprint || v.views.len() != views => {
            return refuse_all(Refusal::FingerprintMismatch)
        }
        Some(Ok(v)) => stored_parts(v),
    };
    let mut outcomes = Vec::with_capacity(updates.len());
    for u in updates {
        if u.unfit {
            outcomes.push(Outcome::Refused(Refusal::SchemaMismatch));
            continue;
        }
        let Some(part) = parts.get_mut(u.slot) else {
            outcomes.push(Outcome::Refused(Refusal::FingerprintMismatch));
            continue;
        };
        if part
            .as_ref()
            .is_some_and(|p| p.event_time_us > u.event_time_us)
        {
            outcomes.push(Outcome::SkippedOlder);
            continue;
        }
        let values: Vec<_> = u
            .selected
            .iter()
            .filter_map(|&i| u.values.get(i).cloned())
            .collect();
        *part = Some(ViewRow::new(u.event_time_us, &values));
        outcomes.push(Outcome::Written);
    }
    if !outcomes.contains(&Outcome::Written) {
        return Merged {
            bytes: None,
            outcomes,
        };
    }
    let whole: Vec<Vec<usize>> = parts
        .iter()
        .map(|p| (0..p.as_ref().map_or(0, ViewRow::len)).collect())
        .collect();
    let encoded: Vec<Part<'_>> = parts
        .iter()
        .zip(&whole)
        .map(|(row, selected)| Part {
            row: row.as_ref(),
            selected,
        })
        .collect();
    let mut out = Vec::new();
    encode::encode_into(fingerprint, &encoded, &mut out);
    within_bound(out, outcomes)
}

/// The merged bytes, or, over [`MAX_VECTOR_BYTES`], nothing written and every row the vector
/// would have taken refused.
fn within_bound(bytes: Vec<u8>, outcomes: Vec<Outcome>) -> Merged {
    if bytes.len() <= MAX_VECTOR_BYTES {
        return Merged {
            bytes: Some(bytes),
            outcomes,
        };
    }
    let refused = |o: Outcome| match o {
        Outcome::Written => Outcome::Refused(Refusal::VectorTooLarge),
        other => other,
    };
    Merged {
        bytes: None,
        outcomes: outcomes.into_iter().map(refused).collect(),
    }
}

/// A stored vector's parts as rows; an empty part (no row) is None.
fn stored_parts(v: StoredVector) -> Vec<Option<ViewRow>> {
    v.views
        .into_iter()
        .map(|p| (!p.values.is_empty()).then(|| ViewRow::new(p.event_time_us, &p.values)))
        .collect()
}

/// The vector to store: per view, the files' part where it is at least as new as the stored one
/// (or the stored one is empty), else the stored part. A stored vector of another fingerprint
/// or number of views, or undecodable, is replaced by the files' (materialize defines the
/// layout). None when the result is the stored bytes.
pub fn merge_vector(stored: &[u8], files: &[u8]) -> Option<Vec<u8>> {
    let Ok(new) = StoredVector::decode(files) else {
        return Some(files.to_vec());
    };
    let old = match StoredVector::decode(stored) {
        Ok(old) if old.fingerprint == new.fingerprint && old.views.len() == new.views.len() => old,
        _ => return (stored != files).then(|| files.to_vec()),
    };
    let mut out = StoredVector {
        fingerprint: new.fingerprint,
        views: Vec::with_capacity(new.views.len()),
    };
    for (o, n) in old.views.into_iter().zip(new.views) {
        let keep_stored =
            !o.values.is_empty() && (n.values.is_empty() || o.event_time_us > n.event_time_us);
        out.views.push(if keep_stored { o } else { n });
    }
    let bytes = out.encode_to_vec();
    (bytes != stored).then_some(bytes)
}

#[cfg(test)]
#[path = "merge_tests.rs"]
mod tests;
