//! The words a feature repo writes for a route's policies (`on_stale: reject`): one table per
//! policy enum, read both ways, word → enum when a repo is validated and enum → word when a
//! snapshot is shown.

use crate::v1::{MissingEntityPolicy, ReaderErrorPolicy, StalePolicy};

/// A route policy and the words that name its values.
pub trait PolicyWords: Copy + PartialEq + Sized + 'static {
    /// The route field that sets it.
    const FIELD: &'static str;
    /// Every value with its word; the first is the default when the field is absent.
    const WORDS: &'static [(&'static str, Self)];

    /// The value a word names.
    fn from_word(word: &str) -> Option<Self> {
        Self::WORDS
            .iter()
            .find(|(w, _)| *w == word)
            .map(|(_, v)| *v)
    }

    /// The word of a value (`unspecified` for the proto's zero value, which no word names).
    fn word(self) -> &'static str {
        Self::WORDS
            .iter()
            .find(|(_, v)| *v == self)
            .map_or("unspecified", |(w, _)| w)
    }

    /// The value when the field is absent.
    fn default_value() -> Self {
        Self::WORDS[0].1
    }
}

impl PolicyWords for MissingEntityPolicy {
    const FIELD: &'static str = "on_missing_entity";
    const WORDS: &'static [(&'static str, Self)] = &[
        ("reject", Self::MissingReject),
        ("null", Self::MissingNull),
        ("default", Self::MissingDefault),
    ];
}

impl PolicyWords for StalePolicy {
    const FIELD: &'static str = "on_stale";
    const WORDS: &'static [(&'static str, Self)] =
        &[("null", Self::StaleNull), ("reject", Self::StaleReject)];
}

impl PolicyWords for ReaderErrorPolicy {
    const FIELD: &'static str = "on_reader_error";
    const WORDS: &'static [(&'static str, Self)] = &[
        ("reject", Self::ReaderErrorReject),
        ("forward", Self::ReaderErrorForward),
    ];
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip<P: PolicyWords + std::fmt::Debug>() {
        for (word, value) in P::WORDS {
            assert_eq!(P::from_word(word), Some(*value));
            assert_eq!(value.word(), *word);
        }
        assert_eq!(P::from_word("maybe"), None);
    }

    #[test]
    fn every_word_names_one_value_and_back() {
        round_trip::<MissingEntityPolicy>();
        round_trip::<StalePolicy>();
        round_trip::<ReaderErrorPolicy>();
        assert_eq!(StalePolicy::default_value(), StalePolicy::StaleNull);
        assert_eq!(StalePolicy::Unspecified.word(), "unspecified");
    }
}
