//! Three voters in one process, over real TCP on 127.0.0.1 with their files in temporary
//! directories: elections, failover, restarts from disk, catch-up by snapshot, validation.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use tokio::net::TcpListener;
use uuid::Uuid;

use super::{QuorumConfig, RaftQuorum};
use crate::cluster::quorum::{MetadataQuorum, QuorumError};
use crate::cluster::records::{MetadataRecord, Partition, VersionedRecord};

const FAST: QuorumConfig = QuorumConfig { heartbeat_ms: 50, election_timeout_ms: 300, snapshot_every: 20 };
const PATIENCE: Duration = Duration::from_secs(20);
const CLUSTER_ID: &str = "c2x1aWNlLXJlZmVyZW5jZQ";

struct Cluster {
    _root: tempfile::TempDir,
    dirs: BTreeMap<i32, PathBuf>,
    voters: BTreeMap<i32, String>,
    nodes: BTreeMap<i32, RaftQuorum>,
}

impl Cluster {
    async fn start(n: i32) -> Cluster {
        let root = tempfile::tempdir().unwrap();
        let mut listeners = BTreeMap::new();
        let mut voters = BTreeMap::new();
        for id in 1..=n {
            let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
            voters.insert(id, l.local_addr().unwrap().to_string());
            listeners.insert(id, l);
        }
        let dirs: BTreeMap<i32, PathBuf> = (1..=n).map(|id| (id, root.path().join(format!("node-{id}")))).collect();
        let mut cluster = Cluster { _root: root, dirs, voters, nodes: BTreeMap::new() };
        for (id, l) in listeners {
            let q = RaftQuorum::start(id, CLUSTER_ID, l, &cluster.voters, &cluster.dirs[&id], FAST).await.unwrap();
            cluster.nodes.insert(id, q);
        }
        cluster
    }

    async fn stop(&mut self, id: i32) {
        self.nodes.remove(&id).expect("running").shutdown().await;
    }

    async fn restart(&mut self, id: i32) {
        let l = TcpListener::bind(&self.voters[&id]).await.unwrap();
        let q = RaftQuorum::start(id, CLUSTER_ID, l, &self.voters, &self.dirs[&id], FAST).await.unwrap();
        self.nodes.insert(id, q);
    }

    /// The leader every running voter agrees on.
    async fn leader(&self) -> i32 {
        let deadline = tokio::time::Instant::now() + PATIENCE;
        loop {
            let seen: Vec<Option<i32>> = self.nodes.values().map(|q| q.status().leader).collect();
            if let Some(Some(l)) = seen.first() {
                if self.nodes.contains_key(l) && seen.iter().all(|s| *s == Some(*l)) {
                    return *l;
                }
            }
            assert!(tokio::time::Instant::now() < deadline, "no agreed leader: {seen:?}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Proposes through the leader, finding it again while an election (after restarts) moves
    /// the leadership.
    async fn propose_on_leader(&self, records: Vec<VersionedRecord>) -> i64 {
        let deadline = tokio::time::Instant::now() + PATIENCE;
        loop {
            let leader = self.leader().await;
            match self.nodes[&leader].propose(records.clone()).await {
                Ok(offset) => return offset,
                Err(e) => assert!(tokio::time::Instant::now() < deadline, "no leader took the proposal: {e}"),
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Waits until every running voter's image has the topic.
    async fn everyone_has(&self, topic: &str) {
        let deadline = tokio::time::Instant::now() + PATIENCE;
        for (id, q) in &self.nodes {
            let mut rx = q.image();
            while rx.borrow().topic(topic).is_none() {
                let left = deadline.saturating_duration_since(tokio::time::Instant::now());
                assert!(
                    tokio::time::timeout(left, rx.changed()).await.is_ok(),
                    "node {id} never applied topic {topic}"
                );
            }
        }
    }
}

fn new_topic(name: &str, partitions: i32) -> Vec<VersionedRecord> {
    let id = Uuid::new_v4();
    let mut out = vec![VersionedRecord { version: 0, record: MetadataRecord::Topic { name: name.into(), topic_id: id } }];
    for p in 0..partitions {
        let replicas = vec![1 + p % 3, 1 + (p + 1) % 3, 1 + (p + 2) % 3];
        out.push(VersionedRecord { version: 2, record: MetadataRecord::Partition(Partition::new(id, p, replicas)) });
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_voters_elect_one_leader_and_every_image_gets_the_committed_records() {
    let c = Cluster::start(3).await;
    let leader = c.leader().await;
    let offset = c.nodes[&leader].propose(new_topic("orders", 3)).await.unwrap();
    assert_eq!(offset, 3, "a topic record and three partition records, numbered from 0");
    c.everyone_has("orders").await;
    let images: Vec<_> = c.nodes.values().map(|q| q.image().borrow().clone()).collect();
    assert!(images.iter().all(|i| **i == *images[0]), "every voter built the same image");
    assert_eq!(images[0].topic("orders").unwrap().partitions.len(), 3);
    let status = c.nodes[&leader].status();
    assert_eq!(status.voters.iter().map(|v| v.id).collect::<Vec<_>>(), vec![1, 2, 3]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_refuses_proposals_naming_the_leader() {
    let c = Cluster::start(3).await;
    let leader = c.leader().await;
    let follower = *c.nodes.keys().find(|id| **id != leader).unwrap();
    match c.nodes[&follower].propose(new_topic("t", 1)).await {
        Err(QuorumError::NotLeader { leader: Some(l) }) => assert_eq!(l, leader),
        other => panic!("{other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_proposal_that_does_not_apply_is_refused_before_it_is_written() {
    let c = Cluster::start(3).await;
    let leader = c.leader().await;
    let before = c.nodes[&leader].status().last_log_index;
    let orphan = new_topic("x", 1).split_off(1);
    let err = c.nodes[&leader].propose(orphan).await.unwrap_err().to_string();
    assert!(err.contains("PartitionRecord") && err.contains("no topic has id"), "{err}");
    assert_eq!(c.nodes[&leader].status().last_log_index, before, "nothing was appended");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn losing_the_leader_elects_another_and_writes_continue() {
    let mut c = Cluster::start(3).await;
    let first = c.leader().await;
    c.nodes[&first].propose(new_topic("before", 1)).await.unwrap();
    c.stop(first).await;
    let second = c.leader().await;
    assert_ne!(second, first);
    c.nodes[&second].propose(new_topic("after", 1)).await.unwrap();
    c.everyone_has("after").await;
    c.everyone_has("before").await;
    // The old leader comes back as a follower and catches up.
    c.restart(first).await;
    c.everyone_has("after").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_voter_restarts_from_its_files_into_the_same_image() {
    let mut c = Cluster::start(3).await;
    let leader = c.leader().await;
    for i in 0..5 {
        c.nodes[&leader].propose(new_topic(&format!("t{i}"), 2)).await.unwrap();
    }
    c.everyone_has("t4").await;
    let before = c.nodes[&leader].image().borrow().clone();
    for id in 1..=3 {
        c.stop(id).await;
    }
    for id in 1..=3 {
        c.restart(id).await;
    }
    c.propose_on_leader(new_topic("again", 1)).await;
    c.everyone_has("again").await;
    for (id, q) in &c.nodes {
        let image = q.image().borrow().clone();
        for (topic_id, t) in &before.topics {
            assert_eq!(image.topics.get(topic_id), Some(t), "node {id} lost or changed topic {}", t.name);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_voter_left_behind_the_purged_log_is_caught_up_by_snapshot() {
    let mut c = Cluster::start(3).await;
    let leader = c.leader().await;
    let behind = *c.nodes.keys().find(|id| **id != leader).unwrap();
    c.stop(behind).await;
    // Well past snapshot_every (20 entries): the leader snapshots and purges its log.
    for i in 0..60 {
        c.nodes[&leader].propose(new_topic(&format!("p{i}"), 1)).await.unwrap();
    }
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while c.nodes[&leader].raft.metrics().borrow().purged.is_none() {
        assert!(tokio::time::Instant::now() < deadline, "the leader never purged its log");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    c.restart(behind).await;
    c.everyone_has("p59").await;
    let leader_image = c.nodes[&leader].image().borrow().clone();
    let behind_image = c.nodes[&behind].image().borrow().clone();
    assert_eq!(behind_image.topics, leader_image.topics);
    assert!(c.dirs[&behind].join("raft-snapshot").exists(), "the snapshot was installed and kept");
}
