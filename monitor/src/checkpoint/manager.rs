//! Loading the agent state at start, and saving it whenever it changed.
//!
//! A checkpoint that cannot be used (damaged, truncated, empty, unreadable, or not a regular
//! file) never stops the agent: it is moved aside with the time in its name, never deleted by
//! that move, and the agent starts with an empty state and protects the node. At most
//! [`SET_ASIDE_KEPT`] copies are kept (the first found and the newest), so an agent restarting
//! in a loop on a disk that damages every write cannot fill it. A file that cannot even be
//! moved is left where it is, and the state is written only once it could be.
use std::fmt;
use std::io;
use std::path::PathBuf;

use super::dir_lock::{DirLock, Held};
use super::key::Key;
use super::store::{FileStore, StoreError};
use super::wall_time;
use crate::engine::checkpoint::{
    AgentState, CURRENT_VERSION, CheckpointError, Mode, NotCarried, decode, encode, state_checksum,
    take_over,
};
use crate::system_clock::unix_ms_now;

/// Damaged checkpoints kept in the directory: the first set aside and the newest others.
pub const SET_ASIDE_KEPT: usize = 5;
/// How a damaged checkpoint set aside is named: `agent_state.corrupt-<time>`.
pub const SET_ASIDE_MARKER: &str = "corrupt-";
/// How a checkpoint set aside by `--reset-state` is named: `agent_state.reset-<time>`.
const RESET_MARKER: &str = "reset-";

/// What to do with the checkpoint found at start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AtStart {
    /// Load it; a damaged one is set aside and the state starts empty.
    Load,
    /// Set it aside even when it is valid, and start empty (`--reset-state`).
    Reset,
}

/// How the state was obtained at start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Startup {
    /// No checkpoint existed; an empty state was written.
    Created,
    /// The checkpoint was loaded; an older version was migrated and rewritten.
    Restored { file_version: u32 },
    /// The checkpoint could not be used and was moved to `set_aside`; the state starts empty.
    /// `pruned` are older copies removed to keep [`SET_ASIDE_KEPT`].
    Damaged {
        problem: String,
        set_aside: PathBuf,
        pruned: Vec<PathBuf>,
    },
    /// The checkpoint could not be used, nor moved aside (`error`); the state starts empty and
    /// is written once the file could be moved.
    DamagedInPlace { problem: String, error: String },
    /// `--reset-state`: the checkpoint (valid or not) was moved to `set_aside`.
    Reset { set_aside: PathBuf },
}

impl Startup {
    /// Why the checkpoint found at start could not be used, when it could not.
    pub fn damage(&self) -> Option<&str> {
        match self {
            Self::Damaged { problem, .. } | Self::DamagedInPlace { problem, .. } => Some(problem),
            Self::Created | Self::Restored { .. } | Self::Reset { .. } => None,
        }
    }
}

/// Why the state could not be loaded or saved.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    /// The directory or file could not be read or written.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The damaged checkpoint found at start is still where the state is written.
    #[error(
        "the damaged checkpoint {} could not be moved aside yet ({problem}); the state is not \
         written over it",
        path.display()
    )]
    DamagedInPlace { path: PathBuf, problem: String },
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
    /// The state this agent starts with (see [`take_over`]).
    pub state: AgentState,
    pub startup: Startup,
    /// What of the file the agent does not carry on, for the log.
    pub not_carried: Vec<NotCarried>,
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
    /// A damaged file found at start that could not be moved aside yet.
    damaged_in_place: Option<String>,
    /// This process's hold on the directory (none where it could not be opened).
    lock: Option<DirLock>,
}

impl StateManager {
    /// Prepares `dir` and loads the state of the agent in `mode` from it (see
    /// [`Self::open`]); a checkpoint that cannot be written is an error here.
    pub fn load_or_init(
        dir: impl Into<PathBuf>,
        mode: Mode,
        at_start: AtStart,
    ) -> Result<(Self, AgentState, Startup), StateError> {
        let opened = Self::open(dir, mode, at_start)?;
        if let Some(error) = opened.write_problem {
            return Err(error);
        }
        Ok((opened.manager, opened.state, opened.startup))
    }

    /// Prepares `dir` and loads the agent state from it: an absent checkpoint starts empty, an
    /// older version is migrated, one that cannot be used is set aside and the state starts
    /// empty; what the agent in `mode` carries on is [`take_over`]'s. The file is left in the
    /// current version, holding the returned state. A directory that cannot be prepared or
    /// written (read only, full, out of file descriptors) does not stop the load: the write
    /// problem is handed back for the caller to report and retry. Only another agent holding
    /// the directory is an error.
    pub fn open(
        dir: impl Into<PathBuf>,
        mode: Mode,
        at_start: AtStart,
    ) -> Result<Opened, StateError> {
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
            damaged_in_place: None,
            lock,
        };
        let (found, startup) = manager.load(at_start);
        let handover = take_over(found, mode);
        let write_problem = match prepared {
            Err(error) => Some(error.into()),
            Ok(()) => manager.save_if_changed(&handover.state).err(),
        };
        Ok(Opened {
            manager,
            state: handover.state,
            startup,
            not_carried: handover.not_carried,
            write_problem,
        })
    }

    /// Writes `state` unless the file already holds the same content; returns whether it wrote.
    /// A checkpoint directory removed meanwhile is made again (mode 0700) and locked anew.
    pub fn save_if_changed(&mut self, state: &AgentState) -> Result<bool, StateError> {
        let checksum = state_checksum(state).map_err(StateError::Encode)?;
        if self.written_checksum == Some(checksum) {
            return Ok(false);
        }
        if let Some(problem) = self.damaged_in_place.clone() {
            match self.set_aside(problem.clone()) {
                Ok(moved) => tracing::warn!("checkpoint {}: {moved}", self.path().display()),
                Err(StoreError::NotFound { .. }) => {}
                Err(error) => {
                    return Err(StateError::DamagedInPlace {
                        path: self.path(),
                        problem: format!("{problem}; moving it: {error}"),
                    });
                }
            }
            self.damaged_in_place = None;
        }
        let bytes = encode(state).map_err(StateError::Encode)?;
        match self.store.write(&self.key, &bytes) {
            Err(error) if directory_gone(&error) && !self.store.dir().exists() => {
                self.make_directory_again()?;
                self.store.write(&self.key, &bytes)?;
            }
            result => result?,
        }
        self.written_checksum = Some(checksum);
        Ok(true)
    }

    /// The checkpoint file.
    pub fn path(&self) -> PathBuf {
        self.store.path_of(&self.key)
    }

    /// Makes the removed checkpoint directory again and locks it: the lock held was on the
    /// directory that is gone.
    fn make_directory_again(&mut self) -> Result<(), StateError> {
        self.store.create_dir()?;
        self.lock = None;
        self.lock = DirLock::take(self.store.dir())?;
        tracing::warn!(
            "checkpoint directory {} was removed while the agent ran; made it again (mode 0700, \
             locked by this agent) and wrote the state into it",
            self.store.dir().display()
        );
        Ok(())
    }

    fn load(&mut self, at_start: AtStart) -> (AgentState, Startup) {
        let decoded = match self.store.read(&self.key) {
            Err(StoreError::NotFound { .. }) => return (AgentState::default(), Startup::Created),
            Err(error) => Err(error.to_string()),
            Ok(bytes) => decode(&bytes).map_err(|problem| problem.to_string()),
        };
        match (decoded, at_start) {
            (Ok(decoded), AtStart::Load) => {
                // A newer file is left as it is until the state changes, so rolling forward
                // again finds it intact.
                if decoded.file_version >= CURRENT_VERSION {
                    self.written_checksum = Some(decoded.checksum);
                }
                let startup = Startup::Restored {
                    file_version: decoded.file_version,
                };
                (decoded.state, startup)
            }
            (Ok(_), AtStart::Reset) => match self.move_aside(RESET_MARKER) {
                Ok(set_aside) => (AgentState::default(), Startup::Reset { set_aside }),
                Err(error) => self.damaged_in_place("--reset-state".into(), &error),
            },
            (Err(problem), _) => match self.set_aside(problem.clone()) {
                Ok(startup) => (AgentState::default(), startup),
                Err(error) => self.damaged_in_place(problem, &error),
            },
        }
    }

    fn damaged_in_place(&mut self, problem: String, error: &StoreError) -> (AgentState, Startup) {
        self.damaged_in_place = Some(problem.clone());
        let startup = Startup::DamagedInPlace {
            problem,
            error: error.to_string(),
        };
        (AgentState::default(), startup)
    }

    /// Moves the damaged checkpoint aside and keeps at most [`SET_ASIDE_KEPT`] copies.
    fn set_aside(&mut self, problem: String) -> Result<Startup, StoreError> {
        let set_aside = self.move_aside(SET_ASIDE_MARKER)?;
        // The copy is kept whatever the pruning does: a failure there costs old copies only.
        let pruned = self
            .store
            .prune_set_aside(&self.key, SET_ASIDE_MARKER, SET_ASIDE_KEPT)
            .unwrap_or_else(|error| {
                tracing::warn!("older set-aside checkpoints not pruned: {error}");
                Vec::new()
            });
        Ok(Startup::Damaged {
            problem,
            set_aside,
            pruned,
        })
    }

    fn move_aside(&self, marker: &str) -> Result<PathBuf, StoreError> {
        let suffix = format!("{marker}{}", wall_time::compact(unix_ms_now()));
        self.store.move_aside(&self.key, &suffix)
    }
}

/// A write that failed because its directory is not there (ENOENT on the temporary file).
fn directory_gone(error: &StoreError) -> bool {
    matches!(error, StoreError::Io { source, .. } if source.kind() == io::ErrorKind::NotFound)
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
            Self::Damaged {
                problem,
                set_aside,
                pruned,
            } => {
                write!(
                    f,
                    "DAMAGED, not used: {problem}. It was kept as {} and the agent starts with an \
                     empty state and protects the node; what that costs: soft-threshold grace \
                     periods and the eviction interval start over, an eviction in progress is not \
                     resumed (a pod still draining may be decided on again), and pods killed \
                     before are not known as killed",
                    set_aside.display()
                )?;
                if !pruned.is_empty() {
                    let names: Vec<String> =
                        pruned.iter().map(|p| p.display().to_string()).collect();
                    write!(
                        f,
                        "; older copies removed to keep {SET_ASIDE_KEPT}: {}",
                        names.join(", ")
                    )?;
                }
                Ok(())
            }
            Self::DamagedInPlace { problem, error } => write!(
                f,
                "DAMAGED, not used: {problem}; it could not be moved aside either ({error}), so \
                 it is left in place and the state is not written over it until it can be \
                 moved; the agent starts with an empty state and protects the node"
            ),
            Self::Reset { set_aside } => write!(
                f,
                "--reset-state: the checkpoint was moved to {} and the state starts empty",
                set_aside.display()
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::fs;

    use super::*;
    use crate::engine::checkpoint::{Checkpoint as _, CheckpointV1, Memory, migrate_to_v4};

    fn busy_memory() -> Memory {
        let mut memory = Memory::default();
        memory.count_events(5, 0);
        memory
    }

    fn acting(memory: Memory) -> AgentState {
        AgentState {
            acting: memory,
            written_by: Some(Mode::Acting),
            ..AgentState::default()
        }
    }

    fn open(dir: &std::path::Path) -> (StateManager, AgentState, Startup) {
        StateManager::load_or_init(dir, Mode::Acting, AtStart::Load).unwrap()
    }

    #[test]
    fn absent_checkpoint_starts_empty_and_is_written() {
        let dir = tempfile::tempdir().unwrap();
        let (manager, state, startup) = open(dir.path());
        let empty = acting(Memory::default());
        assert_eq!((&state, startup), (&empty, Startup::Created));
        let on_disk = decode(&fs::read(manager.path()).unwrap()).unwrap();
        assert_eq!(on_disk.state, empty);
    }

    #[test]
    fn writes_only_when_the_state_changed() {
        let dir = tempfile::tempdir().unwrap();
        let (mut manager, mut state, _) = open(dir.path());
        assert!(
            !manager.save_if_changed(&state).unwrap(),
            "unchanged after start"
        );
        state.acting.count_events(1, 0);
        assert!(manager.save_if_changed(&state).unwrap());
        assert!(!manager.save_if_changed(&state).unwrap());
        // The agent that wrote it is gone before the next one starts.
        drop(manager);

        let (mut reloaded, loaded, startup) = open(dir.path());
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
    fn version_1_file_is_migrated_and_rewritten_as_a_dry_run_s_memory() {
        let dir = tempfile::tempdir().unwrap();
        let v1 = CheckpointV1::new(busy_memory().v1)
            .unwrap()
            .marshal()
            .unwrap();
        fs::write(dir.path().join(Key::agent_state().as_str()), v1).unwrap();
        let (manager, state, startup) = open(dir.path());
        assert_eq!(startup, Startup::Restored { file_version: 1 });
        let expected = take_over(migrate_to_v4(busy_memory()), Mode::Acting).state;
        assert_eq!(state, expected);
        assert_eq!(state.dry_run.v1.counters.events_received, 5);
        let on_disk = decode(&fs::read(manager.path()).unwrap()).unwrap();
        assert_eq!(on_disk.file_version, CURRENT_VERSION);
        assert_eq!(on_disk.state, expected);
    }

    /// The names in `dir` that start with `prefix`.
    fn names(dir: &std::path::Path, prefix: &str) -> Vec<String> {
        let mut names: Vec<String> = fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .filter(|n| n.starts_with(prefix))
            .collect();
        names.sort();
        names
    }

    #[test]
    fn a_damaged_checkpoint_is_set_aside_and_the_state_starts_empty() {
        let good = encode(&acting(busy_memory())).unwrap();
        let flipped = {
            let mut bytes = good.clone();
            let at = bytes.iter().position(|&b| b == b'5').unwrap();
            bytes[at] = b'7';
            bytes
        };
        let cases: Vec<(&str, Vec<u8>, &str)> = vec![
            ("zero-length", Vec::new(), "not a valid checkpoint"),
            (
                "truncated",
                good[..good.len() / 2].to_vec(),
                "not a valid checkpoint",
            ),
            ("a digit changed", flipped, "checksum mismatch"),
        ];
        for (name, bytes, problem) in cases {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join(Key::agent_state().as_str());
            fs::write(&path, &bytes).unwrap();
            let (_, state, startup) = open(dir.path());
            assert_eq!(state, acting(Memory::default()), "{name}");
            let Startup::Damaged { set_aside, .. } = &startup else {
                panic!("{name}: {startup:?}");
            };
            assert!(
                startup.damage().unwrap().contains(problem),
                "{name}: {startup}"
            );
            assert_eq!(
                fs::read(set_aside).unwrap(),
                bytes,
                "{name}: kept as it was"
            );
            assert!(
                startup.to_string().contains("starts with an empty state"),
                "{name}: {startup}"
            );
            assert_eq!(
                decode(&fs::read(&path).unwrap()).unwrap().state,
                acting(Memory::default()),
                "{name}: a fresh checkpoint"
            );
        }
    }

    #[test]
    fn a_crash_loop_on_damaged_files_keeps_a_few_copies() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(Key::agent_state().as_str());
        for round in 0..(SET_ASIDE_KEPT + 3) {
            fs::write(&path, format!("damaged {round}")).unwrap();
            let (_, _, startup) = open(dir.path());
            assert!(startup.damage().is_some(), "{startup:?}");
        }
        let kept = names(dir.path(), "agent_state.corrupt-");
        assert_eq!(kept.len(), SET_ASIDE_KEPT, "{kept:?}");
        let contents: Vec<String> = kept
            .iter()
            .map(|n| fs::read_to_string(dir.path().join(n)).unwrap())
            .collect();
        assert!(
            contents.contains(&"damaged 0".to_owned()),
            "the first kept: {contents:?}"
        );
        let newest = format!("damaged {}", SET_ASIDE_KEPT + 2);
        assert!(contents.contains(&newest), "the newest kept: {contents:?}");
    }

    #[test]
    fn reset_sets_aside_even_a_valid_checkpoint() {
        let dir = tempfile::tempdir().unwrap();
        let (mut manager, mut state, _) = open(dir.path());
        state.acting.count_events(3, 0);
        manager.save_if_changed(&state).unwrap();
        let written = fs::read(manager.path()).unwrap();
        drop(manager);
        let (_, state, startup) =
            StateManager::load_or_init(dir.path(), Mode::Acting, AtStart::Reset).unwrap();
        assert_eq!(state, acting(Memory::default()));
        let Startup::Reset { set_aside } = startup else {
            panic!("{startup:?}");
        };
        assert_eq!(fs::read(set_aside).unwrap(), written);
    }

    #[test]
    fn a_directory_removed_while_running_is_made_again_with_its_mode() {
        use std::os::unix::fs::PermissionsExt as _;
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("checkpoints");
        let (mut manager, mut state, _) = open(&dir);
        fs::remove_dir_all(&dir).unwrap();
        state.acting.count_events(1, 0);
        assert!(manager.save_if_changed(&state).unwrap());
        let mode = fs::metadata(&dir).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o700);
        assert_eq!(
            decode(&fs::read(manager.path()).unwrap()).unwrap().state,
            state
        );
        // The new directory is this agent's: a second one is refused.
        let second = StateManager::load_or_init(&dir, Mode::Acting, AtStart::Load).unwrap_err();
        assert!(matches!(second, StateError::Held(_)), "{second}");
    }

    #[test]
    fn an_oversized_checkpoint_is_set_aside_unread() {
        let dir = tempfile::tempdir().unwrap();
        let (manager, _, _) = open(dir.path());
        let path = manager.path();
        // Sparse: 300 MiB long without taking the space.
        let file = fs::OpenOptions::new().write(true).open(&path).unwrap();
        file.set_len(300 << 20).unwrap();
        drop(manager);

        let (_, state, startup) = open(dir.path());
        assert_eq!(state, acting(Memory::default()));
        assert!(
            startup
                .damage()
                .is_some_and(|problem| problem.contains("larger than 4194304 bytes")),
            "{startup:?}"
        );
    }
}
