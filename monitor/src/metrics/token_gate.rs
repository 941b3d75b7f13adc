//! Whether a bearer token may read a path, checked as kube-rbac-proxy checks it: a
//! TokenReview says who the token belongs to, then a SubjectAccessReview whether that user
//! may `get` the path as a non-resource URL (the [`Reviewer`]; the API calls are in
//! `token_review`). Strangers must not turn the endpoint into a lever on the API server:
//!
//! * answers are kept ([`ALLOWED_FOR`] when allowed, [`DENIED_FOR`] when not), so a scraper
//!   costs two reviews a minute per agent, and the same bad token is reviewed once in a
//!   while; tokens are kept only as two keyed hashes, at most [`CACHED_AT_MOST`];
//! * at most [`IN_FLIGHT`] reviews run at once, and new tokens are reviewed at most
//!   [`REVIEWS_PER_SECOND`] a second (bursts of [`REVIEW_BURST`]); beyond that the request
//!   is answered 429 without asking;
//! * a review the API server does not answer within [`REVIEW_TIMEOUT`] (or refuses) denies
//!   (503), logged once until reviews work again; such answers are not kept.
use std::{
    collections::{BTreeMap, HashMap, hash_map::RandomState},
    hash::BuildHasher as _,
    sync::Mutex,
    time::Duration,
};

use tokio::{sync::Semaphore, time::Instant};

use super::pace::Pace;

/// How long an allowed token is kept.
pub(crate) const ALLOWED_FOR: Duration = Duration::from_secs(60);
/// How long a refused token (unknown, or not allowed) is kept.
pub(crate) const DENIED_FOR: Duration = Duration::from_secs(10);
/// The most answers kept.
pub(crate) const CACHED_AT_MOST: usize = 1024;
/// The most reviews in flight at once.
pub(crate) const IN_FLIGHT: usize = 4;
/// How long a request waits for a review to end before it is refused as throttled.
const WAIT_FOR_SLOT: Duration = Duration::from_secs(1);
/// How long the API server has to answer both reviews.
pub(crate) const REVIEW_TIMEOUT: Duration = Duration::from_secs(5);
/// Reviews of tokens not kept, a second in the long run.
pub(crate) const REVIEWS_PER_SECOND: u32 = 10;
/// Reviews at once after a quiet spell.
pub(crate) const REVIEW_BURST: u32 = 20;

/// The user a TokenReview names, as a SubjectAccessReview takes it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct User {
    pub name: String,
    pub uid: Option<String>,
    pub groups: Vec<String>,
    pub extra: BTreeMap<String, Vec<String>>,
}

/// The API server's two answers. An `Err` is a review that did not happen, in words.
pub(crate) trait Reviewer: Send + Sync + 'static {
    /// The token's user, `None` when the API server does not authenticate it.
    fn authenticate(
        &self,
        token: &str,
    ) -> impl Future<Output = Result<Option<User>, String>> + Send;
    /// Whether `user` may `get` the non-resource URL `path`.
    fn authorize(
        &self,
        user: &User,
        path: &str,
    ) -> impl Future<Output = Result<bool, String>> + Send;
}

/// What the gate says of a token for a path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum GateAnswer {
    Allowed,
    /// The API server does not know the token (401).
    Unauthenticated,
    /// Its user may not get the path (403).
    Forbidden,
    /// The API server did not say (503).
    Unavailable,
    /// Too many tokens to review now (429).
    Throttled,
}

/// A token and a path, hashed with two random keys (128 bits): the token itself is not kept.
type Key = (u64, u64);

struct State {
    answers: HashMap<Key, (GateAnswer, Instant)>,
    pace: Pace,
    /// Why the last review failed, while reviews fail (logged once per episode).
    failing: Option<String>,
}

/// The cache, the bounds and the reviewer.
pub(crate) struct TokenGate<R> {
    reviewer: R,
    keys: (RandomState, RandomState),
    state: Mutex<State>,
    slots: Semaphore,
}

impl<R: Reviewer> TokenGate<R> {
    pub(crate) fn new(reviewer: R) -> Self {
        Self {
            reviewer,
            keys: (RandomState::new(), RandomState::new()),
            state: Mutex::new(State {
                answers: HashMap::new(),
                pace: Pace::new(REVIEWS_PER_SECOND, REVIEW_BURST, Instant::now()),
                failing: None,
            }),
            slots: Semaphore::new(IN_FLIGHT),
        }
    }

    /// May the holder of `token` get `path`?
    pub(crate) async fn check(&self, token: &str, path: &str) -> GateAnswer {
        let key = (
            self.keys.0.hash_one((token, path)),
            self.keys.1.hash_one((token, path)),
        );
        {
            let mut state = self.lock();
            let now = Instant::now();
            if let Some(&(answer, until)) = state.answers.get(&key) {
                if now < until {
                    return answer;
                }
                state.answers.remove(&key);
            }
            if state.pace.take(now).is_some() {
                return GateAnswer::Throttled;
            }
        }
        let Ok(Ok(_slot)) = tokio::time::timeout(WAIT_FOR_SLOT, self.slots.acquire()).await else {
            return GateAnswer::Throttled;
        };
        let reviewed = match tokio::time::timeout(REVIEW_TIMEOUT, self.review(token, path)).await {
            Ok(reviewed) => reviewed,
            Err(_) => Err(format!(
                "the API server did not answer within {}s",
                REVIEW_TIMEOUT.as_secs()
            )),
        };
        let mut state = self.lock();
        match reviewed {
            Ok(answer) => {
                if let Some(why) = state.failing.take() {
                    tracing::info!(
                        "metrics: the API server answers token reviews again (they failed: {why})"
                    );
                }
                let kept_for = if answer == GateAnswer::Allowed {
                    ALLOWED_FOR
                } else {
                    DENIED_FOR
                };
                let now = Instant::now();
                if state.answers.len() >= CACHED_AT_MOST {
                    state.answers.retain(|_, (_, until)| now < *until);
                }
                if state.answers.len() < CACHED_AT_MOST {
                    state.answers.insert(key, (answer, now + kept_for));
                }
                answer
            }
            Err(why) => {
                if state.failing.is_none() {
                    tracing::warn!(
                        "metrics: cannot check a client's token with the API server: {why}; \
                         /metrics and /debug/* are refused (503) to clients off this host \
                         until it answers (loopback clients are still served)"
                    );
                }
                state.failing = Some(why);
                GateAnswer::Unavailable
            }
        }
    }

    async fn review(&self, token: &str, path: &str) -> Result<GateAnswer, String> {
        let Some(user) = self.reviewer.authenticate(token).await? else {
            return Ok(GateAnswer::Unauthenticated);
        };
        Ok(if self.reviewer.authorize(&user, path).await? {
            GateAnswer::Allowed
        } else {
            GateAnswer::Forbidden
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{
        Arc,
        atomic::{AtomicBool, AtomicUsize, Ordering},
    };

    use super::*;

    /// Knows the token `good` (user `prometheus`, who may get `/metrics`) and `other` (user
    /// `nobody`); counts its calls and the most at once; fails while `down`.
    #[derive(Default)]
    struct Fake {
        calls: AtomicUsize,
        running: AtomicUsize,
        most_at_once: AtomicUsize,
        down: AtomicBool,
        delay: Duration,
    }

    impl Reviewer for Arc<Fake> {
        async fn authenticate(&self, token: &str) -> Result<Option<User>, String> {
            self.calls.fetch_add(1, Ordering::SeqCst);
            let now = self.running.fetch_add(1, Ordering::SeqCst) + 1;
            self.most_at_once.fetch_max(now, Ordering::SeqCst);
            tokio::time::sleep(self.delay).await;
            self.running.fetch_sub(1, Ordering::SeqCst);
            if self.down.load(Ordering::SeqCst) {
                return Err("connection refused".into());
            }
            Ok(match token {
                "good" => Some(User {
                    name: "prometheus".into(),
                    ..User::default()
                }),
                "other" => Some(User {
                    name: "nobody".into(),
                    ..User::default()
                }),
                _ => None,
            })
        }

        async fn authorize(&self, user: &User, path: &str) -> Result<bool, String> {
            Ok(user.name == "prometheus" && path == "/metrics")
        }
    }

    #[tokio::test(start_paused = true)]
    async fn answers_are_kept_allowed_longer_than_denied() {
        let fake = Arc::new(Fake::default());
        let gate = TokenGate::new(fake.clone());
        let cases = [
            ("good", "/metrics", GateAnswer::Allowed),
            ("good", "/debug/ranking", GateAnswer::Forbidden),
            ("other", "/metrics", GateAnswer::Forbidden),
            ("bad", "/metrics", GateAnswer::Unauthenticated),
        ];
        for (token, path, want) in cases {
            assert_eq!(gate.check(token, path).await, want, "{token} {path}");
        }
        assert_eq!(fake.calls.load(Ordering::SeqCst), 4);
        for (token, path, want) in cases {
            assert_eq!(gate.check(token, path).await, want, "kept: {token} {path}");
        }
        assert_eq!(fake.calls.load(Ordering::SeqCst), 4, "all kept");
        tokio::time::advance(DENIED_FOR + Duration::from_millis(1)).await;
        for (token, path, want) in cases {
            assert_eq!(gate.check(token, path).await, want, "{token} {path}");
        }
        assert_eq!(
            fake.calls.load(Ordering::SeqCst),
            7,
            "the three refusals asked again, the allowed one kept"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_flood_of_new_tokens_is_reviewed_at_the_pace_and_few_at_once() {
        let fake = Arc::new(Fake {
            delay: Duration::from_millis(200),
            ..Fake::default()
        });
        let gate = Arc::new(TokenGate::new(fake.clone()));
        assert_eq!(gate.check("good", "/metrics").await, GateAnswer::Allowed);
        tokio::time::advance(Duration::from_secs(5)).await;
        let checks: Vec<_> = (0..200)
            .map(|i| {
                let gate = gate.clone();
                tokio::spawn(async move { gate.check(&format!("bad-{i}"), "/metrics").await })
            })
            .collect();
        let mut answers = BTreeMap::new();
        for check in checks {
            *answers
                .entry(format!("{:?}", check.await.unwrap()))
                .or_insert(0) += 1;
        }
        let reviewed = fake.calls.load(Ordering::SeqCst) - 1;
        assert!(
            reviewed <= REVIEW_BURST as usize,
            "{reviewed} reviews: {answers:?}"
        );
        assert!(fake.most_at_once.load(Ordering::SeqCst) <= IN_FLIGHT);
        assert_eq!(
            answers.get("Unauthenticated"),
            Some(&reviewed),
            "{answers:?}"
        );
        assert_eq!(
            answers.get("Throttled"),
            Some(&(200 - reviewed)),
            "{answers:?}"
        );
        // The known token is answered from what was kept, whatever the flood.
        assert_eq!(gate.check("good", "/metrics").await, GateAnswer::Allowed);
        assert_eq!(fake.calls.load(Ordering::SeqCst), reviewed + 1);
    }

    #[tokio::test(start_paused = true)]
    async fn an_api_server_that_does_not_answer_denies_and_nothing_is_kept() {
        let fake = Arc::new(Fake::default());
        fake.down.store(true, Ordering::SeqCst);
        let gate = TokenGate::new(fake.clone());
        assert_eq!(
            gate.check("good", "/metrics").await,
            GateAnswer::Unavailable
        );
        fake.down.store(false, Ordering::SeqCst);
        assert_eq!(gate.check("good", "/metrics").await, GateAnswer::Allowed);

        let slow = Arc::new(Fake {
            delay: REVIEW_TIMEOUT * 2,
            ..Fake::default()
        });
        let gate = TokenGate::new(slow);
        let started = Instant::now();
        assert_eq!(
            gate.check("good", "/metrics").await,
            GateAnswer::Unavailable
        );
        assert_eq!(started.elapsed(), REVIEW_TIMEOUT);
    }
}
