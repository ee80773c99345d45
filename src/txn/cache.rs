//! The transactional ids of the `__transaction_state` partitions a coordinator leads, as it
//! rebuilds them by replaying those partitions when it takes them over, and the work found in
//! them: transactions whose commit or abort was decided but whose markers may not all be written
//! (they are written again), transactions open past their timeout (aborted, as Kafka's
//! `transaction.timeout.ms` has it) and ids idle past `transactional.id.expiration.ms`.
//!
//! A transactional id belongs to partition `abs(javaHashCode(id)) % partitions` of
//! `__transaction_state`, as a group id does to `__consumer_offsets`.
//!
//! # Failure behaviour
//! A record whose key is not a transaction record (another key version) is skipped, as Kafka
//! skips it; a value that does not decode is an error naming the transactional id, and the
//! record is skipped by the caller with a log line (the id keeps its previous state). A
//! tombstone forgets the id.

use std::collections::HashMap;

use super::metadata::TxnMetadata;
use super::records::{decode_key, decode_value};
use super::state::TxnState;

/// The `__transaction_state` partition of a transactional id.
pub fn partition_for(transactional_id: &str, partitions: i32) -> i32 {
    crate::group::partition_for(transactional_id, partitions)
}

/// The transactional ids a coordinator holds.
#[derive(Debug, Default)]
pub struct TxnCache {
    txns: HashMap<String, TxnMetadata>,
}

/// What replaying one record did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Replayed {
    Updated(String),
    Forgot(String),
    /// Not a transaction record.
    Skipped,
}

impl TxnCache {
    /// Applies one record of the log, in log order; `value` is `None` for a tombstone.
    pub fn replay(&mut self, key: &[u8], value: Option<&[u8]>) -> Result<Replayed, String> {
        let Some(id) = decode_key(key)? else { return Ok(Replayed::Skipped) };
        match value {
            None => {
                self.txns.remove(&id);
                Ok(Replayed::Forgot(id))
            }
            Some(v) => {
                let value = decode_value(v).map_err(|e| format!("transactional id {id}: {e}"))?;
                self.txns.insert(id.clone(), TxnMetadata::from_value(&id, &value));
                Ok(Replayed::Updated(id))
            }
        }
    }

    pub fn get(&self, transactional_id: &str) -> Option<&TxnMetadata> {
        self.txns.get(transactional_id)
    }

    pub fn get_mut(&mut self, transactional_id: &str) -> Option<&mut TxnMetadata> {
        self.txns.get_mut(transactional_id)
    }

    /// Adds an id seen for the first time (kept if it is there already); returns it.
    pub fn get_or_insert(&mut self, m: TxnMetadata) -> &mut TxnMetadata {
        self.txns.entry(m.transactional_id.clone()).or_insert(m)
    }

    /// Drops the ids `which` selects (their partition is no longer led here); returns how many.
    pub fn unload(&mut self, which: impl Fn(&str) -> bool) -> usize {
        let before = self.txns.len();
        self.txns.retain(|id, _| !which(id));
        before - self.txns.len()
    }

    /// Forgets an id (its tombstone is written).
    pub fn remove(&mut self, transactional_id: &str) -> Option<TxnMetadata> {
        self.txns.remove(transactional_id)
    }

    /// Every id, in no particular order (admin listings).
    pub fn iter(&self) -> impl Iterator<Item = &TxnMetadata> {
        self.txns.values()
    }

    pub fn len(&self) -> usize {
        self.txns.len()
    }

    pub fn is_empty(&self) -> bool {
        self.txns.is_empty()
    }

    /// The ongoing transactions older than their timeout (`transaction.timeout.ms` as the
    /// producer set it): the coordinator aborts them, fencing their producer. In transactional id
    /// order; an id with a transition being written is left for the next round.
    pub fn timed_out(&self, now_ms: i64) -> Vec<&TxnMetadata> {
        let mut out: Vec<&TxnMetadata> = self
            .txns
            .values()
            .filter(|m| {
                m.txn.state == TxnState::Ongoing
                    && m.pending().is_none()
                    && m.txn.start_ms.saturating_add(i64::from(m.txn.timeout_ms)) < now_ms
            })
            .collect();
        out.sort_by(|a, b| a.transactional_id.cmp(&b.transactional_id));
        out
    }

    /// The transactional ids idle for longer than `transactional.id.expiration.ms` in a state
    /// that may expire (no transaction open): their records become tombstones.
    pub fn expired(&self, now_ms: i64, expiration_ms: i64) -> Vec<&TxnMetadata> {
        let mut out: Vec<&TxnMetadata> = self
            .txns
            .values()
            .filter(|m| {
                m.txn.state.expiration_allowed()
                    && m.pending().is_none()
                    && m.txn.last_update_ms.saturating_add(expiration_ms) <= now_ms
            })
            .collect();
        out.sort_by(|a, b| a.transactional_id.cmp(&b.transactional_id));
        out
    }

    /// The transactions whose commit or abort was written but not yet completed: their markers
    /// are to be written (again), in transactional id order.
    pub fn awaiting_markers(&self) -> Vec<&TxnMetadata> {
        let mut out: Vec<&TxnMetadata> =
            self.txns.values().filter(|m| matches!(m.txn.state, TxnState::PrepareCommit | TxnState::PrepareAbort)).collect();
        out.sort_by(|a, b| a.transactional_id.cmp(&b.transactional_id));
        out
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::txn::records::{encode_key, encode_value, TxnValue};

    fn value(state: TxnState, epoch: i16) -> Vec<u8> {
        let partitions = if state == TxnState::Empty { BTreeMap::new() } else { BTreeMap::from([("t".to_string(), vec![0])]) };
        encode_value(
            &TxnValue {
                producer_id: 4000,
                previous_producer_id: -1,
                next_producer_id: -1,
                producer_epoch: epoch,
                next_producer_epoch: -1,
                timeout_ms: 60_000,
                state,
                partitions,
                last_update_ms: 1,
                start_ms: 1,
                client_transaction_version: 2,
            },
            1,
        )
        .to_vec()
    }

    #[test]
    fn replay_keeps_the_last_state_of_each_id_and_forgets_tombstoned_ones() {
        let mut cache = TxnCache::default();
        cache.replay(&encode_key("a"), Some(&value(TxnState::Empty, 0))).unwrap();
        cache.replay(&encode_key("a"), Some(&value(TxnState::Ongoing, 0))).unwrap();
        cache.replay(&encode_key("a"), Some(&value(TxnState::PrepareCommit, 1))).unwrap();
        cache.replay(&encode_key("b"), Some(&value(TxnState::CompleteAbort, 3))).unwrap();
        cache.replay(&encode_key("c"), Some(&value(TxnState::PrepareAbort, 2))).unwrap();
        assert_eq!(cache.replay(&encode_key("b"), None).unwrap(), Replayed::Forgot("b".into()));
        assert_eq!(cache.len(), 2);
        let a = cache.get("a").unwrap();
        assert_eq!((a.txn.state, a.txn.producer_epoch, a.txn.partitions.len()), (TxnState::PrepareCommit, 1, 1));
        let waiting: Vec<&str> = cache.awaiting_markers().iter().map(|m| m.transactional_id.as_str()).collect();
        assert_eq!(waiting, ["a", "c"]);
    }

    fn at(state: TxnState, start_ms: i64, last_update_ms: i64) -> Vec<u8> {
        let mut v = decode_value(&value(state, 0)).unwrap();
        (v.start_ms, v.last_update_ms) = (start_ms, last_update_ms);
        encode_value(&v, 1).to_vec()
    }

    #[test]
    fn transactions_past_their_timeout_and_ids_past_their_expiration_are_found() {
        let mut cache = TxnCache::default();
        cache.replay(&encode_key("young"), Some(&at(TxnState::Ongoing, 50_000, 50_000))).unwrap();
        cache.replay(&encode_key("old"), Some(&at(TxnState::Ongoing, 1_000, 1_000))).unwrap();
        cache.replay(&encode_key("idle"), Some(&at(TxnState::CompleteCommit, 1_000, 1_000))).unwrap();
        cache.replay(&encode_key("deciding"), Some(&at(TxnState::PrepareCommit, 1_000, 1_000))).unwrap();
        // Timeouts are 60 s: at 61.001 s only "old" has run over.
        let names = |v: Vec<&TxnMetadata>| v.iter().map(|m| m.transactional_id.clone()).collect::<Vec<_>>();
        assert_eq!(names(cache.timed_out(61_001)), ["old"]);
        assert_eq!(names(cache.timed_out(61_000)), Vec::<String>::new());
        // Only an id with no transaction open expires.
        assert_eq!(names(cache.expired(1_000 + 604_800_000, 604_800_000)), ["idle"]);
        assert_eq!(names(cache.expired(604_800_000, 604_800_000)), Vec::<String>::new());
    }

    #[test]
    fn other_records_are_skipped_and_a_bad_value_names_its_id() {
        let mut cache = TxnCache::default();
        // A __consumer_offsets group key (version 2).
        assert_eq!(cache.replay(b"\x00\x02\x00\x01g", Some(b"")).unwrap(), Replayed::Skipped);
        let mut bad = value(TxnState::Ongoing, 0);
        bad.truncate(10);
        assert!(cache.replay(&encode_key("tx-9"), Some(&bad)).unwrap_err().starts_with("transactional id tx-9: "));
        assert!(cache.is_empty());
    }

    #[test]
    fn a_transactional_id_is_placed_as_kafka_places_it() {
        // Java: Utils.abs("my-group".hashCode()) % 50 = 36 (the same placement as groups).
        assert_eq!(partition_for("my-group", 50), 36);
    }
}
