//! A partition leader's view of its followers, as a pure core: what each follower has fetched,
//! where the high watermark stands, and which ISR change to ask the controller for. No I/O and no
//! clock of its own (callers pass `now_ms`), so the rules are tested table-style.
//!
//! The rules are Kafka's (`Partition.scala`, `Replica.scala`):
//! - A follower's log end offset is the offset it fetches from; it was **caught up** at the last
//!   fetch that reached the leader's log end, or at the previous fetch if this one reached the
//!   log end the leader had then.
//! - **High watermark** = the smallest log end offset among the leader and every replica of the
//!   *maximal ISR* (the ISR the image has, plus members of an ISR change still pending at the
//!   controller, KIP-497), and of every other replica caught up within
//!   `replica.lag.time.max.ms` (about to join: the high watermark waits for it rather than
//!   racing past it). With more than one replica it does not advance while the ISR is smaller
//!   than `min.insync.replicas` (KIP-966: what makes the eligible leader replicas safe to elect).
//! - **Shrink**: an ISR member other than the leader that has not been caught up for
//!   `replica.lag.time.max.ms` leaves the ISR.
//! - **Expand**: a replica not in the ISR whose log end offset has reached the high watermark and
//!   the start of the leader's epoch, and that has fetched within `replica.lag.time.max.ms`,
//!   joins it (Kafka decides this at the follower's fetch; a stopped follower never joins). The
//!   controller checks its broker epoch (KIP-903) and that it is unfenced.
//!
//! # Invariants
//! - The high watermark returned never exceeds the leader's log end offset and never goes below
//!   the last one returned (the caller keeps the maximum).
//! - At most one ISR change is pending; another is proposed only once the image has the first
//!   (or the controller refused it).

use std::collections::BTreeMap;

/// What the leader knows about one follower.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FollowerProgress {
    /// The offset the follower last fetched from; -1 before its first fetch.
    pub log_end_offset: i64,
    /// When the follower last had everything the leader had (ms); 0 = never.
    pub last_caught_up_ms: i64,
    last_fetch_ms: i64,
    /// The leader's log end offset at the follower's last fetch.
    last_fetch_leader_leo: i64,
    /// The broker epoch the follower fetched with (KIP-903); -1 when it sent none.
    pub broker_epoch: i64,
}

impl FollowerProgress {
    fn new(in_isr: bool, now_ms: i64) -> FollowerProgress {
        FollowerProgress {
            log_end_offset: -1,
            last_caught_up_ms: if in_isr { now_ms } else { 0 },
            last_fetch_ms: 0,
            last_fetch_leader_leo: -1,
            broker_epoch: -1,
        }
    }

    fn is_caught_up(&self, leader_leo: i64, now_ms: i64, lag_ms: i64) -> bool {
        self.log_end_offset == leader_leo || now_ms - self.last_caught_up_ms <= lag_ms
    }
}

/// An ISR change the leader asks the controller for (AlterPartition).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IsrChange {
    /// The new ISR, with each member's broker epoch as this leader last saw it (-1: unknown).
    pub isr: Vec<(i32, i64)>,
    /// The partition epoch the change applies to (compare-and-set at the controller).
    pub partition_epoch: i32,
}

/// The leader's side of one partition it leads.
#[derive(Debug, Clone)]
pub struct LeaderState {
    pub me: i32,
    pub leader_epoch: i32,
    pub partition_epoch: i32,
    /// The leader's log end offset when it took this epoch: a replica joins the ISR only once
    /// it has everything before it.
    pub epoch_start_offset: i64,
    pub replicas: Vec<i32>,
    /// The ISR as the metadata image has it.
    pub isr: Vec<i32>,
    /// An ISR sent to the controller and not yet in the image.
    pub pending: Option<Vec<i32>>,
    pub min_isr: usize,
    pub followers: BTreeMap<i32, FollowerProgress>,
}

impl LeaderState {
    /// A leader taking `leader_epoch` with its log ending at `leo`. ISR members count as caught
    /// up now, as Kafka resets them, so a new leader does not drop them before they fetch.
    pub fn new(me: i32, leader_epoch: i32, partition_epoch: i32, replicas: Vec<i32>, isr: Vec<i32>, leo: i64, now_ms: i64) -> LeaderState {
        let followers = replicas.iter().filter(|r| **r != me).map(|r| (*r, FollowerProgress::new(isr.contains(r), now_ms))).collect();
        LeaderState { me, leader_epoch, partition_epoch, epoch_start_offset: leo, replicas, isr, pending: None, min_isr: 1, followers }
    }

    /// The sole replica of a partition on a single node: the high watermark is its log end.
    pub fn sole(me: i32) -> LeaderState {
        LeaderState::new(me, 0, 0, vec![me], vec![me], 0, 0)
    }

    /// The image moved on within the same leader epoch: a new ISR or replica set. A pending
    /// change is settled once the image's partition epoch passes the one it was made against.
    pub fn update(&mut self, partition_epoch: i32, replicas: Vec<i32>, isr: Vec<i32>, now_ms: i64) {
        if partition_epoch != self.partition_epoch {
            self.pending = None;
        }
        for r in &replicas {
            if *r != self.me {
                self.followers.entry(*r).or_insert_with(|| FollowerProgress::new(false, now_ms));
            }
        }
        self.followers.retain(|r, _| replicas.contains(r));
        self.partition_epoch = partition_epoch;
        self.replicas = replicas;
        self.isr = isr;
    }

    /// The controller refused the pending change (or it timed out): it may be proposed again.
    pub fn clear_pending(&mut self) {
        self.pending = None;
    }

    /// The ISR plus the members of a pending change.
    pub fn maximal_isr(&self) -> Vec<i32> {
        let mut m = self.isr.clone();
        for r in self.pending.iter().flatten() {
            if !m.contains(r) {
                m.push(*r);
            }
        }
        m
    }

    /// Whether acks=all may append: the ISR has at least `min.insync.replicas` members, or
    /// every replica when there are fewer (Kafka 4's effective minimum ISR, KIP-966: a
    /// partition with one replica takes acks=all whatever `min.insync.replicas` says).
    pub fn has_min_isr(&self) -> bool {
        self.isr.len() >= self.min_isr.min(self.replicas.len())
    }

    /// A fetch from follower `replica` at `fetch_offset` while the leader's log ends at
    /// `leader_leo`. Fetches from a broker that is not a replica are ignored (returns false).
    pub fn on_fetch(&mut self, replica: i32, broker_epoch: i64, fetch_offset: i64, leader_leo: i64, now_ms: i64) -> bool {
        let Some(f) = self.followers.get_mut(&replica) else { return false };
        if fetch_offset >= leader_leo {
            f.last_caught_up_ms = f.last_caught_up_ms.max(now_ms);
        } else if fetch_offset >= f.last_fetch_leader_leo {
            f.last_caught_up_ms = f.last_caught_up_ms.max(f.last_fetch_ms);
        }
        f.last_fetch_leader_leo = leader_leo;
        f.last_fetch_ms = now_ms;
        f.log_end_offset = fetch_offset;
        f.broker_epoch = broker_epoch;
        true
    }

    /// The high watermark the followers' progress allows, or `None` while the ISR is below
    /// `min.insync.replicas` (it must not advance then).
    pub fn high_watermark(&self, leader_leo: i64, now_ms: i64, lag_ms: i64) -> Option<i64> {
        if !self.has_min_isr() {
            return None;
        }
        let maximal = self.maximal_isr();
        let mut hw = leader_leo;
        for (id, f) in &self.followers {
            if maximal.contains(id) || f.is_caught_up(leader_leo, now_ms, lag_ms) && f.log_end_offset >= 0 {
                hw = hw.min(f.log_end_offset.max(0));
            }
        }
        Some(hw)
    }

    /// The ISR change to propose now, if any: lagging members out, caught-up replicas in.
    /// `eligible` says whether a broker may join (registered, unfenced, not shutting down).
    pub fn isr_change(&self, high_watermark: i64, leader_leo: i64, now_ms: i64, lag_ms: i64, eligible: impl Fn(i32) -> bool) -> Option<IsrChange> {
        if self.pending.is_some() {
            return None;
        }
        let mut isr: Vec<i32> = self
            .isr
            .iter()
            .copied()
            .filter(|r| *r == self.me || self.followers.get(r).is_some_and(|f| f.is_caught_up(leader_leo, now_ms, lag_ms)))
            .collect();
        for (id, f) in &self.followers {
            let in_sync = f.log_end_offset >= high_watermark && f.log_end_offset >= self.epoch_start_offset;
            // Kafka weighs an expansion only when the follower fetches; here the round runs on
            // a timer, so the follower must have fetched within the lag time. Otherwise a
            // follower that stopped (paused, cut off) at the high watermark, which stops moving
            // below min.insync.replicas, would be taken back into the ISR it just left.
            let fetching = f.last_fetch_ms > 0 && now_ms - f.last_fetch_ms <= lag_ms;
            if !self.isr.contains(id) && in_sync && fetching && eligible(*id) {
                isr.push(*id);
            }
        }
        // Replica order, as Kafka lists an ISR.
        isr.sort_by_key(|r| self.replicas.iter().position(|x| x == r).unwrap_or(usize::MAX));
        let mut now = self.isr.clone();
        now.sort_by_key(|r| self.replicas.iter().position(|x| x == r).unwrap_or(usize::MAX));
        if isr == now {
            return None;
        }
        let epochs = isr.iter().map(|r| (*r, self.followers.get(r).map_or(-1, |f| f.broker_epoch))).collect();
        Some(IsrChange { isr: epochs, partition_epoch: self.partition_epoch })
    }

    /// Marks `change` as sent to the controller.
    pub fn set_pending(&mut self, change: &IsrChange) {
        self.pending = Some(change.isr.iter().map(|(r, _)| *r).collect());
    }

    /// The followers a consumer fetching from `fetch_offset` may be sent to (KIP-392, Kafka's
    /// `findPreferredReadReplica`): ISR members whose log end offset has reached it.
    pub fn read_replicas(&self, fetch_offset: i64, now_ms: i64) -> Vec<ReadReplica> {
        self.followers
            .iter()
            .filter(|(r, f)| self.isr.contains(r) && f.log_end_offset >= fetch_offset)
            .map(|(r, f)| ReadReplica { id: *r, log_end_offset: f.log_end_offset, since_caught_up_ms: (now_ms - f.last_caught_up_ms).max(0) })
            .collect()
    }
}

/// A follower a consumer may read from, as the leader knows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadReplica {
    pub id: i32,
    pub log_end_offset: i64,
    pub since_caught_up_ms: i64,
}

/// Kafka's `RackAwareReplicaSelector`: with a client rack, the leader if it is in that rack or
/// no replica is; else the replica in that rack with the largest log end offset (then the most
/// recently caught up, then the lowest id). Returns the follower to name as the preferred read
/// replica, or `None` for the leader. `rack_of` gives a broker's `broker.rack`.
pub fn rack_aware_read_replica(client_rack: &str, leader: i32, followers: &[ReadReplica], rack_of: impl Fn(i32) -> Option<String>) -> Option<i32> {
    if client_rack.is_empty() || rack_of(leader).as_deref() == Some(client_rack) {
        return None;
    }
    followers
        .iter()
        .filter(|f| rack_of(f.id).as_deref() == Some(client_rack))
        .max_by(|a, b| {
            a.log_end_offset.cmp(&b.log_end_offset).then(b.since_caught_up_ms.cmp(&a.since_caught_up_ms)).then(b.id.cmp(&a.id))
        })
        .map(|f| f.id)
}

#[cfg(test)]
mod tests {
    use super::*;

    const LAG: i64 = 30_000;

    fn three(isr: Vec<i32>) -> LeaderState {
        let mut s = LeaderState::new(1, 5, 7, vec![1, 2, 3], isr, 100, 1_000);
        s.min_isr = 2;
        s
    }

    #[test]
    fn the_high_watermark_waits_for_the_slowest_isr_member() {
        let mut s = three(vec![1, 2, 3]);
        s.on_fetch(2, 10, 150, 150, 2_000);
        s.on_fetch(3, 11, 120, 150, 2_000);
        assert_eq!(s.high_watermark(150, 2_000, LAG), Some(120));
        s.on_fetch(3, 11, 150, 150, 2_100);
        assert_eq!(s.high_watermark(150, 2_100, LAG), Some(150));
    }

    #[test]
    fn an_isr_member_that_never_fetched_holds_the_high_watermark_at_zero() {
        let s = three(vec![1, 2, 3]);
        assert_eq!(s.high_watermark(150, 2_000, LAG), Some(0));
    }

    #[test]
    fn below_min_insync_replicas_the_high_watermark_does_not_advance() {
        let mut s = three(vec![1]);
        assert!(!s.has_min_isr());
        assert_eq!(s.high_watermark(150, 2_000, LAG), None);
        s.min_isr = 1;
        assert_eq!(s.high_watermark(150, 2_000, LAG), Some(150));
    }

    #[test]
    fn min_insync_replicas_counts_at_most_the_replicas_there_are() {
        let mut one = LeaderState::new(1, 0, 0, vec![1], vec![1], 100, 1_000);
        one.min_isr = 2;
        assert!(one.has_min_isr());
        assert_eq!(one.high_watermark(150, 2_000, LAG), Some(150));
        let mut two = LeaderState::new(1, 0, 0, vec![1, 2], vec![1], 100, 1_000);
        two.min_isr = 3;
        assert!(!two.has_min_isr());
        two.isr = vec![1, 2];
        assert!(two.has_min_isr());
    }

    #[test]
    fn a_caught_up_replica_outside_the_isr_holds_the_high_watermark_until_it_joins() {
        let mut s = three(vec![1, 2]);
        s.min_isr = 1;
        s.on_fetch(2, 10, 200, 200, 2_000);
        s.on_fetch(3, 11, 200, 200, 2_000);
        s.on_fetch(3, 11, 190, 210, 2_500);
        // 3 was caught up 500 ms ago: the high watermark waits for it.
        assert_eq!(s.high_watermark(210, 2_500, LAG), Some(190));
        // Long behind, it no longer counts.
        assert_eq!(s.high_watermark(210, 2_000 + LAG + 1, LAG), Some(200));
    }

    #[test]
    fn a_member_behind_for_longer_than_the_lag_time_is_dropped_from_the_isr() {
        let mut s = three(vec![1, 2, 3]);
        s.on_fetch(2, 10, 100, 100, 1_500);
        s.on_fetch(3, 11, 100, 100, 1_500);
        // 3 stops fetching; 2 keeps up with the leader.
        let now = 1_500 + LAG + 1;
        s.on_fetch(2, 10, 300, 300, now);
        let change = s.isr_change(100, 300, now, LAG, |_| true).unwrap();
        assert_eq!(change, IsrChange { isr: vec![(1, -1), (2, 10)], partition_epoch: 7 });
        s.set_pending(&change);
        // Pending: nothing else is proposed, and 3 still holds the high watermark back.
        assert_eq!(s.isr_change(100, 300, now, LAG, |_| true), None);
        assert_eq!(s.high_watermark(300, now, LAG), Some(100));
        s.update(8, vec![1, 2, 3], vec![1, 2], now);
        assert_eq!(s.high_watermark(300, now, LAG), Some(300));
    }

    #[test]
    fn a_replica_joins_once_it_reaches_the_high_watermark_and_the_epoch_start() {
        let mut s = three(vec![1, 2]);
        s.on_fetch(2, 10, 300, 300, 2_000);
        s.on_fetch(3, 12, 99, 300, 2_000);
        assert_eq!(s.isr_change(300, 300, 2_000, LAG, |_| true), None, "below the epoch start");
        s.on_fetch(3, 12, 250, 300, 2_100);
        assert_eq!(s.isr_change(300, 300, 2_100, LAG, |_| true), None, "below the high watermark");
        s.on_fetch(3, 12, 300, 300, 2_200);
        assert_eq!(s.isr_change(300, 300, 2_200, LAG, |b| b != 3), None, "fenced or shutting down");
        let change = s.isr_change(300, 300, 2_200, LAG, |_| true).unwrap();
        assert_eq!(change.isr, vec![(1, -1), (2, 10), (3, 12)]);
    }

    #[test]
    fn a_stopped_follower_at_the_frozen_high_watermark_does_not_rejoin() {
        // Replicas 1 and 2; min.insync.replicas=2. Follower 2 stops at offset 100 and leaves the
        // ISR; the leader alone cannot move the high watermark past 100, where 2 stopped.
        let mut s = LeaderState::new(1, 5, 7, vec![1, 2], vec![1, 2], 100, 1_000);
        s.min_isr = 2;
        s.on_fetch(2, 10, 100, 100, 1_500);
        s.update(8, vec![1, 2], vec![1], 1_500 + LAG + 1);
        let later = 1_500 + 2 * LAG;
        assert_eq!(s.high_watermark(120, later, LAG), None, "frozen below min.insync.replicas");
        assert_eq!(s.isr_change(100, 120, later, LAG, |_| true), None, "a stopped follower rejoined");
        // Fetching again, caught up, it rejoins.
        s.on_fetch(2, 10, 120, 120, later + 1);
        let change = s.isr_change(100, 120, later + 1, LAG, |_| true).unwrap();
        assert_eq!(change.isr, vec![(1, -1), (2, 10)]);
    }

    #[test]
    fn a_follower_fetching_steadily_behind_a_moving_log_end_stays_caught_up() {
        let mut s = three(vec![1, 2, 3]);
        let mut leo = 100;
        for t in 0..100 {
            let now = 1_000 + t * 1_000;
            // Each fetch reaches what the leader had at the previous fetch.
            s.on_fetch(2, 10, leo, leo + 50, now);
            s.on_fetch(3, 11, leo + 50, leo + 50, now);
            leo += 50;
        }
        assert_eq!(s.isr_change(0, leo, 1_000 + 99 * 1_000, LAG, |_| true), None);
    }

    #[test]
    fn fetches_from_a_broker_that_is_not_a_replica_are_ignored() {
        let mut s = three(vec![1, 2, 3]);
        assert!(!s.on_fetch(9, 1, 500, 100, 2_000));
        assert!(!s.followers.contains_key(&9));
    }

    #[test]
    fn a_single_node_partition_has_its_log_end_as_high_watermark() {
        let s = LeaderState::sole(1);
        assert_eq!(s.high_watermark(42, 0, LAG), Some(42));
        assert_eq!(s.isr_change(42, 42, 0, LAG, |_| true), None);
    }

    mod simulation {
        use super::*;
        use proptest::prelude::*;

        /// One step of a seeded schedule: the leader appends, a follower fetches (from any offset
        /// it may have: up to the leader's log end), time passes, or the controller takes the
        /// ISR change the leader asks for.
        #[derive(Debug, Clone)]
        enum Step {
            Append(i64),
            Fetch { follower: usize, behind: i64 },
            Tick(i64),
            ApplyIsrChange,
        }

        fn step() -> impl Strategy<Value = Step> {
            prop_oneof![
                (1i64..50).prop_map(Step::Append),
                (0usize..2, 0i64..100).prop_map(|(follower, behind)| Step::Fetch { follower, behind }),
                (1i64..20_000).prop_map(Step::Tick),
                Just(Step::ApplyIsrChange),
            ]
        }

        proptest! {
            /// Under any schedule the high watermark never passes what a member of the maximal
            /// ISR has, never goes back, never exceeds the log end, the ISR always holds the
            /// leader, and a member leaves only after the lag time without catching up.
            #[test]
            fn the_high_watermark_never_passes_an_in_sync_replica(steps in proptest::collection::vec(step(), 1..200)) {
                let mut s = LeaderState::new(1, 1, 0, vec![1, 2, 3], vec![1, 2, 3], 0, 0);
                s.min_isr = 2;
                let (mut leo, mut now, mut hw) = (0i64, 0i64, 0i64);
                let mut fetched = [-1i64; 2];
                for st in steps {
                    match st {
                        Step::Append(n) => leo += n,
                        Step::Fetch { follower, behind } => {
                            // A follower never goes back (it truncates only below the HW it was told).
                            let at = (leo - behind).max(fetched[follower]).max(0);
                            fetched[follower] = at;
                            s.on_fetch(follower as i32 + 2, 7, at, leo, now);
                        }
                        Step::Tick(ms) => now += ms,
                        Step::ApplyIsrChange => {
                            if let Some(change) = s.isr_change(hw, leo, now, LAG, |_| true) {
                                let isr: Vec<i32> = change.isr.iter().map(|(b, _)| *b).collect();
                                prop_assert!(isr.contains(&1), "the leader left its own ISR: {:?}", isr);
                                for dropped in s.isr.iter().filter(|b| !isr.contains(b)) {
                                    let f = s.followers[dropped];
                                    prop_assert!(f.log_end_offset != leo && now - f.last_caught_up_ms > LAG, "dropped {} while in sync: {:?}", dropped, f);
                                }
                                s.set_pending(&change);
                                let epoch = s.partition_epoch + 1;
                                s.update(epoch, vec![1, 2, 3], isr, now);
                            }
                        }
                    }
                    if let Some(next) = s.high_watermark(leo, now, LAG) {
                        hw = hw.max(next);
                    }
                    prop_assert!(hw <= leo);
                    for member in s.maximal_isr().iter().filter(|b| **b != 1) {
                        prop_assert!(hw <= s.followers[member].log_end_offset.max(0), "hw {} passed member {}: {:?}", hw, member, s.followers[member]);
                    }
                }
            }
        }
    }

    #[test]
    fn a_consumer_is_sent_to_the_most_caught_up_in_sync_follower_in_its_rack_unless_the_leader_is_there() {
        let mut l = LeaderState::new(1, 3, 0, vec![1, 2, 3, 4], vec![1, 2, 3], 100, 0);
        l.on_fetch(2, 7, 100, 100, 1000);
        l.on_fetch(3, 7, 90, 100, 1000);
        l.on_fetch(4, 7, 100, 100, 1000);
        let rack = |b: i32| Some(match b { 1 => "a", 2..=4 => "b", _ => "c" }.to_string());
        // Only ISR members that have the fetch offset: 4 is outside the ISR, 3 is behind 95.
        let candidates = l.read_replicas(95, 1000);
        assert_eq!(candidates.iter().map(|r| r.id).collect::<Vec<_>>(), vec![2]);
        assert_eq!(rack_aware_read_replica("b", 1, &candidates, rack), Some(2));
        // Both have offset 50: the one with more of the log.
        assert_eq!(rack_aware_read_replica("b", 1, &l.read_replicas(50, 1000), rack), Some(2));
        // The leader's own rack, no rack, or a rack without replicas: the leader.
        assert_eq!(rack_aware_read_replica("a", 1, &candidates, rack), None);
        assert_eq!(rack_aware_read_replica("", 1, &candidates, rack), None);
        assert_eq!(rack_aware_read_replica("c", 1, &candidates, rack), None);
    }
}
