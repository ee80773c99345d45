//! Tests of the KIP-848 consumer group core with a fake clock.

use std::collections::{BTreeMap, BTreeSet};

use kafka_protocol::ResponseError;

use super::*;

const LIMITS: ConsumerGroupLimits = ConsumerGroupLimits { session_timeout_ms: 45_000, max_size: 10 };

fn topics() -> BTreeMap<String, i32> {
    BTreeMap::from([("t".to_string(), 6)])
}

fn join(id: &str) -> Heartbeat {
    Heartbeat {
        member_id: id.into(),
        member_epoch: 0,
        rebalance_timeout_ms: 30_000,
        subscribed_topic_names: Some(vec!["t".into()]),
        owned: Some(BTreeSet::new()),
        client_id: "c".into(),
        ..Default::default()
    }
}

fn beat(id: &str, epoch: i32, owned: &BTreeSet<TopicPartition>) -> Heartbeat {
    Heartbeat { member_id: id.into(), member_epoch: epoch, rebalance_timeout_ms: -1, owned: Some(owned.clone()), ..Default::default() }
}

/// Drives every member with heartbeats (acknowledging whatever it was told) until stable.
fn settle(g: &mut ConsumerGroup, owned: &mut BTreeMap<String, (i32, BTreeSet<TopicPartition>)>, now: i64) {
    for _ in 0..10 {
        let ids: Vec<String> = owned.keys().cloned().collect();
        for id in ids {
            let (epoch, parts) = owned[&id].clone();
            let r = g.heartbeat(beat(&id, epoch, &parts), &topics(), LIMITS, now);
            assert_eq!(r.error, None, "{id}: {:?}", r.error_message);
            let parts = r.assignment.unwrap_or(parts);
            owned.insert(id, (r.member_epoch, parts));
        }
        if state_name(g) == "Stable" {
            return;
        }
    }
    panic!("group did not stabilise: {g:#?}");
}

#[test]
fn members_join_get_epochs_and_split_partitions_without_double_ownership() {
    let mut g = ConsumerGroup::new("g");
    let r = g.heartbeat(join("a"), &topics(), LIMITS, 0);
    assert_eq!((r.error, r.member_epoch), (None, 1));
    assert_eq!(r.assignment.as_ref().map(BTreeSet::len), Some(6));
    let mut owned = BTreeMap::from([("a".to_string(), (1, r.assignment.unwrap()))]);
    let r = g.heartbeat(join("b"), &topics(), LIMITS, 1);
    assert_eq!(g.group_epoch, 2);
    // b must wait for a to revoke: it gets nothing yet, but is at the new epoch.
    assert_eq!((r.member_epoch, r.assignment.as_ref().map(BTreeSet::len)), (2, Some(0)));
    owned.insert("b".into(), (2, BTreeSet::new()));
    // a is told to keep 3 (revoking 3) and stays at epoch 1 until it confirms.
    let ra = g.heartbeat(beat("a", 1, &owned["a"].1), &topics(), LIMITS, 2);
    assert_eq!((ra.member_epoch, ra.assignment.as_ref().map(BTreeSet::len)), (1, Some(3)));
    owned.insert("a".into(), (1, ra.assignment.unwrap()));
    settle(&mut g, &mut owned, 3);
    let (a, b) = (&owned["a"].1, &owned["b"].1);
    assert_eq!((a.len(), b.len()), (3, 3));
    assert!(a.is_disjoint(b));
    assert_eq!((owned["a"].0, owned["b"].0), (2, 2));
}

#[test]
fn stale_epochs_are_fenced_and_unknown_members_rejected() {
    let mut g = ConsumerGroup::new("g");
    let r = g.heartbeat(join("a"), &topics(), LIMITS, 0);
    let none = BTreeSet::new();
    assert_eq!(g.heartbeat(beat("a", 7, &none), &topics(), LIMITS, 1).error, Some(ResponseError::FencedMemberEpoch));
    assert_eq!(g.heartbeat(beat("zz", 1, &none), &topics(), LIMITS, 1).error, Some(ResponseError::UnknownMemberId));
    let bad = Heartbeat { server_assignor: Some("sticky".into()), ..join("c") };
    assert_eq!(g.heartbeat(bad, &topics(), LIMITS, 1).error, Some(ResponseError::UnsupportedAssignor));
    let missing = Heartbeat { subscribed_topic_names: None, ..join("d") };
    assert_eq!(g.heartbeat(missing, &topics(), LIMITS, 1).error, Some(ResponseError::InvalidRequest));
    assert_eq!(g.validate_offset_commit("a", r.member_epoch), Ok(()));
    assert_eq!(g.validate_offset_commit("a", r.member_epoch - 1), Err(ResponseError::StaleMemberEpoch));
    assert_eq!(g.validate_offset_commit("", -1), Err(ResponseError::UnknownMemberId));
}

#[test]
fn leaving_and_expiring_members_free_their_partitions() {
    let mut g = ConsumerGroup::new("g");
    let mut owned = BTreeMap::new();
    for id in ["a", "b", "c"] {
        let r = g.heartbeat(join(id), &topics(), LIMITS, 0);
        owned.insert(id.to_string(), (r.member_epoch, r.assignment.unwrap_or_default()));
    }
    settle(&mut g, &mut owned, 1);
    let left = g.heartbeat(Heartbeat { member_epoch: -1, ..beat("c", 0, &BTreeSet::new()) }, &topics(), LIMITS, 2);
    assert_eq!(left.member_epoch, -1);
    owned.remove("c");
    settle(&mut g, &mut owned, 3);
    assert_eq!(owned.values().map(|(_, p)| p.len()).sum::<usize>(), 6);
    // b stops heartbeating; a alone takes over after b's session timeout.
    let (ea, pa) = owned["a"].clone();
    assert_eq!(g.heartbeat(beat("a", ea, &pa), &topics(), LIMITS, 30_000).error, None);
    assert!(g.tick(&topics(), 3 + LIMITS.session_timeout_ms));
    assert!(!g.members.contains_key("b") && g.members.contains_key("a"));
    owned.remove("b");
    settle(&mut g, &mut owned, 50_000);
    assert_eq!(owned["a"].1.len(), 6);
}

#[test]
fn new_partitions_trigger_a_new_epoch() {
    let mut g = ConsumerGroup::new("g");
    let r = g.heartbeat(join("a"), &topics(), LIMITS, 0);
    let grown = BTreeMap::from([("t".to_string(), 8)]);
    let r2 = g.heartbeat(beat("a", r.member_epoch, &r.assignment.unwrap()), &grown, LIMITS, 1);
    assert_eq!((r2.member_epoch, r2.assignment.map(|a| a.len())), (2, Some(8)));
}

#[test]
fn static_member_returning_after_temporary_leave_keeps_its_partitions() {
    let mut g = ConsumerGroup::new("g");
    let mut owned = BTreeMap::new();
    for (id, inst) in [("a", "ia"), ("b", "ib")] {
        let r = g.heartbeat(Heartbeat { instance_id: Some(inst.into()), ..join(id) }, &topics(), LIMITS, 0);
        owned.insert(id.to_string(), (r.member_epoch, r.assignment.unwrap_or_default()));
    }
    settle(&mut g, &mut owned, 1);
    let epoch = g.group_epoch;
    let before = owned["a"].1.clone();
    let r = g.heartbeat(Heartbeat { member_epoch: -2, instance_id: Some("ia".into()), ..beat("a", 0, &before) }, &topics(), LIMITS, 2);
    assert_eq!(r.member_epoch, -2);
    let back = g.heartbeat(Heartbeat { instance_id: Some("ia".into()), ..join("a2") }, &topics(), LIMITS, 3);
    assert_eq!(back.error, None);
    assert_eq!(back.assignment, Some(before));
    assert_eq!(g.group_epoch, epoch + 1, "one epoch bump for the new member id, no partition moves");
    let taken = g.heartbeat(Heartbeat { instance_id: Some("ia".into()), ..join("a3") }, &topics(), LIMITS, 4);
    assert_eq!(taken.error, Some(ResponseError::UnreleasedInstanceId));
}

fn regex_join(id: &str, regex: &str) -> Heartbeat {
    Heartbeat { subscribed_topic_names: Some(vec![]), subscribed_topic_regex: Some(regex.into()), ..join(id) }
}

fn names(parts: &BTreeSet<TopicPartition>) -> BTreeSet<String> {
    parts.iter().map(|(t, _)| t.clone()).collect()
}

#[test]
fn a_regex_subscription_gets_the_whole_names_it_matches_and_later_topics_within_the_refresh_interval() {
    let mut g = ConsumerGroup::new("g");
    let mut ts = BTreeMap::from([("orders-eu".to_string(), 2), ("orders-us".to_string(), 2), ("xorders-eu".to_string(), 2), ("audit".to_string(), 1)]);
    let r = g.heartbeat(regex_join("a", "orders-.*"), &ts, LIMITS, 0);
    assert_eq!(r.error, None, "{:?}", r.error_message);
    let got = r.assignment.unwrap_or_default();
    // Whole-name matching, as RE2/J's matches(): "xorders-eu" contains a match but is not one.
    assert_eq!(names(&got), BTreeSet::from(["orders-eu".to_string(), "orders-us".to_string()]));
    assert_eq!(got.len(), 4);
    // A topic created later joins the subscription once the regex is resolved again.
    ts.insert("orders-asia".to_string(), 1);
    let early = g.heartbeat(beat("a", r.member_epoch, &got), &ts, LIMITS, REGEX_REFRESH_MS - 1);
    assert_eq!(early.assignment, None, "not resolved again before the refresh interval");
    let later = g.heartbeat(beat("a", early.member_epoch, &got), &ts, LIMITS, REGEX_REFRESH_MS);
    assert!(later.member_epoch > r.member_epoch, "a change in what the regex matches rebalances");
    assert!(names(&later.assignment.unwrap_or_default()).contains("orders-asia"));
    let d = g.members.get("a").map(|m| m.subscribed_regex.clone());
    assert_eq!(d, Some(Some("orders-.*".to_string())));
}

#[test]
fn an_empty_regex_is_none_and_an_invalid_one_is_refused_with_kafkas_error() {
    let mut g = ConsumerGroup::new("g");
    // librdkafka sends "" beside its topic list.
    let r = g.heartbeat(Heartbeat { subscribed_topic_regex: Some(String::new()), ..join("a") }, &topics(), LIMITS, 0);
    assert_eq!(r.error, None);
    assert_eq!(r.assignment.map(|a| a.len()), Some(6));
    assert_eq!(g.members["a"].subscribed_regex, None);
    let bad = g.heartbeat(regex_join("b", "orders-(.*"), &topics(), LIMITS, 0);
    assert_eq!(bad.error, Some(ResponseError::InvalidRegularExpression));
    assert!(bad.error_message.unwrap_or_default().starts_with("SubscribedTopicRegex `orders-(.*` is not a valid regular expression: "));
    assert!(!g.members.contains_key("b"));
    // A pattern whose compiled program would exceed the size limit is refused, not built.
    let huge = g.heartbeat(regex_join("h", "((a{100}){100}){100}"), &topics(), LIMITS, 0);
    assert_eq!(huge.error, Some(ResponseError::InvalidRegularExpression), "{:?}", huge.error_message);
    assert!(huge.error_message.unwrap_or_default().contains("size limit"));
    // A regex alone (no names) is a subscription; neither is not.
    assert_eq!(g.heartbeat(regex_join("c", "t"), &topics(), LIMITS, 0).error, None);
    let neither = Heartbeat { subscribed_topic_names: None, ..join("d") };
    assert_eq!(g.heartbeat(neither, &topics(), LIMITS, 0).error, Some(ResponseError::InvalidRequest));
}

#[test]
fn a_regex_no_member_uses_any_more_is_forgotten() {
    let mut g = ConsumerGroup::new("g");
    let r = g.heartbeat(regex_join("a", "t|u"), &topics(), LIMITS, 0);
    assert_eq!(g.regexes.len(), 1);
    // The member switches to a topic list and clears its regex.
    let switch = Heartbeat { subscribed_topic_names: Some(vec!["t".into()]), subscribed_topic_regex: Some(String::new()), ..beat("a", r.member_epoch, &r.assignment.unwrap_or_default()) };
    assert_eq!(g.heartbeat(switch, &topics(), LIMITS, 1).error, None);
    assert!(g.regexes.is_empty());
}

#[test]
fn java_quoted_text_in_a_regex_is_matched_literally() {
    // Pattern.quote("a.b") + "-.*" as a Java client sends it.
    let re = compile_regex("\\Qa.b\\E-.*").expect("compiles");
    assert!(re.is_match("a.b-1"));
    assert!(!re.is_match("axb-1"), "the quoted dot is literal");
    assert!(compile_regex("\\Qa(b").expect("unterminated quote runs to the end").is_match("a(b"));
    // An escaped backslash before Q is not a quote.
    assert!(compile_regex("a\\\\Q").expect("compiles").is_match("a\\Q"));
    assert_eq!(expand_quoted("x\\d+\\Q.*\\Ey"), "x\\d+\\.\\*y");
}
