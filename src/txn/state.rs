//! The states of a transaction at its coordinator, as Kafka's `TransactionState` has them: the
//! ids written in `__transaction_state`, the names DescribeTransactions and ListTransactions
//! give, which state may follow which, and in which states an idle transactional id may expire.
//!
//! ```text
//!   Empty ──AddPartitions/AddOffsets──> Ongoing ──EndTxn(commit)──> PrepareCommit ──markers──> CompleteCommit
//!     │                                   │  └────EndTxn(abort)/timeout──> PrepareAbort ──markers──> CompleteAbort
//!     │                                   └──InitProducerId while ongoing──> PrepareEpochFence ──> PrepareAbort
//!     └──EndTxn(abort), transactions v2 (also from CompleteCommit / CompleteAbort)──> PrepareAbort
//!   Empty, CompleteCommit, CompleteAbort ──transactional.id.expiration.ms──> Dead
//! ```

/// A transaction's state at its coordinator.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum TxnState {
    /// No transaction yet, or none since the last one completed.
    Empty,
    /// Partitions (or the group's offsets) have been added; records may be written.
    Ongoing,
    /// The commit is decided and logged; markers are being written.
    PrepareCommit,
    /// The abort is decided and logged; markers are being written.
    PrepareAbort,
    /// Every commit marker is written.
    CompleteCommit,
    /// Every abort marker is written.
    CompleteAbort,
    /// The transactional id expired and is about to be removed.
    Dead,
    /// A newer producer with this transactional id arrived while a transaction was ongoing: the
    /// epoch is being bumped and the ongoing transaction will be aborted.
    PrepareEpochFence,
}

/// Every state, in id order.
pub const ALL: [TxnState; 8] = [
    TxnState::Empty,
    TxnState::Ongoing,
    TxnState::PrepareCommit,
    TxnState::PrepareAbort,
    TxnState::CompleteCommit,
    TxnState::CompleteAbort,
    TxnState::Dead,
    TxnState::PrepareEpochFence,
];

impl TxnState {
    /// The id written in `__transaction_state` (`TransactionStatus`).
    pub fn id(self) -> i8 {
        match self {
            TxnState::Empty => 0,
            TxnState::Ongoing => 1,
            TxnState::PrepareCommit => 2,
            TxnState::PrepareAbort => 3,
            TxnState::CompleteCommit => 4,
            TxnState::CompleteAbort => 5,
            TxnState::Dead => 6,
            TxnState::PrepareEpochFence => 7,
        }
    }

    /// The state with this id, if there is one.
    pub fn from_id(id: i8) -> Option<TxnState> {
        ALL.get(usize::try_from(id).ok()?).copied()
    }

    /// The name DescribeTransactions and ListTransactions give (`kafka-transactions list` shows it).
    pub fn name(self) -> &'static str {
        match self {
            TxnState::Empty => "Empty",
            TxnState::Ongoing => "Ongoing",
            TxnState::PrepareCommit => "PrepareCommit",
            TxnState::PrepareAbort => "PrepareAbort",
            TxnState::CompleteCommit => "CompleteCommit",
            TxnState::CompleteAbort => "CompleteAbort",
            TxnState::Dead => "Dead",
            TxnState::PrepareEpochFence => "PrepareEpochFence",
        }
    }

    /// The state with this name (ListTransactions' state filter), if there is one.
    pub fn from_name(name: &str) -> Option<TxnState> {
        ALL.into_iter().find(|s| s.name() == name)
    }

    /// Whether a transactional id idle in this state may expire (`transactional.id.expiration.ms`).
    pub fn expiration_allowed(self) -> bool {
        matches!(self, TxnState::Empty | TxnState::CompleteCommit | TxnState::CompleteAbort)
    }

    /// Whether a transaction may move from `previous` to this state.
    pub fn may_follow(self, previous: TxnState) -> bool {
        use TxnState::*;
        match self {
            Empty => matches!(previous, Empty | CompleteCommit | CompleteAbort),
            Ongoing => matches!(previous, Ongoing | Empty | CompleteCommit | CompleteAbort),
            PrepareCommit => previous == Ongoing,
            // Transactions v2 lets a client that does not know whether its transaction ended
            // send an abort from any completed state.
            PrepareAbort => matches!(previous, Ongoing | PrepareEpochFence | Empty | CompleteCommit | CompleteAbort),
            CompleteCommit => previous == PrepareCommit,
            CompleteAbort => previous == PrepareAbort,
            Dead => matches!(previous, Empty | CompleteAbort | CompleteCommit),
            PrepareEpochFence => previous == Ongoing,
        }
    }

    /// Whether a transaction in this state is complete: no marker is pending and a new one may
    /// begin.
    pub fn is_complete(self) -> bool {
        matches!(self, TxnState::Empty | TxnState::CompleteCommit | TxnState::CompleteAbort)
    }
}

#[cfg(test)]
mod tests {
    use super::TxnState::*;
    use super::*;

    #[test]
    fn ids_and_names_are_kafkas_and_round_trip() {
        let kafka = [
            (0, "Empty"),
            (1, "Ongoing"),
            (2, "PrepareCommit"),
            (3, "PrepareAbort"),
            (4, "CompleteCommit"),
            (5, "CompleteAbort"),
            (6, "Dead"),
            (7, "PrepareEpochFence"),
        ];
        for (state, (id, name)) in ALL.into_iter().zip(kafka) {
            assert_eq!((state.id(), state.name()), (id, name));
            assert_eq!(TxnState::from_id(id), Some(state));
            assert_eq!(TxnState::from_name(name), Some(state));
        }
        assert_eq!(TxnState::from_id(8), None);
        assert_eq!(TxnState::from_id(-1), None);
        assert_eq!(TxnState::from_name("ongoing"), None);
    }

    #[test]
    fn only_kafkas_transitions_are_allowed() {
        // Kafka's TransactionState.validPreviousStates, state by state.
        let allowed: [(TxnState, &[TxnState]); 8] = [
            (Empty, &[Empty, CompleteCommit, CompleteAbort]),
            (Ongoing, &[Ongoing, Empty, CompleteCommit, CompleteAbort]),
            (PrepareCommit, &[Ongoing]),
            (PrepareAbort, &[Ongoing, PrepareEpochFence, Empty, CompleteCommit, CompleteAbort]),
            (CompleteCommit, &[PrepareCommit]),
            (CompleteAbort, &[PrepareAbort]),
            (Dead, &[Empty, CompleteAbort, CompleteCommit]),
            (PrepareEpochFence, &[Ongoing]),
        ];
        for (to, from) in allowed {
            for previous in ALL {
                assert_eq!(to.may_follow(previous), from.contains(&previous), "{previous:?} -> {to:?}");
            }
        }
    }

    #[test]
    fn only_idle_completed_states_expire() {
        let expiring: Vec<TxnState> = ALL.into_iter().filter(|s| s.expiration_allowed()).collect();
        assert_eq!(expiring, [Empty, CompleteCommit, CompleteAbort]);
        assert_eq!(expiring, ALL.into_iter().filter(|s| s.is_complete()).collect::<Vec<_>>());
    }
}
