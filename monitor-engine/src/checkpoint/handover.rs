//! What an agent carries on from the checkpoint it starts on, by the mode it runs in and the
//! mode that wrote the file.
//!
//! Each mode keeps its own memory ([`AgentState::acting`], [`AgentState::dry_run`]), and an
//! agent decides with, and writes, only its own:
//!
//! - A dry run's decisions are never carried out. An acting agent started on a dry run's file
//!   resumes none of its evictions, and the dry run's last eviction neither holds back nor
//!   prompts its next one: it decides from what it observes now.
//! - A dry run never takes over an acting agent's eviction in progress, nor clears it: it is
//!   left in the file for the next acting agent, which finishes it on its original deadline if
//!   the pod still runs. The pods an acting agent killed stay known as killed to both modes.
//! - A file written before version 4 does not say which mode wrote it. Its memory is taken as
//!   a dry run's: an acting agent killing a pod no threshold chose is the worse mistake (the
//!   DaemonSet starts in dry run, so most such files are dry runs'); the cost falls on an
//!   acting agent upgraded in the middle of an eviction, which decides again instead.
//! - When the other mode wrote the file, this mode's soft-threshold timers start over: the
//!   agent did not watch the node since it last wrote them, and a timer carried over that gap
//!   could evict before the threshold was met for its whole grace period.
use std::fmt;

use super::state::{AgentState, Memory, Mode, SavedPod};

/// The state an agent starts with, and what of the file it does not carry on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Handover {
    /// The file's state, marked as written by this agent's mode.
    pub state: AgentState,
    /// For the log, in the order found.
    pub not_carried: Vec<NotCarried>,
}

/// Whose memory a part of the file was.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// An agent of this mode.
    Mode(Mode),
    /// An agent before version 4, which did not record its mode.
    Unrecorded,
}

/// Something the file holds that the starting agent does not carry on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NotCarried {
    /// An eviction still in progress in another mode's memory.
    EvictionInProgress { of: Origin, pod: SavedPod },
    /// Another mode's last eviction (with none in progress).
    LastEviction { of: Origin, pod: SavedPod },
    /// Soft-threshold timers that run no more, by signal.
    SoftTimers { of: Origin, signals: Vec<String> },
}

/// The state the agent in `mode` starts with from the `file` it found.
pub fn take_over(mut file: AgentState, mode: Mode) -> Handover {
    let written_by = file.written_by;
    let mut not_carried = Vec::new();
    let other_origin = match written_by {
        None => {
            // Taken as a dry run's: it moves out of the parts older agents read as acting.
            file.dry_run = std::mem::take(&mut file.acting);
            Origin::Unrecorded
        }
        Some(_) => Origin::Mode(other(mode)),
    };
    match mode {
        Mode::Acting => other_memory(&file.dry_run, other_origin, &mut not_carried),
        Mode::DryRun => {
            if let Some(awaiting) = &file.acting.v1.awaiting_cleanup {
                not_carried.push(NotCarried::EvictionInProgress {
                    of: Origin::Mode(Mode::Acting),
                    pod: awaiting.pod.clone(),
                });
            }
        }
    }
    if written_by == Some(other(mode)) {
        let own = file.memory_mut(mode);
        let signals = soft_timers(own);
        if !signals.is_empty() {
            own.forget_soft_thresholds();
            not_carried.push(NotCarried::SoftTimers {
                of: Origin::Mode(mode),
                signals,
            });
        }
    }
    file.written_by = Some(mode);
    Handover {
        state: file,
        not_carried,
    }
}

/// What an acting agent leaves of a dry run's (or an unrecorded) memory.
fn other_memory(memory: &Memory, of: Origin, not_carried: &mut Vec<NotCarried>) {
    match (&memory.v1.awaiting_cleanup, &memory.v1.last_eviction) {
        (Some(awaiting), _) => not_carried.push(NotCarried::EvictionInProgress {
            of,
            pod: awaiting.pod.clone(),
        }),
        (None, Some(last)) => not_carried.push(NotCarried::LastEviction {
            of,
            pod: last.pod.clone(),
        }),
        (None, None) => {}
    }
    let signals = soft_timers(memory);
    if !signals.is_empty() {
        not_carried.push(NotCarried::SoftTimers { of, signals });
    }
}

fn soft_timers(memory: &Memory) -> Vec<String> {
    memory
        .v1
        .soft_threshold_first_observed_unix_ms
        .keys()
        .cloned()
        .collect()
}

fn other(mode: Mode) -> Mode {
    match mode {
        Mode::Acting => Mode::DryRun,
        Mode::DryRun => Mode::Acting,
    }
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Mode(mode) => f.write_str(mode.describe()),
            Self::Unrecorded => f.write_str(
                "an agent before checkpoint version 4, which did not record whether it was a dry \
                 run (taken as one)",
            ),
        }
    }
}

impl fmt::Display for NotCarried {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let pod = |p: &SavedPod| format!("{}/{} (uid {})", p.namespace, p.name, p.uid);
        match self {
            Self::EvictionInProgress {
                of: Origin::Mode(Mode::Acting),
                pod: p,
            } => write!(
                f,
                "the eviction of {} that an acting agent has in progress is not taken over by \
                 this dry run; it stays in the checkpoint for the next acting agent",
                pod(p)
            ),
            Self::EvictionInProgress { of, pod: p } => write!(
                f,
                "dropped the eviction of {} decided by {of}: it is not resumed, and this agent \
                 decides from what it observes now",
                pod(p)
            ),
            Self::LastEviction { of, pod: p } => write!(
                f,
                "dropped the last eviction decided by {of} ({}): it neither holds back nor \
                 brings on this agent's next eviction",
                pod(p)
            ),
            Self::SoftTimers { of, signals } => write!(
                f,
                "soft-threshold timers of {of} on {} start over: this agent did not watch them \
                 run, so a soft threshold must be seen met for its whole grace period again",
                signals.join(", ")
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checkpoint::Now;

    fn now() -> Now {
        Now {
            unix_ms: 1_700_000_000_000,
            boot_id: "boot-a".into(),
            boot_ms: 50_000,
        }
    }

    fn pod(name: &str) -> SavedPod {
        SavedPod {
            namespace: "default".into(),
            name: name.into(),
            uid: format!("uid-{name}"),
        }
    }

    /// A memory with `name`'s eviction in progress (1 s of grace) and a soft timer running.
    fn evicting(name: &str) -> Memory {
        let mut memory = Memory::default();
        memory.observe_soft_threshold("memory.available", &now());
        memory.record_eviction(pod(name), "memory.available", 0, &now());
        memory.record_grace_period(1);
        memory
    }

    /// `evicting`, its eviction over.
    fn evicted(name: &str) -> Memory {
        let mut memory = evicting(name);
        memory.forget_soft_thresholds();
        memory.finish_cleanup();
        memory
    }

    fn file(acting: Memory, dry_run: Memory, written_by: Option<Mode>) -> AgentState {
        AgentState {
            acting,
            dry_run,
            written_by,
        }
    }

    fn in_progress(of: Origin, name: &str) -> NotCarried {
        NotCarried::EvictionInProgress { of, pod: pod(name) }
    }

    fn timers(of: Origin) -> NotCarried {
        NotCarried::SoftTimers {
            of,
            signals: vec!["memory.available".into()],
        }
    }

    /// One row of the carrying rules.
    struct Case {
        name: &'static str,
        /// The file found at start.
        file: AgentState,
        /// The starting agent's mode.
        mode: Mode,
        /// The memory it decides with.
        carried: Memory,
        /// The other mode's memory, as it leaves it in the file.
        left: Memory,
        /// What the log says is not carried.
        logged: Vec<NotCarried>,
    }

    const ACTING: Origin = Origin::Mode(Mode::Acting);
    const DRY_RUN: Origin = Origin::Mode(Mode::DryRun);

    #[test]
    fn what_each_mode_carries_on() {
        let empty = Memory::default;
        let without_timers = |mut m: Memory| {
            m.forget_soft_thresholds();
            m
        };
        let cases = vec![
            Case {
                name: "acting after acting: everything carried, the eviction resumed",
                file: file(evicting("hog"), empty(), Some(Mode::Acting)),
                mode: Mode::Acting,
                carried: evicting("hog"),
                left: empty(),
                logged: vec![],
            },
            Case {
                name: "acting after a dry run: nothing of the dry run's decisions",
                file: file(empty(), evicting("hog"), Some(Mode::DryRun)),
                mode: Mode::Acting,
                carried: empty(),
                left: evicting("hog"),
                logged: vec![in_progress(DRY_RUN, "hog"), timers(DRY_RUN)],
            },
            Case {
                name: "acting after a dry run whose eviction is over: its last one does not gate",
                file: file(empty(), evicted("hog"), Some(Mode::DryRun)),
                mode: Mode::Acting,
                carried: empty(),
                left: evicted("hog"),
                logged: vec![NotCarried::LastEviction {
                    of: DRY_RUN,
                    pod: pod("hog"),
                }],
            },
            Case {
                name: "acting, back after a dry run: its own eviction in progress, timers anew",
                file: file(evicting("web"), evicting("hog"), Some(Mode::DryRun)),
                mode: Mode::Acting,
                carried: without_timers(evicting("web")),
                left: evicting("hog"),
                logged: vec![in_progress(DRY_RUN, "hog"), timers(DRY_RUN), timers(ACTING)],
            },
            Case {
                name: "acting on a file before version 4: taken as a dry run's",
                file: file(evicting("hog"), empty(), None),
                mode: Mode::Acting,
                carried: empty(),
                left: evicting("hog"),
                logged: vec![
                    in_progress(Origin::Unrecorded, "hog"),
                    timers(Origin::Unrecorded),
                ],
            },
            Case {
                name: "dry run after acting: the acting eviction left alone, not taken over",
                file: file(evicting("web"), empty(), Some(Mode::Acting)),
                mode: Mode::DryRun,
                carried: empty(),
                left: evicting("web"),
                logged: vec![in_progress(ACTING, "web")],
            },
            Case {
                name: "dry run back after acting: its own decisions kept, its timers anew",
                file: file(evicting("web"), evicting("hog"), Some(Mode::Acting)),
                mode: Mode::DryRun,
                carried: without_timers(evicting("hog")),
                left: evicting("web"),
                logged: vec![in_progress(ACTING, "web"), timers(DRY_RUN)],
            },
            Case {
                name: "dry run after a dry run: everything its own carried",
                file: file(evicted("web"), evicting("hog"), Some(Mode::DryRun)),
                mode: Mode::DryRun,
                carried: evicting("hog"),
                left: evicted("web"),
                logged: vec![],
            },
            Case {
                name: "dry run on a file before version 4: its own, as it likely was",
                file: file(evicting("hog"), empty(), None),
                mode: Mode::DryRun,
                carried: evicting("hog"),
                left: empty(),
                logged: vec![],
            },
        ];
        for Case {
            name,
            file,
            mode,
            carried,
            left,
            logged,
        } in cases
        {
            let handover = take_over(file, mode);
            assert_eq!(handover.state.written_by, Some(mode), "{name}");
            assert_eq!(handover.state.memory(mode), &carried, "{name}: carried");
            assert_eq!(
                handover.state.memory(other(mode)),
                &left,
                "{name}: the other mode's memory"
            );
            assert_eq!(handover.not_carried, logged, "{name}: the log");
        }
    }

    #[test]
    fn the_log_says_what_was_dropped_and_why() {
        let handover = take_over(file(evicting("hog"), Memory::default(), None), Mode::Acting);
        let lines: Vec<String> = handover
            .not_carried
            .iter()
            .map(ToString::to_string)
            .collect();
        assert!(
            lines[0].contains("dropped the eviction of default/hog (uid uid-hog)")
                && lines[0].contains("not resumed")
                && lines[0].contains("did not record whether it was a dry run"),
            "{lines:?}"
        );
        let handover = take_over(
            file(evicting("web"), Memory::default(), Some(Mode::Acting)),
            Mode::DryRun,
        );
        assert!(
            handover.not_carried[0]
                .to_string()
                .contains("stays in the checkpoint for the next acting agent"),
            "{:?}",
            handover.not_carried
        );
    }
}
