//! Tests of the coordinator core: offsets, persistence records, replay, expiry, deletion.

use bytes::Bytes;
use kafka_protocol::ResponseError;

use super::*;
use crate::group::classic::{JoinRequest, Outcome};

fn config() -> GroupConfig {
    GroupConfig { initial_rebalance_delay_ms: 0, offsets_retention_ms: 60_000, ..GroupConfig::default() }
}

fn commit(topic: &str, partition: i32, offset: i64) -> OffsetCommit {
    OffsetCommit { topic: topic.into(), partition, offset, leader_epoch: 3, metadata: Some("meta".into()) }
}

fn join_req(member: &str) -> JoinRequest {
    JoinRequest {
        member_id: member.into(),
        client_id: "c".into(),
        session_timeout_ms: 10_000,
        rebalance_timeout_ms: 10_000,
        protocol_type: "consumer".into(),
        protocols: vec![("range".into(), Bytes::from_static(b"m"))],
        ..Default::default()
    }
}

#[test]
fn admin_commit_creates_an_empty_group_and_fetch_returns_it() {
    let mut c = GroupCoordinator::new(config());
    assert_eq!(c.commit_offsets("g", "", None, -1, vec![commit("t", 0, 5), commit("t", 1, 7)], 100), Ok(vec![None, None]));
    let (records, _) = c.drain();
    assert_eq!(records.len(), 2);
    let got = c.fetch_offsets("g", Some(vec![("t".into(), 0), ("t".into(), 9)]));
    assert_eq!(got[0].2.as_ref().map(|v| (v.offset, v.leader_epoch, v.metadata.as_str())), Some((5, 3, "meta")));
    assert_eq!(got[1].2, None, "no commit: offset -1 without error");
    assert_eq!(c.fetch_offsets("g", None).len(), 2);
    assert!(c.fetch_offsets("nobody", None).is_empty());
}

#[test]
fn commits_are_validated_before_anything_is_stored() {
    let mut c = GroupCoordinator::new(config());
    assert_eq!(c.commit_offsets("", "", None, -1, vec![commit("t", 0, 1)], 0), Err(ResponseError::InvalidGroupId));
    assert_eq!(c.commit_offsets("g", "m", None, 1, vec![commit("t", 0, 1)], 0), Err(ResponseError::UnknownMemberId));
    let big = OffsetCommit { metadata: Some("x".repeat(5000)), ..commit("t", 0, 1) };
    assert_eq!(c.commit_offsets("g", "", None, -1, vec![big], 0), Ok(vec![Some(ResponseError::OffsetMetadataTooLarge)]));
    assert!(c.fetch_offsets("g", None).is_empty());
}

#[test]
fn session_timeout_outside_the_broker_bounds_is_refused() {
    let mut c = GroupCoordinator::new(config());
    let r = JoinRequest { session_timeout_ms: 10, ..join_req("") };
    match c.join("g", r, 1, 0) {
        Outcome::Now(r) => assert_eq!(r.error, Some(ResponseError::InvalidSessionTimeout)),
        other => panic!("{other:?}"),
    }
    match c.join("g", join_req("stranger"), 1, 0) {
        Outcome::Now(r) => assert_eq!(r.error, Some(ResponseError::UnknownMemberId)),
        other => panic!("{other:?}"),
    }
}

#[test]
fn replaying_the_records_rebuilds_offsets_and_groups() {
    let mut c = GroupCoordinator::new(config());
    assert_eq!(c.join("g", join_req(""), 1, 0), Outcome::Parked);
    c.commit_offsets("admin", "", None, -1, vec![commit("t", 0, 5)], 0).unwrap();
    c.commit_offsets("admin", "", None, -1, vec![commit("t", 0, 9)], 1).unwrap();
    c.commit_offsets("gone", "", None, -1, vec![commit("t", 0, 1)], 1).unwrap();
    assert_eq!(c.delete_group("gone", 2), None);
    let (records, completions) = c.drain();
    assert_eq!(completions.len(), 1);
    let member = match &completions[0].reply {
        crate::group::Reply::Join(r) => r.member_id.clone(),
        _ => unreachable!(),
    };
    c.sync("g", &member, None, 1, None, None, vec![(member.clone(), Bytes::from_static(b"asg"))], 2, 3);
    let (more, _) = c.drain();

    let mut fresh = GroupCoordinator::new(config());
    for r in records.into_iter().chain(more) {
        // Through the byte encoding, as the loader sees them.
        let (k, v) = r.encode(&|_| None);
        fresh.replay(CoordinatorRecord::decode(&k, v.as_deref(), &|_| None).unwrap().unwrap(), 10);
    }
    assert_eq!(fresh.fetch_offsets("admin", None)[0].2.as_ref().map(|v| v.offset), Some(9));
    assert!(fresh.group("gone").is_none(), "tombstones delete");
    let g = &fresh.group("g").unwrap().classic;
    assert_eq!((g.state(), g.generation_id(), g.member_count()), (GroupState::Stable, 1, 1));
    assert_eq!(g.members().next().unwrap().assignment, Bytes::from_static(b"asg"));
}

#[test]
fn offsets_of_empty_groups_expire_after_retention_and_the_group_goes_with_them() {
    let mut c = GroupCoordinator::new(config());
    c.commit_offsets("g", "", None, -1, vec![commit("t", 0, 5)], 0).unwrap();
    c.commit_offsets("g", "", None, -1, vec![commit("t", 1, 5)], 30_000).unwrap();
    c.drain();
    assert_eq!(c.expire_offsets(59_999), 0);
    assert_eq!(c.expire_offsets(60_000), 1);
    assert_eq!(c.expire_offsets(90_000), 1);
    assert!(c.group("g").is_none());
    let (records, _) = c.drain();
    let tombstones = records.iter().filter(|r| matches!(r, CoordinatorRecord::Offset { value: None, .. })).count();
    assert_eq!(tombstones, 2);
    assert!(records.iter().any(|r| matches!(r, CoordinatorRecord::Group { value: None, .. })));
}

#[test]
fn non_empty_groups_cannot_be_deleted_and_subscribed_offsets_stay() {
    let mut c = GroupCoordinator::new(config());
    assert_eq!(c.join("g", join_req(""), 1, 0), Outcome::Parked);
    assert_eq!(c.delete_group("g", 1), Some(ResponseError::NonEmptyGroup));
    assert_eq!(c.delete_group("nope", 1), Some(ResponseError::GroupIdNotFound));
    assert_eq!(c.delete_offsets("nope", &[]), Err(ResponseError::GroupIdNotFound));
}

#[test]
fn a_deleted_topics_offsets_are_forgotten_in_every_group_with_tombstones() {
    let mut c = GroupCoordinator::new(config());
    c.commit_offsets("g1", "", None, -1, vec![commit("gone", 0, 5), commit("gone", 1, 6), commit("kept", 0, 7)], 100).unwrap();
    c.commit_offsets("g2", "", None, -1, vec![commit("gone", 0, 9)], 100).unwrap();
    c.drain();
    assert_eq!(c.forget_topic("gone"), 3);
    let (records, _) = c.drain();
    let mut tombstones: Vec<(String, String, i32)> = records
        .iter()
        .map(|r| match r {
            CoordinatorRecord::Offset { group, topic, partition, value: None } => (group.clone(), topic.clone(), *partition),
            other => panic!("not an offset tombstone: {other:?}"),
        })
        .collect();
    tombstones.sort();
    assert_eq!(tombstones, vec![("g1".into(), "gone".into(), 0), ("g1".into(), "gone".into(), 1), ("g2".into(), "gone".into(), 0)]);
    let left: Vec<(String, i32)> = c.fetch_offsets("g1", None).into_iter().map(|(t, p, _)| (t, p)).collect();
    assert_eq!(left, vec![("kept".to_string(), 0)]);
    assert!(c.fetch_offsets("g2", None).is_empty());
    assert_eq!(c.forget_topic("gone"), 0, "nothing left to forget");
    assert!(c.drain().0.is_empty());
}

fn kip848_join(member: &str, topics: &[&str]) -> crate::group::consumer::Heartbeat {
    crate::group::consumer::Heartbeat {
        member_id: member.into(),
        member_epoch: 0,
        rebalance_timeout_ms: 30_000,
        subscribed_topic_names: Some(topics.iter().map(|t| t.to_string()).collect()),
        client_id: "c".into(),
        client_host: "/127.0.0.1".into(),
        ..Default::default()
    }
}

/// (member, epoch, assigned partitions) of each member.
type MemberSummary = Vec<(String, i32, Vec<(String, i32)>)>;

/// Replays `records` (through their bytes, topic ids by a fixed map) into a new coordinator.
fn reload(records: Vec<CoordinatorRecord>, now_ms: i64) -> GroupCoordinator {
    let id = |t: &str| Some(uuid::Uuid::from_bytes([t.len() as u8; 16]));
    let name = |u: uuid::Uuid| Some(["", "t", "tt"][u.as_bytes()[0] as usize].to_string());
    let mut fresh = GroupCoordinator::new(config());
    for r in records {
        let (k, v) = r.encode(&id);
        fresh.replay(CoordinatorRecord::decode(&k, v.as_deref(), &name).unwrap().unwrap(), now_ms);
    }
    fresh
}

#[test]
fn a_kip_848_group_reloaded_from_its_records_keeps_its_members_epochs_and_assignments() {
    let mut c = GroupCoordinator::new(config());
    let topics: BTreeMap<String, i32> = [("t".to_string(), 4), ("tt".to_string(), 2)].into();
    let a = c.consumer_heartbeat("g", kip848_join("a", &["t"]), &topics, 0);
    let b = c.consumer_heartbeat("g", kip848_join("b", &["t", "tt"]), &topics, 10);
    assert!(a.error.is_none() && b.error.is_none());
    let hb = |member: &str, epoch: i32, owned: Option<std::collections::BTreeSet<(String, i32)>>| crate::group::consumer::Heartbeat {
        member_id: member.into(),
        member_epoch: epoch,
        owned,
        ..Default::default()
    };
    // a gives up what b is to get; both heartbeat again.
    assert!(c.consumer_heartbeat("g", hb("a", a.member_epoch, Some(Default::default())), &topics, 20).error.is_none());
    assert!(c.consumer_heartbeat("g", hb("b", b.member_epoch, Some(Default::default())), &topics, 30).error.is_none());
    let (records, _) = c.drain();
    assert!(records.iter().any(|r| matches!(r, CoordinatorRecord::CurrentAssignment { .. })));
    let before: MemberSummary = c
        .group("g")
        .unwrap()
        .consumer
        .as_ref()
        .unwrap()
        .members
        .values()
        .map(|m| (m.member_id.clone(), m.member_epoch, m.assigned.iter().cloned().collect()))
        .collect();

    let mut fresh = reload(records, 1_000);
    let g = fresh.group("g").unwrap().consumer.as_ref().unwrap();
    let after: MemberSummary =
        g.members.values().map(|m| (m.member_id.clone(), m.member_epoch, m.assigned.iter().cloned().collect())).collect();
    assert_eq!(after, before);
    assert_eq!(g.group_epoch, c.group("g").unwrap().consumer.as_ref().unwrap().group_epoch);
    // The members go on at their epochs: a commit in b's epoch is taken, a heartbeat in it too,
    // with no rebalance of the reload's own.
    let epoch_b = before.iter().find(|m| m.0 == "b").unwrap().1;
    assert_eq!(fresh.commit_offsets("g", "b", None, epoch_b, vec![commit("tt", 0, 3)], 1_100), Ok(vec![None]));
    let r = fresh.consumer_heartbeat("g", hb("b", epoch_b, None), &topics, 1_200);
    assert_eq!((r.error, r.member_epoch), (None, epoch_b));
    // Only what changed is written again: the commit, and b's record of what it was last sent
    // is not persisted at all.
    let (again, _) = fresh.drain();
    assert!(again.iter().all(|r| matches!(r, CoordinatorRecord::Offset { .. })), "{again:?}");
    // A member that leaves is tombstoned, and a reload then lacks it.
    let left = fresh.consumer_heartbeat("g", hb("a", -1, None), &topics, 1_300);
    assert!(left.error.is_none());
    let (records, _) = fresh.drain();
    assert!(records.iter().any(|r| matches!(r, CoordinatorRecord::ConsumerMember { member, value: None, .. } if member == "a")));
}
