//! Checkpoint keys, which become file names inside the checkpoint directory.
//!
//! The rule is the kubelet's: alphanumeric first and last characters, `-`, `_` and `.` allowed
//! in between, at most 250 characters. It leaves no way to name `..`, a path separator, a hidden
//! file (which would pass for a temporary) or anything outside the directory.
use std::fmt;

/// The key of the agent's state checkpoint.
pub const AGENT_STATE_KEY: &str = "agent_state";

/// The longest key accepted.
pub const MAX_KEY_LEN: usize = 250;

/// A validated checkpoint key.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Key(String);

/// Why a string is not a key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    /// The empty string names the directory itself.
    #[error("invalid checkpoint key: it is empty")]
    Empty,
    /// Longer than [`MAX_KEY_LEN`] characters.
    #[error("invalid checkpoint key: {len} characters, at most {MAX_KEY_LEN} are allowed")]
    TooLong { len: usize },
    /// A character outside `[A-Za-z0-9._-]`, or a non-alphanumeric one at either end.
    #[error(
        "invalid checkpoint key {key:?}: use letters, digits, '-', '_' and '.', and start and end \
         with a letter or digit"
    )]
    BadCharacter { key: String },
}

impl Key {
    /// Validates `key`.
    pub fn new(key: &str) -> Result<Self, KeyError> {
        let len = key.chars().count();
        if len == 0 {
            return Err(KeyError::Empty);
        }
        if len > MAX_KEY_LEN {
            return Err(KeyError::TooLong { len });
        }
        let inner_ok = key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
        let ends_ok = key.starts_with(|c: char| c.is_ascii_alphanumeric())
            && key.ends_with(|c: char| c.is_ascii_alphanumeric());
        if !(inner_ok && ends_ok) {
            return Err(KeyError::BadCharacter {
                key: key.to_owned(),
            });
        }
        Ok(Self(key.to_owned()))
    }

    /// The key of the agent's state checkpoint ([`AGENT_STATE_KEY`]).
    pub fn agent_state() -> Self {
        Self(AGENT_STATE_KEY.to_owned())
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validates_keys() {
        let bad_char = |key: &str| {
            Err(KeyError::BadCharacter {
                key: key.to_owned(),
            })
        };
        let at_limit = "a".repeat(MAX_KEY_LEN);
        let over_limit = "a".repeat(MAX_KEY_LEN + 1);
        let cases: Vec<(&str, &str, Result<(), KeyError>)> = vec![
            ("the agent state key", AGENT_STATE_KEY, Ok(())),
            ("dots and dashes inside", "a.b-c_d.1", Ok(())),
            ("single character", "x", Ok(())),
            ("250 characters", &at_limit, Ok(())),
            (
                "251 characters",
                &over_limit,
                Err(KeyError::TooLong { len: 251 }),
            ),
            ("empty", "", Err(KeyError::Empty)),
            ("parent directory escape", "../x", bad_char("../x")),
            ("parent directory alone", "..", bad_char("..")),
            ("path separator", "a/b", bad_char("a/b")),
            ("absolute path", "/etc/passwd", bad_char("/etc/passwd")),
            ("hidden file looks like a temporary", ".x", bad_char(".x")),
            ("trailing dot", "x.", bad_char("x.")),
            ("leading dash", "-x", bad_char("-x")),
            ("space", "a b", bad_char("a b")),
            ("blank", "    ", bad_char("    ")),
            ("backslash", "a\\b", bad_char("a\\b")),
            ("NUL byte", "a\0b", bad_char("a\0b")),
            ("non-ASCII letter", "é", bad_char("é")),
        ];
        for (name, key, expected) in cases {
            assert_eq!(Key::new(key).map(|_| ()), expected, "{name}");
        }
    }
}
