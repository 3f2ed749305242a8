//! Sizes a client declares — a tensor's shape, a row or entity count, a list's length — checked
//! here, with checked arithmetic, before anything is allocated, reserved or looped over; and the
//! buffers whose size a client decides reserved fallibly. Every format calls these, not a check
//! of its own: in the native build a failed allocation aborts Envoy (`catch_unwind` cannot
//! catch it), and in the Wasm build it traps the VM.
//!
//! Sizes that only the body's length bounds (elements parsed from it, a copy of it) need no
//! check here: the route's `max_body_bytes` has bounded them already.

use crate::config::Route;
use crate::error::FerryError;

/// A declared size as a `usize` within `limit`; over it (or not representable) is a `413`
/// naming `what` and the limit. `limit_name` says which limit it is (for the message).
pub fn within(
    what: &dyn Fn() -> String,
    size: u64,
    limit: u64,
    limit_name: &str,
) -> Result<usize, FerryError> {
    if size > limit {
        return Err(over(what, size, format!("{limit_name} of {limit}")));
    }
    usize::try_from(size).map_err(|_| over(what, size, format!("{limit_name} of {limit}")))
}

/// A count of instances or entities the client declares (a tensor's first dimension, the rows
/// of a column): within the route's `max_entities`, and not zero. Refused as the entity counts
/// of every format are (`no_entities`, `too_many_entities`).
pub fn entities(size: u64, route: &Route) -> Result<usize, FerryError> {
    if size == 0 {
        return Err(FerryError::NoEntities);
    }
    if size > u64::from(route.max_entities) {
        return Err(FerryError::TooManyEntities {
            limit: route.max_entities,
            count: size,
        });
    }
    usize::try_from(size).map_err(|_| FerryError::TooManyEntities {
        limit: route.max_entities,
        count: size,
    })
}

/// The number of elements a shape declares (the product of its dimensions), computed without
/// overflow, within `limit`.
pub fn elements(
    what: &dyn Fn() -> String,
    dims: &[u64],
    limit: u64,
    limit_name: &str,
) -> Result<usize, FerryError> {
    let product = dims
        .iter()
        .try_fold(1u64, |acc, d| acc.checked_mul(*d))
        .ok_or_else(|| {
            over(
                what,
                u64::MAX,
                format!("{limit_name} of {limit} (its dimensions multiply past 2^64)"),
            )
        })?;
    within(what, product, limit, limit_name)
}

/// An empty vector with room for `n` elements, reserved fallibly: a failure is a `413`, never
/// an abort.
pub fn vec_with<T>(what: &dyn Fn() -> String, n: usize) -> Result<Vec<T>, FerryError> {
    let mut v = Vec::new();
    reserve(&mut v, what, n)?;
    Ok(v)
}

/// Room for `n` more elements in `v`, reserved fallibly.
pub fn reserve<T>(v: &mut Vec<T>, what: &dyn Fn() -> String, n: usize) -> Result<(), FerryError> {
    v.try_reserve(n).map_err(|_| {
        over(
            what,
            u64::try_from(n).unwrap_or(u64::MAX),
            "what memory could be reserved for it".to_string(),
        )
    })
}

fn over(what: &dyn Fn() -> String, size: u64, limit: String) -> FerryError {
    FerryError::DeclaredTooLarge {
        what: what(),
        size,
        limit,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::fixture::route_with;

    fn what() -> String {
        "input tensor 'amount'".into()
    }

    #[test]
    fn sizes_over_their_limit_are_413_naming_it() {
        assert_eq!(within(&what, 7, 7, "the limit").unwrap(), 7);
        let e = within(&what, 8, 7, "the list limit").unwrap_err();
        assert_eq!((e.status(), e.code()), (413, "declared_size_too_large"));
        assert_eq!(
            e.message(),
            "input tensor 'amount' declares 8, over the list limit of 7"
        );
    }

    #[test]
    fn shapes_multiply_without_overflow() {
        assert_eq!(elements(&what, &[3, 4], 12, "l").unwrap(), 12);
        assert_eq!(elements(&what, &[], 12, "l").unwrap(), 1);
        assert_eq!(elements(&what, &[0, u64::MAX], 12, "l").unwrap(), 0);
        for dims in [
            vec![u64::from(u32::MAX), u64::from(u32::MAX), 2],
            vec![1 << 62, 4],
        ] {
            let e = elements(&what, &dims, 1 << 20, "l").unwrap_err();
            assert_eq!(e.code(), "declared_size_too_large", "{dims:?}");
        }
    }

    #[test]
    fn entity_counts_are_checked_against_the_route() {
        let c = route_with(|_| {});
        let route = &c.routes[0];
        let max = u64::from(route.max_entities);
        assert_eq!(entities(max, route).unwrap() as u64, max);
        assert_eq!(entities(0, route).unwrap_err().code(), "no_entities");
        for huge in [max + 1, u64::from(u32::MAX), 1 << 35, 1 << 62, u64::MAX] {
            let e = entities(huge, route).unwrap_err();
            assert_eq!((e.status(), e.code()), (413, "too_many_entities"), "{huge}");
        }
    }

    #[test]
    fn a_reservation_that_cannot_be_made_is_refused_not_aborted() {
        let e = vec_with::<u64>(&what, usize::MAX).unwrap_err();
        assert_eq!((e.status(), e.code()), (413, "declared_size_too_large"));
        assert!(e.message().contains("what memory could be reserved"));
        let v = vec_with::<u8>(&what, 16).unwrap();
        assert!(v.capacity() >= 16);
    }
}
