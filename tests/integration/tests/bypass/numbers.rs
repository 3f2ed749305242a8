//! Client numbers by their exact text: JSON numbers an f64 cannot hold (1e400) or would change
//! (12345678901234567890 has more digits than an f64 keeps) are compared as the characters the
//! client sent.

use serde_json::Value as Json;

use crate::outcome::text;

/// The number token right after the object key `"field":` in `text`, if any.
pub fn number_token(text: &str, field: &str) -> Option<String> {
    let key = format!("\"{field}\"");
    let mut from = 0;
    while let Some(at) = text[from..].find(&key) {
        let after = from + at + key.len();
        let rest = text[after..].trim_start();
        if let Some(rest) = rest.strip_prefix(':') {
            let rest = rest.trim_start();
            let token: String = rest
                .chars()
                .take_while(|c| c.is_ascii_digit() || "+-.eE".contains(*c))
                .collect();
            if !token.is_empty() {
                return Some(token);
            }
        }
        from = after;
    }
    None
}

/// Parses JSON after turning the number after each `"field":` of `fields` into a string of its
/// exact text: numbers an f64 cannot hold (1e400) parse, and comparing two bodies compares
/// those numbers' text.
pub fn parse_quoting(body: &[u8], fields: &[&str]) -> Result<Json, String> {
    let mut t = String::from_utf8_lossy(body).into_owned();
    for field in fields {
        let key = format!("\"{field}\"");
        let mut from = 0;
        while let Some(at) = t[from..].find(&key) {
            let after = from + at + key.len();
            let colon = t[after..].len() - t[after..].trim_start().len();
            if !t[after + colon..].starts_with(':') {
                from = after;
                continue;
            }
            let start_rest = after + colon + 1;
            let ws = t[start_rest..].len() - t[start_rest..].trim_start().len();
            let start = start_rest + ws;
            let len = t[start..]
                .chars()
                .take_while(|c| c.is_ascii_digit() || "+-.eE".contains(*c))
                .count();
            if len > 0 {
                let token = t[start..start + len].to_string();
                t.replace_range(start..start + len, &format!("\"{token}\""));
            }
            from = start + len + if len > 0 { 2 } else { 0 };
        }
    }
    serde_json::from_str(&t).map_err(|e| format!("not JSON ({e}): {}", text(t.as_bytes())))
}
