//! `--kube-hard-action`: what an eviction decided on a hard threshold does first with `--kube`,
//! and so which [`Route`] each eviction takes (the route's steps are
//! [`crate::engine::action_path`]'s).
use clap::ValueEnum;

use crate::engine::action_path::Route;

/// What `--kube` does when a hard threshold decides an eviction.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub(crate) enum HardAction {
    /// Kill the pod's cgroup on this node at once, then post the Eviction.
    #[default]
    Kill,
    /// Only post the Eviction; the kubelet stops the pod once the API server deleted it.
    Api,
}

/// `--kube-hard-action`, shared by the agent and `monitor doctor` (which checks the
/// privileges the chosen action needs).
#[derive(clap::Args, Clone, Copy, Debug, Default)]
pub(crate) struct HardActionFlag {
    /// With --kube: what an eviction decided on a hard threshold does first. Soft thresholds
    /// always go through the Eviction API alone.
    ///
    /// kill (the default) kills the pod's cgroup on this node at once (SIGTERM, the
    /// decision's grace period, 1 s on hard thresholds, then SIGKILL), exactly as without
    /// --kube, and then posts the Eviction so the API server records it and the kubelet does
    /// not restart the pod here. This is how the kubelet itself treats a hard threshold: it
    /// stops the pod at once and consults no PodDisruptionBudget. A fast-growing pod reaches
    /// the kernel's OOM killer in the time an API round trip and the kubelet's reaction take,
    /// so only this wins that race. Once the pod is stopped, the API's answer no longer holds
    /// the node: a budget's refusal (429), an error or no answer within 10 s is logged and
    /// counted as a failed action, not taken back; the kubelet may then restart the pod's
    /// containers (restartPolicy), and the pod ranks again once they run. When the kill
    /// cannot stop the pod, the Eviction's answer decides, as with api.
    ///
    /// api only posts the Eviction and leaves stopping the pod to the kubelet: budgets are
    /// respected (a refused pod is passed over) but the pod grows until the kubelet acts.
    /// Needs CAP_KILL and the host PID namespace for kill (see `monitor doctor`).
    #[arg(
        long,
        value_enum,
        default_value_t,
        requires = "kube",
        value_name = "ACTION"
    )]
    pub kube_hard_action: HardAction,
}

impl HardAction {
    /// The route for an eviction decided on a hard or a soft threshold.
    pub(crate) fn route(self, kube: bool, hard: bool) -> Route {
        match (kube, hard, self) {
            (false, _, _) => Route::Local,
            (true, true, HardAction::Kill) => Route::LocalFirst,
            (true, _, _) => Route::Api,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_route_follows_the_mode_the_threshold_and_the_flag() {
        let cases = [
            ("--pods, hard", false, true, HardAction::Kill, Route::Local),
            ("--pods, soft", false, false, HardAction::Api, Route::Local),
            (
                "--kube, hard, kill",
                true,
                true,
                HardAction::Kill,
                Route::LocalFirst,
            ),
            ("--kube, hard, api", true, true, HardAction::Api, Route::Api),
            (
                "--kube, soft, kill",
                true,
                false,
                HardAction::Kill,
                Route::Api,
            ),
            (
                "--kube, soft, api",
                true,
                false,
                HardAction::Api,
                Route::Api,
            ),
        ];
        for (name, kube, hard, action, route) in cases {
            assert_eq!(action.route(kube, hard), route, "{name}");
        }
        assert_eq!(
            HardAction::default(),
            HardAction::Kill,
            "the default wins the race"
        );
        assert!(Route::LocalFirst.kills() && Route::Local.kills() && !Route::Api.kills());
    }
}
