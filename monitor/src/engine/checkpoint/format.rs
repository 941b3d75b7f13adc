//! The checkpoint file: versioned envelopes, their checksums, and the migration between them.
//!
//! Version 1:
//!
//! ```json
//! { "version": 1, "state": { ... }, "checksum": 1234 }
//! ```
//!
//! Version 2 embeds version 1 unchanged and adds its own part with a second checksum:
//!
//! ```json
//! { "version": 2, "state": { ... }, "checksum": 1234, "v2": { "boot": ... }, "checksum_v2": 5678 }
//! ```
//!
//! `checksum` covers `state` alone, so a version-1 agent (after a rollback) still verifies and
//! loads a version-2 file: it ignores fields it does not know and never gates on `version`.
//! `checksum_v2` covers all of version 2's content. A reader takes the newest part it
//! understands; when that part is corrupt it refuses the file instead of falling back to an older
//! part, since the older part cannot say what the newer one held.
use serde::{Deserialize, Serialize};

use super::canonical;
use super::state::{AgentState, AgentStateV1, BootMarks};

/// The version this agent writes.
pub const CURRENT_VERSION: u32 = 2;

// Frozen schema names: they are part of every checksum.
const SCHEMA_V1: &str = "monitor.AgentState/v1";
const SCHEMA_V2: &str = "monitor.AgentState/v2";

/// Why bytes could not be turned into a verified checkpoint, or a state into bytes.
#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    /// Not a checkpoint: invalid JSON, a missing, unknown or mistyped field, or a truncated file.
    #[error("not a valid checkpoint: {0}")]
    Malformed(#[source] serde_json::Error),
    /// The `version` field holds a value no agent ever wrote.
    #[error("not a valid checkpoint: version {0} does not exist")]
    BadVersion(u32),
    /// The file says version 1 yet carries a version-2 part: reading it as version 1 would
    /// silently drop that part, so the version field itself must be damaged.
    #[error("not a valid checkpoint: it says version 1 but carries a version-2 part")]
    VersionMismatch,
    /// The content does not hash to the checksum stored next to it.
    #[error(
        "checksum mismatch in the version-{part} content: expected {expected} (stored in the \
         file), actual {actual} (computed from the content)"
    )]
    ChecksumMismatch {
        part: u32,
        expected: u32,
        actual: u32,
    },
    /// Serialising failed; cannot happen with string-keyed maps, but serde_json's API is fallible.
    #[error("could not encode the checkpoint: {0}")]
    Encode(#[source] serde_json::Error),
}

/// A checkpoint file format, split like the kubelet's: parsing and verification are separate
/// steps, because the checksum covers the parsed content rather than the bytes.
pub trait Checkpoint: Sized {
    /// Serialises the checkpoint with the checksums it holds.
    fn marshal(&self) -> Result<Vec<u8>, CheckpointError>;
    /// Parses bytes without checking any checksum.
    fn unmarshal(bytes: &[u8]) -> Result<Self, CheckpointError>;
    /// Checks every checksum this format knows against the parsed content.
    fn verify_checksum(&self) -> Result<(), CheckpointError>;
}

/// The version-1 file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckpointV1 {
    pub version: u32,
    pub state: AgentStateV1,
    pub checksum: u32,
}

/// The version-2 file: version 1's fields, then its own.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckpointV2 {
    #[serde(flatten)]
    pub v1: CheckpointV1,
    pub v2: PartV2,
    pub checksum_v2: u32,
}

/// What version 2 adds to the file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PartV2 {
    pub boot: Option<BootMarks>,
}

/// A verified checkpoint, brought to the current version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decoded {
    pub state: AgentState,
    /// The version found in the file; older than [`CURRENT_VERSION`] means it was migrated.
    pub file_version: u32,
    /// [`state_checksum`] of `state`.
    pub checksum: u32,
}

impl CheckpointV1 {
    /// Wraps `state` with its checksum.
    pub fn new(state: AgentStateV1) -> Result<Self, CheckpointError> {
        Ok(Self {
            version: 1,
            checksum: checksum_v1(&state)?,
            state,
        })
    }
}

impl Checkpoint for CheckpointV1 {
    fn marshal(&self) -> Result<Vec<u8>, CheckpointError> {
        to_pretty_json(self)
    }

    fn unmarshal(bytes: &[u8]) -> Result<Self, CheckpointError> {
        let checkpoint: Self = serde_json::from_slice(bytes).map_err(CheckpointError::Malformed)?;
        // Any later version is welcome: it embeds version 1 for exactly this reader.
        if checkpoint.version == 0 {
            return Err(CheckpointError::BadVersion(0));
        }
        Ok(checkpoint)
    }

    fn verify_checksum(&self) -> Result<(), CheckpointError> {
        verify(1, self.checksum, checksum_v1(&self.state)?)
    }
}

impl CheckpointV2 {
    /// Wraps `state` with both checksums.
    pub fn new(state: AgentState) -> Result<Self, CheckpointError> {
        let checksum_v2 = state_checksum(&state)?;
        let AgentState { v1, boot } = state;
        Ok(Self {
            v1: CheckpointV1 {
                version: CURRENT_VERSION,
                ..CheckpointV1::new(v1)?
            },
            v2: PartV2 { boot },
            checksum_v2,
        })
    }

    /// The state this checkpoint holds.
    pub fn into_state(self) -> AgentState {
        AgentState {
            v1: self.v1.state,
            boot: self.v2.boot,
        }
    }

    fn state(&self) -> AgentState {
        self.clone().into_state()
    }
}

impl Checkpoint for CheckpointV2 {
    fn marshal(&self) -> Result<Vec<u8>, CheckpointError> {
        to_pretty_json(self)
    }

    fn unmarshal(bytes: &[u8]) -> Result<Self, CheckpointError> {
        let checkpoint: Self = serde_json::from_slice(bytes).map_err(CheckpointError::Malformed)?;
        if checkpoint.v1.version < 2 {
            return Err(CheckpointError::BadVersion(checkpoint.v1.version));
        }
        Ok(checkpoint)
    }

    fn verify_checksum(&self) -> Result<(), CheckpointError> {
        // The newer part first: if it is damaged, that is the error worth reporting.
        verify(2, self.checksum_v2, state_checksum(&self.state())?)?;
        // A bad version-1 checksum would make a rollback fail, so it is corruption too.
        self.v1.verify_checksum()
    }
}

/// Brings a version-1 state to the current version. Version 1 had no boot marks, so the timers
/// of a migrated state are measured on the wall clock until they restart.
pub fn migrate_v1_to_v2(state: AgentStateV1) -> AgentState {
    AgentState {
        v1: state,
        boot: None,
    }
}

/// The checksum of `state`'s full current-version content; equal checksums mean there is
/// nothing new to write.
pub fn state_checksum(state: &AgentState) -> Result<u32, CheckpointError> {
    canonical::checksum(SCHEMA_V2, state).map_err(CheckpointError::Encode)
}

/// Serialises `state` in the current version.
pub fn encode(state: &AgentState) -> Result<Vec<u8>, CheckpointError> {
    CheckpointV2::new(state.clone())?.marshal()
}

/// Parses and verifies a checkpoint of any version, migrating it to the current one.
pub fn decode(bytes: &[u8]) -> Result<Decoded, CheckpointError> {
    #[derive(Deserialize)]
    struct Envelope {
        version: u32,
        v2: Option<serde::de::IgnoredAny>,
        checksum_v2: Option<serde::de::IgnoredAny>,
    }
    let envelope: Envelope = serde_json::from_slice(bytes).map_err(CheckpointError::Malformed)?;
    let version = envelope.version;
    let state = match version {
        0 => return Err(CheckpointError::BadVersion(0)),
        1 if envelope.v2.is_some() || envelope.checksum_v2.is_some() => {
            return Err(CheckpointError::VersionMismatch);
        }
        1 => {
            let checkpoint = CheckpointV1::unmarshal(bytes)?;
            checkpoint.verify_checksum()?;
            migrate_v1_to_v2(checkpoint.state)
        }
        // Versions after 2 are read through the version-2 part they embed.
        _ => {
            let checkpoint = CheckpointV2::unmarshal(bytes)?;
            checkpoint.verify_checksum()?;
            checkpoint.into_state()
        }
    };
    Ok(Decoded {
        checksum: state_checksum(&state)?,
        state,
        file_version: version,
    })
}

fn checksum_v1(state: &AgentStateV1) -> Result<u32, CheckpointError> {
    canonical::checksum(SCHEMA_V1, state).map_err(CheckpointError::Encode)
}

fn verify(part: u32, expected: u32, actual: u32) -> Result<(), CheckpointError> {
    if expected == actual {
        Ok(())
    } else {
        Err(CheckpointError::ChecksumMismatch {
            part,
            expected,
            actual,
        })
    }
}

fn to_pretty_json<T: Serialize>(value: &T) -> Result<Vec<u8>, CheckpointError> {
    let mut bytes = serde_json::to_vec_pretty(value).map_err(CheckpointError::Encode)?;
    bytes.push(b'\n');
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::checkpoint::{Now, PodRef};

    fn sample_state() -> AgentState {
        let now = Now {
            unix_ms: 1_700_000_000_000,
            boot_id: "boot-a".into(),
            boot_ms: 42_000,
        };
        let mut state = AgentState::default();
        state.observe_soft_threshold("memory.available", &now);
        state.set_condition("MemoryPressure", "True", &now);
        let pod = PodRef {
            namespace: "shop".into(),
            name: "cart-0".into(),
            uid: "0b6c".into(),
        };
        state.record_eviction(pod, "memory.available", 3 << 20, &now);
        state.count_events(10, 1);
        state
    }

    fn json(bytes: &[u8]) -> serde_json::Value {
        serde_json::from_slice(bytes).unwrap()
    }

    #[test]
    fn round_trips_in_the_current_version() {
        let state = sample_state();
        let decoded = decode(&encode(&state).unwrap()).unwrap();
        assert_eq!(decoded.state, state);
        assert_eq!(decoded.file_version, CURRENT_VERSION);
        assert_eq!(decoded.checksum, state_checksum(&state).unwrap());
    }

    #[test]
    fn checksum_ignores_field_order_and_whitespace() {
        let bytes = encode(&sample_state()).unwrap();
        // serde_json's default map sorts keys, so this reorders every object and drops spaces.
        let reordered = serde_json::to_vec(&json(&bytes)).unwrap();
        assert_ne!(reordered, bytes);
        assert_eq!(decode(&reordered).unwrap().state, sample_state());
    }

    #[test]
    fn version_1_reader_loads_a_version_2_file() {
        let state = sample_state();
        let old_reader = CheckpointV1::unmarshal(&encode(&state).unwrap()).unwrap();
        old_reader.verify_checksum().unwrap();
        assert_eq!(old_reader.state, state.v1);
    }

    #[test]
    fn version_1_file_is_migrated() {
        let state = sample_state();
        let v1 = CheckpointV1::new(state.v1.clone())
            .unwrap()
            .marshal()
            .unwrap();
        let decoded = decode(&v1).unwrap();
        assert_eq!(decoded.file_version, 1);
        assert_eq!(decoded.state, migrate_v1_to_v2(state.v1));
    }

    #[test]
    fn a_later_version_is_read_through_its_embedded_parts() {
        let mut file = json(&encode(&sample_state()).unwrap());
        file["version"] = 3.into();
        file["v3"] = serde_json::json!({"something": "new"});
        let decoded = decode(&serde_json::to_vec(&file).unwrap()).unwrap();
        assert_eq!((decoded.file_version, decoded.state), (3, sample_state()));
    }

    #[test]
    fn rejects_damaged_files() {
        let good = json(&encode(&sample_state()).unwrap());
        let edit = |change: &dyn Fn(&mut serde_json::Value)| {
            let mut file = good.clone();
            change(&mut file);
            serde_json::to_vec(&file).unwrap()
        };
        let cases: Vec<(&str, Vec<u8>, &str)> = vec![
            (
                "version-2 content changed: no fallback to version 1",
                edit(&|f| f["v2"]["boot"]["last_eviction_ms"] = 7.into()),
                "version-2",
            ),
            (
                "version-1 content changed",
                edit(&|f| f["state"]["counters"]["events_lost"] = 9.into()),
                "version-2",
            ),
            (
                "version-1 checksum changed",
                edit(&|f| f["checksum"] = 1.into()),
                "version-1",
            ),
            (
                "version zero",
                edit(&|f| f["version"] = 0.into()),
                "version 0",
            ),
            (
                "version lowered to 1 with a version-2 part",
                edit(&|f| f["version"] = 1.into()),
                "carries a version-2 part",
            ),
            (
                "unknown field inside the frozen state",
                edit(&|f| f["state"]["extra"] = 1.into()),
                "unknown field",
            ),
            (
                "not JSON",
                b"{\"version\": 2,".to_vec(),
                "not a valid checkpoint",
            ),
            ("empty file", Vec::new(), "not a valid checkpoint"),
        ];
        for (name, bytes, message) in cases {
            let error = decode(&bytes).expect_err(name).to_string();
            assert!(error.contains(message), "{name}: {error}");
        }
    }

    #[test]
    fn mismatch_names_expected_and_actual() {
        let mut file = json(&encode(&sample_state()).unwrap());
        file["checksum_v2"] = 12345.into();
        let error = decode(&serde_json::to_vec(&file).unwrap()).unwrap_err();
        let CheckpointError::ChecksumMismatch {
            part,
            expected,
            actual,
        } = error
        else {
            panic!("unexpected {error:?}");
        };
        assert_eq!((part, expected), (2, 12345));
        assert_eq!(actual, state_checksum(&sample_state()).unwrap());
    }
}
