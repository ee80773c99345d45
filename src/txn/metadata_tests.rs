use std::collections::BTreeSet;

use kafka_protocol::ResponseError;

use super::*;
use crate::txn::records::{decode_value, encode_value};

const TIMEOUT: i32 = 60_000;

fn parts(list: &[(&str, i32)]) -> BTreeSet<TxnPartition> {
    list.iter().map(|(t, p)| (t.to_string(), *p)).collect()
}

/// Applies a decision's transition as the driver does once its record is written.
fn written(meta: &mut TxnMetadata, decision: InitDecision) -> Txn {
    let InitDecision::Write(t) = decision else { panic!("not a write: {decision:?}") };
    meta.complete(&t).unwrap();
    t
}

fn initialized(producer_id: i64) -> TxnMetadata {
    let mut meta = TxnMetadata::new("tx", producer_id, TIMEOUT, 0);
    let d = meta.init_producer_id(TIMEOUT, None, || unreachable!(), 1);
    written(&mut meta, d);
    meta
}

fn ongoing(producer_id: i64) -> TxnMetadata {
    let mut meta = initialized(producer_id);
    let AddDecision::Write(t) = meta.add_partitions(producer_id, 0, &parts(&[("a", 0)]), 10, 2) else { panic!() };
    meta.complete(&t).unwrap();
    meta
}

#[test]
fn a_new_id_gets_epoch_0_then_each_init_bumps_it() {
    let mut meta = initialized(7);
    assert_eq!((meta.txn.producer_id, meta.txn.producer_epoch, meta.txn.state), (7, 0, TxnState::Empty));
    let d = meta.init_producer_id(TIMEOUT, None, || unreachable!(), 2);
    written(&mut meta, d);
    assert_eq!((meta.txn.producer_id, meta.txn.producer_epoch, meta.txn.last_producer_epoch), (7, 1, NO_PRODUCER_EPOCH));
}

#[test]
fn a_recovering_producer_is_bumped_its_retry_answered_again_and_a_stale_one_fenced() {
    let mut meta = initialized(7);
    // KIP-360: the producer gives its current id and epoch.
    let d = meta.init_producer_id(TIMEOUT, Some((7, 0)), || unreachable!(), 2);
    written(&mut meta, d);
    assert_eq!((meta.txn.producer_epoch, meta.txn.last_producer_epoch), (1, 0));
    // Its answer was lost; it asks again with the epoch it had: the same epoch, not bumped.
    let d = meta.init_producer_id(TIMEOUT, Some((7, 0)), || unreachable!(), 3);
    written(&mut meta, d);
    assert_eq!((meta.txn.producer_epoch, meta.txn.last_producer_epoch), (1, 0));
    // An epoch that is neither the current nor the one before it is fenced.
    assert_eq!(meta.init_producer_id(TIMEOUT, Some((7, 5)), || unreachable!(), 4), InitDecision::Refuse(ResponseError::ProducerFenced));
    // A new producer takes the id over (no epoch given): the last epoch is forgotten, so the
    // old producer, and one with another producer id, are fenced; nothing is prepared.
    let d = meta.init_producer_id(TIMEOUT, None, || unreachable!(), 5);
    written(&mut meta, d);
    assert_eq!((meta.txn.producer_epoch, meta.txn.last_producer_epoch), (2, NO_PRODUCER_EPOCH));
    assert_eq!(meta.init_producer_id(TIMEOUT, Some((7, 1)), || unreachable!(), 6), InitDecision::Refuse(ResponseError::ProducerFenced));
    assert_eq!(meta.init_producer_id(TIMEOUT, Some((8, 2)), || unreachable!(), 6), InitDecision::Refuse(ResponseError::ProducerFenced));
    assert_eq!(meta.pending(), None);
}

#[test]
fn an_id_whose_epochs_ran_out_gets_a_new_producer_id_at_epoch_0() {
    let mut meta = initialized(7);
    meta.txn.producer_epoch = i16::MAX - 1;
    let mut recovering = meta.clone();
    let d = meta.init_producer_id(TIMEOUT, None, || 8, 2);
    let t = written(&mut meta, d);
    assert_eq!((t.producer_id, t.previous_producer_id, t.producer_epoch), (8, 7, 0));
    assert_eq!((meta.txn.producer_id, meta.txn.previous_producer_id, meta.txn.producer_epoch), (8, 7, 0));
    // The producer that had the exhausted epoch was replaced by a new one: it is fenced.
    assert_eq!(meta.init_producer_id(TIMEOUT, Some((7, i16::MAX - 1)), || unreachable!(), 3), InitDecision::Refuse(ResponseError::ProducerFenced));
    // A recovering producer's own rotation keeps its epoch, so its retry (the answer was lost)
    // gets the new producer id and epoch again.
    let d = recovering.init_producer_id(TIMEOUT, Some((7, i16::MAX - 1)), || 9, 2);
    written(&mut recovering, d);
    assert_eq!((recovering.txn.producer_id, recovering.txn.producer_epoch, recovering.txn.last_producer_epoch), (9, 0, i16::MAX - 1));
    let d = recovering.init_producer_id(TIMEOUT, Some((7, i16::MAX - 1)), || unreachable!(), 3);
    written(&mut recovering, d);
    assert_eq!((recovering.txn.producer_id, recovering.txn.producer_epoch), (9, 0));
}

#[test]
fn init_while_a_transaction_is_ongoing_aborts_it_at_a_fenced_epoch() {
    let mut meta = ongoing(7);
    let InitDecision::FenceAndAbort(fenced) = meta.init_producer_id(TIMEOUT, None, || unreachable!(), 20) else { panic!() };
    assert_eq!(fenced, 1);
    // The old producer's commit meanwhile is not taken.
    assert_eq!(meta.end_txn(7, 0, true, true, 2, || unreachable!(), 21), EndDecision::Refuse(ResponseError::ConcurrentTransactions));
    // The coordinator's abort carries the fenced epoch; its write fails.
    let EndDecision::Write(abort) = meta.end_txn(7, fenced, false, false, 2, || unreachable!(), 21) else { panic!() };
    assert_eq!((abort.state, abort.producer_epoch), (TxnState::PrepareAbort, 2));
    meta.abandon();
    // The next fence does not bump again: the bumped epoch was never handed out.
    let InitDecision::FenceAndAbort(again) = meta.init_producer_id(TIMEOUT, None, || unreachable!(), 22) else { panic!() };
    assert_eq!(again, 1);
    let EndDecision::Write(abort) = meta.end_txn(7, again, false, false, 2, || unreachable!(), 23) else { panic!() };
    meta.complete(&abort).unwrap();
    // The old producer, at epoch 0, is fenced from now on.
    assert_eq!(meta.end_txn(7, 0, false, true, 2, || unreachable!(), 24), EndDecision::Refuse(ResponseError::ProducerFenced));
}

#[test]
fn a_v2_commit_bumps_the_epoch_and_its_retries_are_answered_as_kafka_does() {
    let mut meta = ongoing(7);
    let EndDecision::Write(t) = meta.end_txn(7, 0, true, true, 2, || unreachable!(), 30) else { panic!() };
    assert_eq!((t.state, t.producer_epoch), (TxnState::PrepareCommit, 1));
    meta.complete(&t).unwrap();
    // A retry while the markers are written: CONCURRENT_TRANSACTIONS; an abort now: INVALID_TXN_STATE.
    assert_eq!(meta.end_txn(7, 0, true, true, 2, || unreachable!(), 31), EndDecision::Refuse(ResponseError::ConcurrentTransactions));
    assert_eq!(meta.end_txn(7, 0, false, true, 2, || unreachable!(), 31), EndDecision::Refuse(ResponseError::InvalidTxnState));
    let t = meta.prepare_complete(32).unwrap();
    meta.complete(&t).unwrap();
    // Once complete, the retry is answered NONE; the old epoch cannot start anything.
    assert_eq!(meta.end_txn(7, 0, true, true, 2, || unreachable!(), 33), EndDecision::Done);
    assert_eq!(meta.end_txn(7, 1, true, true, 2, || unreachable!(), 33), EndDecision::Refuse(ResponseError::ProducerFenced));
    // Another producer id is not this transactional id's.
    assert_eq!(meta.end_txn(8, 1, false, true, 2, || unreachable!(), 33), EndDecision::Refuse(ResponseError::InvalidProducerIdMapping));
}

#[test]
fn a_v2_client_may_abort_a_transaction_that_never_began_a_v1_client_may_not() {
    let mut meta = initialized(7);
    assert_eq!(meta.end_txn(7, 0, false, true, 1, || unreachable!(), 5), EndDecision::Refuse(ResponseError::InvalidTxnState));
    assert_eq!(meta.end_txn(7, 0, true, true, 2, || unreachable!(), 5), EndDecision::Refuse(ResponseError::InvalidTxnState));
    let EndDecision::Write(t) = meta.end_txn(7, 0, false, true, 2, || unreachable!(), 5) else { panic!() };
    assert_eq!((t.state, t.start_ms, t.producer_epoch), (TxnState::PrepareAbort, 5, 1));
}

#[test]
fn a_v1_end_keeps_the_epoch_and_a_completed_one_is_answered_again() {
    let mut meta = initialized(7);
    let AddDecision::Write(t) = meta.add_partitions(7, 0, &parts(&[("a", 0)]), 10, 1) else { panic!() };
    meta.complete(&t).unwrap();
    assert_eq!(meta.end_txn(7, 1, false, true, 1, || unreachable!(), 11), EndDecision::Refuse(ResponseError::ProducerFenced));
    let EndDecision::Write(t) = meta.end_txn(7, 0, false, true, 1, || unreachable!(), 11) else { panic!() };
    assert_eq!(t.producer_epoch, 0);
    meta.complete(&t).unwrap();
    let t = meta.prepare_complete(12).unwrap();
    meta.complete(&t).unwrap();
    assert_eq!(meta.end_txn(7, 0, false, true, 1, || unreachable!(), 13), EndDecision::Done);
    assert_eq!(meta.end_txn(7, 0, true, true, 1, || unreachable!(), 13), EndDecision::Refuse(ResponseError::InvalidTxnState));
}

#[test]
fn a_v2_end_that_uses_the_last_epoch_hands_out_the_next_producer_id() {
    let mut meta = ongoing(7);
    meta.txn.producer_epoch = i16::MAX - 1;
    let EndDecision::Write(t) = meta.end_txn(7, i16::MAX - 1, true, true, 2, || 9, 40) else { panic!() };
    assert_eq!((t.producer_epoch, t.next_producer_id), (i16::MAX, 9));
    meta.complete(&t).unwrap();
    let t = meta.prepare_complete(41).unwrap();
    meta.complete(&t).unwrap();
    assert_eq!((meta.txn.producer_id, meta.txn.producer_epoch, meta.txn.previous_producer_id), (9, 0, 7));
    // The client's retry, with the old id at the last epoch, is the same end: NONE.
    assert_eq!(meta.end_txn(7, i16::MAX - 1, true, true, 2, || unreachable!(), 42), EndDecision::Done);
}

#[test]
fn one_transition_at_a_time() {
    let mut meta = initialized(7);
    let InitDecision::Write(_) = meta.init_producer_id(TIMEOUT, None, || unreachable!(), 2) else { panic!() };
    assert_eq!(meta.pending(), Some(TxnState::Empty));
    assert_eq!(meta.init_producer_id(TIMEOUT, None, || unreachable!(), 3), InitDecision::Refuse(ResponseError::ConcurrentTransactions));
    assert_eq!(meta.add_partitions(7, 0, &parts(&[("a", 0)]), 3, 2), AddDecision::Refuse(ResponseError::ConcurrentTransactions));
}

#[test]
fn adding_partitions_checks_the_producer_then_begins_or_extends_the_transaction() {
    let mut meta = initialized(7);
    assert_eq!(meta.add_partitions(8, 0, &parts(&[("a", 0)]), 5, 2), AddDecision::Refuse(ResponseError::InvalidProducerIdMapping));
    assert_eq!(meta.add_partitions(7, 1, &parts(&[("a", 0)]), 5, 2), AddDecision::Refuse(ResponseError::ProducerFenced));
    let AddDecision::Write(t) = meta.add_partitions(7, 0, &parts(&[("a", 0)]), 5, 2) else { panic!() };
    assert_eq!((t.state, t.start_ms), (TxnState::Ongoing, 5));
    meta.complete(&t).unwrap();
    assert_eq!(meta.add_partitions(7, 0, &parts(&[("a", 0)]), 6, 2), AddDecision::AlreadyIn);
    let AddDecision::Write(t) = meta.add_partitions(7, 0, &parts(&[("b", 1)]), 7, 2) else { panic!() };
    assert_eq!(t.start_ms, 5, "the transaction began with its first partition");
    assert_eq!(t.partitions, parts(&[("a", 0), ("b", 1)]));
}

#[test]
fn transitions_kafka_does_not_allow_are_refused_and_prepare_nothing() {
    let mut meta = initialized(7);
    // Commit with nothing begun.
    assert_eq!(meta.prepare_end(TxnState::PrepareCommit, 2, NO_PRODUCER_ID, 5, true), Err(ResponseError::InvalidTxnState));
    assert_eq!(meta.pending(), None);
    // A v2 abort of nothing is allowed (the client may not know whether its transaction ended).
    assert!(meta.prepare_end(TxnState::PrepareAbort, 2, NO_PRODUCER_ID, 5, true).is_ok());
    // Completing a transition that is not the pending one changes nothing.
    let mut other = initialized(7);
    let wrong = other.prepare_dead().unwrap();
    let before = meta.clone();
    assert_eq!(meta.complete(&wrong), Err(ResponseError::InvalidTxnState));
    assert_eq!(meta, before);
}

#[test]
fn init_checks_the_id_and_the_timeout_first() {
    assert_eq!(check_init("", 1000, 900_000), Err(ResponseError::InvalidRequest));
    assert_eq!(check_init("tx", 900_001, 900_000), Err(ResponseError::InvalidTransactionTimeout));
    assert_eq!(check_init("tx", 0, 900_000), Err(ResponseError::InvalidTransactionTimeout));
    assert_eq!(check_init("tx", 900_000, 900_000), Ok(()));
}

#[test]
fn a_written_transition_loads_back_as_the_same_state() {
    let mut meta = ongoing(7);
    let AddDecision::Write(t) = meta.add_partitions(7, 0, &parts(&[("b", 3), ("b", 1)]), 50, 2) else { panic!() };
    meta.complete(&t).unwrap();
    let loaded = TxnMetadata::from_value("tx", &decode_value(&encode_value(&t.to_value(), 1)).unwrap());
    assert_eq!(
        (loaded.txn.producer_id, loaded.txn.producer_epoch, loaded.txn.state, &loaded.txn.partitions, loaded.txn.start_ms, loaded.txn.client_version),
        (meta.txn.producer_id, meta.txn.producer_epoch, meta.txn.state, &meta.txn.partitions, meta.txn.start_ms, meta.txn.client_version)
    );
}
