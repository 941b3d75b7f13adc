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
//! progress) with `checksum_v3`. Version 4 embeds version 3 and adds `v4` (the mode of the
//! agent that wrote the file, and a dry run's own memory) with `checksum_v4`; the parts of
//! versions 1 to 3 hold only what acting agents did.
//!
//! `checksum` covers `state` alone, so a version-1 agent (after a rollback) still verifies and
//! loads a later file: it ignores fields it does not know and never gates on `version`.
//! `checksum_v2` covers version 2's content (`state` and `v2`), so a version-2 agent verifies
//! a later file likewise; `checksum_v3` covers version 3's, `checksum_v4` all of version 4's.
//! A reader takes
//! the newest part it understands; when that part is corrupt it refuses the file instead of
//! falling back to an older part, since the older part cannot say what the newer one held.
use serde::{Deserialize, Serialize};

use super::canonical;
use super::state::{AgentState, AgentStateV1, BootMarks, Memory, Mode, PendingEviction};

/// The version this agent writes.
pub const CURRENT_VERSION: u32 = 4;

// Frozen schema names: they are part of every checksum.
const SCHEMA_V1: &str = "monitor.AgentState/v1";
const SCHEMA_V2: &str = "monitor.AgentState/v2";
const SCHEMA_V3: &str = "monitor.AgentState/v3";
const SCHEMA_V4: &str = "monitor.AgentState/v4";

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
    /// part, version 3 with a version-4 part, ...): reading it as the older version would silently
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
    pub(crate) version: u32,
    pub state: AgentStateV1,
    pub checksum: u32,
}

/// The version-2 file: version 1's fields, then its own.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckpointV2 {
    #[serde(flatten)]
    pub(crate) v1: CheckpointV1,
    pub(crate) v2: PartV2,
    pub checksum_v2: u32,
}

/// What version 2 adds to the file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct PartV2 {
    pub(crate) boot: Option<BootMarks>,
}

/// The version-3 file: version 2's fields, then its own.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckpointV3 {
    #[serde(flatten)]
    pub(crate) v2: CheckpointV2,
    pub(crate) v3: PartV3,
    pub checksum_v3: u32,
}

/// What version 3 adds to the file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct PartV3 {
    pub(crate) pending: Option<PendingEviction>,
}

/// The version-4 file: version 3's fields (what acting agents did), then its own.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct CheckpointV4 {
    #[serde(flatten)]
    pub(crate) v3: CheckpointV3,
    pub(crate) v4: PartV4,
    pub(crate) checksum_v4: u32,
}

/// What version 4 adds to the file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct PartV4 {
    pub(crate) written_by: Option<Mode>,
    pub(crate) dry_run: Memory,
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
    /// Wraps the version-2 content of `memory` with both checksums; what later versions add is
    /// left out.
    pub fn new(memory: Memory) -> Result<Self, CheckpointError> {
        let Memory { v1, boot, .. } = memory;
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

    /// The memory this checkpoint holds (nothing of version 3).
    pub fn into_state(self) -> Memory {
        Memory {
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
    /// Wraps `memory` with the three checksums of version 3, as a version-3 file.
    pub fn new(memory: Memory) -> Result<Self, CheckpointError> {
        Self::with_version(memory, 3)
    }

    fn with_version(memory: Memory, version: u32) -> Result<Self, CheckpointError> {
        let checksum_v3 = checksum_v3(&memory)?;
        let Memory { v1, boot, pending } = memory;
        Ok(Self {
            v2: CheckpointV2::with_version(v1, boot, version)?,
            v3: PartV3 { pending },
            checksum_v3,
        })
    }

    /// The memory this checkpoint holds.
    pub fn into_state(self) -> Memory {
        Memory {
            pending: self.v3.pending,
            ..self.v2.into_state()
        }
    }

    fn memory(&self) -> Memory {
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
        verify(3, self.checksum_v3, checksum_v3(&self.memory())?)?;
        self.v2.verify_checksum()
    }
}

impl CheckpointV4 {
    /// Wraps `state` with all four checksums.
    pub(crate) fn new(state: AgentState) -> Result<Self, CheckpointError> {
        let checksum_v4 = state_checksum(&state)?;
        let AgentState {
            acting,
            dry_run,
            written_by,
        } = state;
        Ok(Self {
            v3: CheckpointV3::with_version(acting, CURRENT_VERSION)?,
            v4: PartV4 {
                written_by,
                dry_run,
            },
            checksum_v4,
        })
    }

    /// The state this checkpoint holds.
    pub(crate) fn into_state(self) -> AgentState {
        AgentState {
            acting: self.v3.into_state(),
            dry_run: self.v4.dry_run,
            written_by: self.v4.written_by,
        }
    }

    fn state(&self) -> AgentState {
        self.clone().into_state()
    }
}

impl Checkpoint for CheckpointV4 {
    fn marshal(&self) -> Result<Vec<u8>, CheckpointError> {
        to_pretty_json(self)
    }

    fn unmarshal(bytes: &[u8]) -> Result<Self, CheckpointError> {
        let checkpoint: Self = serde_json::from_slice(bytes).map_err(CheckpointError::Malformed)?;
        let version = checkpoint.v3.v2.v1.version;
        if version < 4 {
            return Err(CheckpointError::BadVersion(version));
        }
        Ok(checkpoint)
    }

    fn verify_checksum(&self) -> Result<(), CheckpointError> {
        verify(4, self.checksum_v4, state_checksum(&self.state())?)?;
        self.v3.verify_checksum()
    }
}

/// Brings a version-1 state to a version-2 memory. Version 1 had no boot marks, so the
/// timers of a migrated state are measured on the wall clock until they restart.
pub fn migrate_v1_to_v2(state: AgentStateV1) -> Memory {
    Memory {
        v1: state,
        boot: None,
        pending: None,
    }
}

/// Brings the memory of a file from before version 4 to the current version: it stays where
/// those versions kept it, and the file does not say which mode wrote it.
pub fn migrate_to_v4(memory: Memory) -> AgentState {
    AgentState {
        acting: memory,
        dry_run: Memory::default(),
        written_by: None,
    }
}

/// The checksum of `state`'s full current-version content; equal checksums mean there is
/// nothing new to write.
pub fn state_checksum(state: &AgentState) -> Result<u32, CheckpointError> {
    canonical::checksum(SCHEMA_V4, state).map_err(CheckpointError::Encode)
}

fn checksum_v3(memory: &Memory) -> Result<u32, CheckpointError> {
    canonical::checksum(SCHEMA_V3, memory).map_err(CheckpointError::Encode)
}

fn checksum_v2(v1: &AgentStateV1, boot: &Option<BootMarks>) -> Result<u32, CheckpointError> {
    canonical::checksum(SCHEMA_V2, &ContentV2 { v1, boot }).map_err(CheckpointError::Encode)
}

/// Serialises `state` in the current version.
pub fn encode(state: &AgentState) -> Result<Vec<u8>, CheckpointError> {
    CheckpointV4::new(state.clone())?.marshal()
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
        v4: Option<serde::de::IgnoredAny>,
        checksum_v4: Option<serde::de::IgnoredAny>,
    }
    let envelope: Envelope = serde_json::from_slice(bytes).map_err(CheckpointError::Malformed)?;
    let version = envelope.version;
    // The newest part the file carries, by its content or its checksum.
    let carries = [
        (4, envelope.v4.is_some() || envelope.checksum_v4.is_some()),
        (3, envelope.v3.is_some() || envelope.checksum_v3.is_some()),
        (2, envelope.v2.is_some() || envelope.checksum_v2.is_some()),
    ]
    .into_iter()
    .find_map(|(part, present)| present.then_some(part))
    .unwrap_or(1);
    if version < carries {
        return Err(if version == 0 {
            CheckpointError::BadVersion(0)
        } else {
            CheckpointError::VersionMismatch {
                said: version,
                carries,
            }
        });
    }
    let state = match version {
        0 => return Err(CheckpointError::BadVersion(0)),
        1 => {
            let checkpoint = CheckpointV1::unmarshal(bytes)?;
            checkpoint.verify_checksum()?;
            migrate_to_v4(migrate_v1_to_v2(checkpoint.state))
        }
        2 => {
            let checkpoint = CheckpointV2::unmarshal(bytes)?;
            checkpoint.verify_checksum()?;
            migrate_to_v4(checkpoint.into_state())
        }
        3 => {
            let checkpoint = CheckpointV3::unmarshal(bytes)?;
            checkpoint.verify_checksum()?;
            migrate_to_v4(checkpoint.into_state())
        }
        // Versions after 4 are read through the version-4 part they embed.
        _ => {
            let checkpoint = CheckpointV4::unmarshal(bytes)?;
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
