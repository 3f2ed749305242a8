//! The request path of a scenario: a route's path `/protected/NAME/TAIL` put through changes
//! whose effect on the route match is known by construction, so that the filter's decision can
//! be checked against it rather than against its own normalisation.

use ferry_core::config::Config;

use super::input::Bytes;

/// Where the path leads, as the generator built it (not as the filter computes it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expect {
    /// A spelling of this route's path (percent-encoded unreserved characters, `//`, `.`,
    /// `..`, a query): the filter must handle the request on this route.
    Route(usize),
    /// Under the protected prefix but no route's path (case changed, `%2F` for a `/`): 404.
    NoRoute,
    /// Outside every protected prefix and route: the request passes, untouched but for
    /// Ferry-owned headers, which are removed.
    Pass,
}

/// A path segment and what it is to the route match.
#[derive(Clone, PartialEq, Eq)]
enum Role {
    Protected,
    /// The route's name segment (the last one of the route's prefix `/protected/NAME/`).
    Name,
    Tail,
    /// Removed by normalisation (`.`, empty, a segment and its `..`), or a dead route name.
    Noise,
    /// Two segments joined by `%2F` (one segment to a server that does not decode it).
    Joined,
}

const UNPROTECTED: [&str; 4] = ["open", "protectedx", "protecte", "v1"];
const TAILS: [&[&str]; 5] = [&["infer"], &[], &["v1:predict"], &["a", "b"], &["x"]];
const DOT: [&str; 3] = [".", "%2e", "%2E"];
const DOTDOT: [&str; 4] = ["..", "%2e%2e", ".%2E", "%2E."];

/// The path: a route's path `/protected/NAME/TAIL` put through changes whose effect on
/// matching is known by construction (see [`Expect`]). Returns it, its expectation, and the
/// route it started from.
pub fn path(b: &mut Bytes<'_>, config: &Config) -> (String, Expect, usize) {
    let n = config.routes.len();
    let base = b.below(n);
    let mut segs: Vec<(String, Role)> = vec![
        ("protected".into(), Role::Protected),
        (config.routes[base].name.clone(), Role::Name),
    ];
    for t in TAILS[b.below(TAILS.len())] {
        segs.push((t.to_string(), Role::Tail));
    }
    let mut target = base;
    let (mut pass, mut no_route) = (false, false);
    // `/protected/A/../B/tail` is B's path.
    let swap = b.one_in(6);
    if swap {
        target = b.below(n);
        segs[1].1 = Role::Noise;
        segs.insert(2, (DOTDOT[b.below(4)].into(), Role::Noise));
        segs.insert(3, (config.routes[target].name.clone(), Role::Name));
    }
    if b.one_in(10) {
        segs[0].0 = UNPROTECTED[b.below(UNPROTECTED.len())].into();
        pass = true;
    }
    if b.one_in(8) {
        // A case change: `/Protected/...` is still under the prefix (compared without case),
        // but matches no route (route paths are compared exactly).
        let live: Vec<usize> = (0..segs.len())
            .filter(|i| matches!(segs[*i].1, Role::Protected | Role::Name))
            .collect();
        let i = live[b.below(live.len())];
        let letters: Vec<usize> = segs[i]
            .0
            .char_indices()
            .filter(|(_, c)| c.is_ascii_alphabetic())
            .map(|(k, _)| k)
            .collect();
        if !letters.is_empty() {
            let k = letters[b.below(letters.len())];
            let mut s = segs[i].0.clone().into_bytes();
            s[k] ^= 0x20;
            segs[i].0 = String::from_utf8_lossy(&s).into_owned();
            no_route = true;
        }
    }
    if !swap && b.one_in(10) {
        // `%2F` is not a `/` to the route match: `/protected%2FNAME/` is outside the prefix,
        // `/protected/NAME%2Ftail` under it but no route's.
        let slash = ["%2F", "%2f"][b.below(2)];
        let at = b.below(2);
        let joined = match segs.get(at + 1) {
            Some((next, _)) => format!("{}{slash}{next}", segs[at].0),
            None => format!("{}{slash}", segs[at].0),
        };
        segs[at] = (joined, Role::Joined);
        if at + 1 < segs.len() {
            segs.remove(at + 1);
        }
        if at == 0 {
            pass = true;
        } else {
            no_route = true;
        }
    }
    for _ in 0..b.below(4) {
        let at = b.below(segs.len() + 1);
        match b.below(5) {
            0 => segs.insert(at, (String::new(), Role::Noise)),
            1 => segs.insert(at, (DOT[b.below(3)].into(), Role::Noise)),
            2 if at == 0 => segs.insert(0, (DOTDOT[b.below(4)].into(), Role::Noise)),
            _ => {
                segs.insert(at, (DOTDOT[b.below(4)].into(), Role::Noise));
                segs.insert(at, ("zz".into(), Role::Noise));
            }
        }
    }
    for _ in 0..b.below(4) {
        // Percent-encode one unreserved character (any hex case): the same path.
        let i = b.below(segs.len());
        let s = &segs[i].0;
        if s.is_empty() || s.contains('%') {
            continue;
        }
        let k = b.below(s.len());
        let c = s.as_bytes()[k];
        if !(c.is_ascii_alphanumeric() || matches!(c, b'-' | b'.' | b'_' | b'~')) {
            continue;
        }
        let enc = if b.one_in(2) {
            format!("%{c:02x}")
        } else {
            format!("%{c:02X}")
        };
        segs[i].0 = format!("{}{enc}{}", &s[..k], &s[k + 1..]);
    }
    let mut raw = String::new();
    for (s, _) in &segs {
        raw.push('/');
        raw.push_str(s);
    }
    // A route's prefix ends with `/`: with no tail the path must too.
    if segs.last().is_some_and(|(_, r)| *r == Role::Name) {
        raw.push('/');
    }
    if b.one_in(4) {
        raw.push_str(["?a=b", "?x=/../../y", "#frag", "?"][b.below(4)]);
    }
    let expect = if pass {
        Expect::Pass
    } else if no_route {
        Expect::NoRoute
    } else {
        Expect::Route(target)
    };
    (raw, expect, base)
}
