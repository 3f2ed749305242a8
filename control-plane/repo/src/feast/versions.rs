//! Feast's online feature view versioning (0.63+) and view states (0.64+) as Ferry reads them.
//! With `enable_online_feature_view_versioning`, Feast stores a view's fields under `VIEW_vN`
//! (`mmh3("VIEW_vN:feature")`, `_ts:VIEW_vN`) where N is the view's current version, or the
//! version a FeatureService pins (`view@vN`), VIEW itself for version 0 (Feast 0.67's
//! `compute_versioned_name`). A pinned service reads the view as that version defined it (the
//! registry's version history), as Ferry view `VIEW_vN`. A `disabled` view is refused by name;
//! a `MATERIALIZING` one is served from what Redis holds (Feast refuses to serve it).

use std::collections::BTreeMap;

use ferry_protos::feast;
use ferry_protos::feast_proto as fp;
use prost::Message;

/// Where one Ferry view's values are in Feast's layout.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ViewStorage {
    /// The name in its Redis fields: VIEW, or VIEW_vN.
    pub stored_as: String,
    /// Its name in a precomputed vector (`projection.name_to_use()`): VIEW, or VIEW@vN when
    /// the service pins a version.
    pub precomputed_as: String,
}

/// The Ferry view a projection reads: the view itself, or `VIEW_vN` for a pinned version.
pub fn ferry_name(view: &str, pin: Option<i32>) -> String {
    match pin {
        Some(n) => format!("{view}_v{n}"),
        None => view.to_owned(),
    }
}

/// Each batch view of a project with its version: the registry's views at their current
/// version and the pinned ones (`VIEW_vN`) at theirs.
pub struct Versions<'a> {
    views: Vec<(&'a fp::FeatureViewSpec, i32)>,
    /// The pinned views (`VIEW_vN`) and the view each pins.
    pins: BTreeMap<&'a str, &'a str>,
}

impl<'a> Versions<'a> {
    pub fn of(reg: &'a fp::Registry, project: &str, pinned: &'a [Pinned]) -> Self {
        let current = reg
            .feature_views
            .iter()
            .filter_map(|v| Some((v.spec.as_ref()?, current_version(v))))
            .filter(|(s, _)| s.project == project);
        let pins = pinned.iter().filter_map(|(s, n)| {
            let view = s.name.strip_suffix(&format!("_v{n}"))?;
            Some((s.name.as_str(), view))
        });
        Versions {
            views: current.chain(pinned.iter().map(|(s, n)| (s, *n))).collect(),
            pins: pins.collect(),
        }
    }

    /// Every view by its Ferry name.
    pub fn specs(&self) -> impl Iterator<Item = (&'a str, &'a fp::FeatureViewSpec)> + '_ {
        self.views.iter().map(|(s, _)| (s.name.as_str(), *s))
    }

    /// The Ferry view a projection of `view` reads (a pinned version is view `VIEW_vN`).
    pub fn view(&self, view: &str, pin: Option<i32>) -> Option<(&'a str, &'a fp::FeatureViewSpec)> {
        let ferry = ferry_name(view, pin);
        self.specs().find(|(name, _)| *name == ferry)
    }

    /// Where Ferry view `name` is stored.
    pub fn storage(&self, name: &str, versioning: bool) -> ViewStorage {
        let version = self
            .views
            .iter()
            .find(|(s, _)| s.name == name)
            .map_or(0, |v| v.1);
        let pin = self.pins.get(name).copied();
        storage(pin.unwrap_or(name), version, pin.is_some(), versioning)
    }
}

/// Where a view is stored: `current` is its current version (unpinned) or the pinned one.
pub fn storage(view: &str, version: i32, pinned: bool, versioning: bool) -> ViewStorage {
    let stored_as = if versioning && version > 0 {
        format!("{view}_v{version}")
    } else {
        view.to_owned()
    };
    ViewStorage {
        stored_as,
        precomputed_as: if pinned {
            format!("{view}@v{version}")
        } else {
            view.to_owned()
        },
    }
}

/// A pinned view (renamed `VIEW_vN`) and its version.
pub type Pinned = (fp::FeatureViewSpec, i32);

/// The layout of Ferry view `view` stored `at` (as written when `None`) with `features`
/// selected, for a service read from its precomputed vector or not.
pub fn view_layout<'a>(
    at: Option<&ViewStorage>,
    view: &str,
    features: impl Iterator<Item = &'a str>,
    precomputed: bool,
) -> ferry_protos::v1::FeastView {
    let plain;
    let at = match at {
        Some(s) => s,
        None => {
            plain = storage(view, 0, false, false);
            &plain
        }
    };
    let features: Vec<&str> = features.collect();
    let stored = &at.stored_as;
    ferry_protos::v1::FeastView {
        timestamp_field: feast::timestamp_field(stored),
        feature_fields: features
            .iter()
            .map(|x| feast::feature_field(stored, x))
            .collect(),
        precomputed_view: if precomputed {
            at.precomputed_as.clone()
        } else {
            String::new()
        },
        precomputed_names: features
            .iter()
            .filter(|_| precomputed)
            .map(|x| format!("{}__{x}", at.precomputed_as))
            .collect(),
    }
}

/// The views the project's services pin to a version (`view@vN`), each as that version
/// defined it, renamed to its Ferry name (`VIEW_vN`), with its version. An unresolvable pin
/// is an `(path, reason)` problem.
pub fn pinned(
    reg: &fp::Registry,
    project: &str,
    versioning: bool,
) -> (Vec<Pinned>, Vec<(String, String)>) {
    let mut out: BTreeMap<String, Pinned> = BTreeMap::new();
    let mut problems = Vec::new();
    let services = reg.feature_services.iter().filter_map(|s| s.spec.as_ref());
    for s in services.filter(|s| s.project == project) {
        for p in &s.features {
            let Some(n) = p.version_tag else { continue };
            let view = p.feature_view_name.as_str();
            let path = format!(
                "feast feature service '{}': feature view '{view}@v{n}'",
                s.name
            );
            if !versioning {
                problems.push((
                    path,
                    "is pinned to a version but enable_online_feature_view_versioning is off \
                     (Feast refuses it too)"
                        .to_owned(),
                ));
                continue;
            }
            match version_spec(reg, project, view, n) {
                Some(mut spec) => {
                    spec.name = ferry_name(view, Some(n));
                    out.insert(spec.name.clone(), (spec, n));
                }
                None => problems.push((
                    path,
                    format!("version v{n} is not in the registry's version history"),
                )),
            }
        }
    }
    (out.into_values().collect(), problems)
}

/// The view `name` as version `n` defined it: the registry's current view when that is its
/// version, else the version history's record.
fn version_spec(
    reg: &fp::Registry,
    project: &str,
    name: &str,
    n: i32,
) -> Option<fp::FeatureViewSpec> {
    let current = reg.feature_views.iter().find(|v| {
        v.spec
            .as_ref()
            .is_some_and(|s| s.name == name && s.project == project)
    });
    if let Some(v) = current.filter(|v| current_version(v) == n) {
        return v.spec.clone();
    }
    reg.feature_view_version_history
        .iter()
        .flat_map(|h| &h.records)
        .filter(|r| r.feature_view_name == name && r.version_number == n)
        .filter_map(|r| fp::FeatureView::decode(r.feature_view_proto.as_slice()).ok())
        .filter_map(|v| v.spec)
        .find(|s| s.project == project)
}

/// A view's current version (0 without versioning or before its first change).
pub fn current_version(v: &fp::FeatureView) -> i32 {
    v.meta.as_ref().map_or(0, |m| m.current_version_number)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view(name: &str, version: i32, features: &[&str]) -> fp::FeatureView {
        fp::FeatureView {
            spec: Some(fp::FeatureViewSpec {
                name: name.into(),
                project: "p".into(),
                features: features
                    .iter()
                    .map(|f| fp::FeatureSpec {
                        name: (*f).into(),
                        value_type: fp::ValueType::Int64 as i32,
                    })
                    .collect(),
                ..Default::default()
            }),
            meta: Some(fp::FeatureViewMeta {
                current_version_number: version,
                ..Default::default()
            }),
        }
    }

    fn pinned_service(pins: &[(&str, i32)]) -> fp::FeatureService {
        fp::FeatureService {
            spec: Some(fp::FeatureServiceSpec {
                name: "s".into(),
                project: "p".into(),
                features: pins
                    .iter()
                    .map(|(v, n)| fp::FeatureViewProjection {
                        feature_view_name: (*v).into(),
                        version_tag: Some(*n),
                        ..Default::default()
                    })
                    .collect(),
                ..Default::default()
            }),
        }
    }

    #[test]
    fn storage_names_follow_feasts_compute_versioned_name() {
        let s = storage("user", 2, false, true);
        assert_eq!(
            (s.stored_as.as_str(), s.precomputed_as.as_str()),
            ("user_v2", "user")
        );
        let s = storage("user", 0, true, true);
        assert_eq!(
            (s.stored_as.as_str(), s.precomputed_as.as_str()),
            ("user", "user@v0")
        );
        assert_eq!(storage("user", 3, false, false).stored_as, "user");
        assert_eq!(ferry_name("user", Some(1)), "user_v1");
    }

    #[test]
    fn a_pin_reads_the_version_history_or_the_current_view() {
        let old = view("user", 0, &["a"]);
        let mut reg = fp::Registry {
            feature_views: vec![view("user", 1, &["a", "b"])],
            feature_services: vec![pinned_service(&[("user", 0), ("user", 1), ("user", 7)])],
            feature_view_version_history: Some(fp::FeatureViewVersionHistory {
                records: vec![fp::FeatureViewVersionRecord {
                    feature_view_name: "user".into(),
                    project_id: "p".into(),
                    version_number: 0,
                    feature_view_type: "feature_view".into(),
                    feature_view_proto: old.encode_to_vec(),
                }],
            }),
            ..Default::default()
        };
        let (views, problems) = pinned(&reg, "p", true);
        let names: Vec<_> = views
            .iter()
            .map(|(s, n)| (s.name.as_str(), *n, s.features.len()))
            .collect();
        assert_eq!(names, [("user_v0", 0, 1), ("user_v1", 1, 2)]);
        assert_eq!(problems.len(), 1);
        assert!(problems[0].1.contains("v7 is not in"), "{problems:?}");
        reg.feature_services = vec![pinned_service(&[("user", 0)])];
        let (views, problems) = pinned(&reg, "p", false);
        assert!(views.is_empty());
        assert!(problems[0].1.contains("versioning is off"), "{problems:?}");
    }
}
