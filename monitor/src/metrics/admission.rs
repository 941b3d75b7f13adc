//! Which network connections the endpoint holds, so that slow clients cannot keep a probe or
//! a scrape out. Pure: connection ids, client addresses and instants in, choices out; the
//! server carries them out.
//!
//! * Connections are accepted as they come (a client queued behind others in the kernel
//!   waits for all of them), up to a cap on those open at once.
//! * At the cap, or when one client holds its share ([`PER_CLIENT`]), the connection that
//!   has waited longest for its request head gives way to the new one, once it has had
//!   [`HEAD_GRACE`] to send it: a probe sends its head with the connection, a slow client
//!   never does. A client over its share whose connections all sent their heads (or are
//!   younger than the grace) has the new connection closed at once.
use std::{collections::BTreeMap, net::IpAddr, time::Duration};

use tokio::time::Instant;

/// The most connections one client address holds at once: a quarter of the most the
/// endpoint holds.
pub(crate) const PER_CLIENT: usize = 256;
/// How long a connection may wait for its head before a newer one may take its place.
pub(crate) const HEAD_GRACE: Duration = Duration::from_millis(100);

/// One open connection.
#[derive(Debug)]
struct Open {
    client: IpAddr,
    since: Instant,
    head_done: bool,
}

/// What to do with a connection just accepted.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Admit {
    /// Serve it under `id`, after closing `evict` (a connection still waiting for its head).
    Take { id: u64, evict: Option<u64> },
    /// Close it at once: its client holds its share, or the cap is reached, and no
    /// connection can give way.
    Refuse,
}

/// Whether another connection may be accepted now.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Room {
    /// Yes (possibly by closing one still waiting for its head).
    Now,
    /// At the cap: the oldest connection waiting for its head may give way at this instant.
    At(Instant),
    /// At the cap, every connection past its head: when one ends.
    WhenOneEnds,
}

/// The open connections and the rules above.
#[derive(Debug)]
pub(crate) struct Admission {
    cap: usize,
    per_client: usize,
    /// By id, which grows: the first entries are the oldest.
    open: BTreeMap<u64, Open>,
    next_id: u64,
}

impl Admission {
    /// At most `cap` connections at once (at least one); a client's share is
    /// [`PER_CLIENT`], or the cap when lower.
    pub(crate) fn new(cap: usize) -> Self {
        let cap = cap.max(1);
        Self {
            cap,
            per_client: PER_CLIENT.min(cap),
            open: BTreeMap::new(),
            next_id: 0,
        }
    }

    pub(crate) fn cap(&self) -> usize {
        self.cap
    }

    pub(crate) fn room(&self, now: Instant) -> Room {
        if self.open.len() < self.cap {
            return Room::Now;
        }
        match self.oldest_waiting(|_| true) {
            Some((_, since)) if now >= since + HEAD_GRACE => Room::Now,
            Some((_, since)) => Room::At(since + HEAD_GRACE),
            None => Room::WhenOneEnds,
        }
    }

    /// Decides on a connection from `client` accepted at `now`, and records it when taken.
    pub(crate) fn admit(&mut self, client: IpAddr, now: Instant) -> Admit {
        let held = self.open.values().filter(|o| o.client == client).count();
        let evict = if held >= self.per_client {
            match self.evictable(now, |o| o.client == client) {
                Some(id) => Some(id),
                None => return Admit::Refuse,
            }
        } else if self.open.len() >= self.cap {
            match self.evictable(now, |_| true) {
                Some(id) => Some(id),
                None => return Admit::Refuse,
            }
        } else {
            None
        };
        if let Some(id) = evict {
            self.open.remove(&id);
        }
        let id = self.next_id;
        self.next_id += 1;
        self.open.insert(
            id,
            Open {
                client,
                since: now,
                head_done: false,
            },
        );
        Admit::Take { id, evict }
    }

    /// The connection's request head has arrived: it no longer gives way to others.
    pub(crate) fn head_done(&mut self, id: u64) {
        if let Some(open) = self.open.get_mut(&id) {
            open.head_done = true;
        }
    }

    /// The connection ended (or was closed).
    pub(crate) fn close(&mut self, id: u64) {
        self.open.remove(&id);
    }

    fn oldest_waiting(&self, of: impl Fn(&Open) -> bool) -> Option<(u64, Instant)> {
        self.open
            .iter()
            .find(|(_, o)| !o.head_done && of(o))
            .map(|(id, o)| (*id, o.since))
    }

    /// The oldest connection matching `of` that still waits for its head after its grace.
    fn evictable(&self, now: Instant, of: impl Fn(&Open) -> bool) -> Option<u64> {
        self.oldest_waiting(of)
            .filter(|(_, since)| now >= *since + HEAD_GRACE)
            .map(|(id, _)| id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    fn ip(last: u8) -> IpAddr {
        IpAddr::from([10, 0, 0, last])
    }

    #[test]
    fn a_new_connection_takes_the_place_of_the_one_that_waited_longest_for_its_head() {
        let t0 = Instant::now();
        let mut admission = Admission::new(3);
        let Admit::Take { id: slow, .. } = admission.admit(ip(1), t0) else {
            panic!("room")
        };
        let Admit::Take { id: done, .. } = admission.admit(ip(2), t0 + MS) else {
            panic!("room")
        };
        admission.head_done(done);
        let Admit::Take { id: young, .. } = admission.admit(ip(3), t0 + 2 * MS) else {
            panic!("room")
        };
        // At the cap, within the grace: the new one waits in the kernel.
        assert_eq!(admission.room(t0 + 50 * MS), Room::At(t0 + HEAD_GRACE));
        let later = t0 + HEAD_GRACE + 5 * MS;
        assert_eq!(admission.room(later), Room::Now);
        let Admit::Take { evict, .. } = admission.admit(ip(4), later) else {
            panic!("room")
        };
        assert_eq!(evict, Some(slow), "the oldest still waiting for its head");
        // Next in line: `young` (the one past its head never gives way).
        let Admit::Take { evict, .. } = admission.admit(ip(5), later + 100 * MS) else {
            panic!("room")
        };
        assert_eq!(evict, Some(young));
        assert_eq!(admission.open.len(), 3);
    }

    #[test]
    fn at_the_cap_with_every_head_in_the_room_waits_for_one_to_end() {
        let t0 = Instant::now();
        let mut admission = Admission::new(2);
        for client in [1, 2] {
            let Admit::Take { id, .. } = admission.admit(ip(client), t0) else {
                panic!("room")
            };
            admission.head_done(id);
        }
        assert_eq!(
            admission.room(t0 + Duration::from_secs(9)),
            Room::WhenOneEnds
        );
        assert_eq!(admission.admit(ip(3), t0), Admit::Refuse);
        admission.close(0);
        assert_eq!(admission.room(t0), Room::Now);
    }

    #[test]
    fn a_client_over_its_share_gives_way_to_itself_only() {
        let t0 = Instant::now();
        let mut admission = Admission::new(PER_CLIENT * 4);
        let other = admission.admit(ip(9), t0);
        assert_eq!(other, Admit::Take { id: 0, evict: None });
        for i in 0..PER_CLIENT {
            assert!(matches!(
                admission.admit(ip(1), t0 + MS * i as u32),
                Admit::Take { evict: None, .. }
            ));
        }
        // Over its share within the grace: refused, however much room there is.
        assert_eq!(admission.admit(ip(1), t0 + 50 * MS), Admit::Refuse);
        // After it: its own oldest waiting connection (id 1) gives way, not the other
        // client's older one (id 0).
        let Admit::Take { evict, .. } = admission.admit(ip(1), t0 + 200 * MS) else {
            panic!("its own oldest gives way")
        };
        assert_eq!(evict, Some(1));
        assert_eq!(admission.open.len(), PER_CLIENT + 1);
    }
}
