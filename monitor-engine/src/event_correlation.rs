//! The kubelet's rules for Events (client-go's `EventCorrelator`, which its event recorder
//! runs before every write), so the agent's Events on a pod decided on again and again add up
//! as the kubelet's do instead of piling up:
//!
//! * the same Event (source, object, type, reason and message) again is one Event whose
//!   `count` grows and whose `lastTimestamp` moves: a PATCH of the Event first written;
//! * Events that differ only in their message are combined once 10 distinct messages came
//!   within 10 minutes of each other: one Event "(combined from similar events): ..." takes
//!   every new message from then on, counted the same way;
//! * a source may write 25 Events about one object at once, then one every 5 minutes (a token
//!   bucket per source and object); what the bucket holds back is still counted, and the next
//!   write carries the count.
//!
//! Each of the three keeps at most [`CACHE_ENTRIES`] keys, the least recently used going first,
//! as client-go's LRU caches do. Plain data and the wall clock's nanoseconds in; what to write
//! out.
use std::collections::{BTreeSet, HashMap};

/// Distinct messages within [`AGGREGATE_WINDOW_NS`] after which similar Events are combined.
pub(crate) const AGGREGATE_MAX_EVENTS: usize = 10;
/// How long similar Events count toward combining them: 10 minutes since the last one.
pub(crate) const AGGREGATE_WINDOW_NS: u64 = 600 * NANOS_PER_SECOND;
/// Events a source may write about one object at once.
pub(crate) const SPAM_BURST: f64 = 25.0;
/// Then one every 5 minutes.
pub(crate) const SPAM_REFILL_PER_SECOND: f64 = 1.0 / 300.0;
/// Keys each cache keeps.
pub(crate) const CACHE_ENTRIES: usize = 4096;
/// What a combined Event's message starts with.
pub(crate) const COMBINED_PREFIX: &str = "(combined from similar events): ";

const NANOS_PER_SECOND: u64 = 1_000_000_000;

/// The object an Event is about.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Involved {
    pub kind: String,
    pub api_version: String,
    pub namespace: String,
    pub name: String,
    pub uid: String,
}

/// An Event about to be recorded, as its source words it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Occurrence<'a> {
    pub object: &'a Involved,
    /// `Normal` or `Warning`.
    pub type_: &'a str,
    pub reason: &'a str,
    pub message: &'a str,
}

/// The Event to write: its name, what it says and how often it happened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Write {
    /// `{object name}.{first occurrence in nanoseconds, hex}`, as the kubelet names them.
    pub name: String,
    pub message: String,
    pub count: u32,
    pub first_ns: u64,
    pub last_ns: u64,
}

/// What to send the API server for one occurrence.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Correlated {
    /// A new Event (`count` 1).
    Create(Write),
    /// The Event `name` again: a strategic merge patch of `count`, `lastTimestamp` and
    /// `message`. Should the Event be gone (Events expire), it is created as it stands.
    Patch(Write),
    /// Over the source's rate for this object: nothing is sent; the occurrence is counted.
    Skip,
}

/// The state of client-go's correlator for one source (component and host).
#[derive(Debug)]
pub struct EventCorrelator {
    source: String,
    /// Distinct messages by aggregate key (all but the message), with the last occurrence.
    aggregates: Lru<(BTreeSet<String>, u64)>,
    /// The Event written for each key: its name, count and first occurrence.
    written: Lru<(String, u32, u64)>,
    /// Tokens left and when they were counted, by source and object.
    buckets: Lru<(f64, u64)>,
}

impl EventCorrelator {
    /// A correlator for the Events of `component` on `host`.
    pub fn new(component: &str, host: &str) -> Self {
        Self {
            source: format!("{component}\u{0}{host}"),
            aggregates: Lru::default(),
            written: Lru::default(),
            buckets: Lru::default(),
        }
    }

    /// What to write for `event`, happening at `now_ns` (wall clock).
    pub fn correlate(&mut self, event: &Occurrence<'_>, now_ns: u64) -> Correlated {
        let object = event.object;
        let spam_key = [
            self.source.as_str(),
            &object.kind,
            &object.namespace,
            &object.name,
            &object.uid,
            &object.api_version,
            event.type_,
        ]
        .join("\u{0}");
        let aggregate_key = [spam_key.as_str(), event.reason].join("\u{0}");
        let event_key = [aggregate_key.as_str(), event.message].join("\u{0}");

        // Similar Events: combined once enough distinct messages came close together.
        let mut messages = self
            .aggregates
            .take(&aggregate_key)
            .filter(|(_, last)| now_ns.saturating_sub(*last) <= AGGREGATE_WINDOW_NS)
            .map(|(messages, _)| messages)
            .unwrap_or_default();
        messages.insert(event.message.to_string());
        let combined = messages.len() >= AGGREGATE_MAX_EVENTS;
        if combined {
            // The set never grows past the limit.
            messages.pop_first();
        }
        self.aggregates
            .put(aggregate_key.clone(), (messages, now_ns));
        let (key, message) = if combined {
            (aggregate_key, format!("{COMBINED_PREFIX}{}", event.message))
        } else {
            (event_key, event.message.to_string())
        };

        // The same Event again: counted on the one written first.
        let seen = self.written.take(&key);
        let write = match &seen {
            Some((name, count, first_ns)) => Write {
                name: name.clone(),
                message,
                count: count.saturating_add(1),
                first_ns: *first_ns,
                last_ns: now_ns,
            },
            None => Write {
                name: format!("{}.{now_ns:x}", object.name),
                message,
                count: 1,
                first_ns: now_ns,
                last_ns: now_ns,
            },
        };
        self.written
            .put(key, (write.name.clone(), write.count, write.first_ns));

        // The source's rate for this object, counted after the occurrence was.
        match (self.take_token(spam_key, now_ns), seen) {
            (false, _) => Correlated::Skip,
            (true, None) => Correlated::Create(write),
            (true, Some(_)) => Correlated::Patch(write),
        }
    }

    /// Whether the bucket of `key` has a token at `now_ns`, taking it.
    fn take_token(&mut self, key: String, now_ns: u64) -> bool {
        let (tokens, then) = self.buckets.take(&key).unwrap_or((SPAM_BURST, now_ns));
        let elapsed = now_ns.saturating_sub(then) as f64 / NANOS_PER_SECOND as f64;
        let tokens = (tokens + elapsed * SPAM_REFILL_PER_SECOND).min(SPAM_BURST);
        let (accepted, left) = if tokens >= 1.0 {
            (true, tokens - 1.0)
        } else {
            (false, tokens)
        };
        self.buckets.put(key, (left, now_ns));
        accepted
    }
}

/// A map of at most [`CACHE_ENTRIES`] keys that forgets the least recently used first.
#[derive(Debug)]
struct Lru<V> {
    entries: HashMap<String, (V, u64)>,
    tick: u64,
}

impl<V> Default for Lru<V> {
    fn default() -> Self {
        Self {
            entries: HashMap::new(),
            tick: 0,
        }
    }
}

impl<V> Lru<V> {
    /// Removes and returns the value of `key`; [`Self::put`] puts it back as the newest.
    fn take(&mut self, key: &str) -> Option<V> {
        self.entries.remove(key).map(|(value, _)| value)
    }

    fn put(&mut self, key: String, value: V) {
        if self.entries.len() >= CACHE_ENTRIES && !self.entries.contains_key(&key) {
            let oldest = self
                .entries
                .iter()
                .min_by_key(|(_, (_, used))| *used)
                .map(|(k, _)| k.clone());
            if let Some(oldest) = oldest {
                self.entries.remove(&oldest);
            }
        }
        self.tick += 1;
        self.entries.insert(key, (value, self.tick));
    }
}

#[cfg(test)]
mod tests;
