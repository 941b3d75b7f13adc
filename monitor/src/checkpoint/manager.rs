//! Loading the agent state at start, and saving it whenever it changed.
use std::fmt;
use std::path::PathBuf;

use super::dir_lock::{DirLock, Held};
use super::key::Key;
use super::store::{FileStore, StoreError};
use super::wall_time;
use crate::engine::checkpoint::{
    AgentState, CURRENT_VERSION, CheckpointError, decode, encode, state_checksum,
};
use crate::system_clock::unix_ms_now;

/// What to do with a checkpoint that exists but cannot be loaded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IfUnusable {
    /// Refuse to start (the default): the operator decides.
    Refuse,
    /// Rename the file with a timestamp suffix and start empty (`--reset-state`).
    Reset,
}

/// How the state was obtained at start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Startup {
    /// No checkpoint existed; an empty state was written.
    Created,
    /// The checkpoint was loaded; an older version was migrated and rewritten.
    Restored { file_version: u32 },
    /// The checkpoint was unusable and was moved to `set_aside`; an empty state was written.
    Reset { set_aside: PathBuf, problem: String },
}

/// Why the state could not be loaded or saved.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    /// The directory or file could not be read or written.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The checkpoint exists but is corrupt or unparsable, and resetting was not asked for.
    #[error(
        "refusing to start: checkpoint {} cannot be trusted: {problem}. Check it with `monitor \
         checkpoint verify {}`. To start with an empty state, restart the agent with \
         --reset-state: the file is kept, renamed with a timestamp suffix, and soft-threshold \
         grace periods and the eviction interval start over.",
        path.display(),
        path.display()
    )]
    Unusable {
        path: PathBuf,
        problem: CheckpointError,
    },
    /// The state could not be serialised.
    #[error(transparent)]
    Encode(CheckpointError),
    /// Another agent holds the directory.
    #[error(transparent)]
    Held(#[from] Held),
}

/// What [`StateManager::open`] found.
#[derive(Debug)]
pub struct Opened {
    pub manager: StateManager,
    pub state: AgentState,
    pub startup: Startup,
    /// Why the checkpoint cannot be written now, if it cannot.
    pub write_problem: Option<StateError>,
}

/// Owns the agent's checkpoint file and writes it only when the state changed.
#[derive(Debug)]
pub struct StateManager {
    store: FileStore,
    key: Key,
    /// Checksum of what the file holds, when that is known to be the current version.
    written_checksum: Option<u32>,
    /// This process's hold on the directory (none where it could not be opened).
    _lock: Option<DirLock>,
}

impl StateManager {
    /// Prepares `dir` and loads the agent state from it: an absent checkpoint starts empty, an
    /// older version is migrated, an unusable one is refused or reset according to `if_unusable`.
    /// The file on disk is left in the current version, holding the returned state.
    pub fn load_or_init(
        dir: impl Into<PathBuf>,
        if_unusable: IfUnusable,
    ) -> Result<(Self, AgentState, Startup), StateError> {
        let opened = Self::open(dir, if_unusable)?;
        if let Some(error) = opened.write_problem {
            return Err(error);
        }
        Ok((opened.manager, opened.state, opened.startup))
    }

    /// Like [`Self::load_or_init`], but a directory that cannot be prepared or written (read
    /// only, full, out of file descriptors) does not stop the load: the state is read if it
    /// can be, and the write problem is handed back for the caller to report and retry. An
    /// unreadable or corrupt checkpoint is still refused.
    pub fn open(dir: impl Into<PathBuf>, if_unusable: IfUnusable) -> Result<Opened, StateError> {
        let store = FileStore::at(dir);
        // The lock comes before anything in the directory is touched: a second agent must not
        // remove the first one's temporary file.
        let created = store.create_dir();
        let lock = DirLock::take(store.dir())?;
        let prepared = created.and_then(|()| store.remove_stale_temporaries());
        let mut manager = Self {
            store,
            key: Key::agent_state(),
            written_checksum: None,
            _lock: lock,
        };
        let (state, startup) = manager.load(if_unusable)?;
        let write_problem = match prepared {
            Err(error) => Some(error.into()),
            Ok(()) => manager.save_if_changed(&state).err(),
        };
        Ok(Opened {
            manager,
            state,
            startup,
            write_problem,
        })
    }

    /// Writes `state` unless the file already holds the same content; returns whether it wrote.
    pub fn save_if_changed(&mut self, state: &AgentState) -> Result<bool, StateError> {
        let checksum = state_checksum(state).map_err(StateError::Encode)?;
        if self.written_checksum == Some(checksum) {
            return Ok(false);
        }
        let bytes = encode(state).map_err(StateError::Encode)?;
        self.store.write(&self.key, &bytes)?;
        self.written_checksum = Some(checksum);
        Ok(true)
    }

    /// The checkpoint file.
    pub fn path(&self) -> PathBuf {
        self.store.path_of(&self.key)
    }

    fn load(&mut self, if_unusable: IfUnusable) -> Result<(AgentState, Startup), StateError> {
        let bytes = match self.store.read(&self.key) {
            Ok(bytes) => bytes,
            Err(StoreError::NotFound { .. }) => {
                return Ok((AgentState::default(), Startup::Created));
            }
            // No checkpoint this agent wrote: set aside like a corrupt one when asked to.
            Err(error @ (StoreError::TooLarge { .. } | StoreError::NotRegular { .. }))
                if if_unusable == IfUnusable::Reset =>
            {
                return self.reset(error.to_string());
            }
            Err(error) => return Err(error.into()),
        };
        match (decode(&bytes), if_unusable) {
            (Ok(decoded), _) => {
                // A newer file is left as it is until the state changes, so rolling forward
                // again finds it intact.
                if decoded.file_version >= CURRENT_VERSION {
                    self.written_checksum = Some(decoded.checksum);
                }
                let startup = Startup::Restored {
                    file_version: decoded.file_version,
                };
                Ok((decoded.state, startup))
            }
            (Err(problem), IfUnusable::Reset) => self.reset(problem.to_string()),
            (Err(problem), IfUnusable::Refuse) => Err(StateError::Unusable {
                path: self.path(),
                problem,
            }),
        }
    }
}

impl StateManager {
    /// Moves the unusable checkpoint aside with a timestamp suffix and starts empty.
    fn reset(&mut self, problem: String) -> Result<(AgentState, Startup), StateError> {
        let suffix = format!("corrupt-{}", wall_time::compact(unix_ms_now()));
        let set_aside = self.store.move_aside(&self.key, &suffix)?;
        Ok((AgentState::default(), Startup::Reset { set_aside, problem }))
    }
}

impl fmt::Display for Startup {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Created => write!(f, "no checkpoint found; starting with an empty state"),
            Self::Restored { file_version } if *file_version < CURRENT_VERSION => write!(
                f,
                "restored the state from a version-{file_version} checkpoint and migrated it to \
                 version {CURRENT_VERSION}"
            ),
            Self::Restored { file_version } => {
                write!(
                    f,
                    "restored the state from a version-{file_version} checkpoint"
                )
            }
            Self::Reset { set_aside, problem } => write!(
                f,
                "the checkpoint was unusable ({problem}); it was moved to {} and the state starts \
                 empty",
                set_aside.display()
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::fs;

    use super::*;
    use crate::engine::checkpoint::{Checkpoint as _, CheckpointV1};

    fn busy_state() -> AgentState {
        let mut state = AgentState::default();
        state.count_events(5, 0);
        state
    }

    #[test]
    fn absent_checkpoint_starts_empty_and_is_written() {
        let dir = tempfile::tempdir().unwrap();
        let (manager, state, startup) =
            StateManager::load_or_init(dir.path(), IfUnusable::Refuse).unwrap();
        assert_eq!((state, startup), (AgentState::default(), Startup::Created));
        let on_disk = decode(&fs::read(manager.path()).unwrap()).unwrap();
        assert_eq!(on_disk.state, AgentState::default());
    }

    #[test]
    fn writes_only_when_the_state_changed() {
        let dir = tempfile::tempdir().unwrap();
        let (mut manager, mut state, _) =
            StateManager::load_or_init(dir.path(), IfUnusable::Refuse).unwrap();
        assert!(
            !manager.save_if_changed(&state).unwrap(),
            "unchanged after start"
        );
        state.count_events(1, 0);
        assert!(manager.save_if_changed(&state).unwrap());
        assert!(!manager.save_if_changed(&state).unwrap());
        // The agent that wrote it is gone before the next one starts.
        drop(manager);

        let (mut reloaded, loaded, startup) =
            StateManager::load_or_init(dir.path(), IfUnusable::Refuse).unwrap();
        assert_eq!(
            startup,
            Startup::Restored {
                file_version: CURRENT_VERSION
            }
        );
        assert_eq!(loaded, state);
        assert!(
            !reloaded.save_if_changed(&loaded).unwrap(),
            "restored state is not rewritten"
        );
    }

    #[test]
    fn version_1_file_is_migrated_and_rewritten() {
        let dir = tempfile::tempdir().unwrap();
        let v1 = CheckpointV1::new(busy_state().v1)
            .unwrap()
            .marshal()
            .unwrap();
        fs::write(dir.path().join(Key::agent_state().as_str()), v1).unwrap();
        let (manager, state, startup) =
            StateManager::load_or_init(dir.path(), IfUnusable::Refuse).unwrap();
        assert_eq!(startup, Startup::Restored { file_version: 1 });
        assert_eq!(state, busy_state());
        assert_eq!(
            decode(&fs::read(manager.path()).unwrap())
                .unwrap()
                .file_version,
            CURRENT_VERSION
        );
    }

    #[test]
    fn corrupt_checkpoint_is_refused_then_reset() {
        let dir = tempfile::tempdir().unwrap();
        let (manager, _, _) = StateManager::load_or_init(dir.path(), IfUnusable::Refuse).unwrap();
        let path = manager.path();
        let mut file: serde_json::Value =
            serde_json::from_slice(&fs::read(&path).unwrap()).unwrap();
        file["state"]["counters"]["events_lost"] = 3.into();
        let corrupt = serde_json::to_vec(&file).unwrap();
        fs::write(&path, &corrupt).unwrap();
        drop(manager);

        let refused = StateManager::load_or_init(dir.path(), IfUnusable::Refuse).unwrap_err();
        let message = refused.to_string();
        for expected in [
            path.display().to_string(),
            "expected".into(),
            "actual".into(),
            "--reset-state".into(),
        ] {
            assert!(
                message.contains(&expected),
                "{expected:?} missing from: {message}"
            );
        }
        assert_eq!(
            fs::read(&path).unwrap(),
            corrupt,
            "refusing leaves the file alone"
        );

        let (_, state, startup) =
            StateManager::load_or_init(dir.path(), IfUnusable::Reset).unwrap();
        assert_eq!(state, AgentState::default());
        let Startup::Reset { set_aside, .. } = startup else {
            panic!("expected a reset, got {startup:?}");
        };
        assert_eq!(
            fs::read(&set_aside).unwrap(),
            corrupt,
            "the bad file is kept"
        );
        let name = set_aside.file_name().unwrap().to_str().unwrap();
        assert!(name.starts_with("agent_state.corrupt-2"), "{name}");
        assert_eq!(
            decode(&fs::read(&path).unwrap()).unwrap().state,
            AgentState::default()
        );
    }

    #[test]
    fn an_oversized_checkpoint_is_refused_unread_then_reset() {
        let dir = tempfile::tempdir().unwrap();
        let (manager, _, _) = StateManager::load_or_init(dir.path(), IfUnusable::Refuse).unwrap();
        let path = manager.path();
        // Sparse: 300 MiB long without taking the space.
        let file = fs::OpenOptions::new().write(true).open(&path).unwrap();
        file.set_len(300 << 20).unwrap();
        drop(manager);

        let refused = StateManager::load_or_init(dir.path(), IfUnusable::Refuse).unwrap_err();
        let message = refused.to_string();
        assert!(
            message.contains("is larger than 4194304 bytes") && message.contains("--reset-state"),
            "{message}"
        );
        let (_, state, startup) =
            StateManager::load_or_init(dir.path(), IfUnusable::Reset).unwrap();
        assert_eq!(state, AgentState::default());
        assert!(
            matches!(&startup, Startup::Reset { problem, .. } if problem.contains("larger than")),
            "{startup:?}"
        );
    }
}
