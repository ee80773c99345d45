//! Tests of `cluster/controller.rs` (kept beside it to keep that file readable).

use super::*;
use crate::cluster::image::PartitionState;

const TIMEOUT: i64 = 9000;

fn apply_all(image: &mut MetadataImage, records: &[VersionedRecord]) {
    for r in records {
        let offset = image.offset + 1;
        image.apply(offset, &r.record).unwrap_or_else(|e| panic!("{e}"));
    }
}

fn reg(id: i32, incarnation: u8) -> Registration {
    Registration {
        broker_id: id,
        incarnation_id: Uuid::from_bytes([incarnation; 16]),
        endpoints: vec![Endpoint { name: "PLAINTEXT".into(), host: "127.0.0.1".into(), port: 9000 + id as u16, security_protocol: 0 }],
        features: vec![],
        rack: None,
        previous_broker_epoch: -1,
    }
}

/// Three registered, caught-up, unfenced brokers at time 0.
fn three_brokers() -> (Controller, MetadataImage, BTreeMap<i32, i64>) {
    let mut c = Controller::new(TIMEOUT);
    let mut image = MetadataImage::default();
    let mut epochs = BTreeMap::new();
    for id in 1..=3 {
        let (records, epoch) = c.register(&image, &reg(id, id as u8), 0).unwrap();
        apply_all(&mut image, &records);
        assert!(image.brokers[&id].fenced, "a new registration starts fenced");
        epochs.insert(id, epoch);
    }
    for id in 1..=3 {
        let hb = Heartbeat { broker_id: id, broker_epoch: epochs[&id], metadata_offset: image.offset, want_shutdown: false };
        let (records, reply) = c.heartbeat(&image, &hb, 0).unwrap();
        apply_all(&mut image, &records);
        assert!(!reply.is_fenced);
    }
    (c, image, epochs)
}

fn with_topic(c: &Controller, image: &mut MetadataImage, name: &str, partitions: i32, rf: i16) {
    let records =
        c.create_topic(image, name, partitions, rf, &BTreeMap::new(), &BTreeMap::new(), Start { leader: 0, shift: 0 }).unwrap();
    apply_all(image, &records);
}

#[test]
fn a_broker_is_unfenced_only_once_it_has_caught_up_to_its_registration() {
    let mut c = Controller::new(TIMEOUT);
    let mut image = MetadataImage::default();
    let (records, epoch) = c.register(&image, &reg(1, 1), 0).unwrap();
    apply_all(&mut image, &records);
    assert_eq!(epoch, 0, "the epoch is the registration record's offset");
    let behind = Heartbeat { broker_id: 1, broker_epoch: epoch, metadata_offset: -1, want_shutdown: false };
    let (records, reply) = c.heartbeat(&image, &behind, 10).unwrap();
    assert!(records.is_empty() && reply.is_fenced);
    let caught_up = Heartbeat { metadata_offset: 0, ..behind };
    let (records, reply) = c.heartbeat(&image, &caught_up, 20).unwrap();
    apply_all(&mut image, &records);
    assert!(!reply.is_fenced && !image.brokers[&1].fenced);
    let stale = Heartbeat { broker_epoch: 7, ..caught_up };
    assert_eq!(c.heartbeat(&image, &stale, 30).unwrap_err().code, codes::STALE_BROKER_EPOCH);
}

#[test]
fn a_second_process_with_a_live_node_id_is_refused_but_a_restart_after_the_session_is_not() {
    let (mut c, image, _) = three_brokers();
    let err = c.register(&image, &reg(2, 99), 1000).unwrap_err();
    assert_eq!(err.code, codes::DUPLICATE_BROKER_REGISTRATION);
    assert!(err.message.contains("node.id=2"), "{}", err.message);
    // The same incarnation registering again (a retry) is fine, and so is a new one once the
    // old session has expired; either way a new epoch.
    assert!(c.register(&image, &reg(2, 2), 1000).is_ok());
    let (_, epoch) = c.register(&image, &reg(2, 99), 1000 + TIMEOUT).unwrap();
    assert_eq!(epoch, image.offset + 1);
}

#[test]
fn a_broker_that_stops_heartbeating_is_fenced_and_loses_its_leaderships() {
    let (mut c, mut image, epochs) = three_brokers();
    with_topic(&c, &mut image, "orders", 3, 3);
    // Brokers 1 and 3 keep heartbeating; 2 goes silent.
    for id in [1, 3] {
        let hb = Heartbeat { broker_id: id, broker_epoch: epochs[&id], metadata_offset: image.offset, want_shutdown: false };
        c.heartbeat(&image, &hb, TIMEOUT).unwrap();
    }
    assert!(c.expire_sessions(&image, TIMEOUT - 1).is_empty(), "not yet");
    let records = c.expire_sessions(&image, TIMEOUT + 1);
    apply_all(&mut image, &records);
    assert!(image.brokers[&2].fenced);
    for (i, p) in &image.topic("orders").unwrap().partitions {
        assert!(!p.isr.contains(&2), "partition {i}: {p:?}");
        assert_ne!(p.leader, 2, "partition {i}: {p:?}");
        assert!(p.isr.contains(&p.leader), "partition {i}: {p:?}");
    }
    // It comes back: registers with a new epoch and is unfenced once caught up; the
    // preferred leader election gives its partitions back once it is in the ISR again.
    let (records, epoch) = c.register(&image, &reg(2, 42), TIMEOUT + 2).unwrap();
    apply_all(&mut image, &records);
    assert!(epoch > epochs[&2]);
    let hb = Heartbeat { broker_id: 2, broker_epoch: epoch, metadata_offset: image.offset, want_shutdown: false };
    let (records, _) = c.heartbeat(&image, &hb, TIMEOUT + 3).unwrap();
    apply_all(&mut image, &records);
    assert!(!image.brokers[&2].fenced);
    assert!(c.elect_preferred_leaders(&image).is_empty(), "2 is not in any ISR yet: nothing to elect");
}

#[test]
fn two_brokers_expiring_in_one_round_are_fenced_one_after_the_other() {
    // Found by the replication simulation: broker 1 led, 1 and 2 expired together; each
    // change was made from the same image, so leadership went to 2 (fenced in the same
    // round) and 2's change put 1 back in the ISR, leaving a leader outside its ISR.
    let (mut c, mut image, epochs) = three_brokers();
    with_topic(&c, &mut image, "orders", 3, 3);
    let hb = Heartbeat { broker_id: 3, broker_epoch: epochs[&3], metadata_offset: image.offset, want_shutdown: false };
    c.heartbeat(&image, &hb, TIMEOUT).unwrap();
    let records = c.expire_sessions(&image, TIMEOUT + 1);
    apply_all(&mut image, &records);
    assert!(image.brokers[&1].fenced && image.brokers[&2].fenced && !image.brokers[&3].fenced);
    for (i, p) in &image.topic("orders").unwrap().partitions {
        assert_eq!((p.leader, p.isr.clone()), (3, vec![3]), "partition {i}: {p:?}");
    }
}

#[test]
fn time_the_controller_did_not_run_fences_nobody_but_a_silent_broker_still_expires_after() {
    let (mut c, image, epochs) = three_brokers();
    assert!(c.expire_sessions(&image, 100).is_empty());
    // The controller's process is paused for two sessions: at its first check after, no
    // broker is fenced for its own silence.
    let resumed = 100 + 2 * TIMEOUT;
    assert!(c.expire_sessions(&image, resumed).is_empty(), "fenced for the controller's pause");
    // Brokers 1 and 3 heartbeat again; 2 stays silent and expires a session later.
    for id in [1, 3] {
        let hb = Heartbeat { broker_id: id, broker_epoch: epochs[&id], metadata_offset: image.offset, want_shutdown: false };
        c.heartbeat(&image, &hb, resumed + TIMEOUT / 2).unwrap();
    }
    let mut now = resumed;
    while now < resumed + TIMEOUT - 1 {
        now += 250;
        assert!(c.expire_sessions(&image, now.min(resumed + TIMEOUT - 1)).is_empty(), "at {now}");
    }
    let mut after = image.clone();
    apply_all(&mut after, &c.expire_sessions(&image, resumed + TIMEOUT));
    assert_eq!(after.brokers.values().filter(|b| b.fenced).map(|b| b.id).collect::<Vec<_>>(), vec![2]);
}

#[test]
fn the_last_isr_member_fenced_leaves_its_partition_offline_not_elected_unclean() {
    let (mut c, mut image, epochs) = three_brokers();
    with_topic(&c, &mut image, "single", 3, 1);
    let led_by_1: Vec<i32> =
        image.topic("single").unwrap().partitions.iter().filter(|(_, p)| p.leader == 1).map(|(i, _)| *i).collect();
    assert_eq!(led_by_1.len(), 1);
    for id in [2, 3] {
        let hb = Heartbeat { broker_id: id, broker_epoch: epochs[&id], metadata_offset: image.offset, want_shutdown: false };
        c.heartbeat(&image, &hb, TIMEOUT).unwrap();
    }
    let records = c.expire_sessions(&image, TIMEOUT + 1);
    apply_all(&mut image, &records);
    let p = &image.topic("single").unwrap().partitions[&led_by_1[0]];
    assert_eq!((p.leader, p.isr.clone()), (-1, vec![1]));
    // Broker 1 comes back (a new registration, then a caught-up heartbeat): it leads again.
    let (records, epoch) = c.register(&image, &reg(1, 9), TIMEOUT + 2).unwrap();
    apply_all(&mut image, &records);
    let hb = Heartbeat { broker_id: 1, broker_epoch: epoch, metadata_offset: image.offset, want_shutdown: false };
    let (records, _) = c.heartbeat(&image, &hb, TIMEOUT + 2).unwrap();
    apply_all(&mut image, &records);
    let p = &image.topic("single").unwrap().partitions[&led_by_1[0]];
    assert_eq!((p.leader, p.leader_epoch), (1, 2));
}

#[test]
fn an_unclean_election_needs_the_topic_config_and_leaves_the_new_leader_recovering_alone() {
    let (mut c, mut image, epochs) = three_brokers();
    with_topic(&c, &mut image, "orders", 1, 3);
    let t = image.topic_ids["orders"];
    // The ISR shrinks to broker 1, which is then fenced: the partition has no leader.
    let p = image.topics[&t].partitions[&0].clone();
    let mut shrink = PartitionChange::new(t, 0);
    shrink.leader = 1;
    shrink.isr = Some(vec![1]);
    apply_all(&mut image, &[versioned(MetadataRecord::PartitionChange(shrink))]);
    for id in [2, 3] {
        let hb = Heartbeat { broker_id: id, broker_epoch: epochs[&id], metadata_offset: image.offset, want_shutdown: false };
        c.heartbeat(&image, &hb, TIMEOUT).unwrap();
    }
    let records = c.expire_sessions(&image, TIMEOUT + 1);
    apply_all(&mut image, &records);
    assert_eq!((image.topics[&t].partitions[&0].leader, image.topics[&t].partitions[&0].isr.clone()), (-1, vec![1]));
    // Not enabled (the default): nothing.
    assert!(c.elect_unclean(&image, |topic| unclean_enabled(&image, topic, false)).is_empty());
    // Enabled on the topic: the first live replica leads alone, RECOVERING.
    let mut on = image.clone();
    apply_all(&mut on, &[versioned(MetadataRecord::Config {
        resource_type: TOPIC_RESOURCE, resource_name: "orders".into(),
        name: "unclean.leader.election.enable".into(), value: Some("true".into()),
    })]);
    let records = c.elect_unclean(&on, |topic| unclean_enabled(&on, topic, false));
    apply_all(&mut on, &records);
    let q = &on.topics[&t].partitions[&0];
    let first_live = *p.replicas.iter().find(|r| **r != 1).unwrap();
    assert_eq!((q.leader, q.isr.clone(), q.leader_recovery_state), (first_live, vec![first_live], RECOVERING));
    assert!(q.leader_epoch > p.leader_epoch);
    // While RECOVERING the ISR does not grow; RECOVERED it may, and never goes back.
    let other = *p.replicas.iter().find(|r| **r != 1 && **r != first_live).unwrap();
    let mut req = alter_isr(&on, &epochs, vec![(first_live, -1), (other, epochs[&other])]);
    req.leader_recovery_state = RECOVERING;
    assert_eq!(c.alter_partition(&on, &req), Err(codes::INVALID_REQUEST));
    let recovered = c.alter_partition(&on, &alter_isr(&on, &epochs, vec![(first_live, -1)])).unwrap();
    apply_all(&mut on, &recovered);
    assert_eq!(on.topics[&t].partitions[&0].leader_recovery_state, RECOVERED);
    let mut back = alter_isr(&on, &epochs, vec![(first_live, -1)]);
    back.leader_recovery_state = RECOVERING;
    assert_eq!(c.alter_partition(&on, &back), Err(codes::INVALID_REQUEST));
    // ElectLeaders UNCLEAN makes the same election whatever the topic config says.
    let (records, results) = c.elect_leaders(&image, 1, Some(&[("orders".to_string(), 0)]));
    assert_eq!(results[0].code, 0);
    apply_all(&mut image, &records);
    assert_eq!(image.topics[&t].partitions[&0].leader_recovery_state, RECOVERING);
}

#[test]
fn controlled_shutdown_moves_every_leadership_away_before_the_broker_may_exit() {
    let (mut c, mut image, epochs) = three_brokers();
    with_topic(&c, &mut image, "orders", 6, 3);
    with_topic(&c, &mut image, "single", 3, 1);
    let hb = Heartbeat { broker_id: 1, broker_epoch: epochs[&1], metadata_offset: image.offset, want_shutdown: true };
    let (records, reply) = c.heartbeat(&image, &hb, 10).unwrap();
    apply_all(&mut image, &records);
    assert!(reply.in_controlled_shutdown && image.brokers[&1].in_controlled_shutdown);
    for (i, p) in &image.topic("orders").unwrap().partitions {
        assert_ne!(p.leader, 1, "orders-{i}: {p:?}");
        assert!(!p.isr.contains(&1) && p.isr.len() == 2, "orders-{i}: {p:?}");
    }
    // A replication-factor-1 partition of broker 1 has nobody to move to: it goes offline.
    let offline = image.topic("single").unwrap().partitions.values().filter(|p| p.leader == -1).count();
    assert_eq!(offline, 1);
    assert!(reply.should_shut_down, "it leads nothing any more");
    // A new topic does not place replicas on a broker that is shutting down.
    let records = c.create_topic(&image, "later", 4, 2, &BTreeMap::new(), &BTreeMap::new(), Start { leader: 0, shift: 0 }).unwrap();
    apply_all(&mut image, &records);
    assert!(image.topic("later").unwrap().partitions.values().all(|p| !p.replicas.contains(&1)));
}

#[test]
fn create_topic_refuses_what_kafka_refuses_before_making_any_record() {
    let (c, mut image, _) = three_brokers();
    with_topic(&c, &mut image, "orders", 1, 1);
    let none = BTreeMap::new();
    let s = Start { leader: 0, shift: 0 };
    type Case = (&'static str, i32, i16, BTreeMap<i32, Vec<i32>>, i16);
    let cases: Vec<Case> = vec![
        ("orders", 1, 1, none.clone(), codes::TOPIC_ALREADY_EXISTS),
        ("bad/name", 1, 1, none.clone(), codes::INVALID_TOPIC_EXCEPTION),
        ("t", 0, 1, none.clone(), codes::INVALID_PARTITIONS),
        ("t", 1, 4, none.clone(), codes::INVALID_REPLICATION_FACTOR),
        ("t", 1, 0, none.clone(), codes::INVALID_REPLICATION_FACTOR),
        ("t", 0, 0, BTreeMap::from([(0, vec![1, 1])]), codes::INVALID_REPLICA_ASSIGNMENT),
        ("t", 0, 0, BTreeMap::from([(0, vec![1, 9])]), codes::INVALID_REPLICA_ASSIGNMENT),
        ("t", 0, 0, BTreeMap::from([(0, vec![1, 2]), (2, vec![2, 3])]), codes::INVALID_REPLICA_ASSIGNMENT),
        ("t", 0, 0, BTreeMap::from([(0, vec![1, 2]), (1, vec![3])]), codes::INVALID_REPLICA_ASSIGNMENT),
    ];
    for (name, partitions, rf, assignments, code) in cases {
        let got = c.create_topic(&image, name, partitions, rf, &assignments, &none_configs(), s);
        assert_eq!(got.map_err(|e| e.code), Err(code), "{name} {partitions} {rf} {assignments:?}");
    }
    let err = c.create_topic(&image, "t", 1, 4, &none, &none_configs(), s).unwrap_err();
    assert!(err.message.contains("only 3 broker(s) are registered"), "{}", err.message);
    // Explicit assignments are taken as given, configs come along.
    let configs = BTreeMap::from([("cleanup.policy".to_string(), "compact".to_string())]);
    let records = c.create_topic(&image, "t", 0, 0, &BTreeMap::from([(0, vec![3, 1]), (1, vec![2, 3])]), &configs, s).unwrap();
    apply_all(&mut image, &records);
    let t = image.topic("t").unwrap();
    assert_eq!((t.partitions[&0].replicas.clone(), t.partitions[&0].leader), (vec![3, 1], 3));
    assert_eq!(image.configs[&(TOPIC_RESOURCE, "t".to_string())]["cleanup.policy"], "compact");
}

fn none_configs() -> BTreeMap<String, String> {
    BTreeMap::new()
}

#[test]
fn config_changes_are_checked_again_by_the_controller() {
    let (c, mut image, _) = three_brokers();
    with_topic(&c, &mut image, "orders", 1, 1);
    let set = |k: &str, v: &str| vec![(k.to_string(), Some(v.to_string()))];
    let code = |t: i8, name: &str, changes: Vec<(String, Option<String>)>| c.alter_configs(&image, t, name, &changes).map(drop).map_err(|e| e.code);
    assert_eq!(code(TOPIC_RESOURCE, "gone", set("retention.ms", "1")), Err(codes::UNKNOWN_TOPIC_OR_PARTITION));
    assert_eq!(code(TOPIC_RESOURCE, "orders", set("retention.ms", "soon")), Err(codes::INVALID_CONFIG));
    assert_eq!(code(TOPIC_RESOURCE, "orders", set("no.such.key", "1")), Err(codes::INVALID_CONFIG));
    assert_eq!(code(BROKER_RESOURCE, "", set("num.io.threads", "4")), Err(codes::INVALID_CONFIG));
    assert_eq!(code(BROKER_RESOURCE, "x", set("log.retention.ms", "1000")), Err(codes::INVALID_REQUEST));
    let records = c.alter_configs(&image, BROKER_RESOURCE, "", &set("log.retention.ms", "1000")).unwrap();
    apply_all(&mut image, &records);
    let records = c.alter_configs(&image, TOPIC_RESOURCE, "orders", &set("retention.ms", "5000")).unwrap();
    apply_all(&mut image, &records);
    assert_eq!(image.configs[&(BROKER_RESOURCE, String::new())]["log.retention.ms"], "1000");
    assert_eq!(image.configs[&(TOPIC_RESOURCE, "orders".to_string())]["retention.ms"], "5000");
    let records = c.alter_configs(&image, TOPIC_RESOURCE, "orders", &[("retention.ms".to_string(), None)]).unwrap();
    apply_all(&mut image, &records);
    assert!(!image.configs.contains_key(&(TOPIC_RESOURCE, "orders".to_string())));
}

#[test]
fn new_partitions_continue_the_numbering_with_the_topics_replication_factor() {
    let (c, mut image, _) = three_brokers();
    with_topic(&c, &mut image, "orders", 2, 2);
    let s = Start { leader: 0, shift: 0 };
    let refused = |count: i32, assignments: &[Vec<i32>]| c.create_partitions(&image, "orders", count, assignments, s).unwrap_err().code;
    assert_eq!(refused(2, &[]), codes::INVALID_PARTITIONS);
    assert_eq!(refused(3, &[vec![1, 2], vec![2, 3]]), codes::INVALID_REPLICA_ASSIGNMENT);
    assert_eq!(refused(3, &[vec![1, 9]]), codes::INVALID_REPLICA_ASSIGNMENT);
    assert_eq!(c.create_partitions(&image, "gone", 3, &[], s).unwrap_err().code, codes::UNKNOWN_TOPIC_OR_PARTITION);
    let records = c.create_partitions(&image, "orders", 5, &[], s).unwrap();
    apply_all(&mut image, &records);
    let t = image.topic("orders").unwrap();
    assert_eq!(t.partitions.keys().copied().collect::<Vec<_>>(), vec![0, 1, 2, 3, 4]);
    for p in t.partitions.values() {
        assert_eq!(p.replicas.len(), 2);
        assert_eq!(p.leader, p.replicas[0]);
    }
    let records = c.create_partitions(&image, "orders", 6, &[vec![3, 1]], s).unwrap();
    apply_all(&mut image, &records);
    assert_eq!(image.topic("orders").unwrap().partitions[&5].replicas, vec![3, 1]);
}

#[test]
fn preferred_leaders_are_restored_once_back_in_the_isr() {
    let (c, mut image, _) = three_brokers();
    with_topic(&c, &mut image, "orders", 3, 3);
    let t = image.topic("orders").unwrap().id;
    // Partition 0 (preferred leader 1) failed over to 2 while 1 stayed in the ISR.
    let mut change = PartitionChange::new(t, 0);
    change.leader = 2;
    apply_all(&mut image, &[versioned(MetadataRecord::PartitionChange(change))]);
    let records = c.elect_preferred_leaders(&image);
    assert_eq!(records.len(), 1);
    apply_all(&mut image, &records);
    let p = &image.topic("orders").unwrap().partitions[&0];
    assert_eq!((p.leader, p.leader_epoch), (1, 2));
    assert!(c.elect_preferred_leaders(&image).is_empty());
}

#[test]
fn elect_leaders_moves_only_partitions_whose_preferred_replica_is_in_sync() {
    let (c, mut image, _) = three_brokers();
    with_topic(&c, &mut image, "orders", 3, 3);
    let t = image.topic("orders").unwrap().id;
    // Partition 0 failed over with its preferred replica still in the ISR; partition 1 also
    // lost its preferred replica from the ISR.
    let p0 = image.topic("orders").unwrap().partitions[&0].clone();
    let p1 = image.topic("orders").unwrap().partitions[&1].clone();
    let mut change = PartitionChange::new(t, 0);
    change.leader = p0.replicas[1];
    let mut out = PartitionChange::new(t, 1);
    out.leader = p1.replicas[1];
    out.isr = Some(p1.replicas[1..].to_vec());
    apply_all(&mut image, &[versioned(MetadataRecord::PartitionChange(change)), versioned(MetadataRecord::PartitionChange(out))]);
    let asked: Vec<(String, i32)> = (0..4).map(|i| ("orders".to_string(), i)).chain([("nope".to_string(), 0)]).collect();
    let (records, results) = c.elect_leaders(&image, 0, Some(&asked));
    let codes: Vec<i16> = results.iter().map(|e| e.code).collect();
    assert_eq!(
        codes,
        vec![0, codes::PREFERRED_LEADER_NOT_AVAILABLE, codes::ELECTION_NOT_NEEDED, codes::UNKNOWN_TOPIC_OR_PARTITION, codes::UNKNOWN_TOPIC_OR_PARTITION]
    );
    apply_all(&mut image, &records);
    assert_eq!(image.topic("orders").unwrap().partitions[&0].leader, p0.replicas[0]);
    // Asked for everything: nothing left to elect is listed as nothing.
    let (records, results) = c.elect_leaders(&image, 0, None);
    assert!(records.is_empty() && results.is_empty(), "{results:?}");
    // An unclean election is for a partition without a leader only.
    let (records, results) = c.elect_leaders(&image, 1, Some(&asked[..1]));
    assert!(records.is_empty());
    assert_eq!(results[0].code, codes::ELECTION_NOT_NEEDED);
}

#[test]
fn automatic_rebalancing_acts_only_for_a_broker_whose_imbalance_is_over_the_percentage() {
    let (c, mut image, _) = three_brokers();
    // 30 partitions, 10 preferring each broker.
    with_topic(&c, &mut image, "orders", 30, 3);
    let t = image.topic("orders").unwrap().id;
    let prefers = |image: &MetadataImage, b: i32| -> Vec<i32> {
        image.topic("orders").unwrap().partitions.iter().filter(|(_, p)| p.replicas[0] == b).map(|(i, _)| *i).collect()
    };
    let moved: Vec<i32> = prefers(&image, 1).into_iter().take(1).collect();
    for i in &moved {
        let mut change = PartitionChange::new(t, *i);
        change.leader = image.topic("orders").unwrap().partitions[i].replicas[1];
        apply_all(&mut image, &[versioned(MetadataRecord::PartitionChange(change))]);
    }
    // One in ten led elsewhere is not over 10%.
    assert!(c.rebalance_leaders(&image, 10).is_empty());
    let second = prefers(&image, 1)[1];
    let mut change = PartitionChange::new(t, second);
    change.leader = image.topic("orders").unwrap().partitions[&second].replicas[1];
    apply_all(&mut image, &[versioned(MetadataRecord::PartitionChange(change))]);
    // Two in ten is: both go back to broker 1.
    let records = c.rebalance_leaders(&image, 10);
    assert_eq!(records.len(), 2);
    apply_all(&mut image, &records);
    assert!(image.topic("orders").unwrap().partitions.values().all(|p| p.leader == p.replicas[0]));
}

#[test]
fn producer_id_blocks_never_overlap_and_go_only_to_a_brokers_current_epoch() {
    let (c, mut image, epochs) = three_brokers();
    let mut starts = Vec::new();
    for id in [1, 2, 1, 3] {
        let (records, start) = c.allocate_producer_ids(&image, id, epochs[&id]).unwrap();
        apply_all(&mut image, &records);
        starts.push(start);
    }
    assert_eq!(starts, [0, 1000, 2000, 3000]);
    assert_eq!(image.next_producer_id, 4000);
    let stale = c.allocate_producer_ids(&image, 2, epochs[&2] - 1).unwrap_err();
    assert_eq!(stale.code, codes::STALE_BROKER_EPOCH);
    let unknown = c.allocate_producer_ids(&image, 9, 1).unwrap_err();
    assert_eq!(unknown.code, codes::STALE_BROKER_EPOCH);
    assert_eq!(image.next_producer_id, 4000, "a refusal makes no record");
}

/// Three brokers and `orders-0` on all three: the image, the epochs, the topic id, the
/// partition and one follower.
fn orders_on_three() -> (Controller, MetadataImage, BTreeMap<i32, i64>, Uuid, PartitionState, i32) {
    let (c, mut image, epochs) = three_brokers();
    with_topic(&c, &mut image, "orders", 1, 3);
    let t = image.topic_ids["orders"];
    let p = image.topics[&t].partitions[&0].clone();
    let follower = *p.replicas.iter().find(|r| **r != p.leader).unwrap();
    (c, image, epochs, t, p, follower)
}

/// An AlterPartition from the current leader of `orders-0` for `new_isr`.
fn alter_isr(image: &MetadataImage, epochs: &BTreeMap<i32, i64>, new_isr: Vec<(i32, i64)>) -> AlterIsr {
    let t = image.topic_ids["orders"];
    let p = &image.topics[&t].partitions[&0];
    AlterIsr {
        broker_id: p.leader,
        broker_epoch: epochs[&p.leader],
        topic_id: t,
        partition: 0,
        leader_epoch: p.leader_epoch,
        partition_epoch: p.partition_epoch,
        new_isr,
        leader_recovery_state: RECOVERED,
    }
}

#[test]
fn alter_partition_is_a_compare_and_set_by_the_current_leader() {
    let (c, mut image, epochs, t, p, follower) = orders_on_three();
    let leader = p.leader;
    let shrunk: Vec<(i32, i64)> = p.isr.iter().filter(|r| **r != follower).map(|r| (*r, epochs[r])).collect();
    let req = alter_isr(&image, &epochs, shrunk.clone());
    // Not the leader, an old broker epoch, an old leader epoch, an old partition epoch.
    assert_eq!(c.alter_partition(&image, &AlterIsr { broker_id: follower, broker_epoch: epochs[&follower], ..req.clone() }), Err(codes::INVALID_REQUEST));
    assert_eq!(c.alter_partition(&image, &AlterIsr { broker_epoch: epochs[&leader] + 100, ..req.clone() }), Err(codes::STALE_BROKER_EPOCH));
    assert_eq!(c.alter_partition(&image, &AlterIsr { leader_epoch: p.leader_epoch - 1, ..req.clone() }), Err(codes::FENCED_LEADER_EPOCH));
    assert_eq!(c.alter_partition(&image, &AlterIsr { partition_epoch: p.partition_epoch + 1, ..req.clone() }), Err(codes::INVALID_UPDATE_VERSION));
    // The leader must stay, members must be replicas.
    assert_eq!(c.alter_partition(&image, &AlterIsr { new_isr: vec![(follower, epochs[&follower])], ..req.clone() }), Err(codes::INVALID_REQUEST));
    assert_eq!(c.alter_partition(&image, &AlterIsr { new_isr: vec![(leader, -1), (9, -1)], ..req.clone() }), Err(codes::INVALID_REQUEST));

    let records = c.alter_partition(&image, &req).unwrap();
    apply_all(&mut image, &records);
    let after = &image.topics[&t].partitions[&0];
    assert_eq!(after.isr, shrunk.iter().map(|(r, _)| *r).collect::<Vec<_>>());
    assert_eq!((after.leader, after.leader_epoch, after.partition_epoch), (leader, p.leader_epoch, p.partition_epoch + 1));
    // The same request again is against an old partition epoch.
    assert_eq!(c.alter_partition(&image, &req), Err(codes::INVALID_UPDATE_VERSION));
}

#[test]
fn a_replica_rejoins_the_isr_only_in_the_broker_epoch_the_leader_saw() {
    let (c, mut image, epochs, t, p, follower) = orders_on_three();
    let mut shrink = PartitionChange::new(t, 0);
    shrink.isr = Some(p.isr.iter().copied().filter(|r| *r != follower).collect());
    apply_all(&mut image, &[versioned(MetadataRecord::PartitionChange(shrink))]);
    let p = image.topics[&t].partitions[&0].clone();
    let mut grown: Vec<(i32, i64)> = p.isr.iter().map(|r| (*r, epochs[r])).collect();
    grown.push((follower, epochs[&follower] - 1));
    let req = alter_isr(&image, &epochs, grown.clone());
    // It fetched in an earlier incarnation (KIP-903): not eligible.
    assert_eq!(c.alter_partition(&image, &req), Err(codes::INELIGIBLE_REPLICA));
    grown.last_mut().unwrap().1 = epochs[&follower];
    let records = c.alter_partition(&image, &AlterIsr { new_isr: grown, ..req }).unwrap();
    apply_all(&mut image, &records);
    assert!(image.topics[&t].partitions[&0].isr.contains(&follower));
}

/// Turns eligible leader replicas on, as a new cluster's bootstrap records do.
fn with_elr(image: &mut MetadataImage) {
    apply_all(image, &[versioned(MetadataRecord::FeatureLevel { name: ELR_FEATURE.into(), feature_level: 1 })]);
}

fn heartbeat_all_but(c: &mut Controller, image: &MetadataImage, epochs: &BTreeMap<i32, i64>, silent: &[i32], now: i64) {
    for (id, epoch) in epochs {
        if !silent.contains(id) {
            let hb = Heartbeat { broker_id: *id, broker_epoch: *epoch, metadata_offset: image.offset, want_shutdown: false };
            c.heartbeat(image, &hb, now).unwrap();
        }
    }
}

/// Registers `id` again (a restart, clean when `previous` is its registered epoch) and unfences it.
fn restart(c: &mut Controller, image: &mut MetadataImage, id: i32, previous: i64, now: i64) -> i64 {
    let mut r = reg(id, 50 + id as u8);
    r.previous_broker_epoch = previous;
    let (records, epoch) = c.register(image, &r, now).unwrap();
    apply_all(image, &records);
    let hb = Heartbeat { broker_id: id, broker_epoch: epoch, metadata_offset: image.offset, want_shutdown: false };
    let (records, _) = c.heartbeat(image, &hb, now).unwrap();
    apply_all(image, &records);
    epoch
}

#[test]
fn with_elr_an_isr_below_min_isr_keeps_its_lost_members_eligible_and_one_leads_when_the_isr_empties() {
    let (mut c, mut image, epochs, ..) = orders_on_three();
    with_elr(&mut image);
    let records = c.alter_configs(&image, TOPIC_RESOURCE, "orders", &[("min.insync.replicas".to_string(), Some("2".to_string()))]).unwrap();
    apply_all(&mut image, &records);
    let p = image.topic("orders").unwrap().partitions[&0].clone();
    let leader = p.leader;
    let others: Vec<i32> = p.replicas.iter().copied().filter(|r| *r != leader).collect();
    // The leader drops both followers (they lag): below min.insync.replicas, they become the ELR.
    let req = alter_isr(&image, &epochs, vec![(leader, epochs[&leader])]);
    let records = c.alter_partition(&image, &req).unwrap();
    apply_all(&mut image, &records);
    let p = image.topic("orders").unwrap().partitions[&0].clone();
    let mut elr = others.clone();
    elr.sort();
    assert_eq!((p.isr.clone(), p.eligible_leader_replicas.clone()), (vec![leader], elr.clone()));
    // The leader's session expires: the first ELR member in replica order that is alive leads,
    // alone in the ISR; the old leader joins the ELR.
    heartbeat_all_but(&mut c, &image, &epochs, &[leader], TIMEOUT);
    let records = c.expire_sessions(&image, TIMEOUT + 1);
    apply_all(&mut image, &records);
    let p = image.topic("orders").unwrap().partitions[&0].clone();
    let mut rest = vec![leader, others[1]];
    rest.sort();
    assert_eq!((p.leader, p.isr.clone(), p.eligible_leader_replicas.clone()), (others[0], vec![others[0]], rest));
}

#[test]
fn with_elr_the_last_replica_stopped_cleanly_leads_again_and_one_stopped_uncleanly_does_not() {
    for clean in [true, false] {
        let (mut c, mut image, epochs) = three_brokers();
        with_elr(&mut image);
        with_topic(&c, &mut image, "single", 3, 1);
        let (&index, _) = image.topic("single").unwrap().partitions.iter().find(|(_, p)| p.leader == 1).unwrap();
        // Broker 1 goes silent and is fenced: its partition keeps an empty ISR, 1 in the ELR
        // (min.insync.replicas 1) and as its last known leader.
        heartbeat_all_but(&mut c, &image, &epochs, &[1], TIMEOUT);
        let records = c.expire_sessions(&image, TIMEOUT + 1);
        apply_all(&mut image, &records);
        let p = image.topic("single").unwrap().partitions[&index].clone();
        assert_eq!((p.leader, p.isr.clone(), p.eligible_leader_replicas.clone(), p.last_known_elr.clone()), (-1, vec![], vec![1], vec![1]));
        let previous = if clean { epochs[&1] } else { -1 };
        restart(&mut c, &mut image, 1, previous, TIMEOUT + 2);
        let p = image.topic("single").unwrap().partitions[&index].clone();
        if clean {
            // From the ELR: a clean election.
            assert_eq!((p.leader, p.isr.clone(), p.eligible_leader_replicas.clone(), p.leader_recovery_state), (1, vec![1], vec![], RECOVERED));
        } else {
            // Out of the ELR; as the last known leader with nothing else left it leads again,
            // uncleanly (RECOVERING), as Kafka's balanced recovery does.
            assert_eq!((p.leader, p.isr.clone(), p.eligible_leader_replicas.clone(), p.leader_recovery_state), (1, vec![1], vec![], RECOVERING));
        }
        assert!(p.last_known_elr.is_empty(), "{p:?}");
    }
}

#[test]
fn with_elr_an_unclean_restart_leaves_the_elr_and_a_clean_member_still_leads() {
    let (mut c, mut image, epochs, ..) = orders_on_three();
    with_elr(&mut image);
    let records = c.alter_configs(&image, TOPIC_RESOURCE, "orders", &[("min.insync.replicas".to_string(), Some("3".to_string()))]).unwrap();
    apply_all(&mut image, &records);
    let p = image.topic("orders").unwrap().partitions[&0].clone();
    // Every broker goes silent at once and is fenced: ISR empty, all three eligible.
    let records = c.expire_sessions(&image, TIMEOUT + 1);
    apply_all(&mut image, &records);
    let q = image.topic("orders").unwrap().partitions[&0].clone();
    assert_eq!((q.leader, q.isr.clone(), q.eligible_leader_replicas.clone()), (-1, vec![], vec![1, 2, 3]));
    // The old leader restarts after a crash: it leaves the ELR and does not lead.
    restart(&mut c, &mut image, p.leader, -1, TIMEOUT + 2);
    let q = image.topic("orders").unwrap().partitions[&0].clone();
    assert_eq!(q.leader, -1);
    assert!(!q.eligible_leader_replicas.contains(&p.leader), "{q:?}");
    // A replica that stopped cleanly comes back and leads from the ELR.
    let clean = *q.eligible_leader_replicas.first().unwrap();
    restart(&mut c, &mut image, clean, epochs[&clean], TIMEOUT + 3);
    let q = image.topic("orders").unwrap().partitions[&0].clone();
    assert_eq!((q.leader, q.isr.clone(), q.leader_recovery_state), (clean, vec![clean], RECOVERED));
}

/// `orders-0` on two of three brokers: (controller, image, epochs, topic id, leader, the other
/// replica, the broker without a replica).
fn orders_on_two() -> (Controller, MetadataImage, BTreeMap<i32, i64>, Uuid, i32, i32, i32) {
    let (c, mut image, epochs) = three_brokers();
    with_topic(&c, &mut image, "orders", 1, 2);
    let t = image.topic_ids["orders"];
    let p = image.topics[&t].partitions[&0].clone();
    let other = *p.replicas.iter().find(|r| **r != p.leader).unwrap();
    let spare = (1..=3).find(|b| !p.replicas.contains(b)).unwrap();
    (c, image, epochs, t, p.leader, other, spare)
}

#[test]
fn a_reassignment_adds_the_target_and_finishes_once_it_is_in_sync_moving_the_leader_off_a_removed_replica() {
    let (c, mut image, epochs, t, leader, other, spare) = orders_on_two();
    let before = image.topics[&t].partitions[&0].clone();
    let records = c.reassign(&image, "orders", 0, Some(&[other, spare]), false).unwrap();
    apply_all(&mut image, &records);
    let p = image.topics[&t].partitions[&0].clone();
    // The target first, then the replica being removed; the leader and its epoch stay.
    assert_eq!(p.replicas, vec![other, spare, leader]);
    assert_eq!((p.adding_replicas.clone(), p.removing_replicas.clone()), (vec![spare], vec![leader]));
    assert_eq!((p.leader, p.leader_epoch), (leader, before.leader_epoch));
    assert_eq!(p.isr, before.isr);
    // The new replica caught up: the leader's AlterPartition brings it in and that finishes
    // the reassignment; the removed leader hands over to the first target replica in sync.
    let grown: Vec<(i32, i64)> = [leader, other, spare].iter().map(|r| (*r, epochs[r])).collect();
    let records = c.alter_partition(&image, &alter_isr(&image, &epochs, grown)).unwrap();
    apply_all(&mut image, &records);
    let p = &image.topics[&t].partitions[&0];
    assert_eq!((p.replicas.clone(), p.isr.clone()), (vec![other, spare], vec![other, spare]));
    assert!(p.adding_replicas.is_empty() && p.removing_replicas.is_empty());
    assert_eq!((p.leader, p.leader_epoch), (other, before.leader_epoch + 1));
}

#[test]
fn removing_a_follower_keeps_the_leader_but_bumps_its_epoch_to_fence_the_removed_replica() {
    let (c, mut image, epochs, t, leader, other, spare) = orders_on_two();
    let epoch = image.topics[&t].partitions[&0].leader_epoch;
    let r = c.reassign(&image, "orders", 0, Some(&[leader, spare]), false).unwrap();
    apply_all(&mut image, &r);
    assert_eq!(image.topics[&t].partitions[&0].replicas, vec![leader, spare, other]);
    let grown: Vec<(i32, i64)> = [leader, other, spare].iter().map(|r| (*r, epochs[r])).collect();
    let r = c.alter_partition(&image, &alter_isr(&image, &epochs, grown)).unwrap();
    apply_all(&mut image, &r);
    let p = &image.topics[&t].partitions[&0];
    assert_eq!((p.replicas.clone(), p.isr.clone()), (vec![leader, spare], vec![leader, spare]));
    assert_eq!((p.leader, p.leader_epoch), (leader, epoch + 1));
}

#[test]
fn a_reassignment_whose_target_is_already_in_sync_finishes_at_once_and_one_to_the_same_replicas_changes_nothing() {
    let (c, mut image, _, t, leader, other, _) = orders_on_two();
    // Reordering the same replicas: only the order (the preferred leader) changes.
    let r = c.reassign(&image, "orders", 0, Some(&[other, leader]), false).unwrap();
    apply_all(&mut image, &r);
    let p = &image.topics[&t].partitions[&0];
    assert_eq!(p.replicas, vec![other, leader]);
    assert!(p.adding_replicas.is_empty() && p.removing_replicas.is_empty());
    assert!(c.reassign(&image, "orders", 0, Some(&[other, leader]), false).unwrap().is_empty());
}

#[test]
fn cancelling_a_reassignment_reverts_to_the_original_replicas() {
    let (c, mut image, _, t, leader, other, spare) = orders_on_two();
    let before = image.topics[&t].partitions[&0].clone();
    assert_eq!(c.reassign(&image, "orders", 0, None, false).unwrap_err().code, codes::NO_REASSIGNMENT_IN_PROGRESS);
    let r = c.reassign(&image, "orders", 0, Some(&[other, spare]), false).unwrap();
    apply_all(&mut image, &r);
    let r = c.reassign(&image, "orders", 0, None, false).unwrap();
    apply_all(&mut image, &r);
    let p = &image.topics[&t].partitions[&0];
    // Kafka's revert keeps the merged order less the replicas being added.
    assert_eq!((p.replicas.clone(), p.isr.clone(), p.leader), (vec![other, leader], before.isr.clone(), leader));
    assert!(p.adding_replicas.is_empty() && p.removing_replicas.is_empty());
}

#[test]
fn a_reassignment_target_is_checked_as_kafka_checks_it() {
    let (c, image, _, _, leader, other, spare) = orders_on_two();
    let code = |target: &[i32], allow: bool| c.reassign(&image, "orders", 0, Some(target), allow).map(|_| ()).map_err(|r| r.code);
    assert_eq!(code(&[], false), Err(codes::INVALID_REPLICA_ASSIGNMENT));
    assert_eq!(code(&[leader, leader], false), Err(codes::INVALID_REPLICA_ASSIGNMENT));
    assert_eq!(code(&[leader, 9], false), Err(codes::INVALID_REPLICA_ASSIGNMENT));
    // KIP-860: a different replication factor only when allowed.
    assert_eq!(code(&[leader, other, spare], false), Err(codes::INVALID_REPLICATION_FACTOR));
    assert_eq!(code(&[leader, other, spare], true), Ok(()));
    assert_eq!(c.reassign(&image, "nope", 0, Some(&[leader]), true).unwrap_err().code, codes::UNKNOWN_TOPIC_OR_PARTITION);
    assert_eq!(c.reassign(&image, "orders", 5, Some(&[leader]), true).unwrap_err().code, codes::UNKNOWN_TOPIC_OR_PARTITION);
}
