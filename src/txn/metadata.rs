//! One transactional id at its coordinator, and the coordinator's decisions on it: what
//! InitProducerId, AddPartitionsToTxn and EndTxn answer or write, and each state transition a
//! transaction goes through (Kafka's `TransactionMetadata` and the checks of its
//! `TransactionCoordinator`). Pure: the driver writes each [`Txn`] to
//! `__transaction_state` and applies it with [`TxnMetadata::complete`] once replicated.
//!
//! # Invariants
//! - At most one transition is pending (prepared, being written). Any other request meanwhile
//!   gets CONCURRENT_TRANSACTIONS, which clients retry.
//! - A transition becomes the state only once its record is written ([`TxnMetadata::complete`]);
//!   a write that fails is dropped with [`TxnMetadata::abandon`] and the state is as before.
//! - Every transition is one Kafka allows ([`TxnState::may_follow`]); anything else is refused
//!   with INVALID_TXN_STATE and prepares nothing.
//! - A client never gets epoch `i16::MAX`: an id whose epoch reached `i16::MAX - 1` gets a new
//!   producer id on its next InitProducerId, so the coordinator can always fence it once more.
//!
//! # Epochs (KIP-360, KIP-890)
//! InitProducerId bumps the epoch (fencing the previous producer with the id). With the
//! producer's current id and epoch given (a producer recovering from an error), a match bumps
//! it, the epoch before it is a retry of a bump that succeeded (answered again, not bumped), and
//! anything else is PRODUCER_FENCED. Under transactions v2 every EndTxn bumps the epoch once more,
//! so a late marker or produce of one transaction cannot land in the next; a retried EndTxn is
//! known by its epoch being one behind, and a v2 client may abort a transaction that never
//! began. An InitProducerId that finds a transaction ongoing fences its producer: the
//! coordinator aborts it at a bumped epoch, written with the abort (not on its own).

use std::collections::BTreeSet;

use kafka_protocol::ResponseError;

use super::records::TxnValue;
use super::state::TxnState;

/// No producer id (Kafka's `RecordBatch.NO_PRODUCER_ID`).
pub const NO_PRODUCER_ID: i64 = -1;
/// No producer epoch (Kafka's `RecordBatch.NO_PRODUCER_EPOCH`).
pub const NO_PRODUCER_EPOCH: i16 = -1;

/// Whether `epoch` leaves no room to bump it twice more (once for the client, once to fence).
pub fn epoch_exhausted(epoch: i16) -> bool {
    epoch >= i16::MAX - 1
}

/// A partition in a transaction: (topic, partition).
pub type TxnPartition = (String, i32);

/// A transactional id's state at its coordinator.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxnMetadata {
    pub transactional_id: String,
    /// Its transaction as last written.
    pub txn: Txn,
    pending: Option<TxnState>,
    /// The abort being written is an epoch fence's.
    fence_in_flight: bool,
    /// The last epoch fence's abort was not written: the next fence does not bump again (the
    /// bumped epoch was never given to anyone).
    failed_epoch_fence: bool,
}

/// A transactional id's transaction, as written (or, prepared, as it will be once written).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Txn {
    pub producer_id: i64,
    /// The producer id before the last transition (-1 if none).
    pub previous_producer_id: i64,
    /// Under transactions v2, the producer id the client moves to when this transaction ends
    /// (its epoch ran out); -1 otherwise.
    pub next_producer_id: i64,
    pub producer_epoch: i16,
    /// The epoch before the last bump a recovering producer asked for (-1 if none).
    pub last_producer_epoch: i16,
    pub timeout_ms: i32,
    pub state: TxnState,
    pub partitions: BTreeSet<TxnPartition>,
    /// When the transaction began (its first partition); -1 if none.
    pub start_ms: i64,
    pub last_update_ms: i64,
    /// The transaction version the client speaks (0-2; 2 is KIP-890's).
    pub client_version: i16,
}

impl Txn {
    /// The `__transaction_state` value that records this transition.
    pub fn to_value(&self) -> TxnValue {
        let mut partitions = std::collections::BTreeMap::<String, Vec<i32>>::new();
        for (topic, p) in &self.partitions {
            partitions.entry(topic.clone()).or_default().push(*p);
        }
        TxnValue {
            producer_id: self.producer_id,
            previous_producer_id: self.previous_producer_id,
            next_producer_id: self.next_producer_id,
            producer_epoch: self.producer_epoch,
            next_producer_epoch: NO_PRODUCER_EPOCH,
            timeout_ms: self.timeout_ms,
            state: self.state,
            partitions,
            last_update_ms: self.last_update_ms,
            start_ms: self.start_ms,
            client_transaction_version: self.client_version,
        }
    }
}

/// What an InitProducerId with a transactional id gets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InitDecision {
    /// This error, now; nothing is written.
    Refuse(ResponseError),
    /// Write this; once written, answer with its producer id and epoch.
    Write(Txn),
    /// A transaction is ongoing: the coordinator aborts it at this fenced epoch (its own
    /// [`TxnMetadata::end_txn`], not from the client) and answers CONCURRENT_TRANSACTIONS, so
    /// that the client asks again once it is aborted. The fence itself is not written.
    FenceAndAbort(i16),
}

/// What an AddPartitionsToTxn (or the implicit add of a v2 Produce) gets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AddDecision {
    Refuse(ResponseError),
    /// The partitions are in the ongoing transaction already.
    AlreadyIn,
    /// Write this; once written, answer NONE.
    Write(Txn),
}

/// What an EndTxn gets (or the coordinator's own abort of a fenced or timed-out transaction).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EndDecision {
    Refuse(ResponseError),
    /// The transaction already ended this way (a retry): NONE, with the current producer id and
    /// epoch.
    Done,
    /// Write this (`PrepareCommit` or `PrepareAbort`); once written, answer NONE with its
    /// producer id and epoch, and write the markers.
    Write(Txn),
}

/// The checks of an InitProducerId that come before the transactional id's state: an empty id
/// is INVALID_REQUEST, a timeout outside 1..=`transaction.max.timeout.ms` is
/// INVALID_TRANSACTION_TIMEOUT.
pub fn check_init(transactional_id: &str, timeout_ms: i32, max_timeout_ms: i32) -> Result<(), ResponseError> {
    if transactional_id.is_empty() {
        return Err(ResponseError::InvalidRequest);
    }
    if timeout_ms <= 0 || timeout_ms > max_timeout_ms {
        return Err(ResponseError::InvalidTransactionTimeout);
    }
    Ok(())
}

impl TxnMetadata {
    /// A transactional id seen for the first time, with a producer id of its own and no epoch
    /// yet (its first InitProducerId makes it 0).
    pub fn new(transactional_id: &str, producer_id: i64, timeout_ms: i32, now_ms: i64) -> TxnMetadata {
        TxnMetadata {
            transactional_id: transactional_id.to_string(),
            txn: Txn {
                producer_id,
                previous_producer_id: NO_PRODUCER_ID,
                next_producer_id: NO_PRODUCER_ID,
                producer_epoch: NO_PRODUCER_EPOCH,
                last_producer_epoch: NO_PRODUCER_EPOCH,
                timeout_ms,
                state: TxnState::Empty,
                partitions: BTreeSet::new(),
                start_ms: -1,
                last_update_ms: now_ms,
                client_version: 0,
            },
            pending: None,
            fence_in_flight: false,
            failed_epoch_fence: false,
        }
    }

    /// The state a `__transaction_state` value stands for (loading the log).
    pub fn from_value(transactional_id: &str, v: &TxnValue) -> TxnMetadata {
        TxnMetadata {
            transactional_id: transactional_id.to_string(),
            txn: Txn {
                producer_id: v.producer_id,
                previous_producer_id: v.previous_producer_id,
                next_producer_id: v.next_producer_id,
                producer_epoch: v.producer_epoch,
                last_producer_epoch: NO_PRODUCER_EPOCH,
                timeout_ms: v.timeout_ms,
                state: v.state,
                partitions: v.partitions.iter().flat_map(|(t, ps)| ps.iter().map(|p| (t.clone(), *p))).collect(),
                start_ms: v.start_ms,
                last_update_ms: v.last_update_ms,
                client_version: v.client_transaction_version,
            },
            pending: None,
            fence_in_flight: false,
            failed_epoch_fence: false,
        }
    }

    /// The state of the transition being written, if one is.
    pub fn pending(&self) -> Option<TxnState> {
        self.pending
    }

    /// The transaction as it is, moving to `state` (every transition records the producer id
    /// it leaves as the previous one).
    fn transit(&self, state: TxnState) -> Txn {
        Txn { previous_producer_id: self.txn.producer_id, state, ..self.txn.clone() }
    }

    /// Marks `t` pending if it is a transition Kafka allows from here.
    fn prepare(&mut self, t: Txn) -> Result<Txn, ResponseError> {
        if self.pending.is_some() {
            return Err(ResponseError::ConcurrentTransactions);
        }
        if !t.state.may_follow(self.txn.state) || (t.state != TxnState::Dead && t.producer_epoch < 0) || t.producer_id < 0 {
            tracing::error!(transactional_id = %self.transactional_id, from = ?self.txn.state, to = ?t.state,
                epoch = t.producer_epoch, "refusing a transaction state transition Kafka does not allow");
            return Err(ResponseError::InvalidTxnState);
        }
        self.pending = Some(t.state);
        Ok(t)
    }

    /// Fences the current producer: the epoch is bumped (once, however often the write fails)
    /// and the ongoing transaction is to be aborted.
    pub fn prepare_fence_epoch(&mut self) -> Result<Txn, ResponseError> {
        let mut t = self.transit(TxnState::PrepareEpochFence);
        if !self.failed_epoch_fence && self.txn.producer_epoch < i16::MAX {
            t.producer_epoch += 1;
        }
        self.prepare(t)
    }

    /// A new epoch for the same producer id (see the module's "Epochs"); `expected_epoch` is the
    /// epoch a recovering producer says it has.
    pub fn prepare_bump_epoch(&mut self, timeout_ms: i32, expected_epoch: Option<i16>, now_ms: i64) -> Result<Txn, ResponseError> {
        if epoch_exhausted(self.txn.producer_epoch) {
            return Err(ResponseError::InvalidTxnState);
        }
        let mut t = self.transit(TxnState::Empty);
        let bumped = self.txn.producer_epoch + 1;
        match expected_epoch {
            None => (t.producer_epoch, t.last_producer_epoch) = (bumped, NO_PRODUCER_EPOCH),
            Some(e) if self.txn.producer_epoch == NO_PRODUCER_EPOCH || e == self.txn.producer_epoch => {
                (t.producer_epoch, t.last_producer_epoch) = (bumped, self.txn.producer_epoch)
            }
            // A retry of a bump that succeeded but whose answer was lost: the same epoch again.
            Some(e) if e == self.txn.last_producer_epoch => {}
            Some(_) => return Err(ResponseError::ProducerFenced),
        }
        t.timeout_ms = timeout_ms;
        t.partitions.clear();
        t.start_ms = -1;
        t.last_update_ms = now_ms;
        self.prepare(t)
    }

    /// A new producer id with epoch 0, for an id whose epochs ran out. `record_last_epoch`: the
    /// producer gave its epoch (it is recovering), which is kept so that its retry is known.
    pub fn prepare_rotate_producer_id(&mut self, producer_id: i64, timeout_ms: i32, now_ms: i64, record_last_epoch: bool) -> Result<Txn, ResponseError> {
        if matches!(self.txn.state, TxnState::Ongoing | TxnState::PrepareCommit | TxnState::PrepareAbort) {
            return Err(ResponseError::InvalidTxnState);
        }
        let mut t = self.transit(TxnState::Empty);
        t.producer_id = producer_id;
        t.producer_epoch = 0;
        t.last_producer_epoch = if record_last_epoch { self.txn.producer_epoch } else { NO_PRODUCER_EPOCH };
        t.timeout_ms = timeout_ms;
        t.partitions.clear();
        t.start_ms = -1;
        t.last_update_ms = now_ms;
        self.prepare(t)
    }

    /// The transaction with `added` in it; it begins now if none was ongoing.
    pub fn prepare_add_partitions(&mut self, added: &BTreeSet<TxnPartition>, now_ms: i64, client_version: i16) -> Result<Txn, ResponseError> {
        let mut t = self.transit(TxnState::Ongoing);
        if self.txn.state.is_complete() {
            t.start_ms = now_ms;
        }
        t.partitions.extend(added.iter().cloned());
        t.last_update_ms = now_ms;
        t.client_version = client_version;
        self.prepare(t)
    }

    /// The decision to commit (`PrepareCommit`) or abort (`PrepareAbort`). Under transactions v2
    /// it bumps the epoch, so that a late marker or produce of this transaction cannot land in
    /// the next; `next_producer_id` is the id the client moves to if that bump exhausts the
    /// epochs. `nothing_added`: a v2 abort of a transaction that never began starts now.
    pub fn prepare_end(&mut self, state: TxnState, client_version: i16, next_producer_id: i64, now_ms: i64, nothing_added: bool) -> Result<Txn, ResponseError> {
        if !matches!(state, TxnState::PrepareCommit | TxnState::PrepareAbort) {
            return Err(ResponseError::InvalidTxnState);
        }
        let mut t = self.transit(state);
        if client_version >= 2 {
            // An abort at i16::MAX is let through unbumped so that a broken id can recover.
            if !(self.txn.producer_epoch == i16::MAX && state == TxnState::PrepareAbort) {
                t.producer_epoch = self.txn.producer_epoch.saturating_add(1);
            }
            t.last_producer_epoch = self.txn.producer_epoch;
        }
        if nothing_added {
            t.start_ms = now_ms;
        }
        t.next_producer_id = next_producer_id;
        t.last_update_ms = now_ms;
        t.client_version = client_version;
        self.prepare(t)
    }

    /// Every marker is written: the transaction is complete. A v2 client moving to a new
    /// producer id gets it with epoch 0.
    pub fn prepare_complete(&mut self, now_ms: i64) -> Result<Txn, ResponseError> {
        let state = match self.txn.state {
            TxnState::PrepareCommit => TxnState::CompleteCommit,
            _ => TxnState::CompleteAbort,
        };
        let mut t = self.transit(state);
        if self.txn.client_version >= 2 && self.txn.next_producer_id != NO_PRODUCER_ID {
            t.producer_id = self.txn.next_producer_id;
            t.producer_epoch = 0;
        }
        t.next_producer_id = NO_PRODUCER_ID;
        t.partitions.clear();
        t.last_update_ms = now_ms;
        let t = self.prepare(t)?;
        self.failed_epoch_fence = false;
        Ok(t)
    }

    /// The id expired (`transactional.id.expiration.ms`); its record becomes a tombstone.
    pub fn prepare_dead(&mut self) -> Result<Txn, ResponseError> {
        let mut t = self.transit(TxnState::Dead);
        t.partitions.clear();
        self.prepare(t)
    }

    /// The pending transition's record is written: it becomes the state.
    pub fn complete(&mut self, t: &Txn) -> Result<(), ResponseError> {
        if self.pending != Some(t.state) {
            tracing::error!(transactional_id = %self.transactional_id, pending = ?self.pending, written = ?t.state,
                "a written transaction state is not the pending one; keeping the state before it");
            return Err(ResponseError::InvalidTxnState);
        }
        self.txn = t.clone();
        self.pending = None;
        self.fence_in_flight = false;
        Ok(())
    }

    /// The pending transition's record could not be written: the state stays as it was.
    pub fn abandon(&mut self) {
        self.pending = None;
        if std::mem::take(&mut self.fence_in_flight) {
            self.failed_epoch_fence = true;
        }
    }

    /// InitProducerId for this id: `expected` is the producer id and epoch a recovering
    /// producer gives (KIP-360), `new_producer_id` hands out a fresh id if one is needed.
    pub fn init_producer_id(&mut self, timeout_ms: i32, expected: Option<(i64, i16)>, new_producer_id: impl FnOnce() -> i64, now_ms: i64) -> InitDecision {
        if self.pending.is_some() {
            return InitDecision::Refuse(ResponseError::ConcurrentTransactions);
        }
        // The producer is one of this id's unless: the id was only just created (a producer
        // recovering from UNKNOWN_PRODUCER_ID takes the new one), it is the current producer id
        // (its epoch is checked by the bump), or it is the previous one with its epochs used up
        // (a retry after a rotation whose answer was lost).
        let known = |(id, epoch): (i64, i16)| {
            self.txn.producer_epoch == NO_PRODUCER_EPOCH
                || id == self.txn.producer_id
                || (id == self.txn.previous_producer_id && epoch_exhausted(epoch))
        };
        if expected.is_some_and(|e| !known(e)) {
            return InitDecision::Refuse(ResponseError::ProducerFenced);
        }
        let decided = match self.txn.state {
            TxnState::PrepareAbort | TxnState::PrepareCommit => return InitDecision::Refuse(ResponseError::ConcurrentTransactions),
            TxnState::Empty | TxnState::CompleteCommit | TxnState::CompleteAbort => {
                if epoch_exhausted(self.txn.producer_epoch) && expected.is_none_or(|(_, e)| e == self.txn.producer_epoch) {
                    self.prepare_rotate_producer_id(new_producer_id(), timeout_ms, now_ms, expected.is_some())
                } else {
                    self.prepare_bump_epoch(timeout_ms, expected.map(|(_, e)| e), now_ms)
                }
            }
            // The ongoing transaction is aborted under a fenced epoch first; the client's retry
            // then bumps again (and gets a new producer id if the fence used the last epoch).
            TxnState::Ongoing => {
                return self.prepare_fence_epoch().map_or_else(InitDecision::Refuse, |t| InitDecision::FenceAndAbort(t.producer_epoch))
            }
            TxnState::Dead | TxnState::PrepareEpochFence => {
                tracing::error!(transactional_id = %self.transactional_id, state = ?self.txn.state, "InitProducerId found a state it can never see");
                return InitDecision::Refuse(ResponseError::UnknownServerError);
            }
        };
        decided.map_or_else(InitDecision::Refuse, InitDecision::Write)
    }

    /// EndTxn for this id from producer `producer_id` at `epoch`: `commit` or abort.
    /// `from_client` is false for the coordinator's own aborts (an epoch fence, a timeout),
    /// which may carry a newer epoch than the client's. `client_version` is the transaction
    /// version the request speaks (2: the epoch is bumped by every end, KIP-890);
    /// `new_producer_id` hands out the producer id the client moves to when that bump uses up
    /// the epochs.
    #[allow(clippy::too_many_arguments)]
    pub fn end_txn(
        &mut self,
        producer_id: i64,
        epoch: i16,
        commit: bool,
        from_client: bool,
        client_version: i16,
        new_producer_id: impl FnOnce() -> i64,
        now_ms: i64,
    ) -> EndDecision {
        use TxnState::*;
        let fencing = self.pending == Some(PrepareEpochFence);
        let current = self.txn.producer_epoch;
        // The transaction as written is a v2 one: the epoch it holds is one past the client's
        // after an end, so the same epoch again means the next transaction.
        let v2 = !fencing && self.txn.client_version >= 2;
        let retry_after_bump = v2 && i32::from(current) == i32::from(epoch) + 1;
        let retry_after_rotation = v2 && self.txn.previous_producer_id == producer_id && epoch == i16::MAX - 1 && current == 0;
        let epoch_ok = if v2 {
            match self.txn.state {
                Ongoing | Empty | Dead | PrepareEpochFence => epoch == current,
                PrepareCommit | PrepareAbort => retry_after_bump,
                // Also an abort at the current epoch: a v2 client that does not know whether
                // its transaction ended may abort again.
                CompleteCommit | CompleteAbort => retry_after_bump || retry_after_rotation || (!commit && epoch == current),
            }
        } else {
            (!from_client || epoch == current) && epoch >= current
        };
        if producer_id != self.txn.producer_id && !retry_after_rotation {
            return EndDecision::Refuse(ResponseError::InvalidProducerIdMapping);
        }
        if !epoch_ok {
            return EndDecision::Refuse(ResponseError::ProducerFenced);
        }
        if self.pending.is_some() && !fencing {
            return EndDecision::Refuse(ResponseError::ConcurrentTransactions);
        }
        let (next, nothing_added) = match (self.txn.state, commit) {
            (Ongoing, _) => (if commit { PrepareCommit } else { PrepareAbort }, false),
            (CompleteCommit, true) | (CompleteAbort, false) if retry_after_bump || retry_after_rotation || !v2 => return EndDecision::Done,
            (Empty | CompleteCommit | CompleteAbort, false) if client_version >= 2 => (PrepareAbort, true),
            (PrepareCommit, true) | (PrepareAbort, false) => return EndDecision::Refuse(ResponseError::ConcurrentTransactions),
            (Dead | PrepareEpochFence, _) => {
                tracing::error!(transactional_id = %self.transactional_id, state = ?self.txn.state, "EndTxn found a state it can never see");
                return EndDecision::Refuse(ResponseError::UnknownServerError);
            }
            _ => {
                tracing::debug!(transactional_id = %self.transactional_id, state = ?self.txn.state, commit, "EndTxn in a state that cannot end that way");
                return EndDecision::Refuse(ResponseError::InvalidTxnState);
            }
        };
        let next_producer_id = if client_version >= 2 && !fencing && epoch_exhausted(current) { new_producer_id() } else { NO_PRODUCER_ID };
        if fencing {
            // The fence is not written on its own: the abort carries the fenced epoch.
            if commit {
                return EndDecision::Refuse(ResponseError::ConcurrentTransactions);
            }
            self.pending = None;
            self.fence_in_flight = true;
            self.txn.producer_epoch = epoch;
            self.txn.last_producer_epoch = NO_PRODUCER_EPOCH;
        }
        self.prepare_end(next, client_version, next_producer_id, now_ms, nothing_added).map_or_else(EndDecision::Refuse, EndDecision::Write)
    }

    /// AddPartitionsToTxn for this id from producer `producer_id` at `epoch`.
    pub fn add_partitions(&mut self, producer_id: i64, epoch: i16, partitions: &BTreeSet<TxnPartition>, now_ms: i64, client_version: i16) -> AddDecision {
        if producer_id != self.txn.producer_id {
            return AddDecision::Refuse(ResponseError::InvalidProducerIdMapping);
        }
        if epoch != self.txn.producer_epoch {
            return AddDecision::Refuse(ResponseError::ProducerFenced);
        }
        if self.pending.is_some() || matches!(self.txn.state, TxnState::PrepareCommit | TxnState::PrepareAbort) {
            return AddDecision::Refuse(ResponseError::ConcurrentTransactions);
        }
        if self.txn.state == TxnState::Ongoing && partitions.is_subset(&self.txn.partitions) {
            return AddDecision::AlreadyIn;
        }
        self.prepare_add_partitions(partitions, now_ms, client_version).map_or_else(AddDecision::Refuse, AddDecision::Write)
    }
}

#[cfg(test)]
#[path = "metadata_tests.rs"]
mod tests;
