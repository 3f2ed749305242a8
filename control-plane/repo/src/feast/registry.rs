//! Where a Feast repo's registry lives (`registry:` of `feature_store.yaml`) and how it is
//! read: the file `feast apply` writes, Feast's SQL registry on PostgreSQL
//! ([`super::sql`]) or Feast's registry server ([`super::remote`]). Each yields the
//! same `feast.core.Registry`, so nothing downstream knows which it was.
//!
//! Repo loading is synchronous (the CLI, and `ferry serve`'s watcher off the runtime's
//! threads), the database and gRPC clients async: each read runs on a thread of its own with a
//! small runtime of its own, which works whether or not the caller is inside a runtime.

use std::path::{Path, PathBuf};

use ferry_protos::feast_proto as fp;
use prost::Message;
use serde_norway::Value as Yaml;

use super::remote::{self, RemoteRegistry};
use super::sql::{self, SqlRegistry};

/// A Feast registry.
#[derive(Clone, Debug)]
pub enum RegistrySource {
    /// `registry: PATH` or `registry_type: file` (relative to the Feast repo).
    File(PathBuf),
    /// `registry_type: sql` with a PostgreSQL URL.
    Sql(Box<SqlRegistry>),
    /// `registry_type: remote`: Feast's registry server.
    Remote(RemoteRegistry),
}

impl std::fmt::Display for RegistrySource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RegistrySource::File(p) => write!(f, "{}", p.display()),
            RegistrySource::Sql(s) => write!(f, "{}", s.shown),
            RegistrySource::Remote(r) => write!(f, "{}", r.shown()),
        }
    }
}

/// The registry `registry` (and, for a remote one, `auth`) describe, for the Feast repo in
/// `dir`; an error says what is wrong with it.
pub fn parse(
    registry: Option<&Yaml>,
    auth: Option<&Yaml>,
    dir: &Path,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<RegistrySource, String> {
    let (path, kind) = match registry {
        Some(Yaml::String(s)) => (s.clone(), "file"),
        Some(m) => (
            m.get("path")
                .and_then(Yaml::as_str)
                .unwrap_or("")
                .to_owned(),
            m.get("registry_type")
                .and_then(Yaml::as_str)
                .unwrap_or("file"),
        ),
        None => return Err("no registry".into()),
    };
    match (kind, registry) {
        ("sql", _) => Ok(RegistrySource::Sql(Box::new(sql::parse(&path, env)?))),
        ("remote", Some(m)) => Ok(RegistrySource::Remote(remote::parse(m, auth, dir, env)?)),
        ("file", _) if !path.contains("://") || path.starts_with("file://") => Ok(
            RegistrySource::File(dir.join(path.trim_start_matches("file://"))),
        ),
        _ => Err(format!(
            "registry '{}' (type {kind}) is not supported; Ferry reads a local file, a SQL \
             registry on PostgreSQL (registry_type: sql) or Feast's registry server \
             (registry_type: remote)",
            sql::redact(&path)
        )),
    }
}

impl RegistrySource {
    /// The registry file, for a file registry.
    pub fn file(&self) -> Option<&Path> {
        match self {
            RegistrySource::File(p) => Some(p),
            _ => None,
        }
    }

    /// The whole registry (for a SQL registry, `project`'s objects), and a notice for each
    /// message holding fields our `.proto` does not declare (`unknown`).
    pub fn read(&self, project: &str) -> Result<(fp::Registry, Vec<String>), String> {
        match self {
            RegistrySource::File(file) => {
                let bytes = std::fs::read(file)
                    .map_err(|e| format!("{e} (has `feast apply` been run in the Feast repo?)"))?;
                fp::Registry::decode(bytes.as_slice())
                    .map(|r| (r, super::unknown::notices(&bytes)))
                    .map_err(|e| format!("not a Feast registry: {e}"))
            }
            RegistrySource::Sql(sql) => {
                let objects = on_own_runtime(sql.fetch(project))?;
                assemble(objects.iter().map(|(f, o)| (*f, o.as_slice())), project)
            }
            RegistrySource::Remote(remote) => {
                let objects = on_own_runtime(remote.fetch(project))?;
                assemble(objects.iter().map(|(f, o)| (*f, o.as_ref())), project)
            }
        }
    }

    /// Bytes that change when a database or server registry's content does (None for a file:
    /// the watcher hashes the file itself). An unreachable registry gives a fixed stamp, so
    /// the watcher reloads (and reports the error) once, not on every poll.
    pub fn stamp(&self, project: &str) -> Option<Vec<u8>> {
        let stamp = match self {
            RegistrySource::File(_) => return None,
            RegistrySource::Sql(sql) => on_own_runtime(sql.stamp(project)),
            RegistrySource::Remote(remote) => on_own_runtime(remote.fetch(project))
                .map(|objects| digest(objects.iter().map(|(f, o)| (*f, o.as_ref())))),
        };
        Some(stamp.unwrap_or_else(|_| b"unreachable".to_vec()))
    }
}

/// A registry of `project` from its objects, each (field number of its list in
/// `feast.core.Registry`, serialized object): framed as elements of those repeated fields,
/// they decode as the registry file would, and every object carries `project` (as Feast's
/// `proto()` sets it); with the notices of fields our `.proto` does not declare.
fn assemble<'a>(
    objects: impl Iterator<Item = (u32, &'a [u8])>,
    project: &str,
) -> Result<(fp::Registry, Vec<String>), String> {
    use prost::encoding::{encode_key, encode_varint, WireType};
    let mut bytes = Vec::new();
    for (field, object) in objects {
        encode_key(field, WireType::LengthDelimited, &mut bytes);
        encode_varint(object.len() as u64, &mut bytes);
        bytes.extend_from_slice(object);
    }
    let mut reg = fp::Registry::decode(bytes.as_slice())
        .map_err(|e| format!("a registry object is not a Feast object: {e}"))?;
    let p = || project.to_owned();
    let specs = (reg.entities.iter_mut().filter_map(|o| o.spec.as_mut()))
        .map(|s| &mut s.project)
        .chain(
            reg.feature_views
                .iter_mut()
                .filter_map(|o| o.spec.as_mut())
                .map(|s| &mut s.project),
        )
        .chain(
            reg.feature_services
                .iter_mut()
                .filter_map(|o| o.spec.as_mut())
                .map(|s| &mut s.project),
        )
        .chain(
            reg.on_demand_feature_views
                .iter_mut()
                .filter_map(|o| o.spec.as_mut())
                .map(|s| &mut s.project),
        )
        .chain(
            reg.stream_feature_views
                .iter_mut()
                .filter_map(|o| o.spec.as_mut())
                .map(|s| &mut s.project),
        );
    for project in specs {
        *project = p();
    }
    Ok((reg, super::unknown::notices(&bytes)))
}

/// A digest of a database or server registry's objects, in the order read.
fn digest<'a>(objects: impl Iterator<Item = (u32, &'a [u8])>) -> Vec<u8> {
    use sha2::{Digest, Sha256};
    let mut hasher = Sha256::new();
    for (field, object) in objects {
        hasher.update(field.to_le_bytes());
        hasher.update((object.len() as u64).to_le_bytes());
        hasher.update(object);
    }
    hasher.finalize().to_vec()
}

/// Runs `work` to completion on a new thread with a current-thread runtime.
fn on_own_runtime<T: Send>(
    work: impl std::future::Future<Output = Result<T, String>> + Send,
) -> Result<T, String> {
    std::thread::scope(|scope| {
        scope
            .spawn(|| {
                tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .map_err(|e| format!("starting a runtime: {e}"))?
                    .block_on(work)
            })
            .join()
            .unwrap_or_else(|_| Err("the registry read failed".into()))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn objects_become_the_registry_a_file_holds_with_their_project_set() {
        let entity = fp::Entity {
            spec: Some(fp::EntitySpec {
                name: "user".into(),
                ..Default::default()
            }),
        };
        let service = fp::FeatureService {
            spec: Some(fp::FeatureServiceSpec {
                name: "scoring".into(),
                ..Default::default()
            }),
        };
        let (e, s) = (entity.encode_to_vec(), service.encode_to_vec());
        let objects = [(1, e.as_slice()), (7, s.as_slice())];
        let (reg, notices) = assemble(objects.into_iter(), "shop").unwrap();
        assert!(notices.is_empty(), "{notices:?}");
        let spec = reg.entities[0].spec.as_ref().unwrap();
        assert_eq!(
            (spec.name.as_str(), spec.project.as_str()),
            ("user", "shop")
        );
        let spec = reg.feature_services[0].spec.as_ref().unwrap();
        assert_eq!(
            (spec.name.as_str(), spec.project.as_str()),
            ("scoring", "shop")
        );
        assert!(assemble([(1, &b"\xff\xff"[..])].into_iter(), "shop").is_err());
    }

    #[test]
    fn registries_are_told_apart_by_type_and_path() {
        let dir = Path::new("/feast");
        let env = |_: &str| None;
        let parsed = |yaml: &str| {
            let y: Yaml = serde_norway::from_str(yaml).unwrap();
            parse(Some(&y), None, dir, &env).map(|r| r.to_string())
        };
        assert_eq!(
            parsed("data/registry.db"),
            Ok("/feast/data/registry.db".into())
        );
        assert_eq!(parsed("{path: file:///r.db}"), Ok("/r.db".into()));
        let sql = parsed("{registry_type: sql, path: 'postgresql://u:pw@h/d'}");
        assert_eq!(sql, Ok("postgresql://u:***@h/d".into()));
        let remote = parsed("{registry_type: remote, path: 'h:6570'}");
        assert_eq!(remote, Ok("grpc://h:6570".into()));
        let s3 = parsed("s3://bucket/registry.db").unwrap_err();
        assert!(s3.contains("(type file) is not supported"), "{s3}");
        let snowflake = parsed("{registry_type: snowflake.registry, path: x}").unwrap_err();
        assert!(snowflake.contains("type snowflake.registry"), "{snowflake}");
        assert!(parse(None, None, dir, &env).is_err());
    }
}
