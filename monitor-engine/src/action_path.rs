//! The path one eviction takes, as a pure state machine: which step runs first, what the
//! decision state hears of each step's report, and which step follows.
//!
//! Three routes. `--pods` kills the pod's cgroup on the node. `--kube` on a soft threshold
//! (or with `--kube-hard-action api`) posts an Eviction and leaves the pod to the kubelet.
//! `--kube` on a hard threshold, by default, does both in order: the kill first, because
//! the API round trip and the kubelet's reaction are where a fast-growing pod beats the
//! kernel's OOM killer to the node; then the Eviction, so the API server records it and
//! neither a controller nor the kubelet restarts the pod on this node. This is what the
//! kubelet's own node-pressure eviction does on a hard threshold: it stops the pod at once,
//! with no PodDisruptionBudget consulted, and only then reports it.
//!
//! Once the kill has stopped the pod, the node has what it needed: what the API makes of the
//! Eviction (accepted, refused by a budget, failed, too slow) is recorded and logged but no
//! longer reaches the decision state, which must neither take the eviction back (a refusal
//! would) nor wait for the pod to leave the watch. When the kill could not stop the pod, the
//! Eviction is the fallback and its report decides, exactly as on the API-only route.
//!
//! Which route an eviction takes is the agent's to say, from its flags
//! (`--kube-hard-action`).

/// Which steps an eviction takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Route {
    /// `--pods`: a cgroup kill.
    Local,
    /// `--kube` on a soft threshold, or with `--kube-hard-action api`: an Eviction.
    Api,
    /// `--kube` on a hard threshold: a cgroup kill, then an Eviction to record it.
    LocalFirst,
}

impl Route {
    /// The first step.
    pub(crate) fn first_step(self) -> Step {
        match self {
            Route::Local | Route::LocalFirst => Step::Kill,
            Route::Api => Step::Evict,
        }
    }

    /// Whether the agent stops the pod's processes itself.
    pub fn kills(self) -> bool {
        self != Route::Api
    }

    /// A short name, for the decision's JSON.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Route::Local => "kill",
            Route::Api => "api",
            Route::LocalFirst => "kill_then_api",
        }
    }

    /// In words, for the decision line.
    pub fn describe(self) -> &'static str {
        match self {
            Route::Local => "killing its cgroup",
            Route::Api => "through the Eviction API, the kubelet stops it",
            Route::LocalFirst => {
                "hard threshold: killing its cgroup first, then the Eviction API records it"
            }
        }
    }
}

/// One step of a route.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// Kill the pod's cgroup on this node.
    Kill,
    /// Post the Eviction (or the deletion) to the API server.
    Evict,
}

/// How a step ended, from its actuator's report.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StepEnd {
    /// The pod's cgroup is empty.
    Stopped,
    /// The pod (or its cgroup) was already gone.
    Gone,
    /// The API server accepted the Eviction.
    Accepted,
    /// A PodDisruptionBudget refused it (429).
    Refused,
    /// It could not be carried out (processes survived force, the API failed).
    Failed,
    /// The API server did not answer in time.
    TimedOut,
}

/// Where one eviction is on its route.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ActionPath {
    pub route: Route,
    /// The step running now.
    pub step: Step,
    /// The kill stopped the pod (or found it gone): the node got what it needed.
    pub stopped_locally: bool,
}

/// What follows a step's report.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Transition {
    /// The report goes to the decision state: it says whether the node got its memory back.
    pub tell_decision: bool,
    /// The step to run next.
    pub next: Option<Step>,
    /// The API did not record an eviction whose pod was already stopped (counted as a
    /// failed action).
    pub unrecorded: bool,
    /// Which path was taken and why, for the log and the recent decisions.
    pub why: &'static str,
}

impl ActionPath {
    /// An eviction at the start of `route`.
    pub fn new(route: Route) -> Self {
        Self {
            route,
            step: route.first_step(),
            stopped_locally: false,
        }
    }

    /// Takes the running step's report and moves on.
    pub fn advance(&mut self, end: StepEnd) -> Transition {
        use StepEnd::{Accepted, Failed, Gone, Refused, Stopped, TimedOut};
        let done = |why| Transition {
            tell_decision: true,
            next: None,
            unrecorded: false,
            why,
        };
        let transition = match (self.route, self.step, self.stopped_locally, end) {
            (Route::Local | Route::Api, _, _, _) => done(match end {
                Stopped | Gone | Accepted => "done",
                Refused => "refused by a PodDisruptionBudget",
                Failed | TimedOut => "failed",
            }),
            (Route::LocalFirst, Step::Kill, _, Stopped | Gone) => {
                self.stopped_locally = true;
                Transition {
                    tell_decision: true,
                    next: Some(Step::Evict),
                    unrecorded: false,
                    why: "stopped on the node; posting the Eviction to record it",
                }
            }
            (Route::LocalFirst, Step::Kill, _, _) => Transition {
                tell_decision: false,
                next: Some(Step::Evict),
                unrecorded: false,
                why: "not stopped on the node; the Eviction API is the fallback and decides",
            },
            (Route::LocalFirst, Step::Evict, true, Accepted | Gone) => Transition {
                tell_decision: false,
                next: None,
                unrecorded: false,
                why: "stopped on the node, then recorded by the API server",
            },
            (Route::LocalFirst, Step::Evict, true, Refused) => Transition {
                tell_decision: false,
                next: None,
                unrecorded: true,
                why: "stopped on the node, but a PodDisruptionBudget refused the Eviction: the \
                      kubelet may restart its containers, which then rank again",
            },
            (Route::LocalFirst, Step::Evict, true, _) => Transition {
                tell_decision: false,
                next: None,
                unrecorded: true,
                why: "stopped on the node, but the Eviction was not recorded by the API server",
            },
            (Route::LocalFirst, Step::Evict, false, _) => done(match end {
                Accepted | Gone | Stopped => "not stopped on the node; evicted through the API",
                Refused => "not stopped on the node; a PodDisruptionBudget refused the Eviction",
                Failed | TimedOut => "neither stopped on the node nor evicted through the API",
            }),
        };
        if let Some(next) = transition.next {
            self.step = next;
        }
        transition
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs `ends` through a path on `route`; each step's transition.
    fn walk(route: Route, ends: &[StepEnd]) -> Vec<(Step, Transition)> {
        let mut path = ActionPath::new(route);
        ends.iter()
            .map(|&end| {
                let step = path.step;
                (step, path.advance(end))
            })
            .collect()
    }

    #[test]
    fn every_transition() {
        use StepEnd::*;
        // (name, route, step ends, per step: (step, tell_decision, next, unrecorded))
        type Expect = (Step, bool, Option<Step>, bool);
        let cases: [(&str, Route, &[StepEnd], &[Expect]); 17] = [
            (
                "local stopped",
                Route::Local,
                &[Stopped],
                &[(Step::Kill, true, None, false)],
            ),
            (
                "local gone",
                Route::Local,
                &[Gone],
                &[(Step::Kill, true, None, false)],
            ),
            (
                "local failed",
                Route::Local,
                &[Failed],
                &[(Step::Kill, true, None, false)],
            ),
            (
                "api accepted",
                Route::Api,
                &[Accepted],
                &[(Step::Evict, true, None, false)],
            ),
            (
                "api gone",
                Route::Api,
                &[Gone],
                &[(Step::Evict, true, None, false)],
            ),
            (
                "api refused",
                Route::Api,
                &[Refused],
                &[(Step::Evict, true, None, false)],
            ),
            (
                "api failed",
                Route::Api,
                &[Failed],
                &[(Step::Evict, true, None, false)],
            ),
            (
                "api timed out",
                Route::Api,
                &[TimedOut],
                &[(Step::Evict, true, None, false)],
            ),
            (
                "killed, recorded",
                Route::LocalFirst,
                &[Stopped, Accepted],
                &[
                    (Step::Kill, true, Some(Step::Evict), false),
                    (Step::Evict, false, None, false),
                ],
            ),
            (
                "cgroup gone, pod gone from the API",
                Route::LocalFirst,
                &[Gone, Gone],
                &[
                    (Step::Kill, true, Some(Step::Evict), false),
                    (Step::Evict, false, None, false),
                ],
            ),
            (
                "killed, refused by a budget: not taken back",
                Route::LocalFirst,
                &[Stopped, Refused],
                &[
                    (Step::Kill, true, Some(Step::Evict), false),
                    (Step::Evict, false, None, true),
                ],
            ),
            (
                "killed, the API failed",
                Route::LocalFirst,
                &[Stopped, Failed],
                &[
                    (Step::Kill, true, Some(Step::Evict), false),
                    (Step::Evict, false, None, true),
                ],
            ),
            (
                "killed, the API too slow",
                Route::LocalFirst,
                &[Stopped, TimedOut],
                &[
                    (Step::Kill, true, Some(Step::Evict), false),
                    (Step::Evict, false, None, true),
                ],
            ),
            (
                "kill failed, the API accepts and decides",
                Route::LocalFirst,
                &[Failed, Accepted],
                &[
                    (Step::Kill, false, Some(Step::Evict), false),
                    (Step::Evict, true, None, false),
                ],
            ),
            (
                "kill failed, refused: the refusal decides",
                Route::LocalFirst,
                &[Failed, Refused],
                &[
                    (Step::Kill, false, Some(Step::Evict), false),
                    (Step::Evict, true, None, false),
                ],
            ),
            (
                "kill failed, the API failed too",
                Route::LocalFirst,
                &[Failed, Failed],
                &[
                    (Step::Kill, false, Some(Step::Evict), false),
                    (Step::Evict, true, None, false),
                ],
            ),
            (
                "kill failed, the API timed out",
                Route::LocalFirst,
                &[Failed, TimedOut],
                &[
                    (Step::Kill, false, Some(Step::Evict), false),
                    (Step::Evict, true, None, false),
                ],
            ),
        ];
        for (name, route, ends, expected) in cases {
            let got: Vec<Expect> = walk(route, ends)
                .into_iter()
                .map(|(step, t)| (step, t.tell_decision, t.next, t.unrecorded))
                .collect();
            assert_eq!(got, expected, "{name}");
        }
    }

    #[test]
    fn a_path_that_stopped_the_pod_says_so_whatever_the_api_answers() {
        for end in [StepEnd::Accepted, StepEnd::Refused, StepEnd::Failed] {
            let mut path = ActionPath::new(Route::LocalFirst);
            path.advance(StepEnd::Stopped);
            assert!(path.stopped_locally);
            let why = path.advance(end).why;
            assert!(why.starts_with("stopped on the node"), "{end:?}: {why}");
        }
    }
}
