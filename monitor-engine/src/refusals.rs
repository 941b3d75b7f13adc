//! Pods whose eviction the API server refused because a PodDisruptionBudget allowed no
//! disruption (429), and the rule that keeps one such pod from stalling the node.
//!
//! A refusal frees nothing, so it must not cost what an eviction costs:
//! - the refused pod is held out of the decisions for one eviction interval (at least
//!   [`MIN_HOLD`]), keeping its place in the ranking, then may be tried again;
//! - the decision it came from is taken back: the wait for its cleanup ends, and the
//!   eviction interval counts from the eviction before it, so the next candidate is evicted
//!   at once when that one is more than an interval ago.
//!
//! When every candidate is held, nothing is evicted until the first hold ends: the refused
//! pods are then tried again, one API request per pod and interval.
use std::{collections::HashMap, time::Duration};

use crate::{decide::EvictionState, ids::PodUid, instant::MonoInstant};

/// The shortest time a refused pod is held out, so that an eviction interval of 0 does not
/// turn refusals into a loop of API requests.
pub const MIN_HOLD: Duration = Duration::from_secs(1);

/// Refused pods and the decision each refusal takes back.
#[derive(Debug, Default)]
pub(crate) struct Refusals {
    /// Refused pods, by uid, and when they may be chosen again.
    held_until: HashMap<PodUid, MonoInstant>,
    /// The last eviction decided: its pod, and when the eviction before it was.
    last_decided: Option<(PodUid, Option<MonoInstant>)>,
}

impl Refusals {
    /// Remembers a decided eviction of `uid`, and when the one before it was, so a refusal
    /// can take it back.
    pub(crate) fn decided(&mut self, uid: &str, previous_eviction: Option<MonoInstant>) {
        self.last_decided = Some((uid.into(), previous_eviction));
    }

    /// The eviction of `uid` was refused at `now`: the pod is held out for `interval` (at
    /// least [`MIN_HOLD`]), and the decision is taken back in `state`.
    pub(crate) fn refused(
        &mut self,
        uid: &str,
        now: MonoInstant,
        interval: Duration,
        state: &mut EvictionState,
    ) {
        self.held_until
            .insert(uid.into(), now.saturating_add(interval.max(MIN_HOLD)));
        self.take_back(uid, state);
    }

    /// Takes the decision on `uid` back in `state`: no cleanup awaited, and the eviction
    /// interval counts from the eviction before it.
    pub(crate) fn take_back(&mut self, uid: &str, state: &mut EvictionState) {
        state.pod_cleaned_up(uid);
        if let Some((decided, previous)) = self.last_decided.take() {
            if decided.as_str() == uid {
                state.last_eviction = previous;
            } else {
                self.last_decided = Some((decided, previous));
            }
        }
    }

    /// Ends the holds that are over at `now`.
    pub(crate) fn expire(&mut self, now: MonoInstant) {
        self.held_until.retain(|_, until| *until > now);
    }

    /// Whether `uid` is held out of the decisions.
    pub(crate) fn holds(&self, uid: &str) -> bool {
        self.held_until.contains_key(uid)
    }

    /// Forgets a pod that left the pod set.
    pub(crate) fn forget(&mut self, uid: &str) {
        self.held_until.remove(uid);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{decide::PendingCleanup, pod_facts::PodRef};

    fn at(secs: u64) -> MonoInstant {
        MonoInstant::from_millis(secs * 1000)
    }

    fn pending(uid: &str, secs: u64) -> EvictionState {
        EvictionState {
            last_eviction: Some(at(secs)),
            awaiting_cleanup: Some(PendingCleanup {
                pod: PodRef {
                    namespace: "default".into(),
                    name: uid.into(),
                    uid: uid.into(),
                },
                evicted_at: at(secs),
                grace_period_seconds: 1,
            }),
            ..EvictionState::default()
        }
    }

    #[test]
    fn a_refusal_takes_its_decision_back_and_holds_the_pod_for_an_interval() {
        struct Case {
            name: &'static str,
            previous: Option<u64>,
            decided: &'static str,
            refused: &'static str,
            interval: u64,
            last_eviction_after: Option<u64>,
            cleanup_wait_ends: bool,
            held_until: u64,
        }
        let cases = [
            Case {
                name: "first eviction refused: no interval to wait for",
                previous: None,
                decided: "a",
                refused: "a",
                interval: 10,
                last_eviction_after: None,
                cleanup_wait_ends: true,
                held_until: 110,
            },
            Case {
                name: "the interval counts from the eviction before",
                previous: Some(50),
                decided: "a",
                refused: "a",
                interval: 10,
                last_eviction_after: Some(50),
                cleanup_wait_ends: true,
                held_until: 110,
            },
            Case {
                name: "a refusal of another pod leaves the decision alone",
                previous: Some(50),
                decided: "a",
                refused: "b",
                interval: 10,
                last_eviction_after: Some(100),
                cleanup_wait_ends: false,
                held_until: 110,
            },
            Case {
                name: "interval 0 still holds for the minimum",
                previous: None,
                decided: "a",
                refused: "a",
                interval: 0,
                last_eviction_after: None,
                cleanup_wait_ends: true,
                held_until: 101,
            },
        ];
        for case in cases {
            let mut refusals = Refusals::default();
            let mut state = pending(case.decided, 100);
            refusals.decided(case.decided, case.previous.map(at));
            refusals.refused(
                case.refused,
                at(100),
                Duration::from_secs(case.interval),
                &mut state,
            );
            assert_eq!(
                state.last_eviction,
                case.last_eviction_after.map(at),
                "{}",
                case.name
            );
            assert_eq!(
                state.awaiting_cleanup.is_none(),
                case.cleanup_wait_ends,
                "{}",
                case.name
            );
            refusals.expire(at(case.held_until - 1));
            assert!(refusals.holds(case.refused), "{}: held", case.name);
            refusals.expire(at(case.held_until));
            assert!(!refusals.holds(case.refused), "{}: released", case.name);
        }
    }
}
