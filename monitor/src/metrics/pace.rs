//! A token bucket: at most `rate` a second in the long run, `burst` at once after a quiet
//! spell. It paces what strangers can make the agent do: accepts on the metrics port, token
//! reviews sent to the API server.
use std::time::Duration;

use tokio::time::Instant;

#[derive(Debug)]
pub(crate) struct Pace {
    rate: f64,
    burst: f64,
    tokens: f64,
    at: Instant,
}

impl Pace {
    /// Full at `now`.
    pub(crate) fn new(rate: u32, burst: u32, now: Instant) -> Self {
        Self {
            rate: f64::from(rate.max(1)),
            burst: f64::from(burst.max(1)),
            tokens: f64::from(burst.max(1)),
            at: now,
        }
    }

    /// Takes a token: `None` when one was there, else how long until one is.
    pub(crate) fn take(&mut self, now: Instant) -> Option<Duration> {
        let refill = now.saturating_duration_since(self.at).as_secs_f64() * self.rate;
        self.tokens = (self.tokens + refill).min(self.burst);
        self.at = now;
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            None
        } else {
            Some(Duration::from_secs_f64((1.0 - self.tokens) / self.rate))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_then_the_rate() {
        let t0 = Instant::now();
        let mut pace = Pace::new(500, 100, t0);
        for _ in 0..100 {
            assert_eq!(pace.take(t0), None);
        }
        let wait = pace.take(t0).expect("the burst is spent");
        assert!(wait <= Duration::from_millis(3), "{wait:?}");
        assert_eq!(pace.take(t0 + Duration::from_millis(4)), None);
        // A long quiet spell refills the burst, no more.
        let later = t0 + Duration::from_secs(60);
        for _ in 0..100 {
            assert_eq!(pace.take(later), None);
        }
        assert!(pace.take(later).is_some());
    }
}
