//! The atomic compare-and-set of one stored vector: write the new bytes only if the key still
//! holds what was read (or, read absent, still does not exist). Both write paths use it: a push
//! (`ferry serve`'s writes) and `ferry materialize` beside pushes; each reads, merges in Rust
//! ([`crate::merge`]), sets with this, and on a changed key reads again, at most
//! [`MAX_ATTEMPTS`] times. This is the optimistic protocol of WATCH/MULTI/EXEC without its
//! connection state (ARCHITECTURE.md, "Writes"): on a Cluster each script touches one key, so
//! one slot.

/// Attempts per key before a write is given up as contended.
pub const MAX_ATTEMPTS: u32 = 16;

/// Writes `ARGV[3]` if the key holds `ARGV[2]` (`ARGV[1]` = 1), or does not exist (`ARGV[1]` =
/// 0). An existing key keeps its expiry (KEEPTTL: materialize may have set one).
pub const CAS: &str = r"
local cur = redis.call('GET', KEYS[1])
if ARGV[1] == '0' then
  if cur then return 0 end
  redis.call('SET', KEYS[1], ARGV[3])
  return 1
end
if cur ~= ARGV[2] then return 0 end
redis.call('SET', KEYS[1], ARGV[3], 'KEEPTTL')
return 1
";

/// The compare-and-set of `key` from `stored` (None: the key did not exist) to `new`; it
/// answers 1 when it wrote, 0 when the key had changed.
pub fn cas_cmd(key: &str, stored: Option<&[u8]>, new: &[u8]) -> redis::Cmd {
    let (existed, expected) = match stored {
        Some(s) => ("1", s),
        None => ("0", &[][..]),
    };
    // EVAL with the text: Redis caches the compiled script by its hash; the text is a few
    // hundred bytes beside a vector of a few hundred to a few thousand.
    let mut cmd = redis::cmd("EVAL");
    cmd.arg(CAS)
        .arg(1)
        .arg(key)
        .arg(existed)
        .arg(expected)
        .arg(new);
    cmd
}
