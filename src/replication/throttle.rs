//! Replication throttles, as Kafka's `ReplicationQuotaManager` applies them while a
//! reassignment copies a partition to a new replica (`kafka-reassign-partitions --throttle`):
//!
//! - the broker configs `leader.replication.throttled.rate` and
//!   `follower.replication.throttled.rate` cap, in bytes per second, what this broker sends as a
//!   leader and fetches as a follower for throttled replicas;
//! - the topic configs `leader.replication.throttled.replicas` and
//!   `follower.replication.throttled.replicas` name the throttled replicas, as
//!   `partition:broker` pairs or `*` (every replica of the topic): a leader throttles a partition
//!   whose list names it, a follower one whose list names it;
//! - only replicas outside the ISR are throttled: an in-sync follower is never slowed down, so
//!   acks=all produce latency does not depend on a reassignment elsewhere.
//!
//! A [`Quota`] measures the throttled bytes over a sliding window of one-second samples
//! (Kafka's `replication.quota.window.num` 11 × `replication.quota.window.size.seconds` 1).
//! While the measured rate is above the limit, throttled partitions are left out of the fetch
//! (follower) or answered without records (leader); they catch up as the rate falls.
//!
//! Pure apart from the clock the caller passes in; the limit and samples are behind a mutex
//! taken once per fetch.

use std::collections::VecDeque;

use parking_lot::Mutex;

/// Samples kept, one per second.
const WINDOW_SAMPLES: i64 = 11;

/// One direction's throttle on this broker (leader or follower).
#[derive(Default)]
pub struct Quota {
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    /// Bytes per second; `None`: unlimited.
    limit: Option<i64>,
    /// (second, bytes) of the recent seconds, oldest first.
    samples: VecDeque<(i64, u64)>,
    /// The second of the first sample since the limit was set (a rate over a window that has
    /// not filled yet is taken over the time it covers).
    since: Option<i64>,
}

impl Quota {
    /// Sets the limit (`None` or a negative value: unlimited, Kafka's default `Long.MAX_VALUE`).
    pub fn set_limit(&self, bytes_per_second: Option<i64>) {
        let mut q = self.inner.lock();
        let limit = bytes_per_second.filter(|l| *l >= 0 && *l < i64::MAX);
        if q.limit != limit {
            q.limit = limit;
            q.samples.clear();
            q.since = None;
        }
    }

    /// Whether a limit is set at all (no work per partition otherwise).
    pub fn is_limited(&self) -> bool {
        self.inner.lock().limit.is_some()
    }

    /// Counts `bytes` of throttled replication at `now_ms`.
    pub fn record(&self, bytes: u64, now_ms: i64) {
        let mut q = self.inner.lock();
        if q.limit.is_none() || bytes == 0 {
            return;
        }
        let second = now_ms.div_euclid(1000);
        q.since.get_or_insert(second);
        match q.samples.back_mut() {
            Some((s, b)) if *s == second => *b += bytes,
            _ => q.samples.push_back((second, bytes)),
        }
        while q.samples.front().is_some_and(|(s, _)| *s <= second - WINDOW_SAMPLES) {
            q.samples.pop_front();
        }
    }

    /// Whether the throttled bytes of the window, as a rate, are above the limit.
    pub fn exceeded(&self, now_ms: i64) -> bool {
        let q = self.inner.lock();
        let (Some(limit), Some(since)) = (q.limit, q.since) else { return false };
        let second = now_ms.div_euclid(1000);
        let bytes: u64 = q.samples.iter().filter(|(s, _)| *s > second - WINDOW_SAMPLES).map(|(_, b)| *b).sum();
        // The window covers the seconds since the first sample, at most WINDOW_SAMPLES, the
        // current one counted as elapsed so far.
        let full = (second - since).clamp(0, WINDOW_SAMPLES - 1) as f64;
        let elapsed = full + (now_ms.rem_euclid(1000) as f64 / 1000.0).max(0.001);
        bytes as f64 / elapsed.max(1.0) > limit as f64
    }
}

/// Whether a `*.replication.throttled.replicas` value names replica `broker` of `partition`.
pub fn names_replica(value: &str, partition: i32, broker: i32) -> bool {
    let value = value.trim();
    if value == "*" {
        return true;
    }
    value.split(',').any(|pair| {
        let mut it = pair.trim().splitn(2, ':');
        let p = it.next().and_then(|p| p.trim().parse::<i32>().ok());
        let b = it.next().and_then(|b| b.trim().parse::<i32>().ok());
        p == Some(partition) && b == Some(broker)
    })
}

/// Kafka's `ThrottledReplicaListValidator`: empty, `*`, or `partition:broker` pairs.
pub fn valid_replica_list(value: &str) -> bool {
    let value = value.trim();
    value.is_empty()
        || value == "*"
        || value.split(',').all(|pair| {
            let parts: Vec<&str> = pair.trim().split(':').collect();
            parts.len() == 2 && parts.iter().all(|n| !n.is_empty() && n.bytes().all(|c| c.is_ascii_digit()))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unlimited_quota_is_never_exceeded() {
        let q = Quota::default();
        q.record(u64::MAX / 2, 0);
        assert!(!q.exceeded(0));
        assert!(!q.is_limited());
    }

    #[test]
    fn a_quota_is_exceeded_while_the_window_rate_is_above_the_limit_and_recovers() {
        let q = Quota::default();
        q.set_limit(Some(1000));
        q.record(500, 10_000);
        assert!(!q.exceeded(10_500), "500 B in the first second is under 1000 B/s");
        q.record(2000, 10_600);
        assert!(q.exceeded(10_700), "2500 B within one second is over");
        // Later the same bytes spread over more seconds: under the limit again.
        assert!(!q.exceeded(13_000));
        // Beyond the window they no longer count.
        q.record(1, 30_000);
        assert!(!q.exceeded(30_100));
    }

    #[test]
    fn changing_the_limit_starts_the_window_afresh() {
        let q = Quota::default();
        q.set_limit(Some(10));
        q.record(1_000_000, 0);
        assert!(q.exceeded(500));
        q.set_limit(Some(20));
        assert!(!q.exceeded(600));
        q.set_limit(None);
        q.record(1_000_000, 700);
        assert!(!q.exceeded(800));
    }

    #[test]
    fn a_replica_list_names_pairs_or_every_replica() {
        assert!(names_replica("0:1,1:2", 1, 2));
        assert!(names_replica(" 0:1 , 1:2 ", 0, 1));
        assert!(!names_replica("0:1,1:2", 0, 2));
        assert!(names_replica("*", 7, 9));
        assert!(!names_replica("", 0, 0));
    }

    #[test]
    fn only_kafkas_replica_list_forms_are_valid() {
        for ok in ["", "*", "0:1", "0:1,1:2", " 0:1, 1:2 "] {
            assert!(valid_replica_list(ok), "{ok:?}");
        }
        for bad in ["0", "0:", ":1", "a:1", "0:1,", "0:1:2", "**"] {
            assert!(!valid_replica_list(bad), "{bad:?}");
        }
    }
}
