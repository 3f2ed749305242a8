//! A shared record's sequence as stored in Redis, read by one rule (#35): whoever can write
//! Redis can write `ferry:cp:*`, so the text found there is checked before any use.

/// The shared record's sequence field as read, by the one rule every reader follows: a
/// decimal in `1..=MAX_SEQUENCE` without leading zeros, or it is out of range (refused, never
/// adopted; its text is kept for the compare-and-set that replaces it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Stored {
    /// No record.
    None,
    At(u64),
    OutOfRange(String),
}

impl Stored {
    pub fn parse(raw: Option<&str>) -> Stored {
        let Some(raw) = raw.filter(|r| !r.is_empty()) else {
            return Stored::None;
        };
        let canonical =
            raw.len() <= 20 && raw.bytes().all(|b| b.is_ascii_digit()) && !raw.starts_with('0');
        match raw.parse::<u64>().ok().filter(|_| canonical) {
            Some(n) if ferry_protos::signed::bounded_sequence(n).is_some() => Stored::At(n),
            _ => Stored::OutOfRange(raw.chars().take(64).collect()),
        }
    }

    /// The text the install script compares with.
    pub fn raw(&self) -> String {
        match self {
            Stored::None => String::new(),
            Stored::At(n) => n.to_string(),
            Stored::OutOfRange(raw) => raw.clone(),
        }
    }

    /// The sequence this replica has served, as the script compares it.
    pub fn known(sequence: u64) -> Stored {
        match sequence {
            0 => Stored::None,
            n => Stored::At(n),
        }
    }
}
