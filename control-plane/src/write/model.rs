//! What a write may touch, compiled from the served snapshot and a held-back one: each writable
//! view's schema (from the current snapshot: it validates every row) and every stored vector
//! that holds the view, one [`Target`] per (FeatureService, fingerprint), so that a push between
//! a materialize and its release lands under both fingerprints.

use std::collections::HashMap;
use std::sync::Arc;

use ferry_protos::v1;

/// One stored vector layout that holds a view.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    pub service: String,
    pub fingerprint: u64,
    /// How many views the service's vector holds.
    pub views: usize,
    /// Where this view's part sits in the vector.
    pub slot: usize,
    /// The service's selected features of the view, as indexes into the view's schema
    /// features, in the service's (canonical) order. Empty when the layout cannot take the
    /// view's rows (a held-back snapshot with a feature the served schema does not have).
    pub selected: Vec<usize>,
    /// Why this layout cannot take the view's rows, if it cannot.
    pub unfit: Option<String>,
}

/// A view Ferry writes: its schema and where it is stored.
#[derive(Clone, Debug)]
pub struct ViewModel {
    pub schema: v1::WriteView,
    /// Every (service, fingerprint) holding the view; each is written.
    pub targets: Vec<Target>,
}

/// The compiled write model of one (current, held-back) pair of snapshots.
#[derive(Debug, Default)]
pub struct WriteModel {
    pub project: String,
    /// The snapshot versions it was built from (current, held-back), to reuse it.
    pub versions: (String, Option<String>),
    pub views: HashMap<String, Arc<ViewModel>>,
    /// Push source name → its views' names.
    pub push_sources: HashMap<String, Vec<String>>,
    /// Whether the services are read from Feast's layout (a Feast-backed repo).
    pub feast_backed: bool,
}

impl WriteModel {
    /// Builds the model; `held_back` adds its layouts (not its schemas).
    pub fn build(current: &v1::Snapshot, held_back: Option<&v1::Snapshot>) -> WriteModel {
        let mut views: HashMap<String, ViewModel> = current
            .write_views
            .iter()
            .map(|w| {
                let vm = ViewModel {
                    schema: w.clone(),
                    targets: Vec::new(),
                };
                (w.name.clone(), vm)
            })
            .collect();
        for snap in std::iter::once(current).chain(held_back) {
            for service in snap.services.iter().filter(|s| s.feast.is_none()) {
                for (slot, sv) in service.views.iter().enumerate() {
                    let Some(vm) = views.get_mut(&sv.name) else {
                        continue;
                    };
                    let known = vm
                        .targets
                        .iter()
                        .any(|t| t.service == service.name && t.fingerprint == service.fingerprint);
                    if !known {
                        vm.targets.push(target(service, slot, sv, &vm.schema));
                    }
                }
            }
        }
        WriteModel {
            project: current.project.clone(),
            versions: (
                current.version.clone(),
                held_back.map(|h| h.version.clone()),
            ),
            views: views.into_iter().map(|(k, v)| (k, Arc::new(v))).collect(),
            push_sources: current
                .push_sources
                .iter()
                .map(|p| (p.name.clone(), p.views.clone()))
                .collect(),
            feast_backed: current.services.iter().any(|s| s.feast.is_some()),
        }
    }
}

fn target(
    service: &v1::FeatureService,
    slot: usize,
    sv: &v1::ServiceView,
    schema: &v1::WriteView,
) -> Target {
    let mut selected = Vec::with_capacity(sv.features.len());
    let mut unfit = None;
    for f in &sv.features {
        match schema
            .features
            .iter()
            .position(|s| s.name == f.name && s.r#type == f.r#type)
        {
            Some(i) => selected.push(i),
            None => {
                unfit = Some(format!(
                    "service '{}' at fingerprint {} stores '{}:{}', which the served schema of \
                     the view does not have with that type",
                    service.name,
                    ferry_protos::fingerprint_hex(service.fingerprint),
                    sv.name,
                    f.name
                ));
            }
        }
    }
    if unfit.is_some() {
        selected.clear();
    }
    Target {
        service: service.name.clone(),
        fingerprint: service.fingerprint,
        views: service.views.len(),
        slot,
        selected,
        unfit,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferry_repo::snapshot;
    use ferry_repo::test_support::{load_repo, ORDER_FILES, ORDER_YAML};

    #[test]
    fn every_service_and_held_back_fingerprint_holding_a_view_is_a_target() {
        let (_dir, reg) = load_repo(ORDER_YAML, &ORDER_FILES);
        let current = snapshot::build(&reg.unwrap());
        let model = WriteModel::build(&current, None);
        let alpha = &model.views["alpha"];
        // alpha has a, b, c (sorted by name); the service selects a and c.
        assert_eq!(alpha.targets.len(), 1);
        let t = &alpha.targets[0];
        assert_eq!((t.service.as_str(), t.views, t.slot), ("pair", 2, 0));
        assert_eq!(t.selected, [0, 2]);
        assert_eq!(model.views["zeta"].targets[0].slot, 1);

        // A held-back snapshot adding alpha:b to the service: a second layout, same schema.
        let (_dir2, reg2) = load_repo(
            &ORDER_YAML.replace(r#"[zeta, "alpha:c", "alpha:a"]"#, "[zeta, alpha]"),
            &ORDER_FILES,
        );
        let held = snapshot::build(&reg2.unwrap());
        let model = WriteModel::build(&current, Some(&held));
        let alpha = &model.views["alpha"];
        assert_eq!(alpha.targets.len(), 2);
        assert_ne!(alpha.targets[0].fingerprint, alpha.targets[1].fingerprint);
        assert_eq!(alpha.targets[1].selected, [0, 1, 2]);
        assert_eq!(model.views["zeta"].targets.len(), 2);
        assert_eq!(model.versions.1.as_deref(), Some(held.version.as_str()));
    }
}
