//! What a dry run with `--reclaim-first` says it would reclaim before an eviction: the page
//! cache the kubelet counts in each pod, head first in its order, until the threshold's
//! shortfall is covered or the ladder's bytes spent (see [`crate::reclaim_ladder`]).
use crate::{pod_facts::PodRef, reclaim_ladder::Budget, units::unsigned_bytes};

/// What a dry run would reclaim: each pod's file cache, head first, until the shortfall is
/// covered or the budget's bytes spent; whether an eviction would still follow.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DryRunPlan {
    pub steps: Vec<(PodRef, u64)>,
    pub then_evict: bool,
}

/// A dry run's ladder from the file cache each rung holds and the bytes the threshold is
/// short of. A guess: the kernel may refuse part of it, and cache in use comes back.
pub fn dry_run_plan(rungs: &[(PodRef, u64)], shortfall: u64, budget: Budget) -> DryRunPlan {
    let mut steps = Vec::new();
    let mut taken = 0u64;
    for (pod, file) in rungs {
        if taken >= shortfall || taken >= budget.bytes {
            break;
        }
        let take = (*file).min(budget.bytes - taken).min(shortfall - taken);
        if take > 0 {
            steps.push((pod.clone(), take));
            taken += take;
        }
    }
    DryRunPlan {
        steps,
        then_evict: taken < shortfall,
    }
}

impl DryRunPlan {
    /// "would reclaim file cache: 412.0Mi from shop/cache, then evict nobody".
    pub fn text(&self, victim: &PodRef) -> String {
        let then = if self.then_evict {
            format!("then evict {victim}")
        } else {
            "then evict nobody".to_string()
        };
        if self.steps.is_empty() {
            return format!("would find no file cache to reclaim, {then}");
        }
        let from = self
            .steps
            .iter()
            .map(|(pod, taken)| format!("{} from {pod}", unsigned_bytes(*taken)))
            .collect::<Vec<_>>()
            .join(", ");
        format!("would reclaim file cache: {from}, {then}")
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::reclaim_ladder::{
        EPISODE_BUDGET,
        tests::{MI, pod},
    };

    #[test]
    fn a_dry_run_says_what_it_would_reclaim_and_whether_an_eviction_follows() {
        let rungs = [(pod("cache"), 300 * MI), (pod("web"), 200 * MI)];
        for (name, shortfall, budget_bytes, steps, text) in [
            (
                "the head's cache covers it",
                100 * MI,
                1 << 30,
                vec![(pod("cache"), 100 * MI)],
                "would reclaim file cache: 100.0Mi from default/cache, then evict nobody",
            ),
            (
                "two pods cover it",
                412 * MI,
                1 << 30,
                vec![(pod("cache"), 300 * MI), (pod("web"), 112 * MI)],
                "would reclaim file cache: 300.0Mi from default/cache, 112.0Mi from default/web, \
                 then evict nobody",
            ),
            (
                "not enough cache",
                600 * MI,
                1 << 30,
                vec![(pod("cache"), 300 * MI), (pod("web"), 200 * MI)],
                "would reclaim file cache: 300.0Mi from default/cache, 200.0Mi from default/web, \
                 then evict default/victim",
            ),
            (
                "the budget bounds it",
                412 * MI,
                256 * MI,
                vec![(pod("cache"), 256 * MI)],
                "would reclaim file cache: 256.0Mi from default/cache, then evict default/victim",
            ),
        ] {
            let budget = Budget {
                bytes: budget_bytes,
                time: Duration::from_secs(1),
            };
            let plan = dry_run_plan(&rungs, shortfall, budget);
            assert_eq!(plan.steps, steps, "{name}");
            assert_eq!(plan.text(&pod("victim")), text, "{name}");
        }
        let empty = dry_run_plan(&[(pod("cache"), 0)], MI, EPISODE_BUDGET);
        assert_eq!(
            empty.text(&pod("victim")),
            "would find no file cache to reclaim, then evict default/victim"
        );
    }
}
