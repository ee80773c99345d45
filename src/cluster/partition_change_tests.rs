//! The builder's rules, one scenario each (the ELR cases as Kafka's PartitionChangeBuilder
//! and KIP-966 describe them).

use super::*;

const RECOVERED: i8 = 0;

fn part(isr: &[i32], leader: i32, elr: &[i32], last_known: &[i32]) -> PartitionState {
    PartitionState {
        replicas: vec![1, 2, 3],
        isr: isr.to_vec(),
        removing_replicas: vec![],
        adding_replicas: vec![],
        leader,
        leader_recovery_state: RECOVERED,
        leader_epoch: 5,
        partition_epoch: 9,
        eligible_leader_replicas: elr.to_vec(),
        last_known_elr: last_known.to_vec(),
    }
}

/// (isr, leader, elr, last known elr, recovery state) of the change; `None` fields unchanged.
type Seen = (Option<Vec<i32>>, i32, Option<Vec<i32>>, Option<Vec<i32>>, i8);

fn seen(c: Option<PartitionChange>) -> Option<Seen> {
    c.map(|c| (c.isr, c.leader, c.eligible_leader_replicas, c.last_known_elr, c.leader_recovery_state))
}

fn only(ids: &'static [i32]) -> impl Fn(i32) -> bool {
    move |r| ids.contains(&r)
}

#[test]
fn an_isr_falling_below_min_isr_puts_the_members_it_loses_in_the_elr() {
    let p = part(&[1, 2], 1, &[], &[]);
    let ok = only(&[1, 2, 3]);
    let c = Builder::new(&p, Uuid::nil(), 0, &ok, true, 2).isr(vec![1]).build();
    assert_eq!(seen(c), Some((Some(vec![1]), -2, Some(vec![2]), None, -1)));
    // Without ELR only the ISR changes.
    let c = Builder::new(&p, Uuid::nil(), 0, &ok, false, 2).isr(vec![1]).build();
    assert_eq!(seen(c), Some((Some(vec![1]), -2, None, None, -1)));
}

#[test]
fn an_isr_back_at_min_isr_clears_the_elr() {
    let p = part(&[1], 1, &[2], &[]);
    let ok = only(&[1, 2, 3]);
    let c = Builder::new(&p, Uuid::nil(), 0, &ok, true, 2).isr(vec![1, 3]).build();
    assert_eq!(seen(c), Some((Some(vec![1, 3]), -2, Some(vec![]), None, -1)));
}

#[test]
fn the_last_isr_member_fenced_leaves_an_empty_isr_its_elr_and_itself_as_last_known_leader() {
    let p = part(&[1], 1, &[2], &[]);
    let none = only(&[]);
    let c = Builder::new(&p, Uuid::nil(), 0, &none, true, 2).isr(vec![]).build();
    assert_eq!(seen(c), Some((Some(vec![]), -1, Some(vec![1, 2]), Some(vec![1]), -1)));
    // Without ELR the last member stays in the ISR and nothing leads.
    let c = Builder::new(&p, Uuid::nil(), 0, &none, false, 2).isr(vec![]).build();
    assert_eq!(seen(c), Some((None, -1, Some(vec![]), None, -1)));
}

#[test]
fn a_single_replica_shut_down_is_its_own_elr_as_on_kafka() {
    // What test_metadata_log.py reads from Kafka 4.4 after a clean stop: ISR [], leader -1, ELR [1].
    let mut p = part(&[1], 1, &[], &[]);
    p.replicas = vec![1];
    let none = only(&[]);
    let c = Builder::new(&p, Uuid::nil(), 0, &none, true, 1).isr(vec![]).build();
    assert_eq!(seen(c), Some((Some(vec![]), -1, Some(vec![1]), Some(vec![1]), -1)));
}

#[test]
fn with_the_isr_empty_a_live_elr_member_leads_and_becomes_the_isr() {
    let p = part(&[], -1, &[1, 2], &[1]);
    let two = only(&[2]);
    let c = Builder::new(&p, Uuid::nil(), 0, &two, true, 2).build();
    assert_eq!(seen(c), Some((Some(vec![2]), 2, Some(vec![1]), Some(vec![]), -1)));
    // A replica outside the ELR does not.
    let three = only(&[3]);
    assert_eq!(seen(Builder::new(&p, Uuid::nil(), 0, &three, true, 2).build()), None);
}

#[test]
fn an_unclean_shutdown_takes_the_replica_out_of_the_elr() {
    let p = part(&[], -1, &[1, 2], &[1]);
    let none = only(&[]);
    let c = Builder::new(&p, Uuid::nil(), 0, &none, true, 2).unclean_shutdown(vec![1]).build();
    assert_eq!(seen(c), Some((None, -2, Some(vec![2]), None, -1)));
    // A member of the ISR too: out of both.
    let p = part(&[1], 1, &[2], &[]);
    let two = only(&[2]);
    let c = Builder::new(&p, Uuid::nil(), 0, &two, true, 2).isr(vec![]).unclean_shutdown(vec![1]).build();
    assert_eq!(seen(c), Some((Some(vec![2]), 2, Some(vec![]), None, -1)));
}

#[test]
fn with_isr_and_elr_empty_the_last_known_leader_leads_again_uncleanly() {
    let p = part(&[], -1, &[], &[1]);
    let one = only(&[1]);
    let c = Builder::new(&p, Uuid::nil(), 0, &one, true, 2).build();
    assert_eq!(seen(c), Some((Some(vec![1]), 1, None, Some(vec![]), RECOVERING)));
    // Not while it is away.
    let two = only(&[2]);
    assert_eq!(seen(Builder::new(&p, Uuid::nil(), 0, &two, true, 2).build()), None);
}

#[test]
fn an_unclean_election_clears_the_elr() {
    let p = part(&[], -1, &[2], &[1]);
    let three = only(&[3]);
    let c = Builder::new(&p, Uuid::nil(), 0, &three, true, 2).election(Election::Unclean).build();
    assert_eq!(seen(c), Some((Some(vec![3]), 3, Some(vec![]), Some(vec![]), RECOVERING)));
}

#[test]
fn a_leader_that_may_stay_stays_and_nothing_changing_is_no_record() {
    let p = part(&[1, 2, 3], 1, &[], &[]);
    let ok = only(&[1, 2, 3]);
    assert_eq!(seen(Builder::new(&p, Uuid::nil(), 0, &ok, true, 2).build()), None);
    assert_eq!(seen(Builder::new(&p, Uuid::nil(), 0, &ok, true, 2).isr(vec![1, 2, 3]).build()), None);
    // A leader that may not stay hands over to the first ISR member that may lead.
    let not_one = only(&[2, 3]);
    let c = Builder::new(&p, Uuid::nil(), 0, &not_one, true, 2).isr(vec![2, 3]).build();
    assert_eq!(seen(c), Some((Some(vec![2, 3]), 2, None, None, -1)));
    // A preferred election moves it back to the first replica.
    let p = part(&[1, 2, 3], 2, &[], &[]);
    let c = Builder::new(&p, Uuid::nil(), 0, &ok, true, 2).election(Election::Preferred).build();
    assert_eq!(seen(c), Some((None, 1, None, None, -1)));
}

#[test]
fn a_leader_reporting_recovered_clears_recovering() {
    let mut p = part(&[1], 1, &[], &[]);
    p.leader_recovery_state = RECOVERING;
    let ok = only(&[1, 2, 3]);
    let c = Builder::new(&p, Uuid::nil(), 0, &ok, true, 1).recovery_state(RECOVERED).build();
    assert_eq!(seen(c), Some((None, -2, None, None, RECOVERED)));
}
