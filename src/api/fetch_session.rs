//! Incremental fetch sessions (KIP-227): the broker remembers which partitions a consumer
//! fetches, so later requests list only what changed and responses carry only partitions with
//! news.
//!
//! Request forms (session id, epoch):
//! - (0, -1): sessionless full fetch.  (0, 0): full fetch that creates a session.
//! - (id, 0): close `id`, create a new session.  (id, -1): close `id`, sessionless.
//! - (id, n>0): incremental; `n` must equal the session's expected epoch.
//!
//! # Invariants
//! - At most `capacity` sessions exist; when full, the least recently used session idle for
//!   longer than [`EVICTION_IDLE`] is evicted, otherwise the client gets a sessionless answer.
//! - A session's epoch advances by exactly one per accepted incremental request.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use indexmap::IndexMap;
use kafka_protocol::ResponseError;
use parking_lot::Mutex;

/// A session idle this long may be evicted to make room for a new one.
pub const EVICTION_IDLE: Duration = Duration::from_secs(120);

/// Identifies a partition by topic name and index.
pub type PartitionKey = (String, i32);

/// What the session remembers about one partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SessionPartition {
    pub fetch_offset: i64,
    pub max_bytes: i32,
    pub current_leader_epoch: i32,
    /// A follower's LastFetchedEpoch (v12+; -1 for consumers).
    pub last_fetched_epoch: i32,
    /// High watermark and log start last sent, to decide whether a partition has news.
    pub last_high_watermark: i64,
    pub last_log_start_offset: i64,
}

#[derive(Debug)]
struct Session {
    epoch: i32,
    partitions: IndexMap<PartitionKey, SessionPartition>,
    last_used: Instant,
}

/// How a request maps onto the session cache.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SessionPlan {
    /// Answer every requested partition; `session_id` is the id to return (0 for none).
    Full { session_id: i32 },
    /// Answer the session's partitions, including only those with news.
    Incremental { session_id: i32, partitions: Vec<(PartitionKey, SessionPartition)> },
    /// Refuse the whole request with this top-level error.
    Error(ResponseError),
}

/// All sessions of the broker.
#[derive(Debug)]
pub struct FetchSessionCache {
    capacity: usize,
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    sessions: HashMap<i32, Session>,
    next_id: i32,
}

impl Inner {
    fn create(&mut self, capacity: usize, partitions: IndexMap<PartitionKey, SessionPartition>, now: Instant) -> i32 {
        if capacity == 0 {
            return 0;
        }
        if self.sessions.len() >= capacity {
            let victim = self
                .sessions
                .iter()
                .filter(|(_, s)| now.duration_since(s.last_used) >= EVICTION_IDLE)
                .min_by_key(|(_, s)| s.last_used)
                .map(|(id, _)| *id);
            match victim {
                Some(id) => {
                    self.sessions.remove(&id);
                }
                None => return 0,
            }
        }
        loop {
            self.next_id = self.next_id.wrapping_add(1);
            if self.next_id <= 0 {
                self.next_id = 1;
            }
            if !self.sessions.contains_key(&self.next_id) {
                break;
            }
        }
        let id = self.next_id;
        self.sessions.insert(id, Session { epoch: 1, partitions, last_used: now });
        id
    }
}

impl FetchSessionCache {
    pub fn new(capacity: usize) -> FetchSessionCache {
        FetchSessionCache { capacity, inner: Mutex::new(Inner::default()) }
    }

    /// Applies a request to the cache. `requested` are the partitions listed in the request,
    /// `forgotten` those it asks to drop.
    pub fn plan(
        &self,
        session_id: i32,
        epoch: i32,
        requested: &[(PartitionKey, SessionPartition)],
        forgotten: &[PartitionKey],
        now: Instant,
    ) -> SessionPlan {
        let mut inner = self.inner.lock();
        if epoch == 0 || epoch == -1 {
            if session_id != 0 {
                inner.sessions.remove(&session_id);
            }
            if epoch == -1 {
                return SessionPlan::Full { session_id: 0 };
            }
            let parts: IndexMap<_, _> = requested.iter().cloned().collect();
            let id = inner.create(self.capacity, parts, now);
            return SessionPlan::Full { session_id: id };
        }
        if session_id == 0 {
            return SessionPlan::Error(ResponseError::InvalidFetchSessionEpoch);
        }
        let Some(session) = inner.sessions.get_mut(&session_id) else {
            return SessionPlan::Error(ResponseError::FetchSessionIdNotFound);
        };
        if session.epoch != epoch {
            return SessionPlan::Error(ResponseError::InvalidFetchSessionEpoch);
        }
        session.epoch = if session.epoch == i32::MAX { 1 } else { session.epoch + 1 };
        session.last_used = now;
        for key in forgotten {
            session.partitions.shift_remove(key);
        }
        for (key, p) in requested {
            match session.partitions.get_mut(key) {
                Some(existing) => {
                    existing.fetch_offset = p.fetch_offset;
                    existing.max_bytes = p.max_bytes;
                    existing.current_leader_epoch = p.current_leader_epoch;
                    existing.last_fetched_epoch = p.last_fetched_epoch;
                }
                None => {
                    session.partitions.insert(key.clone(), *p);
                }
            }
        }
        let partitions = session.partitions.iter().map(|(k, v)| (k.clone(), *v)).collect();
        SessionPlan::Incremental { session_id, partitions }
    }

    /// Records what was sent for a partition so the next incremental response can skip it.
    pub fn record_sent(&self, session_id: i32, key: &PartitionKey, high_watermark: i64, log_start_offset: i64) {
        if session_id == 0 {
            return;
        }
        if let Some(p) = self.inner.lock().sessions.get_mut(&session_id).and_then(|s| s.partitions.get_mut(key)) {
            p.last_high_watermark = high_watermark;
            p.last_log_start_offset = log_start_offset;
        }
    }

    /// Number of live sessions.
    pub fn len(&self) -> usize {
        self.inner.lock().sessions.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn part(offset: i64) -> SessionPartition {
        SessionPartition {
            last_fetched_epoch: -1,
            fetch_offset: offset,
            max_bytes: 1024,
            current_leader_epoch: -1,
            last_high_watermark: -1,
            last_log_start_offset: -1,
        }
    }

    fn key(t: &str, p: i32) -> PartitionKey {
        (t.to_string(), p)
    }

    #[test]
    fn full_fetch_with_epoch_zero_creates_a_session_and_incremental_reuses_it() {
        let c = FetchSessionCache::new(10);
        let now = Instant::now();
        let SessionPlan::Full { session_id } = c.plan(0, 0, &[(key("a", 0), part(5)), (key("a", 1), part(7))], &[], now) else {
            panic!()
        };
        assert!(session_id > 0);
        match c.plan(session_id, 1, &[(key("a", 1), part(9))], &[key("a", 0)], now) {
            SessionPlan::Incremental { partitions, .. } => {
                assert_eq!(partitions, vec![(key("a", 1), part(9))]);
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn wrong_epoch_and_unknown_session_are_errors() {
        let c = FetchSessionCache::new(10);
        let now = Instant::now();
        let SessionPlan::Full { session_id } = c.plan(0, 0, &[(key("a", 0), part(0))], &[], now) else { panic!() };
        assert_eq!(c.plan(session_id, 2, &[], &[], now), SessionPlan::Error(ResponseError::InvalidFetchSessionEpoch));
        assert_eq!(c.plan(session_id + 100, 1, &[], &[], now), SessionPlan::Error(ResponseError::FetchSessionIdNotFound));
        assert!(matches!(c.plan(session_id, 1, &[], &[], now), SessionPlan::Incremental { .. }));
        assert!(matches!(c.plan(session_id, 2, &[], &[], now), SessionPlan::Incremental { .. }));
    }

    #[test]
    fn final_epoch_closes_the_session() {
        let c = FetchSessionCache::new(10);
        let now = Instant::now();
        let SessionPlan::Full { session_id } = c.plan(0, 0, &[], &[], now) else { panic!() };
        assert_eq!(c.plan(session_id, -1, &[], &[], now), SessionPlan::Full { session_id: 0 });
        assert!(c.is_empty());
    }

    #[test]
    fn full_cache_answers_sessionless_until_a_session_is_idle() {
        let c = FetchSessionCache::new(1);
        let t0 = Instant::now();
        let SessionPlan::Full { session_id: first } = c.plan(0, 0, &[], &[], t0) else { panic!() };
        assert!(first > 0);
        assert_eq!(c.plan(0, 0, &[], &[], t0), SessionPlan::Full { session_id: 0 });
        let later = t0 + EVICTION_IDLE + Duration::from_secs(1);
        let SessionPlan::Full { session_id: second } = c.plan(0, 0, &[], &[], later) else { panic!() };
        assert!(second > 0 && second != first);
    }
}
