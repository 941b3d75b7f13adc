//! What the endpoint itself knows and the event loop does not: whether it listens yet (for
//! `/readyz` on the probe socket), and its counters, rendered after the loop's metrics in
//! `/metrics`. Atomics and one short lock, shared by the server's tasks.
use std::{
    fmt::Write as _,
    sync::{
        Mutex,
        atomic::{AtomicU64, Ordering},
    },
};

use super::exposition::header;

/// Why requests were refused or connections closed, as the `reason` label says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Denial {
    /// No bearer token from a client off this host (401).
    NoToken,
    /// The API server does not know the token (401).
    BadToken,
    /// The token's user may not get the path (403).
    Forbidden,
    /// Off this host and not opened to it (403).
    Remote,
    /// The token could not be checked: the API server did not answer in time (503).
    Unavailable,
    /// Too many tokens to check at once (429).
    Throttled,
}

impl Denial {
    const ALL: [Denial; 6] = [
        Denial::NoToken,
        Denial::BadToken,
        Denial::Forbidden,
        Denial::Remote,
        Denial::Unavailable,
        Denial::Throttled,
    ];

    fn label(self) -> &'static str {
        match self {
            Denial::NoToken => "no_token",
            Denial::BadToken => "bad_token",
            Denial::Forbidden => "forbidden",
            Denial::Remote => "remote",
            Denial::Unavailable => "unavailable",
            Denial::Throttled => "throttled",
        }
    }
}

/// Connections the endpoint closed before answering, as the `reason` label says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Dropped {
    /// It waited for its head past the grace and a newer connection took its place.
    GaveWay,
    /// Its client held its share of connections (or the endpoint was full and every
    /// connection past its head).
    Refused,
}

/// The endpoint's own state and counters.
#[derive(Debug, Default)]
pub(crate) struct EndpointStats {
    /// `None` while listening (or not started); the bind error while it is retried.
    not_listening: Mutex<Option<String>>,
    bind_failures: AtomicU64,
    denied: [AtomicU64; Denial::ALL.len()],
    dropped: [AtomicU64; 2],
}

impl EndpointStats {
    /// The metrics address could not be bound: `why` until [`Self::listening`].
    pub(crate) fn bind_failed(&self, why: String) {
        self.bind_failures.fetch_add(1, Ordering::Relaxed);
        *self.lock() = Some(why);
    }

    pub(crate) fn listening(&self) {
        *self.lock() = None;
    }

    /// Why the metrics address is not served, while it is not.
    pub(crate) fn not_listening(&self) -> Option<String> {
        self.lock().clone()
    }

    pub(crate) fn denied(&self, why: Denial) {
        self.denied[why as usize].fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn dropped(&self, why: Dropped) {
        self.dropped[why as usize].fetch_add(1, Ordering::Relaxed);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<String>> {
        self.not_listening
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The endpoint's families in the text exposition format.
    pub(crate) fn render(&self, out: &mut String) {
        let name = "monitor_metrics_bind_failures_total";
        header(
            out,
            name,
            "counter",
            "Failed attempts to listen on --metrics-addr (address in use, not on this host); retried with backoff while the agent protects the node without its endpoints.",
        );
        let _ = writeln!(out, "{name} {}", self.bind_failures.load(Ordering::Relaxed));
        let name = "monitor_metrics_requests_denied_total";
        header(
            out,
            name,
            "counter",
            "Requests for /metrics or /debug/* refused, by reason: no_token, bad_token (401), forbidden, remote (403), unavailable (the API server did not check the token, 503), throttled (429).",
        );
        for why in Denial::ALL {
            let n = self.denied[why as usize].load(Ordering::Relaxed);
            let _ = writeln!(out, "{name}{{reason=\"{}\"}} {n}", why.label());
        }
        let name = "monitor_metrics_connections_dropped_total";
        header(
            out,
            name,
            "counter",
            "Connections closed unanswered, by reason: gave_way (waited for its request head past the grace while the endpoint was full, or its client's share), refused (its client held its share).",
        );
        for (why, label) in [
            (Dropped::GaveWay, "gave_way"),
            (Dropped::Refused, "refused"),
        ] {
            let n = self.dropped[why as usize].load(Ordering::Relaxed);
            let _ = writeln!(out, "{name}{{reason=\"{label}\"}} {n}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_and_the_bind_state_are_rendered() {
        let stats = EndpointStats::default();
        stats.bind_failed("Address already in use".into());
        stats.bind_failed("Address already in use".into());
        assert_eq!(
            stats.not_listening().as_deref(),
            Some("Address already in use")
        );
        stats.listening();
        assert_eq!(stats.not_listening(), None);
        stats.denied(Denial::Forbidden);
        stats.dropped(Dropped::GaveWay);
        let mut text = String::new();
        stats.render(&mut text);
        for line in [
            "monitor_metrics_bind_failures_total 2",
            "monitor_metrics_requests_denied_total{reason=\"forbidden\"} 1",
            "monitor_metrics_requests_denied_total{reason=\"no_token\"} 0",
            "monitor_metrics_connections_dropped_total{reason=\"gave_way\"} 1",
            "monitor_metrics_connections_dropped_total{reason=\"refused\"} 0",
        ] {
            assert!(text.lines().any(|l| l == line), "{line} not in\n{text}");
        }
    }
}
