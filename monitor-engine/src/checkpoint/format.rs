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
//! Version 3 embeds version 2 unchanged in the same way and adds `v3` (the eviction in
//! progress) with `checksum_v3`.
//!
//! `checksum` covers `state` alone, so a version-1 agent (after a rollback) still verifies and
//! loads a version-2 or version-3 file: it ignores fields it does not know and never gates on
//! `version`. `checksum_v2` covers version 2's content (`state` and `v2`), so a version-2 agent
//! verifies a version-3 file likewise; `checksum_v3` covers all of version 3's. A reader takes
//! the newest part it understands; when that part is corrupt it refuses the file instead of
//! falling back to an older part, since the older part cannot say what the newer one held.
use serde::{Deserialize, Serialize};

use super::canonical;
use super::state::{AgentState, AgentStateV1, BootMarks, PendingEviction};

/// The version this agent writes.
pub const CURRENT_VERSION: u32 = 3;

// Frozen schema names: they are part of every checksum.
const SCHEMA_V1: &str = "monitor.AgentState/v1";
const SCHEMA_V2: &str = "monitor.AgentState/v2";
const SCHEMA_V3: &str = "monitor.AgentState/v3";

/// Why bytes could not be turned into a verified checkpoint, or a state into bytes.
#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    /// Not a checkpoint: invalid JSON, a missing, unknown or mistyped field, or a truncated file.
    #[error("not a valid checkpoint: {0}")]
    Malformed(#[source] serde_json::Error),
    /// The `version` field holds a value no agent ever wrote.
    #[error("not a valid checkpoint: version {0} does not exist")]
    BadVersion(u32),
    /// The file says an older version than the parts it carries (version 1 with a version-2
    /// part, version 2 with a version-3 part): reading it as the older version would silently
    /// drop a part, so the version field itself must be damaged.
    #[error("not a valid checkpoint: it says version {said} but carries a version-{carries} part")]
    VersionMismatch { said: u32, carries: u32 },
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

/// The version-3 file: version 2's fields, then its own.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckpointV3 {
    #[serde(flatten)]
    pub v2: CheckpointV2,
    pub v3: PartV3,
    pub checksum_v3: u32,
}

/// What version 3 adds to the file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PartV3 {
    pub pending: Option<PendingEviction>,
}

/// Version 2's content, as version 2 checksummed it.
#[derive(Serialize)]
struct ContentV2<'a> {
    v1: &'a AgentStateV1,
    boot: &'a Option<BootMarks>,
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
    /// Wraps the version-2 content of `state` with both checksums; what later versions add is
    /// left out.
    pub fn new(state: AgentState) -> Result<Self, CheckpointError> {
        let AgentState { v1, boot, .. } = state;
        Self::with_version(v1, boot, 2)
    }

    fn with_version(
        v1: AgentStateV1,
        boot: Option<BootMarks>,
        version: u32,
    ) -> Result<Self, CheckpointError> {
        let checksum_v2 = checksum_v2(&v1, &boot)?;
        Ok(Self {
            v1: CheckpointV1 {
                version,
                ..CheckpointV1::new(v1)?
            },
            v2: PartV2 { boot },
            checksum_v2,
        })
    }

    /// The state this checkpoint holds (nothing of version 3).
    pub fn into_state(self) -> AgentState {
        AgentState {
            v1: self.v1.state,
            boot: self.v2.boot,
            pending: None,
        }
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
        verify(
            2,
            self.checksum_v2,
            checksum_v2(&self.v1.state, &self.v2.boot)?,
        )?;
        // A bad version-1 checksum would make a rollback fail, so it is corruption too.
        self.v1.verify_checksum()
    }
}

impl CheckpointV3 {
    /// Wraps `state` with all three checksums.
    pub fn new(state: AgentState) -> Result<Self, CheckpointError> {
        let checksum_v3 = state_checksum(&state)?;
        let AgentState { v1, boot, pending } = state;
        Ok(Self {
            v2: CheckpointV2::with_version(v1, boot, CURRENT_VERSION)?,
            v3: PartV3 { pending },
            checksum_v3,
        })
    }

    /// The state this checkpoint holds.
    pub fn into_state(self) -> AgentState {
        AgentState {
            pending: self.v3.pending,
            ..self.v2.into_state()
        }
    }

    fn state(&self) -> AgentState {
        self.clone().into_state()
    }
}

impl Checkpoint for CheckpointV3 {
    fn marshal(&self) -> Result<Vec<u8>, CheckpointError> {
        to_pretty_json(self)
    }

    fn unmarshal(bytes: &[u8]) -> Result<Self, CheckpointError> {
        let checkpoint: Self = serde_json::from_slice(bytes).map_err(CheckpointError::Malformed)?;
        let version = checkpoint.v2.v1.version;
        if version < 3 {
            return Err(CheckpointError::BadVersion(version));
        }
        Ok(checkpoint)
    }

    fn verify_checksum(&self) -> Result<(), CheckpointError> {
        verify(3, self.checksum_v3, state_checksum(&self.state())?)?;
        self.v2.verify_checksum()
    }
}

/// Brings a version-1 state to the current version. Version 1 had no boot marks, so the timers
/// of a migrated state are measured on the wall clock until they restart.
pub fn migrate_v1_to_v2(state: AgentStateV1) -> AgentState {
    AgentState {
        v1: state,
        boot: None,
        pending: None,
    }
}

/// The checksum of `state`'s full current-version content; equal checksums mean there is
/// nothing new to write.
pub fn state_checksum(state: &AgentState) -> Result<u32, CheckpointError> {
    canonical::checksum(SCHEMA_V3, state).map_err(CheckpointError::Encode)
}

fn checksum_v2(v1: &AgentStateV1, boot: &Option<BootMarks>) -> Result<u32, CheckpointError> {
    canonical::checksum(SCHEMA_V2, &ContentV2 { v1, boot }).map_err(CheckpointError::Encode)
}

/// Serialises `state` in the current version.
pub fn encode(state: &AgentState) -> Result<Vec<u8>, CheckpointError> {
    CheckpointV3::new(state.clone())?.marshal()
}

/// Parses and verifies a checkpoint of any version, migrating it to the current one.
pub fn decode(bytes: &[u8]) -> Result<Decoded, CheckpointError> {
    #[derive(Deserialize)]
    struct Envelope {
        version: u32,
        v2: Option<serde::de::IgnoredAny>,
        checksum_v2: Option<serde::de::IgnoredAny>,
        v3: Option<serde::de::IgnoredAny>,
        checksum_v3: Option<serde::de::IgnoredAny>,
    }
    let envelope: Envelope = serde_json::from_slice(bytes).map_err(CheckpointError::Malformed)?;
    let version = envelope.version;
    let carries_v2 = envelope.v2.is_some() || envelope.checksum_v2.is_some();
    let carries_v3 = envelope.v3.is_some() || envelope.checksum_v3.is_some();
    let mismatch = |carries| CheckpointError::VersionMismatch {
        said: version,
        carries,
    };
    let state = match version {
        0 => return Err(CheckpointError::BadVersion(0)),
        1 if carries_v2 || carries_v3 => return Err(mismatch(if carries_v3 { 3 } else { 2 })),
        1 => {
            let checkpoint = CheckpointV1::unmarshal(bytes)?;
            checkpoint.verify_checksum()?;
            migrate_v1_to_v2(checkpoint.state)
        }
        2 if carries_v3 => return Err(mismatch(3)),
        2 => {
            let checkpoint = CheckpointV2::unmarshal(bytes)?;
            checkpoint.verify_checksum()?;
            checkpoint.into_state()
        }
        // Versions after 3 are read through the version-3 part they embed.
        _ => {
            let checkpoint = CheckpointV3::unmarshal(bytes)?;
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
    use crate::checkpoint::{Now, SavedPod};

    fn sample_state() -> AgentState {
        let now = Now {
            unix_ms: 1_700_000_000_000,
            boot_id: "boot-a".into(),
            boot_ms: 42_000,
        };
        let mut state = AgentState::default();
        state.observe_soft_threshold("memory.available", &now);
        state.set_condition("MemoryPressure", "True", &now);
        let pod = SavedPod {
            namespace: "shop".into(),
            name: "cart-0".into(),
            uid: "0b6c".into(),
        };
        state.record_eviction(pod, "memory.available", 3 << 20, &now);
        state.record_grace_period(30);
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
    fn older_readers_load_the_current_file() {
        let state = sample_state();
        let bytes = encode(&state).unwrap();
        let v1_reader = CheckpointV1::unmarshal(&bytes).unwrap();
        v1_reader.verify_checksum().unwrap();
        assert_eq!(v1_reader.state, state.v1);
        let v2_reader = CheckpointV2::unmarshal(&bytes).unwrap();
        v2_reader.verify_checksum().unwrap();
        assert_eq!(
            v2_reader.into_state(),
            AgentState {
                pending: None,
                ..state
            }
        );
    }

    #[test]
    fn version_2_file_loads_without_a_pending_grace_period() {
        let state = sample_state();
        let v2 = CheckpointV2::new(state.clone()).unwrap().marshal().unwrap();
        let decoded = decode(&v2).unwrap();
        assert_eq!(decoded.file_version, 2);
        assert_eq!(decoded.state.pending, None);
        assert_eq!(decoded.state.v1, state.v1);
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
        file["version"] = 4.into();
        file["v4"] = serde_json::json!({"something": "new"});
        let decoded = decode(&serde_json::to_vec(&file).unwrap()).unwrap();
        assert_eq!((decoded.file_version, decoded.state), (4, sample_state()));
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
                "version-3 content changed: no fallback to version 2",
                edit(&|f| f["v3"]["pending"]["grace_period_seconds"] = 1.into()),
                "version-3",
            ),
            (
                "version-2 content changed",
                edit(&|f| f["v2"]["boot"]["last_eviction_ms"] = 7.into()),
                "version-3",
            ),
            (
                "version-2 checksum changed",
                edit(&|f| f["checksum_v2"] = 1.into()),
                "version-2",
            ),
            (
                "version-1 content changed",
                edit(&|f| f["state"]["counters"]["events_lost"] = 9.into()),
                "version-3",
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
                "version lowered to 1 with newer parts",
                edit(&|f| f["version"] = 1.into()),
                "carries a version-3 part",
            ),
            (
                "version lowered to 2 with a version-3 part",
                edit(&|f| f["version"] = 2.into()),
                "carries a version-3 part",
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
        file["checksum_v3"] = 12345.into();
        let error = decode(&serde_json::to_vec(&file).unwrap()).unwrap_err();
        let CheckpointError::ChecksumMismatch {
            part,
            expected,
            actual,
        } = error
        else {
            panic!("unexpected {error:?}");
        };
        assert_eq!((part, expected), (3, 12345));
        assert_eq!(actual, state_checksum(&sample_state()).unwrap());
    }
}
