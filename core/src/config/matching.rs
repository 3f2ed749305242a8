//! Which route a request takes: the first whose conditions (normalised path, host, headers)
//! accept it, and the protected prefixes under which an unmatched request is refused.

use super::model::{Config, HostMatch, PathMatch, RouteConditions};

impl Config {
    /// Index of the first route whose conditions accept the request: `path` (query string
    /// ignored), and the request headers through `header` (`:authority` for the host), read
    /// only when a route has such a condition.
    pub fn match_route(
        &self,
        path: &str,
        header: &dyn Fn(&str) -> Option<String>,
    ) -> Option<usize> {
        let path = path.split_once('?').map_or(path, |(p, _)| p);
        let mut host = Lazy { header, host: None };
        self.routes
            .iter()
            .position(|r| r.conditions.accepts(path, &mut host, header))
    }

    /// The protected prefix `path` (normalised) lies under, if any.
    pub fn protected_prefix(&self, path: &str) -> Option<&str> {
        self.protected_paths
            .iter()
            .find(|p| ferry_protos::path::is_under(path, p))
            .map(String::as_str)
    }
}

impl RouteConditions {
    fn accepts(
        &self,
        path: &str,
        host: &mut Lazy<'_>,
        header: &dyn Fn(&str) -> Option<String>,
    ) -> bool {
        if self.by_name_only() {
            return false;
        }
        let path_ok = match &self.path {
            None => true,
            Some(PathMatch::Prefix(p)) => path.starts_with(p.as_str()),
            Some(PathMatch::Exact(p)) => path == p,
        };
        if !path_ok {
            return false;
        }
        if let Some(want) = &self.host {
            let got = host.get();
            let ok = match want {
                HostMatch::Exact(h) => got == h,
                HostMatch::Subdomain(suffix) => {
                    got.len() > suffix.len() && got.ends_with(suffix.as_str())
                }
            };
            if !ok {
                return false;
            }
        }
        self.headers
            .iter()
            .all(|m| match (header(&m.name), &m.exact) {
                (None, _) => false,
                (Some(_), None) => true,
                (Some(v), Some(want)) => &v == want,
            })
    }
}

/// The request's host, read at most once and only when a route asks for it.
struct Lazy<'a> {
    header: &'a dyn Fn(&str) -> Option<String>,
    host: Option<String>,
}

impl Lazy<'_> {
    fn get(&mut self) -> &str {
        let header = self.header;
        self.host
            .get_or_insert_with(|| normalize_host(&header(":authority").unwrap_or_default()))
    }
}

/// `Example.COM:8080` → `example.com`; `[::1]:80` → `[::1]`.
pub fn normalize_host(authority: &str) -> String {
    let host = if authority.starts_with('[') {
        authority
            .split_once(']')
            .map_or(authority, |(h, _)| &authority[..=h.len()])
    } else {
        authority.rsplit_once(':').map_or(authority, |(h, _)| h)
    };
    host.trim_end_matches('.').to_ascii_lowercase()
}

#[cfg(test)]
#[path = "matching_tests.rs"]
mod tests;
