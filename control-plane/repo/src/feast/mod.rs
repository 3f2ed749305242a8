//! A Feast repo as the source of a Ferry repo's entities, views and services (`feast: {repo:
//! PATH}` in `ferry.yaml`): its `feature_store.yaml` and the registry `feast apply` writes (a
//! `feast.core.Registry`, decoded with our own subset in `ferry_protos::feast_proto`, read from
//! a file, a database or Feast's registry server: `registry`).
//! What Ferry cannot serve from Feast's Redis layout is refused by name, never skipped.
//! Versioned views and view states: `versions`; fields of the registry our `.proto`
//! does not know: `unknown` (warned about at `ferry apply`).

pub(crate) mod odfv;
mod registry;
mod remote;
mod sql;
mod types;
mod unknown;
mod versions;
mod writes;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use ferry_protos::feast_proto::{self as fp, ValueType as Fvt};
use serde_norway::Value as Yaml;

use crate::ferry_yaml::{RawEntity, RawFeastOnDemand, RawFeature, RawOnDemandView, RawRepo};
use crate::ferry_yaml::{RawService, RawView};
use crate::Issue;
use registry::RegistrySource;
use types::{feature_type, type_name};
use versions::ViewStorage;

/// Feast's repo configuration file.
pub const FEATURE_STORE_FILE: &str = "feature_store.yaml";

/// Where a Feast-backed repo's definitions come from.
#[derive(Clone, Debug)]
pub struct FeastRepo {
    /// Feast project: the suffix of every hash key.
    pub project: String,
    /// The Feast repo folder.
    pub dir: PathBuf,
    /// Its registry: a file, a database or a registry server.
    pub registry: RegistrySource,
    /// The views Ferry writes in Feast's layout, and the push sources feeding them
    /// ([`writes`]).
    pub write_views: Vec<ferry_protos::v1::WriteView>,
    pub push_sources: Vec<ferry_protos::v1::PushSource>,
    /// Per Ferry view: where Feast stores it (versioned names) and its name in precomputed
    /// vectors.
    pub storage: BTreeMap<String, ViewStorage>,
    /// The services read from their precomputed vector (`precompute_online`, no on-demand
    /// view: Feast reads those per view too).
    pub precomputed: BTreeSet<String>,
    /// What `ferry apply` warns about: fields of the registry Ferry's `.proto` does not know.
    pub notices: Vec<String>,
}

impl FeastRepo {
    /// The layout of Ferry view `view` with `features` selected, for a service read from its
    /// precomputed vector or not.
    pub fn view_layout<'a>(
        &self,
        view: &str,
        features: impl Iterator<Item = &'a str>,
        precomputed: bool,
    ) -> ferry_protos::v1::FeastView {
        versions::view_layout(self.storage.get(view), view, features, precomputed)
    }
}

fn issue(path: &str, reason: impl Into<String>) -> Issue {
    Issue {
        path: path.to_owned(),
        reason: reason.into(),
    }
}

/// Where a change of the Feast repo shows (for `ferry serve`'s watcher): the files
/// (`feature_store.yaml`, a file registry) and, for a database or server registry, a stamp of
/// its content ([`RegistrySource::stamp`]: one query or call). Nothing when `ferry.yaml` names
/// no Feast repo.
pub fn watched(root: &Path, repo_text: &str) -> (Vec<PathBuf>, Option<Vec<u8>>) {
    let Ok(raw) = serde_norway::from_str::<RawRepo>(repo_text) else {
        return (Vec::new(), None);
    };
    let Some(f) = raw.feast else {
        return (Vec::new(), None);
    };
    let dir = root.join(&f.repo);
    let mut files = vec![dir.join(FEATURE_STORE_FILE)];
    let Ok(config) = store_config(&dir) else {
        return (files, None);
    };
    files.extend(config.registry.file().map(Path::to_path_buf));
    (files, config.registry.stamp(&config.project))
}

/// Reads the Feast repo `raw.feast` names and fills `raw`'s entities, views and services from
/// its registry. Every problem is returned at once.
pub fn merge(raw: &mut RawRepo, root: &Path) -> Result<Option<FeastRepo>, Vec<Issue>> {
    let Some(f) = &raw.feast else {
        return Ok(None);
    };
    let mut issues = Vec::new();
    if !raw.entities.is_empty() || !raw.feature_views.is_empty() || !raw.feature_services.is_empty()
    {
        issues.push(issue(
            "feast",
            "a Feast-backed repo takes its entities, feature_views and feature_services from the \
             Feast registry; remove them from ferry.yaml",
        ));
    }
    if !raw.on_demand_views.is_empty() {
        issues.push(issue(
            "on_demand_views",
            "a Feast-backed repo takes its on-demand views from the Feast registry; give their \
             features' CEL under feast: {on_demand: [{view, features: [{name, expr}]}]}",
        ));
    }
    let dir = root.join(&f.repo);
    let config = store_config(&dir).map_err(|e| vec![e])?;
    let (registry, notices) = config
        .registry
        .read(&config.project)
        .map_err(|e| vec![issue(&format!("feast registry {}", config.registry), e)])?;
    let versioning = config.versioning;
    let (converted, (storage, precomputed)) = convert(
        &registry,
        &config.project,
        &f.on_demand,
        versioning,
        &mut issues,
    );
    if !issues.is_empty() {
        return Err(issues);
    }
    if raw.project != config.project {
        return Err(vec![issue(
            "project",
            format!(
                "'{}' differs from the Feast repo's project '{}'",
                raw.project, config.project
            ),
        )]);
    }
    (
        raw.entities,
        raw.feature_views,
        raw.feature_services,
        raw.on_demand_views,
    ) = converted;
    let (write_views, push_sources) =
        writes::writes(&registry, &config.project, &config.write, versioning);
    Ok(Some(FeastRepo {
        project: config.project,
        dir,
        registry: config.registry,
        write_views,
        push_sources,
        storage,
        precomputed,
        notices,
    }))
}

/// What Ferry reads from `feature_store.yaml`.
struct StoreConfig {
    project: String,
    registry: RegistrySource,
    /// How Feast's Redis store writes (`key_ttl_seconds`, `skip_dedup`).
    write: ferry_protos::v1::FeastWrite,
    /// `registry: {enable_online_feature_view_versioning: true}` (Feast 0.63+).
    versioning: bool,
}

fn store_config(dir: &Path) -> Result<StoreConfig, Issue> {
    let file = dir.join(FEATURE_STORE_FILE);
    let fpath = file.display().to_string();
    let text = std::fs::read_to_string(&file).map_err(|e| issue(&fpath, e.to_string()))?;
    // Feast expands environment variables in the file before parsing it; so does Ferry.
    let text = expand_vars(&text, |name| std::env::var(name).ok());
    let y: Yaml = serde_norway::from_str(&text).map_err(|e| issue(&fpath, e.to_string()))?;
    let get = |k: &str| y.get(k);
    let project = get("project")
        .and_then(Yaml::as_str)
        .ok_or_else(|| issue(&fpath, "no project"))?
        .to_owned();
    check_online_store(get("online_store"), &fpath)?;
    let store = get("online_store");
    let write = ferry_protos::v1::FeastWrite {
        key_ttl_seconds: store
            .and_then(|s| s.get("key_ttl_seconds"))
            .and_then(Yaml::as_i64)
            .filter(|t| *t > 0)
            .unwrap_or(0),
        skip_dedup: store
            .and_then(|s| s.get("skip_dedup"))
            .and_then(Yaml::as_bool)
            .unwrap_or(false),
    };
    match get("entity_key_serialization_version").map(Yaml::as_i64) {
        None | Some(Some(3)) => {}
        Some(v) => {
            return Err(issue(
                &fpath,
                format!(
                    "entity_key_serialization_version {v:?} is not supported; Ferry reads keys \
                     serialized with version 3 only"
                ),
            ))
        }
    }
    let env = |name: &str| std::env::var(name).ok();
    let registry =
        registry::parse(get("registry"), get("auth"), dir, &env).map_err(|e| issue(&fpath, e))?;
    let versioning = get("registry")
        .and_then(|r| r.get("enable_online_feature_view_versioning"))
        .and_then(Yaml::as_bool)
        .unwrap_or(false);
    Ok(StoreConfig {
        project,
        registry,
        write,
        versioning,
    })
}

/// `$NAME` and `${NAME}` replaced by `var(NAME)`, left as written when it has no value, as
/// Python's `os.path.expandvars` (which Feast applies to `feature_store.yaml`) does.
fn expand_vars(text: &str, var: impl Fn(&str) -> Option<String>) -> String {
    let is_name = |c: char| c.is_ascii_alphanumeric() || c == '_';
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        let (name, written) = match after.strip_prefix('{') {
            Some(braced) => match braced.find('}') {
                Some(end) => (&braced[..end], end + 2),
                None => ("", 0),
            },
            None => {
                let end = after.find(|c| !is_name(c)).unwrap_or(after.len());
                (&after[..end], end)
            }
        };
        match (!name.is_empty()).then(|| var(name)).flatten() {
            Some(value) => out.push_str(&value),
            None => out.push_str(&rest[at..=at + written]),
        }
        rest = &rest[at + 1 + written..];
    }
    out.push_str(rest);
    out
}

fn check_online_store(store: Option<&Yaml>, fpath: &str) -> Result<(), Issue> {
    let (kind, redis_type) = match store {
        None => ("sqlite", None),
        Some(Yaml::String(s)) => (s.as_str(), None),
        Some(m) => (
            m.get("type").and_then(Yaml::as_str).unwrap_or("sqlite"),
            m.get("redis_type").and_then(Yaml::as_str),
        ),
    };
    if kind != "redis" {
        return Err(issue(
            fpath,
            format!(
                "online store '{kind}' is not supported; Ferry reads Feast's Redis online store \
                 only"
            ),
        ));
    }
    if let Some(t @ "redis_sentinel") = redis_type {
        return Err(issue(fpath, format!("redis_type '{t}' is not supported")));
    }
    Ok(())
}

type Converted = (
    Vec<RawEntity>,
    Vec<RawView>,
    Vec<RawService>,
    Vec<RawOnDemandView>,
);

/// Per Ferry view, where Feast stores it; the services read from their precomputed vector.
type Layouts = (BTreeMap<String, ViewStorage>, BTreeSet<String>);

/// The project's views in a Feast registry: the batch ones Ferry reads and the on-demand ones
/// it computes from CEL, by name, and the names of the kind it cannot read (stream).
struct ProjectViews<'a> {
    batch: BTreeMap<&'a str, &'a fp::FeatureViewSpec>,
    on_demand: BTreeMap<&'a str, &'a fp::OnDemandFeatureViewSpec>,
    /// The CEL `ferry.yaml` gives for on-demand views' features.
    given: &'a [RawFeastOnDemand],
    stream: BTreeSet<String>,
    /// Each batch view's version and the pinned views.
    versions: versions::Versions<'a>,
}

impl<'a> ProjectViews<'a> {
    fn of(
        reg: &'a fp::Registry,
        project: &str,
        given: &'a [RawFeastOnDemand],
        pinned: &'a [versions::Pinned],
    ) -> Self {
        let named = |list: Vec<Option<&fp::NamedSpec>>| -> BTreeSet<String> {
            list.into_iter()
                .flatten()
                .filter(|s| s.project == project)
                .map(|s| s.name.clone())
                .collect()
        };
        let versions = versions::Versions::of(reg, project, pinned);
        ProjectViews {
            batch: versions.specs().collect(),
            versions,
            on_demand: odfv::of_project(reg, project),
            given,
            stream: named(
                reg.stream_feature_views
                    .iter()
                    .map(|v| v.spec.as_ref())
                    .collect(),
            ),
        }
    }
}

/// The project's services, the views they select (with only the selected features, and those
/// on-demand views given CEL may read), those views' entities and the on-demand views given
/// CEL, as if written in `ferry.yaml`.
fn convert(
    reg: &fp::Registry,
    project: &str,
    given: &[RawFeastOnDemand],
    versioning: bool,
    issues: &mut Vec<Issue>,
) -> (Converted, Layouts) {
    let (pinned, problems) = versions::pinned(reg, project, versioning);
    issues.extend(problems.into_iter().map(|(path, why)| issue(&path, why)));
    let views = ProjectViews::of(reg, project, given, &pinned);
    let mut selected: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    let (on_demand, read) = odfv::definitions(given, &views.on_demand, &views.batch, issues);
    for (view, features) in read {
        // Only the types Ferry serves: a feature of another type that an expression names is
        // then "no feature" to the checker, never a refusal of the view.
        let servable = views.batch[view]
            .features
            .iter()
            .filter(|f| features.contains(&f.name.as_str()))
            .filter(|f| feature_type(f.value_type).is_some())
            .map(|f| f.name.as_str());
        selected.entry(view).or_default().extend(servable);
    }
    let specs = reg.feature_services.iter().filter_map(|s| s.spec.as_ref());
    let specs: Vec<_> = specs.filter(|spec| spec.project == project).collect();
    let services = specs
        .iter()
        .map(|spec| service(spec, &views, &mut selected, issues))
        .collect();
    // Feast reads a precompute_online service's vector unless it has on-demand views.
    let precomputed = specs
        .iter()
        .filter(|s| s.precompute_online)
        .filter(|s| {
            s.features
                .iter()
                .all(|p| !views.on_demand.contains_key(p.feature_view_name.as_str()))
        })
        .map(|s| s.name.clone())
        .collect();
    let storage = selected
        .keys()
        .map(|&name| (name.to_owned(), views.versions.storage(name, versioning)))
        .collect();
    let mut entity_names = BTreeSet::new();
    let raw_views = selected
        .iter()
        .map(|(name, features)| {
            let v = views.batch[name];
            entity_names.extend(v.entities.iter().cloned());
            raw_view(v, features, issues)
        })
        .collect();
    let entities = entities(reg, project, &entity_names, issues);
    (
        (entities, raw_views, services, on_demand),
        (storage, precomputed),
    )
}

/// One Feast feature service as `ferry.yaml` would select it (`view:feature` refs), adding what
/// it selects to `selected`; a projection Ferry cannot serve is an issue.
fn service<'a>(
    spec: &'a fp::FeatureServiceSpec,
    views: &ProjectViews<'a>,
    selected: &mut BTreeMap<&'a str, BTreeSet<&'a str>>,
    issues: &mut Vec<Issue>,
) -> RawService {
    let path = format!("feast feature service '{}'", spec.name);
    let mut refs = Vec::new();
    for p in &spec.features {
        let name = p.feature_view_name.as_str();
        let ppath = format!("{path}: feature view '{name}'");
        if views.stream.contains(name) {
            issues.push(issue(&ppath, "stream feature views are not supported"));
        } else if !p.feature_view_name_alias.is_empty() {
            issues.push(issue(
                &ppath,
                "feature view aliases (with_name) are not supported",
            ));
        } else if !p.join_key_map.is_empty() {
            issues.push(issue(
                &ppath,
                "join key maps (with_join_key_map) are not supported",
            ));
        } else if let Some(odfv) = views.on_demand.get(name) {
            if odfv.disabled {
                issues.push(issue(&ppath, "is disabled (Feast serves nothing from it)"));
            }
            if let Err(e) = odfv::select(name, p, views.given, &ppath, &mut refs) {
                issues.push(e);
            }
        } else if let Some((name, v)) = views.versions.view(name, p.version_tag) {
            if !v.online {
                issues.push(issue(&ppath, "is not online (online=False)"));
            }
            if v.disabled {
                issues.push(issue(
                    &ppath,
                    "is disabled (Feast serves nothing from it; `feast feature-views enable` \
                     it or drop it from the service)",
                ));
            }
            let set = selected.entry(name).or_default();
            for c in &p.feature_columns {
                set.insert(c.name.as_str());
                refs.push(format!("{name}:{}", c.name));
            }
        } else if p.version_tag.is_some() {
            // The pin's own problem was reported by `versions::pinned`.
        } else {
            issues.push(issue(&ppath, "not in the registry"));
        }
    }
    RawService {
        name: spec.name.clone(),
        features: refs,
    }
}

fn raw_view(
    v: &fp::FeatureViewSpec,
    selected: &BTreeSet<&str>,
    issues: &mut Vec<Issue>,
) -> RawView {
    let path = format!("feast feature view '{}'", v.name);
    let features = v
        .features
        .iter()
        .filter(|f| selected.contains(f.name.as_str()))
        .map(|f| RawFeature {
            name: f.name.clone(),
            ty: feature_type(f.value_type)
                .unwrap_or_else(|| {
                    issues.push(issue(
                        &format!("{path}: feature '{}'", f.name),
                        format!("Feast type {} is not supported", type_name(f.value_type)),
                    ));
                    "int64"
                })
                .to_owned(),
            default: None,
        })
        .collect();
    let ttl = v.ttl.as_ref().map(|d| d.seconds).filter(|s| *s > 0);
    RawView {
        name: v.name.clone(),
        entities: v.entities.clone(),
        ttl: ttl.map(|s| Yaml::String(format!("{s}s"))),
        source: None,
        features,
        from_feast: true,
    }
}

fn entities(
    reg: &fp::Registry,
    project: &str,
    names: &BTreeSet<String>,
    issues: &mut Vec<Issue>,
) -> Vec<RawEntity> {
    let mut out = Vec::new();
    for name in names {
        let path = format!("feast entity '{name}'");
        if name == "__dummy" {
            issues.push(issue(
                &path,
                "feature views without entities are not supported",
            ));
            continue;
        }
        let Some(e) = reg
            .entities
            .iter()
            .filter_map(|e| e.spec.as_ref())
            .find(|e| e.project == project && &e.name == name)
        else {
            issues.push(issue(&path, "not in the registry"));
            continue;
        };
        let ty = match Fvt::try_from(e.value_type) {
            Ok(Fvt::String) => "string",
            Ok(Fvt::Int64) => "int64",
            _ => {
                issues.push(issue(
                    &path,
                    format!(
                        "join key type {} is not supported (string or int64)",
                        type_name(e.value_type)
                    ),
                ));
                continue;
            }
        };
        out.push(RawEntity {
            name: e.name.clone(),
            join_key: e.join_key.clone(),
            ty: ty.to_owned(),
        });
    }
    out
}

#[cfg(test)]
#[path = "feast_tests.rs"]
mod tests;
