//! Tests of the classic group state machine with a fake clock (every call takes `now_ms`).

use std::collections::BTreeSet;

use bytes::Bytes;
use kafka_protocol::ResponseError;
use proptest::prelude::*;

use super::*;
use crate::group::{Completion, Reply};

const SESSION: i32 = 10_000;
const REBALANCE: i32 = 30_000;

fn req(member_id: &str, instance: Option<&str>, protocols: &[(&str, &'static [u8])]) -> JoinRequest {
    JoinRequest {
        member_id: member_id.to_string(),
        instance_id: instance.map(str::to_string),
        client_id: "client".into(),
        client_host: "/127.0.0.1".into(),
        session_timeout_ms: SESSION,
        rebalance_timeout_ms: REBALANCE,
        protocol_type: "consumer".into(),
        protocols: protocols.iter().map(|(n, m)| (n.to_string(), Bytes::from_static(m))).collect(),
        require_known_member_id: true,
    }
}

fn range() -> Vec<(&'static str, &'static [u8])> {
    vec![("range", b"r")]
}

fn join_replies(c: Vec<Completion>) -> Vec<(u64, JoinReply)> {
    c.into_iter()
        .filter_map(|c| match c.reply {
            Reply::Join(j) => Some((c.token, j)),
            _ => None,
        })
        .collect()
}

fn sync_replies(c: Vec<Completion>) -> Vec<(u64, SyncReply)> {
    c.into_iter()
        .filter_map(|c| match c.reply {
            Reply::Sync(s) => Some((c.token, s)),
            _ => None,
        })
        .collect()
}

/// Two-step KIP-394 join: returns the member id; the second request is parked under `token`.
fn join_new(g: &mut ClassicGroup, instance: Option<&str>, token: u64, now: i64) -> String {
    let r = req("", instance, &range());
    if instance.is_some() {
        assert_eq!(g.join(r, token, usize::MAX, now), Outcome::Parked);
        return g.members().find(|m| m.instance_id.as_deref() == instance).unwrap().member_id.clone();
    }
    let Outcome::Now(first) = g.join(r, token, usize::MAX, now) else { panic!("expected MEMBER_ID_REQUIRED") };
    assert_eq!(first.error, Some(ResponseError::MemberIdRequired));
    assert!(first.member_id.starts_with("client-"));
    assert_eq!(g.join(req(&first.member_id, None, &range()), token, usize::MAX, now), Outcome::Parked);
    first.member_id
}

/// A Stable group of `n` dynamic (or static) members at generation 1, at time `now`.
fn stable_group(n: usize, static_members: bool, now: i64) -> (ClassicGroup, Vec<String>) {
    let mut g = ClassicGroup::new("g", 0, now);
    let mut ids = Vec::new();
    for i in 0..n {
        let instance = static_members.then(|| format!("i{i}"));
        ids.push(join_new(&mut g, instance.as_deref(), i as u64 + 1, now));
    }
    // With no initial delay the first member completes generation 1 alone; later members
    // triggered another round. Rejoin everyone until one generation holds all of them.
    let mut replies = join_replies(g.take_completions());
    while g.state() != GroupState::CompletingRebalance || g.member_count() != n || !replies.iter().all(|(_, r)| r.error.is_none()) {
        for (t, id) in ids.iter().enumerate() {
            let _ = g.join(req(id, None, &range()), 100 + t as u64, usize::MAX, now);
        }
        replies = join_replies(g.take_completions());
        if g.state() == GroupState::CompletingRebalance && g.member_count() == n {
            break;
        }
    }
    let leader = g.leader_id().unwrap().to_string();
    let gen = g.generation_id();
    let assignments = ids.iter().map(|id| (id.clone(), Bytes::from(format!("a-{id}")))).collect();
    for id in ids.iter().filter(|id| **id != leader) {
        assert_eq!(g.sync(id, None, gen, None, None, vec![], 200, now), Outcome::Parked);
    }
    assert_eq!(g.sync(&leader, None, gen, Some("consumer"), Some("range"), assignments, 201, now), Outcome::Parked);
    assert_eq!(g.state(), GroupState::Stable);
    g.take_completions();
    (g, ids)
}

#[test]
fn first_member_gets_member_id_required_then_leads_generation_one() {
    let mut g = ClassicGroup::new("g", 0, 0);
    let id = join_new(&mut g, None, 7, 0);
    let replies = join_replies(g.take_completions());
    assert_eq!(replies.len(), 1);
    let (token, r) = &replies[0];
    assert_eq!(*token, 7);
    assert_eq!((r.error, r.generation_id, r.leader.as_str(), r.member_id.as_str()), (None, 1, id.as_str(), id.as_str()));
    assert_eq!(r.protocol_name.as_deref(), Some("range"));
    assert_eq!(r.members.len(), 1, "the leader gets the member list");
    assert_eq!(g.state(), GroupState::CompletingRebalance);
}

#[test]
fn initial_rebalance_delay_waits_for_more_members_and_extends_once_per_arrival() {
    let mut g = ClassicGroup::new("g", 3000, 0);
    let a = join_new(&mut g, None, 1, 0);
    let b = join_new(&mut g, None, 2, 1000);
    assert!(g.take_completions().is_empty());
    g.tick(2999);
    assert!(g.take_completions().is_empty(), "delay not over");
    g.tick(3000); // B arrived during the delay: wait another delay
    assert!(g.take_completions().is_empty());
    g.tick(6000);
    let replies = join_replies(g.take_completions());
    assert_eq!(replies.len(), 2);
    assert!(replies.iter().all(|(_, r)| r.generation_id == 1 && r.error.is_none()));
    let leader = replies.iter().find(|(_, r)| r.member_id == r.leader).unwrap();
    assert_eq!(leader.1.members.len(), 2);
    assert!(replies.iter().filter(|(_, r)| r.member_id != r.leader).all(|(_, r)| r.members.is_empty()));
    assert!([a, b].contains(&leader.1.leader));
}

#[test]
fn leader_sync_distributes_assignments_and_stabilises() {
    let (g, ids) = stable_group(3, false, 0);
    for id in &ids {
        let m = g.members().find(|m| &m.member_id == id).unwrap();
        assert_eq!(m.assignment, Bytes::from(format!("a-{id}")));
    }
    let mut g = g;
    // A late SyncGroup in Stable returns the stored assignment at once.
    let gen = g.generation_id();
    match g.sync(&ids[1], None, gen, None, None, vec![], 9, 0) {
        Outcome::Now(r) => assert_eq!(r.assignment, Bytes::from(format!("a-{}", ids[1]))),
        other => panic!("{other:?}"),
    }
}

#[test]
fn heartbeat_and_sync_errors_follow_kafka() {
    let (mut g, ids) = stable_group(2, false, 0);
    let gen = g.generation_id();
    let cases: Vec<(&str, i32, Option<ResponseError>)> = vec![
        ("nobody", gen, Some(ResponseError::UnknownMemberId)),
        (&ids[0], gen + 1, Some(ResponseError::IllegalGeneration)),
        (&ids[0], gen, None),
    ];
    for (member, generation, want) in cases {
        assert_eq!(g.heartbeat(member, None, generation, 1), want, "{member} gen {generation}");
    }
    assert_eq!(g.sync(&ids[0], None, gen - 1, None, None, vec![], 1, 1), Outcome::Now(SyncReply::error(ResponseError::IllegalGeneration)));
    assert_eq!(
        g.sync(&ids[0], None, gen, Some("connect"), None, vec![], 1, 1),
        Outcome::Now(SyncReply::error(ResponseError::InconsistentGroupProtocol))
    );
}

#[test]
fn expired_session_removes_member_and_the_rest_rebalance() {
    let (mut g, ids) = stable_group(2, false, 0);
    let gen = g.generation_id();
    // Only ids[0] keeps heartbeating.
    for t in (1000..=9000).step_by(1000) {
        assert_eq!(g.heartbeat(&ids[0], None, gen, t), None);
        g.tick(t);
    }
    g.tick(SESSION as i64);
    assert_eq!(g.state(), GroupState::PreparingRebalance);
    assert_eq!(g.member_count(), 1);
    assert_eq!(g.heartbeat(&ids[0], None, gen, 10_001), Some(ResponseError::RebalanceInProgress));
    assert_eq!(g.join(req(&ids[0], None, &range()), 50, usize::MAX, 10_002), Outcome::Parked);
    let replies = join_replies(g.take_completions());
    assert_eq!(replies.len(), 1, "the only remaining member completes the join at once");
    assert_eq!(replies[0].1.generation_id, gen + 1);
    assert_eq!(replies[0].1.leader, ids[0]);
}

#[test]
fn static_member_restarting_within_session_timeout_causes_no_rebalance() {
    let (mut g, ids) = stable_group(2, true, 0);
    let gen = g.generation_id();
    let old = ids[1].clone();
    let before = g.members().find(|m| m.member_id == old).unwrap().assignment.clone();
    let Outcome::Now(r) = g.join(req("", Some("i1"), &range()), 60, usize::MAX, 5000) else { panic!("must answer at once") };
    assert_eq!(r.error, None);
    assert_eq!(r.generation_id, gen, "no new generation");
    assert_ne!(r.member_id, old);
    assert_eq!(g.state(), GroupState::Stable);
    // The old incarnation is fenced everywhere.
    assert_eq!(g.heartbeat(&old, Some("i1"), gen, 5001), Some(ResponseError::FencedInstanceId));
    assert_eq!(g.leave(&old, Some("i1"), 5001), Some(ResponseError::FencedInstanceId));
    match g.sync(&r.member_id, Some("i1"), gen, None, None, vec![], 61, 5002) {
        Outcome::Now(s) => assert_eq!(s.assignment, before, "keeps its assignment"),
        other => panic!("{other:?}"),
    }
    assert!(g.take_metadata_changed(), "the new member id must be persisted");
}

#[test]
fn static_member_rejoining_with_other_protocols_triggers_a_rebalance() {
    let (mut g, _) = stable_group(2, true, 0);
    let protocols = vec![("range", &b"r"[..]), ("roundrobin", &b"x"[..])];
    assert_eq!(g.join(req("", Some("i0"), &protocols), 70, usize::MAX, 100), Outcome::Parked);
    assert_eq!(g.state(), GroupState::PreparingRebalance);
}

#[test]
fn inconsistent_protocols_and_full_groups_are_refused() {
    let mut g = ClassicGroup::new("g", 0, 0);
    let Outcome::Now(r) = g.join(req("", None, &[]), 1, usize::MAX, 0) else { panic!() };
    assert_eq!(r.error, Some(ResponseError::InconsistentGroupProtocol), "first member needs protocols");
    let (mut g, _) = stable_group(2, false, 0);
    let Outcome::Now(r) = g.join(req("", None, &[("roundrobin", b"x")]), 1, usize::MAX, 0) else { panic!() };
    assert_eq!(r.error, Some(ResponseError::InconsistentGroupProtocol), "no protocol in common");
    let Outcome::Now(r) = g.join(req("", None, &range()), 1, 2, 0) else { panic!() };
    assert_eq!(r.error, Some(ResponseError::GroupMaxSizeReached));
}

#[test]
fn batch_leave_reports_per_member_and_last_leave_empties_the_group() {
    let (mut g, ids) = stable_group(2, false, 0);
    let gen = g.generation_id();
    assert_eq!(g.leave("ghost", None, 1), Some(ResponseError::UnknownMemberId));
    assert_eq!(g.leave(&ids[0], None, 1), None);
    assert_eq!(g.state(), GroupState::PreparingRebalance);
    assert_eq!(g.leave(&ids[1], None, 2), None);
    assert_eq!(g.state(), GroupState::Empty);
    assert_eq!(g.generation_id(), gen + 1, "completing the join with nobody still bumps the generation");
    assert!(g.take_metadata_changed());
}

#[test]
fn members_that_never_sync_are_removed_after_the_rebalance_timeout() {
    let mut g = ClassicGroup::new("g", 0, 0);
    let a = join_new(&mut g, None, 1, 0);
    g.take_completions();
    let b = join_new(&mut g, None, 2, 0);
    assert_eq!(g.join(req(&a, None, &range()), 3, usize::MAX, 0), Outcome::Parked);
    assert_eq!(g.state(), GroupState::CompletingRebalance);
    g.take_completions();
    let gen = g.generation_id();
    let leader = g.leader_id().unwrap().to_string();
    let follower = if leader == a { b } else { a };
    // The follower syncs and waits; the leader never sends its assignment.
    assert_eq!(g.sync(&follower, None, gen, None, None, vec![], 4, 100), Outcome::Parked);
    for t in (1000..REBALANCE as i64).step_by(1000) {
        assert_eq!(g.heartbeat(&leader, None, gen, t), None, "heartbeats alone do not count as syncing");
        g.tick(t);
    }
    g.tick(REBALANCE as i64);
    assert_eq!(g.state(), GroupState::PreparingRebalance);
    assert_eq!(g.members().map(|m| m.member_id.clone()).collect::<Vec<_>>(), vec![follower]);
    let replies = sync_replies(g.take_completions());
    assert_eq!(replies, vec![(4, SyncReply::error(ResponseError::RebalanceInProgress))]);
}

#[test]
fn offset_commit_validation_matches_kafka() {
    let (mut g, ids) = stable_group(1, false, 0);
    let gen = g.generation_id();
    type Case<'a> = (&'a str, Option<&'a str>, i32, Result<(), ResponseError>);
    let cases: Vec<Case> = vec![
        (&ids[0], None, gen, Ok(())),
        (&ids[0], None, gen + 1, Err(ResponseError::IllegalGeneration)),
        ("ghost", None, gen, Err(ResponseError::UnknownMemberId)),
        ("", None, -1, Err(ResponseError::UnknownMemberId)),
    ];
    for (m, i, gen, want) in cases {
        assert_eq!(g.validate_offset_commit(m, i, gen, 1), want, "{m} {gen}");
    }
    let mut empty = ClassicGroup::new("e", 0, 0);
    assert_eq!(empty.validate_offset_commit("", None, -1, 0), Ok(()), "admin commits to an Empty group");
}

#[test]
fn subscription_topics_are_read_from_consumer_metadata() {
    // version 1 | 2 topics "a", "bc" | user data ...
    let data = [0, 1, 0, 0, 0, 2, 0, 1, b'a', 0, 2, b'b', b'c', 0, 0, 0, 0];
    assert_eq!(parse_subscription_topics(&data), vec!["a".to_string(), "bc".to_string()]);
    assert!(parse_subscription_topics(&[0, 1, 0x7f, 0xff, 0xff, 0xff, 0, 9]).is_empty());
}

#[derive(Debug, Clone)]
enum Op {
    Join(usize),
    Rejoin(usize),
    Sync(usize),
    Heartbeat(usize),
    Leave(usize),
    Advance(i64),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (0..4usize).prop_map(Op::Join),
        (0..4usize).prop_map(Op::Rejoin),
        (0..4usize).prop_map(Op::Sync),
        (0..4usize).prop_map(Op::Heartbeat),
        (0..4usize).prop_map(Op::Leave),
        (1..20_000i64).prop_map(Op::Advance),
    ]
}

proptest! {
    /// Any interleaving keeps the invariants, answers every parked request exactly once, and
    /// a group left alone long enough answers everything and empties out.
    #[test]
    fn random_interleavings_keep_invariants(ops in proptest::collection::vec(op(), 1..60)) {
        let mut g = ClassicGroup::new("g", 1000, 0);
        let mut now = 0i64;
        let mut token = 0u64;
        let mut parked: BTreeSet<u64> = BTreeSet::new();
        let mut ids: Vec<Option<String>> = vec![None; 4];
        let mut last_gen = 0;
        let instance = |i: usize| if i % 2 == 0 { Some(format!("static-{i}")) } else { None };
        for op in ops {
            token += 1;
            match op {
                Op::Join(i) | Op::Rejoin(i) => {
                    let member = if matches!(op, Op::Rejoin(_)) { ids[i].clone().unwrap_or_default() } else { String::new() };
                    let inst = instance(i);
                    match g.join(req(&member, inst.as_deref(), &range()), token, 3, now) {
                        Outcome::Parked => { parked.insert(token); }
                        Outcome::Now(r) => if r.error.is_none() || r.error == Some(ResponseError::MemberIdRequired) { ids[i] = Some(r.member_id) },
                    }
                    if let Some(m) = g.members().find(|m| m.instance_id.is_some() && m.instance_id == inst) { ids[i] = Some(m.member_id.clone()); }
                }
                Op::Sync(i) => {
                    let gen = g.generation_id();
                    let m = ids[i].clone().unwrap_or_default();
                    if let Outcome::Parked = g.sync(&m, instance(i).as_deref(), gen, None, None, vec![(m.clone(), Bytes::from_static(b"x"))], token, now) {
                        parked.insert(token);
                    }
                }
                Op::Heartbeat(i) => { let gen = g.generation_id(); let _ = g.heartbeat(&ids[i].clone().unwrap_or_default(), None, gen, now); }
                Op::Leave(i) => { let _ = g.leave(&ids[i].clone().unwrap_or_default(), None, now); }
                Op::Advance(ms) => { now += ms; g.tick(now); }
            }
            for c in g.take_completions() {
                prop_assert!(parked.remove(&c.token), "token {} answered twice or never parked", c.token);
            }
            prop_assert!(g.generation_id() >= last_gen);
            last_gen = g.generation_id();
            prop_assert!(g.member_count() <= 3);
            if matches!(g.state(), GroupState::Stable | GroupState::CompletingRebalance) {
                let p = g.protocol_name().map(str::to_string);
                prop_assert!(p.is_some());
                prop_assert!(g.members().all(|m| m.protocols.iter().any(|(n, _)| Some(n) == p.as_ref())));
                prop_assert!(g.leader_id().is_some_and(|l| g.members().any(|m| m.member_id == l)));
            }
            let statics: Vec<_> = g.members().filter_map(|m| m.instance_id.clone()).collect();
            let unique: BTreeSet<_> = statics.iter().collect();
            prop_assert_eq!(statics.len(), unique.len());
        }
        for _ in 0..10 {
            now += 60_000;
            g.tick(now);
            for c in g.take_completions() {
                prop_assert!(parked.remove(&c.token));
            }
        }
        prop_assert!(parked.is_empty(), "unanswered: {:?}", parked);
        prop_assert_eq!(g.member_count(), 0);
        prop_assert_eq!(g.state(), GroupState::Empty);
    }
}
