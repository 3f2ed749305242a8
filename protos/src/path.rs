//! The request path as routes see it: the form a model server resolves a path to, so that no
//! spelling of a Ferry route's path (`%61`, `//`, `/./`, `/../`) reaches the model without
//! passing through that route. The filter matches on it; `ferry apply` checks route paths and
//! protected prefixes with it. Envoy is configured to normalise the same way before routing
//! (`normalize_path`, `merge_slashes`); doing it here too keeps the filter safe behind an Envoy
//! that does not (Istio, Envoy Gateway, a hand-written bootstrap).

/// RFC 3986 normalisation of a request path (the query is dropped): percent-encoded unreserved
/// characters decoded (`%61` → `a`), other percent-encodings kept with uppercase hex, runs of
/// `/` merged, `.` and `..` segments removed (never above the root).
pub fn normalize(raw: &str) -> String {
    let path = raw.split(['?', '#']).next().unwrap_or("");
    let decoded = decode_unreserved(path);
    let mut segments: Vec<&str> = Vec::new();
    for segment in decoded.split('/') {
        match segment {
            "" | "." => {}
            ".." => {
                segments.pop();
            }
            s => segments.push(s),
        }
    }
    let mut out = String::with_capacity(decoded.len() + 1);
    for s in &segments {
        out.push('/');
        out.push_str(s);
    }
    // A trailing slash is kept: `/v1/models/` and `/v1/models` are different paths to a server.
    let trailing = decoded.ends_with('/') || decoded.ends_with("/.") || decoded.ends_with("/..");
    if out.is_empty() || (trailing && !segments.is_empty()) {
        out.push('/');
    }
    out
}

fn decode_unreserved(path: &str) -> String {
    let bytes = path.as_bytes();
    let mut out = String::with_capacity(path.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            if let (Some(h), Some(l)) = (hex(bytes[i + 1]), hex(bytes[i + 2])) {
                let c = h * 16 + l;
                if c.is_ascii_alphanumeric() || matches!(c, b'-' | b'.' | b'_' | b'~') {
                    out.push(char::from(c));
                } else {
                    out.push('%');
                    out.push(char::from(bytes[i + 1].to_ascii_uppercase()));
                    out.push(char::from(bytes[i + 2].to_ascii_uppercase()));
                }
                i += 3;
                continue;
            }
        }
        // Copy one whole UTF-8 character (the path came from a str).
        let len = utf8_len(bytes[i]);
        out.push_str(path.get(i..i + len).unwrap_or(""));
        i += len.max(1);
    }
    out
}

fn hex(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

fn utf8_len(first: u8) -> usize {
    match first {
        0xF0..=0xFF => 4,
        0xE0..=0xEF => 3,
        0xC0..=0xDF => 2,
        _ => 1,
    }
}

/// Whether `path` (normalised) lies under `prefix` (lowercase), compared case-insensitively: a
/// model server may route `/V1/Models/x` as `/v1/models/x`.
pub fn is_under(path: &str, prefix: &str) -> bool {
    path.len() >= prefix.len()
        && path.as_bytes()[..prefix.len()].eq_ignore_ascii_case(prefix.as_bytes())
}

/// A route's path condition as a snapshot must hold it: starting with `/` and already in the
/// form [`normalize`] gives, since that is the form it is compared with.
pub fn is_normalized(path: &str) -> bool {
    path.starts_with('/') && normalize(path) == path
}

/// A protected prefix as a snapshot must hold it: normalised and lowercase (so that the
/// case-insensitive comparison needs no case folding of the prefix).
pub fn is_protected_prefix(prefix: &str) -> bool {
    is_normalized(prefix) && !prefix.bytes().any(|b| b.is_ascii_uppercase())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spellings_of_one_path_normalise_to_it() {
        let want = "/v1/models/fraud:predict";
        for raw in [
            "/v1/models/fraud:predict",
            "/v1/models/fr%61ud:predict",
            "/v1/models/fr%61ud:predict?x=1",
            "//v1/models/fraud:predict",
            "/v1//models///fraud:predict",
            "/v1/./models/fraud:predict",
            "/v1/x/../models/fraud:predict",
            "/../v1/models/fraud:predict",
            "/%76%31/models/fraud:predict",
            "/v1/models/%2e/fraud:predict",
            "/v1/x/%2E%2E/models/fraud:predict",
        ] {
            assert_eq!(normalize(raw), want, "{raw}");
        }
    }

    #[test]
    fn reserved_escapes_stay_escaped_and_trailing_slashes_stay() {
        assert_eq!(normalize("/a%2fb"), "/a%2Fb");
        assert_eq!(normalize("/a%3Ab"), "/a%3Ab");
        assert_eq!(normalize("/a%zz"), "/a%zz");
        assert_eq!(normalize("/a%4"), "/a%4");
        assert_eq!(normalize("/a%"), "/a%");
        assert_eq!(normalize("/v1/models/"), "/v1/models/");
        assert_eq!(normalize("/v1/models/x/.."), "/v1/models/");
        assert_eq!(normalize(""), "/");
        assert_eq!(normalize("/"), "/");
        assert_eq!(normalize("/.."), "/");
        assert_eq!(normalize("/é/x"), "/é/x");
    }

    #[test]
    fn route_paths_and_prefixes_must_be_normalised() {
        assert!(is_normalized("/v1/models/fraud"));
        assert!(is_normalized("/t/v2/"));
        assert!(!is_normalized("v1"));
        assert!(!is_normalized("/v1//models"));
        assert!(!is_normalized("/v1/models/fr%61ud"));
        assert!(!is_normalized("/v1/models?x=1"));
        assert!(is_protected_prefix("/v1/models/"));
        assert!(!is_protected_prefix("/V1/models/"));
    }

    #[test]
    fn protected_prefixes_ignore_case() {
        assert!(is_under("/V1/Models/fraud", "/v1/models/"));
        assert!(is_under("/v1/models/", "/v1/models/"));
        assert!(!is_under("/v1/model", "/v1/models/"));
        assert!(!is_under("/v2/models/x", "/v1/models/"));
    }
}
