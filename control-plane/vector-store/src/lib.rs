//! `ferry-vector-store`: the stored vector (`ferry.v1.StoredVector`, one per entity per
//! FeatureService in Redis) as both write paths share it, `ferry materialize` and the writes
//! `ferry serve` executes; neither reaches into the other.
//!
//! Crate map:
//! - [`encode`]: a vector's bytes straight from kept source rows (what prost would write).
//! - [`merge`]: the merge rule: a view's part is replaced only by one at least as new
//!   (`merge_rows` for pushed rows, `merge_vector` for the files' whole vector).
//! - [`cas`]: the atomic compare-and-set of one key (the Lua script and its command).

pub mod cas;
pub mod encode;
pub mod merge;
