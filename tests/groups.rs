//! Consumer groups over the wire against the real binary: the classic protocol's happy path and
//! error codes, committed offsets, administration, and offsets surviving a restart.

mod common;

use bytes::Bytes;
use common::{Broker, Client};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;

/// The broker under test: sluice started here, or, with `GROUPS_TEST_ADDR=host:port`, an
/// already running broker (used to check these expectations against Apache Kafka, started with
/// the same settings as `FAST`).
struct Target {
    _broker: Option<Broker>,
    addr: String,
}

impl Target {
    fn start() -> Target {
        match std::env::var("GROUPS_TEST_ADDR") {
            Ok(addr) => Target { _broker: None, addr },
            Err(_) => {
                let b = Broker::start(FAST);
                Target { addr: b.addr.clone(), _broker: Some(b) }
            }
        }
    }

    /// A client, once the coordinator of `groups` answers (Kafka creates `__consumer_offsets`
    /// on the first FindCoordinator and answers COORDINATOR_NOT_AVAILABLE meanwhile; sluice
    /// answers at once).
    fn connect_ready(&self, groups: &[&str]) -> Client {
        let mut c = Client::connect_to(&self.addr);
        for g in groups {
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
            loop {
                let r = c.call(&FindCoordinatorRequest::default().with_key(s(g)).with_key_type(0), 3);
                if r.error_code == 0 {
                    // Kafka may still be loading the partition: probe with a harmless request.
                    let probe = c.call(&HeartbeatRequest::default().with_group_id(GroupId(s(g))).with_member_id(s("probe")).with_generation_id(1), 4);
                    if probe.error_code == 25 {
                        break;
                    }
                }
                assert!(std::time::Instant::now() < deadline, "coordinator for {g} never became available");
                std::thread::sleep(std::time::Duration::from_millis(200));
            }
        }
        c
    }
}

const FAST: &[&str] = &["group.initial.rebalance.delay.ms=0", "group.min.session.timeout.ms=1000", "offsets.topic.num.partitions=3"];

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_string())
}

fn create_topic(c: &mut Client, topic: &str, partitions: i32) {
    // Kafka takes a moment to elect leaders for a new topic; sluice answers at once.
    let req = CreateTopicsRequest::default().with_topics(vec![create_topics_request::CreatableTopic::default()
        .with_name(TopicName(s(topic)))
        .with_num_partitions(partitions)
        .with_replication_factor(1)]);
    let resp = c.call(&req, 7);
    assert_eq!(resp.topics[0].error_code, 0, "{:?}", resp.topics[0].error_message);
}

fn join(c: &mut Client, group: &str, member: &str, instance: Option<&str>) -> JoinGroupResponse {
    let req = JoinGroupRequest::default()
        .with_group_id(GroupId(s(group)))
        .with_session_timeout_ms(5000)
        .with_rebalance_timeout_ms(5000)
        .with_member_id(s(member))
        .with_group_instance_id(instance.map(s))
        .with_protocol_type(s("consumer"))
        .with_protocols(vec![join_group_request::JoinGroupRequestProtocol::default().with_name(s("range")).with_metadata(Bytes::from_static(b"meta"))]);
    c.call(&req, 9)
}

/// Joins a one-member group and syncs it; returns (member id, generation).
fn join_and_sync(c: &mut Client, group: &str) -> (String, i32) {
    let first = join(c, group, "", None);
    assert_eq!(first.error_code, 79, "MEMBER_ID_REQUIRED");
    let member = first.member_id.to_string();
    let joined = join(c, group, &member, None);
    assert_eq!(joined.error_code, 0);
    assert_eq!(joined.generation_id, 1);
    assert_eq!(joined.leader.as_str(), member);
    assert_eq!(joined.members.len(), 1);
    assert_eq!(joined.protocol_name.as_deref(), Some("range"));
    let sync = SyncGroupRequest::default()
        .with_group_id(GroupId(s(group)))
        .with_generation_id(1)
        .with_member_id(s(&member))
        .with_protocol_type(Some(s("consumer")))
        .with_protocol_name(Some(s("range")))
        .with_assignments(vec![sync_group_request::SyncGroupRequestAssignment::default().with_member_id(s(&member)).with_assignment(Bytes::from_static(b"mine"))]);
    let synced = c.call(&sync, 5);
    assert_eq!(synced.error_code, 0);
    assert_eq!(&synced.assignment[..], b"mine");
    (member, 1)
}

fn heartbeat(c: &mut Client, group: &str, member: &str, generation: i32) -> i16 {
    let req = HeartbeatRequest::default().with_group_id(GroupId(s(group))).with_member_id(s(member)).with_generation_id(generation);
    c.call(&req, 4).error_code
}

fn commit(c: &mut Client, group: &str, member: &str, generation: i32, topic: &str, partition: i32, offset: i64) -> i16 {
    let req = OffsetCommitRequest::default()
        .with_group_id(GroupId(s(group)))
        .with_generation_id_or_member_epoch(generation)
        .with_member_id(s(member))
        .with_topics(vec![offset_commit_request::OffsetCommitRequestTopic::default().with_name(TopicName(s(topic))).with_partitions(vec![
            offset_commit_request::OffsetCommitRequestPartition::default()
                .with_partition_index(partition)
                .with_committed_offset(offset)
                .with_committed_leader_epoch(4)
                .with_committed_metadata(Some(s("note"))),
        ])]);
    c.call(&req, 9).topics[0].partitions[0].error_code
}

/// (offset, leader epoch, metadata) through OffsetFetch v8+ (batched groups).
fn fetch(c: &mut Client, group: &str, topic: &str, partition: i32) -> (i64, i32, String) {
    let req = OffsetFetchRequest::default().with_groups(vec![offset_fetch_request::OffsetFetchRequestGroup::default()
        .with_group_id(GroupId(s(group)))
        .with_topics(Some(vec![offset_fetch_request::OffsetFetchRequestTopics::default().with_name(TopicName(s(topic))).with_partition_indexes(vec![partition])]))]);
    let resp = c.call(&req, 9);
    assert_eq!(resp.groups[0].error_code, 0);
    let p = &resp.groups[0].topics[0].partitions[0];
    assert_eq!(p.error_code, 0);
    (p.committed_offset, p.committed_leader_epoch, p.metadata.as_deref().unwrap_or("").to_string())
}

#[test]
fn find_coordinator_names_this_node_single_and_batched() {
    let b = Target::start();
    let mut c = b.connect_ready(&["g"]);
    let v3 = c.call(&FindCoordinatorRequest::default().with_key(s("g")).with_key_type(0), 3);
    assert_eq!(v3.error_code, 0);
    assert_eq!(format!("{}:{}", v3.host.as_str(), v3.port), b.addr);
    let v4 = c.call(&FindCoordinatorRequest::default().with_key_type(0).with_coordinator_keys(vec![s("a"), s("b")]), 4);
    assert_eq!(v4.coordinators.len(), 2);
    assert!(v4.coordinators.iter().all(|c| c.error_code == 0 && c.node_id.0 == 1));
    let bad = c.call(&FindCoordinatorRequest::default().with_key_type(9).with_coordinator_keys(vec![s("a")]), 4);
    assert_eq!(bad.coordinators[0].error_code, 42, "INVALID_REQUEST");
}

#[test]
fn the_first_find_coordinator_for_a_group_creates_the_offsets_topic() {
    let b = Target::start();
    let mut c = Client::connect_to(&b.addr);
    let offsets = || {
        MetadataRequest::default()
            .with_allow_auto_topic_creation(false)
            .with_topics(Some(vec![metadata_request::MetadataRequestTopic::default().with_name(Some(TopicName(s("__consumer_offsets"))))]))
    };
    let before = c.call(&offsets(), 12);
    assert_eq!(before.topics[0].error_code, 3, "UNKNOWN_TOPIC_OR_PARTITION before any group request");
    // FindCoordinator alone creates it, before any group wrote a record, as Kafka does (which
    // answers COORDINATOR_NOT_AVAILABLE until it is ready; sluice answers once it is created).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while c.call(&FindCoordinatorRequest::default().with_key(s("g")).with_key_type(0), 3).error_code != 0 {
        assert!(std::time::Instant::now() < deadline, "the coordinator never became available");
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    let after = c.call(&offsets(), 12);
    let t = &after.topics[0];
    assert_eq!(t.error_code, 0);
    assert!(t.is_internal);
    assert_eq!(t.partitions.len(), 3, "offsets.topic.num.partitions");
    assert!(t.partitions.iter().all(|p| p.error_code == 0 && p.leader_id.0 == 1));
}

#[test]
fn classic_member_lifecycle_uses_kafkas_error_codes() {
    let b = Target::start();
    let mut c = b.connect_ready(&["g1", "no-such-group"]);
    create_topic(&mut c, "orders", 2);
    let (member, gen) = join_and_sync(&mut c, "g1");
    assert_eq!(heartbeat(&mut c, "g1", &member, gen), 0);
    assert_eq!(heartbeat(&mut c, "g1", &member, gen + 1), 22, "ILLEGAL_GENERATION");
    assert_eq!(heartbeat(&mut c, "g1", "nobody", gen), 25, "UNKNOWN_MEMBER_ID");
    assert_eq!(heartbeat(&mut c, "no-such-group", "nobody", 1), 25);

    assert_eq!(commit(&mut c, "g1", &member, gen, "orders", 1, 42), 0);
    assert_eq!(commit(&mut c, "g1", &member, gen + 5, "orders", 1, 43), 22);
    assert_eq!(commit(&mut c, "g1", &member, gen, "missing-topic", 0, 1), 3, "UNKNOWN_TOPIC_OR_PARTITION");
    assert_eq!(fetch(&mut c, "g1", "orders", 1), (42, 4, "note".to_string()));
    assert_eq!(fetch(&mut c, "g1", "orders", 0).0, -1, "nothing committed: -1 without error");
    // OffsetFetch v7 (single group, top-level error code).
    let v7 = c.call(
        &OffsetFetchRequest::default().with_group_id(GroupId(s("g1"))).with_topics(Some(vec![
            offset_fetch_request::OffsetFetchRequestTopic::default().with_name(TopicName(s("orders"))).with_partition_indexes(vec![1]),
        ])),
        7,
    );
    assert_eq!((v7.error_code, v7.topics[0].partitions[0].committed_offset), (0, 42));

    let listed = c.call(&ListGroupsRequest::default().with_states_filter(vec![s("stable")]), 5);
    let g1 = listed.groups.iter().find(|g| g.group_id.as_str() == "g1").expect("g1 listed as stable");
    assert_eq!((g1.group_state.as_str(), g1.group_type.as_str()), ("Stable", "classic"));
    assert!(listed.groups.iter().all(|g| g.group_state.as_str() == "Stable"));
    let described = c.call(&DescribeGroupsRequest::default().with_groups(vec![GroupId(s("g1")), GroupId(s("nope"))]), 6);
    let g = &described.groups[0];
    assert_eq!((g.group_state.as_str(), g.protocol_data.as_str(), g.members.len()), ("Stable", "range", 1));
    assert_eq!(&g.members[0].member_assignment[..], b"mine");
    // The member's host as Kafka lists it (kafka-consumer-groups --describe's HOST column).
    assert_eq!(g.members[0].client_host.as_str(), "/127.0.0.1");
    assert_eq!(described.groups[1].error_code, 69, "GROUP_ID_NOT_FOUND in v6");

    let deleted = c.call(&DeleteGroupsRequest::default().with_groups_names(vec![GroupId(s("g1"))]), 2);
    assert_eq!(deleted.results[0].error_code, 68, "NON_EMPTY_GROUP");
    let left = c.call(
        &LeaveGroupRequest::default().with_group_id(GroupId(s("g1"))).with_members(vec![
            leave_group_request::MemberIdentity::default().with_member_id(s(&member)),
            leave_group_request::MemberIdentity::default().with_member_id(s("ghost")),
        ]),
        5,
    );
    assert_eq!(left.members.iter().map(|m| m.error_code).collect::<Vec<_>>(), vec![0, 25]);
    let deleted = c.call(&DeleteGroupsRequest::default().with_groups_names(vec![GroupId(s("g1"))]), 2);
    assert_eq!(deleted.results[0].error_code, 0);
    assert_eq!(fetch(&mut c, "g1", "orders", 1).0, -1, "deleting the group deletes its offsets");
}

#[test]
fn second_static_member_with_the_same_instance_id_fences_the_first() {
    let b = Target::start();
    let mut c = b.connect_ready(&["sg"]);
    let first = join(&mut c, "sg", "", Some("instance-1"));
    assert_eq!(first.error_code, 0, "static members skip MEMBER_ID_REQUIRED");
    let old = first.member_id.to_string();
    let sync = SyncGroupRequest::default()
        .with_group_id(GroupId(s("sg")))
        .with_generation_id(first.generation_id)
        .with_member_id(s(&old))
        .with_group_instance_id(Some(s("instance-1")))
        .with_assignments(vec![sync_group_request::SyncGroupRequestAssignment::default().with_member_id(s(&old)).with_assignment(Bytes::from_static(b"a"))]);
    assert_eq!(c.call(&sync, 5).error_code, 23, "SyncGroup v5 must name the protocol type and name");
    let sync = sync.with_protocol_type(Some(s("consumer"))).with_protocol_name(Some(s("range")));
    assert_eq!(c.call(&sync, 5).error_code, 0);
    let again = join(&mut c, "sg", "", Some("instance-1"));
    assert_eq!(again.error_code, 0);
    assert_eq!(again.generation_id, first.generation_id, "no rebalance for a static restart");
    let hb = HeartbeatRequest::default()
        .with_group_id(GroupId(s("sg")))
        .with_member_id(s(&old))
        .with_group_instance_id(Some(s("instance-1")))
        .with_generation_id(first.generation_id);
    assert_eq!(c.call(&hb, 4).error_code, 82, "FENCED_INSTANCE_ID");
}

fn delete_topic(c: &mut Client, topic: &str) {
    let req = DeleteTopicsRequest::default()
        .with_topics(vec![delete_topics_request::DeleteTopicState::default().with_name(Some(TopicName(s(topic))))])
        .with_timeout_ms(10_000);
    assert_eq!(c.call(&req, 6).responses[0].error_code, 0);
}

/// Every topic a group has committed offsets for (OffsetFetch of all topics).
fn committed_topics(c: &mut Client, group: &str) -> Vec<String> {
    let req = OffsetFetchRequest::default().with_groups(vec![offset_fetch_request::OffsetFetchRequestGroup::default().with_group_id(GroupId(s(group))).with_topics(None)]);
    let mut topics: Vec<String> = c.call(&req, 9).groups[0].topics.iter().map(|t| t.name.as_str().to_string()).collect();
    topics.sort();
    topics
}

#[test]
fn deleting_a_topic_forgets_its_committed_offsets() {
    let b = Target::start();
    let mut c = b.connect_ready(&["forgetful"]);
    create_topic(&mut c, "gone", 2);
    create_topic(&mut c, "kept", 1);
    let (member, gen) = join_and_sync(&mut c, "forgetful");
    for (t, p) in [("gone", 0), ("gone", 1), ("kept", 0)] {
        assert_eq!(commit(&mut c, "forgetful", &member, gen, t, p, 40), 0);
    }
    assert_eq!(committed_topics(&mut c, "forgetful"), vec!["gone", "kept"]);
    delete_topic(&mut c, "gone");
    // Kafka removes them once the deletion reaches its group coordinator; sluice at once.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(15);
    while committed_topics(&mut c, "forgetful") != vec!["kept"] {
        assert!(std::time::Instant::now() < deadline, "offsets of the deleted topic still committed: {:?}", committed_topics(&mut c, "forgetful"));
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    // A topic created again under the name starts without the old topic's positions.
    create_topic(&mut c, "gone", 2);
    assert_eq!(fetch(&mut c, "forgetful", "gone", 0).0, -1);
    assert_eq!(fetch(&mut c, "forgetful", "kept", 0).0, 40);
}

#[test]
fn offsets_forgotten_with_their_topic_stay_forgotten_after_a_restart() {
    let b = Broker::start(FAST);
    let mut c = b.connect();
    create_topic(&mut c, "gone", 1);
    create_topic(&mut c, "kept", 1);
    let (member, gen) = join_and_sync(&mut c, "durable");
    assert_eq!(commit(&mut c, "durable", &member, gen, "gone", 0, 7), 0);
    assert_eq!(commit(&mut c, "durable", &member, gen, "kept", 0, 8), 0);
    delete_topic(&mut c, "gone");
    drop(c);
    let b = Broker::start_in(b.stop(), FAST);
    let mut c = b.connect();
    assert_eq!(committed_topics(&mut c, "durable"), vec!["kept"], "the tombstones were replayed");
}

#[test]
fn committed_offsets_and_groups_survive_a_restart() {
    let b = Broker::start(FAST);
    let mut c = b.connect();
    create_topic(&mut c, "events", 3);
    let (member, gen) = join_and_sync(&mut c, "durable");
    for p in 0..3 {
        assert_eq!(commit(&mut c, "durable", &member, gen, "events", p, 100 + p as i64), 0);
    }
    assert_eq!(commit(&mut c, "durable", &member, gen, "events", 0, 500), 0);
    drop(c);
    let dir = b.stop();
    let b = Broker::start_in(dir, FAST);
    let mut c = b.connect();
    assert_eq!(fetch(&mut c, "durable", "events", 0), (500, 4, "note".to_string()));
    assert_eq!(fetch(&mut c, "durable", "events", 2).0, 102);
    // The member was reloaded with its generation, so it carries on without rejoining.
    assert_eq!(heartbeat(&mut c, "durable", &member, gen), 0);
}

fn consumer_heartbeat(c: &mut Client, group: &str, member: &str, epoch: i32, owned: Option<Vec<(uuid::Uuid, Vec<i32>)>>) -> ConsumerGroupHeartbeatResponse {
    let mut req = ConsumerGroupHeartbeatRequest::default()
        .with_group_id(GroupId(s(group)))
        .with_member_id(s(member))
        .with_member_epoch(epoch)
        .with_rebalance_timeout_ms(if epoch == 0 { 30_000 } else { -1 })
        .with_topic_partitions(owned.map(|o| {
            o.into_iter()
                .map(|(id, ps)| consumer_group_heartbeat_request::TopicPartitions::default().with_topic_id(id).with_partitions(ps))
                .collect()
        }));
    if epoch == 0 {
        req = req.with_subscribed_topic_names(Some(vec![TopicName(s("k848"))])).with_server_assignor(Some(s("range")));
    }
    c.call(&req, 1)
}

fn owned_of(resp: &ConsumerGroupHeartbeatResponse) -> Vec<(uuid::Uuid, Vec<i32>)> {
    resp.assignment.as_ref().map(|a| a.topic_partitions.iter().map(|tp| (tp.topic_id, tp.partitions.clone())).collect()).unwrap_or_default()
}

#[test]
fn kip848_members_get_epochs_and_disjoint_assignments() {
    // Exact epochs are sluice's: Kafka 4.4 computes target assignments asynchronously, so its
    // epochs run differently (the first member gets epoch 2, a joiner waits at the old epoch).
    if std::env::var("GROUPS_TEST_ADDR").is_ok() {
        return;
    }
    let b = Target::start();
    let mut c = b.connect_ready(&["cg"]);
    create_topic(&mut c, "k848", 4);
    let a = consumer_heartbeat(&mut c, "cg", "member-a", 0, Some(vec![]));
    assert_eq!((a.error_code, a.member_epoch), (0, 1));
    assert_eq!(owned_of(&a)[0].1, vec![0, 1, 2, 3]);
    let topic_id = owned_of(&a)[0].0;
    assert!(!topic_id.is_nil());
    let bm = consumer_heartbeat(&mut c, "cg", "member-b", 0, Some(vec![]));
    assert_eq!((bm.error_code, bm.member_epoch), (0, 2));
    // a is asked to give up half before b receives anything.
    let a2 = consumer_heartbeat(&mut c, "cg", "member-a", 1, Some(owned_of(&a)));
    assert_eq!(owned_of(&a2)[0].1, vec![0, 1]);
    let a3 = consumer_heartbeat(&mut c, "cg", "member-a", 1, Some(owned_of(&a2)));
    assert_eq!(a3.member_epoch, 2);
    let b2 = consumer_heartbeat(&mut c, "cg", "member-b", 2, Some(vec![]));
    assert_eq!(owned_of(&b2)[0].1, vec![2, 3]);
    assert_eq!(consumer_heartbeat(&mut c, "cg", "member-a", 7, None).error_code, 110, "FENCED_MEMBER_EPOCH");

    let d = c.call(&ConsumerGroupDescribeRequest::default().with_group_ids(vec![GroupId(s("cg")), GroupId(s("none"))]), 1);
    let g = &d.groups[0];
    assert_eq!((g.error_code, g.group_state.as_str(), g.group_epoch, g.assignor_name.as_str()), (0, "Stable", 2, "range"));
    assert_eq!(g.members.len(), 2);
    assert_eq!(d.groups[1].error_code, 69);
    // Offsets are validated against member epochs.
    assert_eq!(commit(&mut c, "cg", "member-a", 2, "k848", 0, 5), 0);
    assert_eq!(commit(&mut c, "cg", "member-a", 1, "k848", 0, 6), 113, "STALE_MEMBER_EPOCH");
    let listed = c.call(&ListGroupsRequest::default().with_types_filter(vec![s("consumer")]), 5);
    assert_eq!(listed.groups.iter().map(|g| g.group_id.as_str()).collect::<Vec<_>>(), vec!["cg"]);
    // A classic JoinGroup cannot take over a live consumer group.
    assert_eq!(join(&mut c, "cg", "", None).error_code, 23, "INCONSISTENT_GROUP_PROTOCOL");
    let left = consumer_heartbeat(&mut c, "cg", "member-b", -1, None);
    assert_eq!((left.error_code, left.member_epoch), (0, -1));
}

#[test]
fn kip848_join_needs_names_or_a_regex_and_treats_an_empty_regex_as_none() {
    // librdkafka sends SubscribedTopicRegex "" beside its topic list; Kafka counts only a
    // non-empty regex. Runs against Kafka too (GROUPS_TEST_ADDR).
    let b = Target::start();
    let mut c = b.connect_ready(&["cg-regex"]);
    create_topic(&mut c, "k848", 4);
    let base = ConsumerGroupHeartbeatRequest::default()
        .with_group_id(GroupId(s("cg-regex")))
        .with_member_id(s(&uuid::Uuid::new_v4().to_string()))
        .with_member_epoch(0)
        .with_rebalance_timeout_ms(30_000)
        .with_topic_partitions(Some(vec![]));
    let r: ConsumerGroupHeartbeatResponse =
        c.call(&base.clone().with_subscribed_topic_names(Some(vec![TopicName(s("k848"))])).with_subscribed_topic_regex(Some(s(""))), 1);
    assert_eq!(r.error_code, 0, "{:?}", r.error_message);
    assert!(r.member_epoch > 0);
    let none: ConsumerGroupHeartbeatResponse = c.call(&base.clone().with_member_id(s(&uuid::Uuid::new_v4().to_string())), 1);
    assert_eq!(none.error_code, 42, "INVALID_REQUEST");
    assert_eq!(none.error_message.as_deref(), Some("Either SubscribedTopicNames or SubscribedTopicRegex must be non-null when (re-)joining."));
    let no_timeout: ConsumerGroupHeartbeatResponse = c.call(
        &base.with_member_id(s(&uuid::Uuid::new_v4().to_string())).with_rebalance_timeout_ms(-1).with_subscribed_topic_names(Some(vec![TopicName(s("k848"))])),
        1,
    );
    assert_eq!(no_timeout.error_code, 42, "INVALID_REQUEST");
    assert_eq!(no_timeout.error_message.as_deref(), Some("RebalanceTimeoutMs must be provided in first request."));

    // A regex alone is a subscription, and ConsumerGroupDescribe shows it; a bad one is refused.
    let mut c = b.connect_ready(&["cg-regex2"]);
    let rx = ConsumerGroupHeartbeatRequest::default()
        .with_group_id(GroupId(s("cg-regex2")))
        .with_member_id(s(&uuid::Uuid::new_v4().to_string()))
        .with_member_epoch(0)
        .with_rebalance_timeout_ms(30_000)
        .with_topic_partitions(Some(vec![]))
        .with_subscribed_topic_names(Some(vec![]));
    let joined: ConsumerGroupHeartbeatResponse = c.call(&rx.clone().with_subscribed_topic_regex(Some(s("k8.8|none"))), 1);
    assert_eq!(joined.error_code, 0, "{:?}", joined.error_message);
    let d = c.call(&ConsumerGroupDescribeRequest::default().with_group_ids(vec![GroupId(s("cg-regex2"))]), 0);
    let m = &d.groups[0].members;
    assert_eq!(m.len(), 1);
    assert_eq!(m[0].subscribed_topic_regex.as_deref(), Some("k8.8|none"));
    assert_eq!(m[0].client_host.as_str(), "/127.0.0.1");
    let bad: ConsumerGroupHeartbeatResponse = c.call(&rx.with_member_id(s(&uuid::Uuid::new_v4().to_string())).with_subscribed_topic_regex(Some(s("k848("))), 1);
    assert_eq!(bad.error_code, 128, "INVALID_REGULAR_EXPRESSION");
    assert!(bad.error_message.as_deref().unwrap_or_default().starts_with("SubscribedTopicRegex `k848(` is not a valid regular expression: "));
}

#[test]
fn consumer_lag_metrics_come_from_committed_offsets() {
    use std::io::{Read, Write};
    let mut overrides = FAST.to_vec();
    overrides.push("metrics.listener=127.0.0.1:0");
    let b = Broker::start(&overrides);
    let metrics = b.metrics.clone().expect("metrics address");
    let mut c = b.connect();
    create_topic(&mut c, "lagging", 1);
    let recs: Vec<common::Rec> = (0..10).map(|i| common::Rec { key: None, value: "v".into(), timestamp: 1_700_000_000_000 + i }).collect();
    let produce = ProduceRequest::default().with_acks(1).with_timeout_ms(5000).with_topic_data(vec![produce_request::TopicProduceData::default()
        .with_name(TopicName(s("lagging")))
        .with_partition_data(vec![produce_request::PartitionProduceData::default().with_index(0).with_records(Some(common::encode_batch(&recs, None)))])]);
    assert_eq!(c.call(&produce, 9).responses[0].partition_responses[0].error_code, 0);
    let (member, gen) = join_and_sync(&mut c, "laggards");
    assert_eq!(commit(&mut c, "laggards", &member, gen, "lagging", 0, 4), 0);
    let mut stream = std::net::TcpStream::connect(&metrics).unwrap();
    write!(stream, "GET /metrics HTTP/1.1\r\nHost: {metrics}\r\n\r\n").unwrap();
    let mut text = String::new();
    stream.read_to_string(&mut text).unwrap();
    let line = |prefix: &str| text.lines().find(|l| l.starts_with(prefix)).unwrap_or_else(|| panic!("no {prefix} in\n{text}")).to_string();
    assert!(line("sluice_consumer_group_lag_records{").ends_with(" 6"), "{}", line("sluice_consumer_group_lag_records{"));
    assert!(line("sluice_consumer_group_members{").ends_with(" 1"));
    assert!(line("sluice_consumer_group_generation{").ends_with(" 1"));
}
