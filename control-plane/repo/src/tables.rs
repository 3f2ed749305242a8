//! A repo's stored views read from their sources: the latest row per entity of every view some
//! service uses (what `ferry materialize` encodes into vectors), and a service's entities.

use std::time::Instant;

use crate::sources::{load_latest, LatestRows, SourceError, TimestampRules, ViewSpec};
use crate::types::{FeatureType, KeyType};
use crate::{FeatureService, Registry};

#[derive(Debug, thiserror::Error)]
pub enum TablesError {
    /// A Feast-backed repo's vectors are Feast's own (`feast materialize` writes them).
    #[error(
        "the repo's features come from the Feast repo {0}: Ferry reads them where `feast \
         materialize` wrote them, so there is nothing for `ferry materialize` to write"
    )]
    FeastBacked(String),
    #[error("feature view '{view}': {source}")]
    Source {
        view: String,
        #[source]
        source: SourceError,
    },
    #[error("a source reader thread failed")]
    Thread,
}

/// What reading one view's source produced.
#[derive(Clone, Debug)]
pub struct ViewSummary {
    pub view: String,
    pub rows_read: u64,
    pub entities: usize,
    pub seconds: f64,
}

/// The latest rows of every view that some service uses, indexed like `Registry::views`.
pub struct Tables {
    pub tables: Vec<Option<LatestRows>>,
    pub summaries: Vec<ViewSummary>,
}

/// A view's join keys in canonical order (sorted by join key), as the entity key is built.
fn view_keys(reg: &Registry, view: usize) -> Vec<(String, KeyType)> {
    let mut keys: Vec<(String, KeyType)> = reg.views[view]
        .entities
        .iter()
        .map(|&e| (reg.entities[e].join_key.clone(), reg.entities[e].key_type))
        .collect();
    keys.sort();
    keys
}

/// One view's kept rows and the seconds reading took.
type Loaded = Result<(LatestRows, f64), SourceError>;

/// Reads the sources of all views used by a service, one thread per view.
pub fn load_tables(reg: &Registry) -> Result<Tables, TablesError> {
    if let Some(f) = &reg.feast {
        return Err(TablesError::FeastBacked(f.dir.display().to_string()));
    }
    let mut used = vec![false; reg.views.len()];
    for s in &reg.services {
        for sv in &s.views {
            used[sv.view] = true;
        }
    }
    // One "now" for every view: the future check means the same for all of them.
    let now_us = TimestampRules::now(None).now_us;
    let results: Vec<(usize, Loaded)> = std::thread::scope(|scope| {
        // Only a Feast-backed repo (refused above) has views without a source.
        let handles: Vec<_> = (0..reg.views.len())
            .filter(|&i| used[i])
            .filter_map(|i| Some((i, reg.views[i].source.as_ref()?)))
            .map(|(i, source)| {
                scope.spawn(move || {
                    let view = &reg.views[i];
                    let keys = view_keys(reg, i);
                    let features: Vec<(String, FeatureType)> = view
                        .features
                        .iter()
                        .map(|f| (f.name.clone(), f.ty))
                        .collect();
                    let start = Instant::now();
                    let rows = load_latest(&ViewSpec {
                        file: &source.file,
                        format: source.format,
                        timestamp_field: &source.timestamp_field,
                        timestamps: TimestampRules {
                            declared: source.timestamp_unit,
                            now_us,
                        },
                        keys: &keys,
                        features: &features,
                    });
                    (i, rows.map(|r| (r, start.elapsed().as_secs_f64())))
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join())
            .collect::<Result<_, _>>()
    })
    .map_err(|_| TablesError::Thread)?;

    let mut tables: Vec<Option<LatestRows>> = (0..reg.views.len()).map(|_| None).collect();
    let mut summaries = Vec::new();
    for (i, result) in results {
        let view = reg.views[i].name.clone();
        let (rows, seconds) = result.map_err(|source| TablesError::Source {
            view: view.clone(),
            source,
        })?;
        summaries.push(ViewSummary {
            view,
            rows_read: rows.rows_read,
            entities: rows.rows.len(),
            seconds,
        });
        tables[i] = Some(rows);
    }
    Ok(Tables { tables, summaries })
}

/// A service's entities: the union of the entity keys of its views, sorted (so runs are
/// reproducible and a progress bar moves steadily).
pub fn service_entities<'a>(service: &FeatureService, tables: &'a Tables) -> Vec<&'a str> {
    let views: Vec<&LatestRows> = service
        .views
        .iter()
        .filter_map(|sv| tables.tables[sv.view].as_ref())
        .collect();
    // Each key once, from the first view that has it: sorting the union, not every view's
    // keys, is what the string comparisons cost.
    let mut keys: Vec<&str> = Vec::with_capacity(views.first().map_or(0, |t| t.rows.len()));
    for (i, t) in views.iter().enumerate() {
        let earlier = &views[..i];
        keys.extend(
            t.rows
                .keys()
                .map(String::as_str)
                .filter(|k| !earlier.iter().any(|e| e.rows.contains_key(*k))),
        );
    }
    keys.sort_unstable();
    keys
}
