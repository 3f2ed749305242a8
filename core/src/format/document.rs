//! The JSON document of a body format: read from the body, written back as the new body, and
//! how a body of the wrong shape is reported.
//!
//! Numbers keep the client's text: serde_json's `arbitrary_precision` keeps every digit, sign
//! and decimal, but spells an exponent as `e` with a sign (`1e400` is read as `1e+400`). The
//! client's spelling of each such number is noted when the body is read ([`Spellings`]) and put
//! back when the new body is written, so the model receives the number as the client wrote it.

use std::borrow::Cow;
use std::collections::{HashMap, HashSet, VecDeque};

use serde_json::Value as Json;

use crate::error::FerryError;

/// A parsed body and how its client spelled the numbers the reader respells.
#[derive(Debug)]
pub struct Document {
    pub json: Json,
    pub spellings: Spellings,
}

/// For each number text the reader produced that differs from the client's, the client's
/// spellings in body order. Empty (no allocation) for a body without such numbers.
#[derive(Debug, Default)]
pub struct Spellings(HashMap<String, VecDeque<String>>);

/// The body as JSON. A member name given twice in one object is refused: serde_json keeps the
/// last, another parser the first, and the rewritten body would silently hold only one.
pub fn parse_json(body: &[u8]) -> Result<Document, FerryError> {
    let json =
        serde_json::from_slice(body).map_err(|e| FerryError::MalformedJson(e.to_string()))?;
    if let Some(name) = duplicate_member(body) {
        return Err(FerryError::DuplicateField {
            place: "an object of the JSON body".into(),
            field: name,
        });
    }
    Ok(Document {
        json,
        spellings: Spellings::of(body),
    })
}

/// The rewritten document as the new body. Writing a `serde_json::Value` cannot fail (its keys
/// are strings, its numbers finite); should it, the request is refused rather than sent on
/// with an empty body.
pub fn write_document(doc: &Json, spellings: Spellings) -> Result<Vec<u8>, FerryError> {
    let out = serde_json::to_vec(doc)
        .map_err(|e| FerryError::BadShape(format!("cannot write the enriched body: {e}")))?;
    Ok(spellings.restore(out))
}

pub fn shape(msg: &str) -> FerryError {
    FerryError::BadShape(msg.to_string())
}

impl Spellings {
    /// The numbers of a (valid JSON) body whose text the reader changes.
    fn of(body: &[u8]) -> Spellings {
        let mut map: HashMap<String, VecDeque<String>> = HashMap::new();
        for token in number_tokens(body) {
            if let Some(read) = as_read(token) {
                let sent = String::from_utf8_lossy(token).into_owned();
                map.entry(read).or_default().push_back(sent);
            }
        }
        Spellings(map)
    }

    /// `out` with each number the reader respelled written as the client wrote it. Only
    /// numerically equal texts are swapped: a number Ferry wrote that happens to read the same
    /// keeps its value whichever spelling it gets.
    pub fn restore(mut self, out: Vec<u8>) -> Vec<u8> {
        if self.0.is_empty() {
            return out;
        }
        let mut restored = Vec::with_capacity(out.len() + 16);
        let mut copied = 0;
        for token in number_tokens(&out) {
            let text = String::from_utf8_lossy(token);
            let Some(sent) = self.0.get_mut(text.as_ref()).and_then(VecDeque::pop_front) else {
                continue;
            };
            let start = token.as_ptr() as usize - out.as_ptr() as usize;
            restored.extend_from_slice(&out[copied..start]);
            restored.extend_from_slice(sent.as_bytes());
            copied = start + token.len();
        }
        restored.extend_from_slice(&out[copied..]);
        restored
    }
}

/// How serde_json's `arbitrary_precision` reader spells `token`, when that differs from it:
/// `E` as `e`, an exponent without a sign with `+`.
fn as_read(token: &[u8]) -> Option<String> {
    let e = token.iter().position(|b| matches!(b, b'e' | b'E'))?;
    let signed = matches!(token.get(e + 1), Some(b'+' | b'-'));
    if token[e] == b'e' && signed {
        return None;
    }
    let mut read = String::with_capacity(token.len() + 1);
    read.push_str(&String::from_utf8_lossy(&token[..e]));
    read.push('e');
    if !signed {
        read.push('+');
    }
    read.push_str(&String::from_utf8_lossy(&token[e + 1..]));
    Some(read)
}

/// The first member name given twice in one object of a valid JSON text (names compared as
/// decoded: `"a"` and `"\u0061"` are the same member).
fn duplicate_member(text: &[u8]) -> Option<String> {
    // One set of names per open object; `None` for an open array.
    let mut open: Vec<Option<HashSet<Cow<'_, str>>>> = Vec::new();
    let mut i = 0;
    while i < text.len() {
        match text[i] {
            b'{' => open.push(Some(HashSet::new())),
            b'[' => open.push(None),
            b'}' | b']' => {
                open.pop();
            }
            b'"' => {
                let start = i;
                i += 1;
                while i < text.len() && text[i] != b'"' {
                    i += if text[i] == b'\\' { 2 } else { 1 };
                }
                let quoted = text.get(start..=i)?;
                let mut next = i + 1;
                while text.get(next).is_some_and(u8::is_ascii_whitespace) {
                    next += 1;
                }
                if let (Some(b':'), Some(Some(names))) = (text.get(next), open.last_mut()) {
                    let name = member_name(quoted)?;
                    if names.contains(&name) {
                        return Some(name.into_owned());
                    }
                    names.insert(name);
                }
            }
            _ => {}
        }
        i += 1;
    }
    None
}

/// A quoted JSON string's text, decoded only when it holds an escape.
fn member_name(quoted: &[u8]) -> Option<Cow<'_, str>> {
    let inner = quoted.get(1..quoted.len().checked_sub(1)?)?;
    if inner.contains(&b'\\') {
        serde_json::from_slice::<String>(quoted)
            .ok()
            .map(Cow::Owned)
    } else {
        std::str::from_utf8(inner).ok().map(Cow::Borrowed)
    }
}

/// The number tokens of a JSON text, in order (strings skipped, escapes honoured).
fn number_tokens(text: &[u8]) -> impl Iterator<Item = &[u8]> {
    let mut i = 0;
    let mut in_string = false;
    std::iter::from_fn(move || {
        while i < text.len() {
            let b = text[i];
            if in_string {
                match b {
                    b'\\' => i += 2,
                    b'"' => {
                        in_string = false;
                        i += 1;
                    }
                    _ => i += 1,
                }
                continue;
            }
            if b == b'"' {
                in_string = true;
                i += 1;
                continue;
            }
            if b == b'-' || b.is_ascii_digit() {
                let start = i;
                while i < text.len()
                    && matches!(text[i], b'0'..=b'9' | b'-' | b'+' | b'.' | b'e' | b'E')
                {
                    i += 1;
                }
                return Some(&text[start..i]);
            }
            i += 1;
        }
        None
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exponents_come_back_as_the_client_spelled_them() {
        let body = br#"{"a":1e400,"s":"1e400 \" 2E5","b":[2E5,-3.5E-7,1e+2,1e5],"c":1e400}"#;
        let doc = parse_json(body).unwrap();
        let out = write_document(&doc.json, doc.spellings).unwrap();
        assert_eq!(out, body.to_vec());
    }

    #[test]
    fn a_member_given_twice_in_one_object_is_refused() {
        for body in [
            r#"{"user_id":"u1","user_id":"u2"}"#,
            r#"{"a":{"amount":1, "amount" :5000}}"#,
            r#"{"users":[{"id":1},{"id":2,"x":[{"k":1}],"id":3}]}"#,
            r#"{"amount":1,"\u0061mount":2}"#,
        ] {
            let e = parse_json(body.as_bytes()).unwrap_err();
            assert_eq!((e.status(), e.code()), (400, "duplicate_field"), "{body}");
        }
        let e = parse_json(br#"{"a":1,"a":2}"#).unwrap_err();
        assert_eq!(
            e.message(),
            "an object of the JSON body: 'a' is given more than once; send it exactly once"
        );
        // The same name in sibling or nested objects, in strings and as values is no duplicate.
        for body in [
            r#"{"a":{"a":1},"b":{"a":2},"c":["a","a"],"d":"\"a\":1,\"a\":2"}"#,
            r#"[{"id":1},{"id":2}]"#,
            r#"{"k\"":1,"k":2}"#,
        ] {
            assert!(parse_json(body.as_bytes()).is_ok(), "{body}");
        }
    }

    #[test]
    fn only_respelled_numbers_are_noted() {
        assert!(Spellings::of(br#"{"a":1.5,"b":-0,"c":1e-3,"d":"1E5"}"#)
            .0
            .is_empty());
        assert_eq!(as_read(b"1E5").as_deref(), Some("1e+5"));
        assert_eq!(as_read(b"1e5").as_deref(), Some("1e+5"));
        assert_eq!(as_read(b"2.5E-7").as_deref(), Some("2.5e-7"));
        assert_eq!(as_read(b"1e-7"), None);
        assert_eq!(as_read(b"12"), None);
    }

    #[test]
    fn a_dropped_number_leaves_the_others_right() {
        // The client's first 1e5 is dropped by the rewrite (e.g. a forged feature): the one
        // left gets a client spelling of the same number.
        let mut s = Spellings::of(br#"{"x":1E5,"y":1e5}"#);
        s.0.get_mut("1e+5").unwrap().pop_front();
        assert_eq!(
            s.restore(br#"{"y":1e+5}"#.to_vec()),
            br#"{"y":1e5}"#.to_vec()
        );
    }
}
