//! The shadow scorecard: a dry run's decisions matched with what happened next on the node,
//! the evidence an operator needs before letting the agent act.
//!
//! A dry run decides on the same pod at every interval while a threshold stays met; the
//! decisions of one such stretch make an *episode* (the pods it named, each from when). What
//! happened next is one of:
//!
//! * the kubelet evicted a pod: the pod the episode named first ([`Outcome::SamePod`], the lead
//!   time is the kubelet's eviction less the agent's first naming of it), another pod
//!   ([`Outcome::DifferentPod`], with a [`Verdict`] from both messages), a pod the agent named
//!   only afterwards ([`Outcome::Late`]) or never ([`Outcome::Missed`]);
//! * the kernel's OOM killer killed a process: with an episode open before it
//!   ([`Outcome::KernelForeseen`], the lead time from the episode's first decision), one only
//!   after it ([`Outcome::KernelLate`]) or none ([`Outcome::KernelUnforeseen`]); a kill in a
//!   pod's own memory limit is neither the kubelet's nor the agent's to prevent and is counted
//!   aside ([`Outcome::KernelOwnLimit`]);
//! * nothing: the episode ended, the window after its last decision, with no eviction
//!   or kill in it ([`Outcome::NothingHappened`]).
//!
//! An outcome is counted once it is final, never taken back (the counts are exported as
//! counters): an eviction or a kill without an episode before it waits the window for a late
//! naming. Only final outcomes are kept across restarts: an episode open or an eviction
//! waiting at a restart is dropped (the eviction is remembered as seen, so its Event listed
//! again is not counted either). Times are wall-clock unix nanoseconds: the kubelet's Events
//! carry its wall clock, in whole seconds ([`KUBELET_CLOCK_NS`]), and it runs on the agent's
//! node.
use std::{
    collections::{BTreeMap, VecDeque},
    sync::Arc,
};

use serde::{Deserialize, Serialize};

use crate::pod_facts::PodRef;
use crate::printable::printable;

mod replay;
mod report;
mod verdict;
pub use replay::replay;
pub use report::{ShadowReport, seconds};
pub use verdict::Verdict;

/// How long after an episode's last decision an eviction or a kill is still its outcome, and
/// how long one without an episode waits for a late naming, unless the agent is told
/// (`--shadow-window`): the kubelet's housekeeping (10 s) twice over, its stats (up to 15 s
/// old) and a soft threshold's evaluation, with room.
pub const MATCH_WINDOW_NS: u64 = 120 * NANOS_PER_SECOND;
/// The kubelet's Event timestamps are whole seconds: a naming up to this much after one is
/// not after it.
pub const KUBELET_CLOCK_NS: u64 = NANOS_PER_SECOND;
/// Lead times kept for the medians (the newest).
pub const KEPT_LEADS: usize = 1024;
/// Matches kept to be read in full (the newest).
pub const KEPT_LINES: usize = 64;
/// Characters of a message or of ranking keys a line keeps (the kubelet's are under 300).
pub const KEPT_TEXT: usize = 512;
/// Kubelet evictions remembered as counted, so a watch's re-list or a restart does not count
/// one twice.
pub const REMEMBERED_EVICTIONS: usize = 512;

const NANOS_PER_SECOND: u64 = 1_000_000_000;

/// What became of a decision, or what came without one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    SamePod,
    DifferentPod,
    Late,
    Missed,
    KernelForeseen,
    KernelLate,
    KernelUnforeseen,
    KernelOwnLimit,
    NothingHappened,
}

impl Outcome {
    pub const ALL: [Outcome; 9] = [
        Outcome::SamePod,
        Outcome::DifferentPod,
        Outcome::Late,
        Outcome::Missed,
        Outcome::KernelForeseen,
        Outcome::KernelLate,
        Outcome::KernelUnforeseen,
        Outcome::KernelOwnLimit,
        Outcome::NothingHappened,
    ];

    /// The metric label and JSON key.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::SamePod => "same_pod",
            Outcome::DifferentPod => "different_pod",
            Outcome::Late => "late",
            Outcome::Missed => "missed",
            Outcome::KernelForeseen => "kernel_foreseen",
            Outcome::KernelLate => "kernel_late",
            Outcome::KernelUnforeseen => "kernel_unforeseen",
            Outcome::KernelOwnLimit => "kernel_own_limit",
            Outcome::NothingHappened => "nothing_happened",
        }
    }

    /// Whose action it is about: `kubelet`, `kernel`, or `none`.
    pub fn against(self) -> &'static str {
        match self {
            Outcome::SamePod | Outcome::DifferentPod | Outcome::Late | Outcome::Missed => "kubelet",
            Outcome::NothingHappened => "none",
            _ => "kernel",
        }
    }
}

/// One decision of the dry run, as the shell saw it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Named {
    pub pod: PodRef,
    pub at_ns: u64,
    /// The decision's message, in the kubelet's words (resource, threshold, usage).
    pub message: String,
    /// The pod's ranking keys at the decision, in words.
    pub keys: String,
}

/// The kubelet's eviction of a pod on this node (its `Evicted` Event).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KubeletEviction {
    pub pod: PodRef,
    pub at_ns: u64,
    /// The Event's message: the resource, threshold and usage, in the kubelet's words.
    pub message: String,
    /// The pod's ranking keys in the agent's view when the eviction was seen, if it ranks it.
    pub keys: Option<String>,
}

/// A process the kernel's OOM killer killed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KernelKill {
    /// The pod it ran in, when it ran in one.
    pub pod: Option<PodRef>,
    pub pid: u32,
    pub comm: String,
    pub at_ns: u64,
    /// Killed because its own pod or container was at its memory limit.
    pub own_limit: bool,
}

/// An outcome made final, for counters and histograms.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Scored {
    pub outcome: Outcome,
    /// What happened less the agent's first decision (positive: the agent was first).
    pub lead_ns: Option<i64>,
}

/// One final outcome, to be read in full.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Line {
    pub outcome: Outcome,
    /// When what happened happened (for nothing: the episode's last decision).
    pub at_ns: u64,
    pub lead_ns: Option<i64>,
    /// The pod the kubelet evicted or the kernel's victim ran in (`-`: none).
    pub acted_on: String,
    /// The pod the agent named (`-`: none).
    pub named: String,
    /// For a different pod: why they differ.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verdict: Option<Verdict>,
    /// What each side said.
    pub detail: String,
}

/// The counts and lead times since `since_ns`: what is kept across restarts.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scorecard {
    /// When the scorecard began (the first dry run on this node's checkpoint directory).
    pub since_ns: u64,
    pub counts: BTreeMap<Outcome, u64>,
    /// Lead times before the kubelet's evictions of the pod the agent named, newest last.
    pub kubelet_leads_ns: VecDeque<i64>,
    /// Lead times before kernel OOM kills an episode foresaw, newest last.
    pub kernel_leads_ns: VecDeque<i64>,
    /// The newest final outcomes, newest last.
    pub lines: VecDeque<Line>,
    /// The uids of the pods whose kubelet eviction was counted, newest last.
    pub counted_evictions: VecDeque<String>,
}

impl Scorecard {
    /// An empty scorecard begun at `now_ns`.
    pub fn begun(now_ns: u64) -> Self {
        Self {
            since_ns: now_ns,
            ..Self::default()
        }
    }

    pub fn count(&self, outcome: Outcome) -> u64 {
        self.counts.get(&outcome).copied().unwrap_or(0)
    }

    /// The kubelet's evictions counted.
    pub fn kubelet_evictions(&self) -> u64 {
        [
            Outcome::SamePod,
            Outcome::DifferentPod,
            Outcome::Late,
            Outcome::Missed,
        ]
        .iter()
        .map(|o| self.count(*o))
        .sum()
    }

    /// The share of the kubelet's evictions whose pod the agent named first (`None`: none).
    pub fn agreement(&self) -> Option<f64> {
        let all = self.kubelet_evictions();
        (all > 0).then(|| self.count(Outcome::SamePod) as f64 / all as f64)
    }

    fn score(&mut self, line: Line) -> Scored {
        *self.counts.entry(line.outcome).or_default() += 1;
        let leads = match line.outcome {
            Outcome::SamePod => Some(&mut self.kubelet_leads_ns),
            Outcome::KernelForeseen => Some(&mut self.kernel_leads_ns),
            _ => None,
        };
        if let (Some(leads), Some(lead)) = (leads, line.lead_ns) {
            push_bounded(leads, lead, KEPT_LEADS);
        }
        let scored = Scored {
            outcome: line.outcome,
            lead_ns: line.lead_ns,
        };
        push_bounded(&mut self.lines, line, KEPT_LINES);
        scored
    }
}

fn push_bounded<T>(queue: &mut VecDeque<T>, value: T, bound: usize) {
    if queue.len() == bound {
        queue.pop_front();
    }
    queue.push_back(value);
}

/// The median of lead times, `None` for none.
pub fn median(leads: &VecDeque<i64>) -> Option<i64> {
    let mut sorted: Vec<i64> = leads.iter().copied().collect();
    sorted.sort_unstable();
    let n = sorted.len();
    match n {
        0 => None,
        _ if n % 2 == 1 => Some(sorted[n / 2]),
        // In i128: the sum of two i64 can overflow.
        _ => Some(((i128::from(sorted[n / 2 - 1]) + i128::from(sorted[n / 2])) / 2) as i64),
    }
}

/// A stretch of decisions with no more than the window between them.
#[derive(Debug, Clone)]
struct Episode {
    first_ns: u64,
    last_ns: u64,
    /// Each pod named, at its first naming, in order.
    named: Vec<Named>,
    /// An eviction or a kill was matched to it.
    matched: bool,
}

impl Episode {
    fn open_at(&self, at_ns: u64, window_ns: u64) -> bool {
        at_ns <= self.last_ns.saturating_add(window_ns)
    }

    /// The pod named last at or before `at_ns` (the head the agent would have evicted).
    fn head_at(&self, at_ns: u64) -> Option<&Named> {
        self.named.iter().rev().find(|n| n.at_ns <= at_ns)
    }
}

/// What came without an episode before it, waiting for a late naming.
#[derive(Debug, Clone)]
enum Waiting {
    Eviction(KubeletEviction),
    Kill(KernelKill),
}

impl Waiting {
    fn at_ns(&self) -> u64 {
        match self {
            Waiting::Eviction(e) => e.at_ns,
            Waiting::Kill(k) => k.at_ns,
        }
    }
}

/// The matcher: the scorecard, the open episode and what waits for a naming.
#[derive(Debug, Clone)]
pub struct Shadow {
    /// Shared with the reports published: copied only when it changes while one is read.
    card: Arc<Scorecard>,
    /// See [`MATCH_WINDOW_NS`].
    window_ns: u64,
    episode: Option<Episode>,
    waiting: Vec<Waiting>,
}

impl Shadow {
    /// Goes on from a scorecard (restored from the checkpoint, or [`Scorecard::begun`]),
    /// matching within `window_ns` (see [`MATCH_WINDOW_NS`]).
    pub fn resume(card: Scorecard, window_ns: u64) -> Self {
        Self {
            card: Arc::new(card),
            window_ns,
            episode: None,
            waiting: Vec::new(),
        }
    }

    pub fn card(&self) -> &Scorecard {
        &self.card
    }

    /// The scorecard with what is not final yet: an episode open, and what waits for a naming.
    pub fn report(&self, node: Option<&str>, now_ns: u64) -> ShadowReport {
        ShadowReport {
            node: node.map(String::from),
            now_ns,
            scorecard: Arc::clone(&self.card),
            episode_open: self.episode.is_some(),
            waiting: self.waiting.len(),
        }
    }

    /// A decision of the dry run.
    pub fn decided(&mut self, named: Named) -> Vec<Scored> {
        let at = named.at_ns;
        let mut scored = self.close_episode_before(at);
        let episode = self.episode.get_or_insert_with(|| Episode {
            first_ns: at,
            last_ns: at,
            named: Vec::new(),
            matched: false,
        });
        episode.last_ns = episode.last_ns.max(at);
        if !episode.named.iter().any(|n| n.pod.uid == named.pod.uid) {
            episode.named.push(named.clone());
        }
        // What came before this naming, within the window, was not foreseen but is not missed.
        let (late, still): (Vec<Waiting>, Vec<Waiting>) = std::mem::take(&mut self.waiting)
            .into_iter()
            .partition(|w| {
                at <= w.at_ns().saturating_add(self.window_ns)
                    && match w {
                        Waiting::Eviction(e) => e.pod.uid == named.pod.uid,
                        Waiting::Kill(_) => true,
                    }
            });
        self.waiting = still;
        for waiting in late {
            episode.matched = true;
            let line = match waiting {
                Waiting::Eviction(e) => late_line(&e, &named),
                Waiting::Kill(k) => kernel_late_line(&k, &named),
            };
            scored.push(Arc::make_mut(&mut self.card).score(line));
        }
        scored
    }

    /// The kubelet evicted a pod on this node. One already counted, or from before the
    /// scorecard began, is not counted again.
    pub fn kubelet_evicted(&mut self, eviction: KubeletEviction) -> Vec<Scored> {
        if eviction.at_ns < self.card.since_ns
            || self.card.counted_evictions.contains(&eviction.pod.uid)
        {
            return Vec::new();
        }
        push_bounded(
            &mut Arc::make_mut(&mut self.card).counted_evictions,
            eviction.pod.uid.clone(),
            REMEMBERED_EVICTIONS,
        );
        let at = eviction.at_ns;
        let mut scored = self.close_episode_before(at);
        let Some(episode) = self.episode.as_mut() else {
            self.waiting.push(Waiting::Eviction(eviction));
            return scored;
        };
        // The Event comes through a watch: the agent may have named the pod after the
        // eviction before the Event arrived.
        if episode.first_ns > at.saturating_add(KUBELET_CLOCK_NS) {
            let Some(named) = episode.named.iter().find(|n| n.pod.uid == eviction.pod.uid) else {
                self.waiting.push(Waiting::Eviction(eviction));
                return scored;
            };
            episode.matched = true;
            let line = late_line(&eviction, named);
            scored.push(Arc::make_mut(&mut self.card).score(line));
            return scored;
        }
        episode.matched = true;
        let same = episode.named.iter().find(|n| {
            n.pod.uid == eviction.pod.uid && n.at_ns <= at.saturating_add(KUBELET_CLOCK_NS)
        });
        let line = if let Some(named) = same {
            Line {
                outcome: Outcome::SamePod,
                at_ns: at,
                lead_ns: Some(signed_diff(at, named.at_ns)),
                acted_on: eviction.pod.to_string(),
                named: named.pod.to_string(),
                verdict: None,
                detail: format!("the kubelet: {}", clipped(&eviction.message)),
            }
        } else {
            different_pod(episode, &eviction)
        };
        scored.push(Arc::make_mut(&mut self.card).score(line));
        scored
    }

    /// The kernel's OOM killer killed a process.
    pub fn kernel_killed(&mut self, kill: KernelKill) -> Vec<Scored> {
        let at = kill.at_ns;
        let mut scored = self.close_episode_before(at);
        if kill.own_limit {
            let line = Line {
                outcome: Outcome::KernelOwnLimit,
                at_ns: at,
                lead_ns: None,
                acted_on: pod_or_dash(kill.pod.as_ref()),
                named: "-".into(),
                verdict: None,
                detail: kill_detail(&kill),
            };
            scored.push(Arc::make_mut(&mut self.card).score(line));
            return scored;
        }
        let Some(episode) = self.episode.as_mut() else {
            self.waiting.push(Waiting::Kill(kill));
            return scored;
        };
        episode.matched = true;
        // Its record read after a decision that came after it.
        if episode.first_ns > at {
            let line = kernel_late_line(&kill, &episode.named[0]);
            scored.push(Arc::make_mut(&mut self.card).score(line));
            return scored;
        }
        let head = episode
            .head_at(at)
            .or(episode.named.first())
            .expect("an episode names a pod");
        let same = kill
            .pod
            .as_ref()
            .is_some_and(|p| episode.named.iter().any(|n| n.pod.uid == p.uid));
        let line = Line {
            outcome: Outcome::KernelForeseen,
            at_ns: at,
            lead_ns: Some(signed_diff(at, episode.first_ns)),
            acted_on: pod_or_dash(kill.pod.as_ref()),
            named: head.pod.to_string(),
            verdict: None,
            detail: format!(
                "{}; {}",
                kill_detail(&kill),
                if same {
                    "the agent had named its pod"
                } else {
                    "the agent had named another pod"
                }
            ),
        };
        scored.push(Arc::make_mut(&mut self.card).score(line));
        scored
    }

    /// Time passed: an episode over and what waited in vain become final.
    pub fn tick(&mut self, now_ns: u64) -> Vec<Scored> {
        let mut scored = self.close_episode_before(now_ns);
        let (done, still): (Vec<Waiting>, Vec<Waiting>) = std::mem::take(&mut self.waiting)
            .into_iter()
            .partition(|w| now_ns > w.at_ns().saturating_add(self.window_ns));
        self.waiting = still;
        for waiting in done {
            let line = match waiting {
                Waiting::Eviction(e) => Line {
                    outcome: Outcome::Missed,
                    at_ns: e.at_ns,
                    lead_ns: None,
                    acted_on: e.pod.to_string(),
                    named: "-".into(),
                    verdict: None,
                    detail: format!("the kubelet: {}", clipped(&e.message)),
                },
                Waiting::Kill(k) => Line {
                    outcome: Outcome::KernelUnforeseen,
                    at_ns: k.at_ns,
                    lead_ns: None,
                    acted_on: pod_or_dash(k.pod.as_ref()),
                    named: "-".into(),
                    verdict: None,
                    detail: kill_detail(&k),
                },
            };
            scored.push(Arc::make_mut(&mut self.card).score(line));
        }
        scored
    }

    /// Ends the open episode if `at_ns` is past its window.
    fn close_episode_before(&mut self, at_ns: u64) -> Vec<Scored> {
        let window = self.window_ns;
        let Some(episode) = self.episode.take_if(|e| !e.open_at(at_ns, window)) else {
            return Vec::new();
        };
        if episode.matched {
            return Vec::new();
        }
        let named: Vec<String> = episode.named.iter().map(|n| n.pod.to_string()).collect();
        let line = Line {
            outcome: Outcome::NothingHappened,
            at_ns: episode.last_ns,
            lead_ns: None,
            acted_on: "-".into(),
            named: clipped(&named.join(", ")),
            verdict: None,
            detail: format!(
                "decided for {} s; nobody acted and the pressure went",
                (episode.last_ns - episode.first_ns) / NANOS_PER_SECOND
            ),
        };
        vec![Arc::make_mut(&mut self.card).score(line)]
    }
}

/// The line of the kubelet's eviction of a pod the episode did not name first: the pod the
/// agent named by then, and why the two differ.
fn different_pod(episode: &Episode, eviction: &KubeletEviction) -> Line {
    let head = episode
        .head_at(eviction.at_ns.saturating_add(KUBELET_CLOCK_NS))
        .or(episode.named.first())
        .expect("an episode names a pod");
    let verdict = Verdict::of(&head.message, &eviction.message);
    let kubelet_keys = eviction
        .keys
        .as_deref()
        .unwrap_or("not ranked by the agent");
    Line {
        outcome: Outcome::DifferentPod,
        at_ns: eviction.at_ns,
        lead_ns: None,
        acted_on: eviction.pod.to_string(),
        named: head.pod.to_string(),
        detail: format!(
            "{}; the kubelet: {}; the agent: {} (keys: the agent's pod {}; the kubelet's pod {})",
            verdict.explain(),
            clipped(&eviction.message),
            clipped(&head.message),
            clipped(&head.keys),
            clipped(kubelet_keys),
        ),
        verdict: Some(verdict),
    }
}

/// The kubelet's eviction of a pod the agent named only after it.
fn late_line(eviction: &KubeletEviction, named: &Named) -> Line {
    Line {
        outcome: Outcome::Late,
        at_ns: eviction.at_ns,
        lead_ns: Some(signed_diff(eviction.at_ns, named.at_ns)),
        acted_on: eviction.pod.to_string(),
        named: named.pod.to_string(),
        verdict: None,
        detail: format!("the kubelet: {}", clipped(&eviction.message)),
    }
}

/// The kernel's kill before the first decision of an episode.
fn kernel_late_line(kill: &KernelKill, named: &Named) -> Line {
    Line {
        outcome: Outcome::KernelLate,
        at_ns: kill.at_ns,
        lead_ns: Some(signed_diff(kill.at_ns, named.at_ns)),
        acted_on: pod_or_dash(kill.pod.as_ref()),
        named: named.pod.to_string(),
        verdict: None,
        detail: kill_detail(kill),
    }
}

/// Text from outside (an Event's message) as a line keeps it: escaped, and at most
/// [`KEPT_TEXT`] characters, so a hostile message cannot swell the scorecard's file.
fn clipped(text: &str) -> String {
    let mut kept: String = text.chars().take(KEPT_TEXT).collect();
    if kept.len() < text.len() {
        kept.push_str("...");
    }
    printable(&kept).into_owned()
}

/// `a - b` in signed nanoseconds, saturating.
fn signed_diff(a: u64, b: u64) -> i64 {
    if a >= b {
        i64::try_from(a - b).unwrap_or(i64::MAX)
    } else {
        i64::try_from(b - a).map_or(i64::MIN, |d| -d)
    }
}

fn pod_or_dash(pod: Option<&PodRef>) -> String {
    pod.map_or_else(|| "-".into(), ToString::to_string)
}

fn kill_detail(kill: &KernelKill) -> String {
    let place = if kill.own_limit {
        "at its own memory limit"
    } else {
        "under node or kubepods pressure"
    };
    format!(
        "the kernel killed pid {} ({}) {place}",
        kill.pid,
        printable(&kill.comm)
    )
}

#[cfg(test)]
mod tests;
