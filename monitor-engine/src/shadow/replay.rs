//! A node's scorecard rebuilt from the cluster's Events alone (`monitor shadow --kube`): the
//! agent's `EvictionDryRun` Events (each a series of decisions on one pod, from its first time
//! to its last) and the kubelet's `Evicted` Events, fed in time order. Events say nothing of
//! the kernel's OOM kills, and the API server keeps them an hour by default.
use super::{KubeletEviction, Named, Scorecard, Shadow};

/// The matcher after every input, and time passed until `now_ns`.
pub fn replay(
    decisions: Vec<Named>,
    evictions: Vec<KubeletEviction>,
    now_ns: u64,
    window_ns: u64,
) -> Shadow {
    enum Input {
        Decided(Named),
        Evicted(KubeletEviction),
    }
    let mut inputs: Vec<(u64, u8, Input)> = decisions
        .into_iter()
        .map(|n| (n.at_ns, 0, Input::Decided(n)))
        .chain(
            evictions
                .into_iter()
                .map(|e| (e.at_ns, 1, Input::Evicted(e))),
        )
        .collect();
    // In time order; at the same second a decision first, as its Event was written first.
    inputs.sort_by_key(|(at, order, _)| (*at, *order));
    // The scorecard begins with the oldest Event.
    let since = inputs.first().map_or(now_ns, |(at, _, _)| *at);
    let mut shadow = Shadow::resume(Scorecard::begun(since), window_ns);
    for (at, _, input) in inputs {
        shadow.tick(at);
        match input {
            Input::Decided(named) => shadow.decided(named),
            Input::Evicted(eviction) => shadow.kubelet_evicted(eviction),
        };
    }
    shadow.tick(now_ns);
    shadow
}
