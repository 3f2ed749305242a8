//! Why a snapshot is refused: the one error type of compiling it, naming the part that
//! breaks a rule.

/// Why a snapshot was refused (Envoy then keeps the last good one).
#[derive(Debug, PartialEq)]
pub enum ConfigError {
    /// The plugin configuration is not a `ferry.v1.Snapshot`.
    Undecodable(String),
    /// A part of the snapshot (`route 'fraud'`, `service 'scoring': view 'profile'`) breaks a
    /// rule; `reason` is the rule's own message (see `rules`).
    Invalid { part: String, reason: String },
}

impl std::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ConfigError::Undecodable(e) => {
                write!(f, "invalid ferry snapshot: not a ferry.v1.Snapshot: {e}")
            }
            ConfigError::Invalid { part, reason } => {
                write!(f, "invalid ferry snapshot: {part}: {reason}")
            }
        }
    }
}

impl std::error::Error for ConfigError {}

pub(super) fn invalid<T>(part: &str, reason: impl Into<String>) -> Result<T, ConfigError> {
    Err(ConfigError::Invalid {
        part: part.to_owned(),
        reason: reason.into(),
    })
}
