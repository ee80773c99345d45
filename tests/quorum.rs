//! The metadata quorum as real processes: three dedicated controllers (`sluice serve` with
//! `process.roles=controller`) on 127.0.0.1, stopped with real signals. Each reports its quorum
//! status as JSON on `/healthz` (503 while it knows no leader).

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use kafka_protocol::messages::broker_registration_request::Listener;
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;

mod common;
use common::{free_port, Client};


/// What `kafka-storage random-uuid` would print; every node of one cluster is formatted with it.
const CLUSTER_ID: &str = "c2x1aWNlLXJlZmVyZW5jZQ";

struct Controllers {
    dir: tempfile::TempDir,
    cluster_ids: BTreeMap<i32, String>,
    quorum_ports: BTreeMap<i32, u16>,
    health_ports: BTreeMap<i32, u16>,
    running: BTreeMap<i32, Child>,
    /// More `key=value` settings for every node.
    extra: Vec<String>,
    /// Each node's PLAINTEXT port when the nodes are brokers too (`process.roles=broker,controller`).
    broker_ports: BTreeMap<i32, u16>,
    /// A second client listener (EXTERNAL, advertised as `localhost`) of combined nodes, whose
    /// PLAINTEXT listener is then advertised under a name that does not resolve.
    external_ports: BTreeMap<i32, u16>,
}

impl Controllers {
    fn new(n: i32) -> Controllers {
        Controllers {
            dir: tempfile::tempdir().unwrap(),
            cluster_ids: (1..=n).map(|i| (i, CLUSTER_ID.to_string())).collect(),
            quorum_ports: (1..=n).map(|i| (i, free_port())).collect(),
            health_ports: (1..=n).map(|i| (i, free_port())).collect(),
            running: BTreeMap::new(),
            extra: Vec::new(),
            broker_ports: BTreeMap::new(),
            external_ports: BTreeMap::new(),
        }
    }

    /// `n` nodes that are brokers and controllers both.
    fn combined(n: i32) -> Controllers {
        let mut c = Controllers::new(n);
        c.broker_ports = (1..=n).map(|i| (i, free_port())).collect();
        c
    }

    /// `controllers` dedicated controllers and `brokers` broker-only nodes observing them (ids
    /// after the controllers').
    fn with_observers(controllers: i32, brokers: i32) -> Controllers {
        let mut c = Controllers::new(controllers);
        for id in controllers + 1..=controllers + brokers {
            c.cluster_ids.insert(id, CLUSTER_ID.to_string());
            c.health_ports.insert(id, free_port());
            c.broker_ports.insert(id, free_port());
        }
        c
    }

    fn broker(&self, id: i32) -> Client {
        Client::connect_to(&format!("127.0.0.1:{}", self.broker_ports[&id]))
    }

    fn voters(&self) -> String {
        self.quorum_ports.iter().map(|(i, p)| format!("{i}@127.0.0.1:{p}")).collect::<Vec<_>>().join(",")
    }

    fn data(&self, id: i32) -> PathBuf {
        self.dir.path().join(format!("node{id}"))
    }

    fn settings(&self, id: i32) -> Vec<String> {
        let (roles, listeners) = match (self.broker_ports.get(&id), self.quorum_ports.get(&id)) {
            (Some(port), Some(quorum)) => ("broker,controller", format!("PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{quorum}")),
            (None, Some(quorum)) => ("controller", format!("CONTROLLER://127.0.0.1:{quorum}")),
            (Some(port), None) => ("broker", format!("PLAINTEXT://127.0.0.1:{port}")),
            (None, None) => panic!("node {id} has no role"),
        };
        let (listeners, external) = match (self.external_ports.get(&id), self.broker_ports.get(&id)) {
            (Some(ext), Some(port)) => (
                format!("{listeners},EXTERNAL://127.0.0.1:{ext}"),
                vec![
                    format!("advertised.listeners=PLAINTEXT://node{id}.invalid:{port},EXTERNAL://localhost:{ext}"),
                    "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,EXTERNAL:PLAINTEXT".to_string(),
                ],
            ),
            _ => (listeners, vec![]),
        };
        [
            format!("process.roles={roles}"),
            format!("node.id={id}"),
            format!("controller.quorum.voters={}", self.voters()),
            format!("listeners={listeners}"),
            "controller.listener.names=CONTROLLER".to_string(),
            format!("log.dirs={}", self.data(id).display()),
            format!("metrics.listener=127.0.0.1:{}", self.health_ports[&id]),
        ]
        .into_iter()
        .chain(external)
        .chain(self.extra.iter().cloned())
        .flat_map(|kv| ["--override".to_string(), kv])
        .collect()
    }

    fn start(&mut self, id: i32) {
        if !self.data(id).exists() {
            let out = Command::new(env!("CARGO_BIN_EXE_sluice"))
                .args(["format", "--cluster-id", &self.cluster_ids[&id]])
                .args(self.settings(id))
                .output()
                .unwrap();
            assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        }
        let mut child = Command::new(env!("CARGO_BIN_EXE_sluice"))
            .arg("serve")
            .args(self.settings(id))
            .env("SLUICE_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // Wait for the health endpoint, then keep draining stderr.
        let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
        let mut seen = Vec::new();
        loop {
            let Some(Ok(line)) = lines.next() else {
                panic!("controller {id} exited while starting; its stderr:\n{}", seen.join("\n"));
            };
            if line.contains("sluice metrics listening on") {
                break;
            }
            seen.push(line);
        }
        std::thread::spawn(move || lines.map_while(Result::ok).for_each(drop));
        self.running.insert(id, child);
    }

    fn kill9(&mut self, id: i32) {
        let mut child = self.running.remove(&id).expect("running");
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
    }

    fn sigterm(&mut self, id: i32) -> std::process::ExitStatus {
        let mut child = self.running.remove(&id).expect("running");
        send_sigterm(child.id());
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                return status;
            }
            assert!(Instant::now() < deadline, "controller {id} ignored SIGTERM");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// (HTTP status, JSON) of a controller's `/healthz`.
    fn health(&self, id: i32) -> Option<(u16, serde_json::Value)> {
        let mut s = TcpStream::connect(("127.0.0.1", self.health_ports[&id])).ok()?;
        s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
        s.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n").ok()?;
        let mut text = String::new();
        s.read_to_string(&mut text).ok()?;
        let status = text.split(' ').nth(1)?.parse().ok()?;
        let body = text.split("\r\n\r\n").nth(1)?;
        Some((status, serde_json::from_str(body.trim()).ok()?))
    }

    /// The leader every running controller reports, once they agree and are healthy.
    fn agreed_leader(&self, within: Duration) -> (i32, BTreeMap<i32, serde_json::Value>) {
        let deadline = Instant::now() + within;
        loop {
            let seen: BTreeMap<i32, Option<(u16, serde_json::Value)>> =
                self.running.keys().filter(|id| self.quorum_ports.contains_key(id)).map(|id| (*id, self.health(*id))).collect();
            let leaders: Vec<Option<i64>> =
                seen.values().map(|h| h.as_ref().filter(|(s, _)| *s == 200).and_then(|(_, j)| j["leader"].as_i64())).collect();
            if let Some(Some(l)) = leaders.first() {
                if leaders.iter().all(|x| *x == Some(*l)) && self.running.contains_key(&(*l as i32)) {
                    return (*l as i32, seen.into_iter().map(|(id, h)| (id, h.unwrap().1)).collect());
                }
            }
            assert!(Instant::now() < deadline, "no agreed leader within {within:?}: {seen:?}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Controllers {
    fn drop(&mut self) {
        for child in self.running.values_mut() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// SIGTERM through kill(1) (std only sends SIGKILL).
fn send_sigterm(pid: u32) {
    let status = Command::new("kill").arg("-TERM").arg(pid.to_string()).status().unwrap();
    assert!(status.success());
}

#[test]
fn three_controllers_elect_a_leader_fail_over_and_survive_kill_9_of_a_minority_and_of_all() {
    let mut c = Controllers::new(3);
    for id in 1..=3 {
        c.start(id);
    }
    let (first, health) = c.agreed_leader(Duration::from_secs(30));
    // The first leader writes the bootstrap records; every voter applies them.
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut health = health;
    while health.values().any(|h| h["features"]["metadata.version"].as_i64() != Some(33)) {
        assert!(Instant::now() < deadline, "bootstrap records not applied everywhere: {health:?}");
        std::thread::sleep(Duration::from_millis(50));
        health = c.agreed_leader(Duration::from_secs(5)).1;
    }

    // The active controller dies: the other two elect one of themselves.
    let killed_at = Instant::now();
    c.kill9(first);
    let (second, _) = c.agreed_leader(Duration::from_secs(15));
    assert_ne!(second, first);
    eprintln!("new leader {second} after {:?}", killed_at.elapsed());
    c.start(first);
    c.agreed_leader(Duration::from_secs(15));

    // A follower (a minority) dies: the leader stays.
    let follower = (1..=3).find(|id| *id != second).unwrap();
    c.kill9(follower);
    let (still, _) = c.agreed_leader(Duration::from_secs(15));
    assert_eq!(still, second);
    c.start(follower);
    let (_, before) = c.agreed_leader(Duration::from_secs(15));
    let offset_before = before.values().map(|h| h["metadata_offset"].as_i64().unwrap()).max().unwrap();
    let controllers_before = before[&second]["controllers"].clone();

    // Every voter dies at once and comes back: the same metadata, from their files.
    for id in 1..=3 {
        c.kill9(id);
    }
    for id in 1..=3 {
        c.start(id);
    }
    let deadline = Instant::now() + Duration::from_secs(15);
    let mut after = c.agreed_leader(Duration::from_secs(30)).1;
    while after.values().any(|h| h["metadata_offset"].as_i64().unwrap() < offset_before) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
        after = c.agreed_leader(Duration::from_secs(5)).1;
    }
    for (id, h) in &after {
        assert_eq!(h["features"]["metadata.version"].as_i64(), Some(33), "node {id}: {h}");
        assert!(h["metadata_offset"].as_i64().unwrap() >= offset_before, "node {id} lost records: {h} vs {offset_before}");
        for ctl in controllers_before.as_array().unwrap() {
            assert!(h["controllers"].as_array().unwrap().contains(ctl), "node {id} lost controller {ctl}: {h}");
        }
    }

    // SIGTERM stops each cleanly.
    for id in 1..=3 {
        assert!(c.sigterm(id).success());
    }
}

#[test]
fn a_controller_that_cannot_reach_a_majority_reports_no_leader_and_keeps_trying() {
    let mut c = Controllers::new(3);
    c.start(1);
    std::thread::sleep(Duration::from_secs(3));
    let (status, h) = c.health(1).expect("/healthz answers");
    assert_eq!(status, 503, "{h}");
    assert!(h["leader"].is_null(), "{h}");
    // Once a majority runs, it joins the quorum.
    c.start(2);
    let (leader, _) = c.agreed_leader(Duration::from_secs(30));
    assert!(leader == 1 || leader == 2);
}

#[test]
fn a_controller_formatted_for_another_cluster_is_refused_by_its_peers() {
    let mut c = Controllers::new(3);
    c.cluster_ids.insert(3, "b3RoZXItY2x1c3Rlci1pZA".to_string());
    for id in 1..=3 {
        c.start(id);
    }
    // 1 and 2 form the quorum; 3 is never answered, and never learns a leader.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let ok: Vec<bool> = [1, 2].iter().map(|id| c.health(*id).is_some_and(|(s, _)| s == 200)).collect();
        if ok == [true, true] {
            break;
        }
        assert!(Instant::now() < deadline, "1 and 2 never elected a leader");
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_secs(3));
    let (status, h) = c.health(3).expect("/healthz answers");
    assert_eq!(status, 503, "{h}");
    // And the format step itself refuses to re-format a dir for another cluster.
    let out = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["format", "--cluster-id", CLUSTER_ID])
        .args(c.settings(3))
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("differs from c2x1aWNlLXJlZmVyZW5jZQ"));
}

/// A broker as the controllers see it: BrokerRegistration and BrokerHeartbeat over the Kafka
/// protocol on the controller listener.
fn register(c: &Controllers, to: i32, broker: i32, incarnation: uuid::Uuid, cluster_id: &str) -> BrokerRegistrationResponse {
    let req = BrokerRegistrationRequest::default()
        .with_broker_id(broker.into())
        .with_cluster_id(StrBytes::from_string(cluster_id.to_string()))
        .with_incarnation_id(incarnation)
        .with_listeners(vec![Listener::default()
            .with_name(StrBytes::from_static_str("PLAINTEXT"))
            .with_host(StrBytes::from_static_str("127.0.0.1"))
            .with_port(9092)]);
    Client::connect_to(&format!("127.0.0.1:{}", c.quorum_ports[&to])).call(&req, 4)
}

fn heartbeat(c: &Controllers, to: i32, broker: i32, epoch: i64) -> BrokerHeartbeatResponse {
    let req = BrokerHeartbeatRequest::default().with_broker_id(broker.into()).with_broker_epoch(epoch).with_current_metadata_offset(epoch);
    Client::connect_to(&format!("127.0.0.1:{}", c.quorum_ports[&to])).call(&req, 1)
}

/// Broker `id`'s entry in controller `on`'s image, from /healthz.
fn broker_state(c: &Controllers, on: i32, id: i64) -> Option<serde_json::Value> {
    let (_, h) = c.health(on)?;
    h["brokers"].as_array()?.iter().find(|b| b["id"].as_i64() == Some(id)).cloned()
}

fn wait_for(what: &str, within: Duration, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + within;
    while !check() {
        assert!(Instant::now() < deadline, "{what} did not happen within {within:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn brokers_register_with_the_active_controller_are_unfenced_by_heartbeats_and_fenced_when_silent() {
    const NOT_CONTROLLER: i16 = 41;
    const STALE_BROKER_EPOCH: i16 = 77;
    const DUPLICATE_BROKER_REGISTRATION: i16 = 101;
    const INCONSISTENT_CLUSTER_ID: i16 = 104;
    let mut c = Controllers::new(3);
    c.extra.push("broker.session.timeout.ms=2000".into());
    for id in 1..=3 {
        c.start(id);
    }
    let (leader, _) = c.agreed_leader(Duration::from_secs(30));
    let follower = (1..=3).find(|id| *id != leader).unwrap();
    let first = uuid::Uuid::new_v4();

    // Bad input on the controller listener closes that connection and nothing else: a Kafka
    // frame over the limit (refused before anything is allocated for it), an unknown api key,
    // a body that does not decode.
    let addr = format!("127.0.0.1:{}", c.quorum_ports[&leader]);
    for bad in [&[0x7f, 0xff, 0xff, 0xff, 0x00][..], &[0, 0, 0, 8, 0x7f, 0x00, 0, 0, 0, 0, 0, 1], &[0, 0, 0, 9, 0, 62, 0, 4, 0, 0, 0, 1, 0xff]] {
        let mut client = Client::connect_to(&addr);
        client.send_raw(bad);
        assert!(client.is_closed(), "{bad:?} was not refused");
    }
    assert_eq!(c.agreed_leader(Duration::from_secs(5)).0, leader);

    // Only the active controller registers brokers, and only brokers of its cluster.
    assert_eq!(register(&c, follower, 10, first, CLUSTER_ID).error_code, NOT_CONTROLLER);
    assert_eq!(register(&c, leader, 10, first, "b3RoZXItY2x1c3Rlci1pZA").error_code, INCONSISTENT_CLUSTER_ID);

    // A registration starts fenced with a new epoch; the first heartbeat that has caught up
    // with the metadata log unfences it, on every controller's image.
    let r = register(&c, leader, 10, first, CLUSTER_ID);
    assert_eq!(r.error_code, 0);
    let epoch = r.broker_epoch;
    assert!(epoch > 0);
    assert_eq!(broker_state(&c, leader, 10).unwrap()["fenced"], true);
    let hb = heartbeat(&c, leader, 10, epoch);
    assert_eq!((hb.error_code, hb.is_fenced, hb.is_caught_up), (0, false, true));
    for id in 1..=3 {
        wait_for("the unfencing to reach every controller", Duration::from_secs(10), || {
            broker_state(&c, id, 10).is_some_and(|b| b["fenced"] == false && b["epoch"] == epoch)
        });
    }
    assert_eq!(heartbeat(&c, leader, 10, epoch - 1).error_code, STALE_BROKER_EPOCH);

    // A second process with the same node.id, while the first is alive, is refused.
    let second = uuid::Uuid::new_v4();
    let hb_and_dup = (heartbeat(&c, leader, 10, epoch), register(&c, leader, 10, second, CLUSTER_ID));
    assert_eq!(hb_and_dup.1.error_code, DUPLICATE_BROKER_REGISTRATION);

    // Silent past broker.session.timeout.ms: fenced.
    wait_for("the silent broker to be fenced", Duration::from_secs(15), || {
        broker_state(&c, leader, 10).is_some_and(|b| b["fenced"] == true)
    });
    // Restarted (a new incarnation), it gets a new, larger epoch and is unfenced again.
    let r = register(&c, leader, 10, second, CLUSTER_ID);
    assert_eq!(r.error_code, 0);
    assert!(r.broker_epoch > epoch);
    let epoch = r.broker_epoch;
    assert!(!heartbeat(&c, leader, 10, epoch).is_fenced);

    // The active controller dies: the new one knows the broker (from the replicated log),
    // starts its session afresh and keeps it unfenced while it heartbeats.
    c.kill9(leader);
    let (new_leader, _) = c.agreed_leader(Duration::from_secs(15));
    let mut hb = heartbeat(&c, new_leader, 10, epoch);
    let deadline = Instant::now() + Duration::from_secs(10);
    while hb.error_code == NOT_CONTROLLER && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
        hb = heartbeat(&c, new_leader, 10, epoch);
    }
    assert_eq!((hb.error_code, hb.is_fenced), (0, false));
    for _ in 0..30 {
        std::thread::sleep(Duration::from_millis(100));
        assert_eq!(heartbeat(&c, new_leader, 10, epoch).error_code, 0);
    }
    assert_eq!(broker_state(&c, new_leader, 10).unwrap()["fenced"], false);
}

/// Every broker's view of the cluster, once all `n` are registered and unfenced.
fn wait_for_brokers(c: &Controllers, n: usize) {
    let deadline = Instant::now() + Duration::from_secs(30);
    for id in c.broker_ports.keys() {
        loop {
            let md = c.broker(*id).call(&MetadataRequest::default().with_topics(Some(vec![])), 12);
            if md.brokers.len() == n {
                break;
            }
            assert!(Instant::now() < deadline, "broker {id} sees {:?}", md.brokers);
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

#[test]
fn a_broker_that_does_not_lead_a_partition_says_who_does() {
    const NOT_LEADER_OR_FOLLOWER: i16 = 6;
    const NOT_COORDINATOR: i16 = 16;
    let mut c = Controllers::combined(3);
    for id in 1..=3 {
        c.start(id);
    }
    wait_for_brokers(&c, 3);
    let topic = "led";
    let create = CreateTopicsRequest::default().with_timeout_ms(30_000).with_topics(vec![create_topics_request::CreatableTopic::default()
        .with_name(common::topic_name(topic))
        .with_num_partitions(1)
        .with_replication_factor(2)]);
    let created = c.broker(1).call(&create, 7);
    assert_eq!(created.topics[0].error_code, 0, "{:?}", created.topics[0].error_message);
    // Creating it again, through another broker: the controller says it exists.
    assert_eq!(c.broker(2).call(&create, 7).topics[0].error_code, 36);

    let md = c.broker(2).call(&MetadataRequest::default().with_topics(Some(vec![metadata_request::MetadataRequestTopic::default().with_name(Some(common::topic_name(topic)))])), 12);
    let p0 = &md.topics[0].partitions[0];
    let (leader, epoch) = (p0.leader_id.0, p0.leader_epoch);
    assert_eq!(p0.replica_nodes.len(), 2);
    // `other` holds no replica; `follower` holds one and does not lead.
    let other = (1..=3).find(|id| !p0.replica_nodes.iter().any(|r| r.0 == *id)).unwrap();
    let follower = p0.replica_nodes.iter().map(|r| r.0).find(|id| *id != leader).unwrap();

    let produce = |to: i32| {
        let batch = common::encode_batch(&[common::Rec { key: Some("k".into()), value: "v".into(), timestamp: 1 }], None);
        let req = ProduceRequest::default().with_acks(-1).with_timeout_ms(5000).with_topic_data(vec![produce_request::TopicProduceData::default()
            .with_name(common::topic_name(topic))
            .with_partition_data(vec![produce_request::PartitionProduceData::default().with_index(0).with_records(Some(batch))])]);
        c.broker(to).call(&req, 11)
    };
    // A non-leader refuses, naming the leader, its epoch and its endpoint (KIP-951).
    let refused = produce(other);
    let part = &refused.responses[0].partition_responses[0];
    assert_eq!(part.error_code, NOT_LEADER_OR_FOLLOWER);
    assert_eq!((part.current_leader.leader_id.0, part.current_leader.leader_epoch), (leader, epoch));
    assert_eq!(refused.node_endpoints.len(), 1);
    assert_eq!((refused.node_endpoints[0].node_id.0, refused.node_endpoints[0].port), (leader, c.broker_ports[&leader] as i32));
    // The leader appends (once its local log exists: it follows the metadata image
    // asynchronously, and answers UNKNOWN_TOPIC_OR_PARTITION, retriable, until then).
    let deadline = Instant::now() + Duration::from_secs(15);
    let ok = loop {
        let r = produce(leader);
        if r.responses[0].partition_responses[0].error_code != 3 || Instant::now() > deadline {
            break r;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!((ok.responses[0].partition_responses[0].error_code, ok.responses[0].partition_responses[0].base_offset), (0, 0));

    // Reads too: Fetch from a replica (a follower serves consumers, KIP-392, as Kafka does from
    // Fetch v11), ListOffsets only from the leader.
    let fetch = |to: i32| {
        let req = FetchRequest::default().with_max_wait_ms(0).with_max_bytes(1 << 20).with_topics(vec![fetch_request::FetchTopic::default()
            .with_topic(common::topic_name(topic))
            .with_partitions(vec![fetch_request::FetchPartition::default().with_partition(0).with_partition_max_bytes(1 << 20)])]);
        c.broker(to).call(&req, 12).responses[0].partitions[0].clone()
    };
    let refused = fetch(other);
    assert_eq!(refused.error_code, NOT_LEADER_OR_FOLLOWER);
    assert_eq!((refused.current_leader.leader_id.0, refused.current_leader.leader_epoch), (leader, epoch), "KIP-951 hint in Fetch v12");
    // Fetch v16 names the topic by id and carries the leader's endpoint too.
    let by_id = FetchRequest::default().with_max_wait_ms(0).with_max_bytes(1 << 20).with_topics(vec![fetch_request::FetchTopic::default()
        .with_topic_id(md.topics[0].topic_id)
        .with_partitions(vec![fetch_request::FetchPartition::default().with_partition(0).with_partition_max_bytes(1 << 20)])]);
    let refused = c.broker(other).call(&by_id, 16);
    let part = &refused.responses[0].partitions[0];
    assert_eq!((part.error_code, part.current_leader.leader_id.0), (NOT_LEADER_OR_FOLLOWER, leader));
    assert_eq!(refused.node_endpoints.len(), 1);
    assert_eq!((refused.node_endpoints[0].node_id.0, refused.node_endpoints[0].port), (leader, c.broker_ports[&leader] as i32));
    let from_leader = fetch(leader);
    assert_eq!((from_leader.error_code, from_leader.high_watermark), (0, 1));
    assert_eq!(fetch(follower).error_code, 0);
    let list = ListOffsetsRequest::default().with_replica_id((-1).into()).with_topics(vec![list_offsets_request::ListOffsetsTopic::default()
        .with_name(common::topic_name(topic))
        .with_partitions(vec![list_offsets_request::ListOffsetsPartition::default().with_partition_index(0).with_timestamp(-1)])]);
    assert_eq!(c.broker(other).call(&list, 7).topics[0].partitions[0].error_code, NOT_LEADER_OR_FOLLOWER);
    assert_eq!(c.broker(follower).call(&list, 7).topics[0].partitions[0].error_code, NOT_LEADER_OR_FOLLOWER);
    assert_eq!(c.broker(leader).call(&list, 7).topics[0].partitions[0].offset, 1);
    // The producers' state too: only the leader describes it.
    let producers = DescribeProducersRequest::default().with_topics(vec![describe_producers_request::TopicRequest::default()
        .with_name(common::topic_name(topic))
        .with_partition_indexes(vec![0])]);
    assert_eq!(c.broker(other).call(&producers, 0).topics[0].partitions[0].error_code, NOT_LEADER_OR_FOLLOWER);
    assert_eq!(c.broker(leader).call(&producers, 0).topics[0].partitions[0].error_code, 0);

    // A group's coordinator is the leader of its __consumer_offsets partition, wherever asked;
    // the others answer NOT_COORDINATOR.
    let find = FindCoordinatorRequest::default().with_key_type(0).with_coordinator_keys(vec![StrBytes::from_static_str("grp")]);
    let mut coordinator = -1;
    let deadline = Instant::now() + Duration::from_secs(15);
    while coordinator < 0 {
        for id in 1..=3 {
            let found = c.broker(id).call(&find, 4).coordinators[0].clone();
            if found.error_code == 0 {
                assert!(coordinator < 0 || coordinator == found.node_id.0, "brokers disagree on the coordinator");
                coordinator = found.node_id.0;
                assert_eq!(found.port, c.broker_ports[&coordinator] as i32);
            }
        }
        assert!(Instant::now() < deadline, "no coordinator for grp");
        std::thread::sleep(Duration::from_millis(200));
    }
    let not_coordinator = (1..=3).find(|id| *id != coordinator).unwrap();
    let hb = HeartbeatRequest::default().with_group_id(StrBytes::from_static_str("grp").into()).with_member_id(StrBytes::from_static_str("m")).with_generation_id(1);
    assert_eq!(c.broker(not_coordinator).call(&hb, 4).error_code, NOT_COORDINATOR);
    assert_ne!(c.broker(coordinator).call(&hb, 4).error_code, NOT_COORDINATOR);
}

/// InitProducerId on `broker`, retried while the broker has no block yet (it answers
/// COORDINATOR_LOAD_IN_PROGRESS until it is registered and the controller answers).
fn init_producer_id(c: &Controllers, broker: i32) -> i64 {
    const COORDINATOR_LOAD_IN_PROGRESS: i16 = 14;
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let resp = c.broker(broker).call(&InitProducerIdRequest::default().with_transactional_id(None).with_transaction_timeout_ms(60_000), 4);
        match resp.error_code {
            0 => {
                assert_eq!(resp.producer_epoch, 0);
                return resp.producer_id.0;
            }
            COORDINATOR_LOAD_IN_PROGRESS => assert!(Instant::now() < deadline, "broker {broker} never got a producer id block"),
            code => panic!("InitProducerId on broker {broker}: error {code}"),
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The topic's id and its `retention.ms` override as broker `on` describes them.
fn topic_id_and_retention(c: &Controllers, on: i32, topic: &str) -> (uuid::Uuid, Option<String>) {
    let req = MetadataRequest::default().with_topics(Some(vec![metadata_request::MetadataRequestTopic::default().with_name(Some(common::topic_name(topic)))]));
    let id = c.broker(on).call(&req, 12).topics[0].topic_id;
    let describe = DescribeConfigsRequest::default().with_resources(vec![describe_configs_request::DescribeConfigsResource::default()
        .with_resource_type(2)
        .with_resource_name(StrBytes::from_string(topic.to_string()))
        .with_configuration_keys(Some(vec![StrBytes::from_static_str("retention.ms")]))]);
    let resp = c.broker(on).call(&describe, 4);
    (id, resp.results[0].configs.first().and_then(|e| e.value.as_ref().map(|v| v.to_string())))
}

#[test]
fn a_whole_cluster_killed_with_sigkill_restarts_with_its_topics_configs_and_producer_ids() {
    let mut c = Controllers::combined(3);
    for id in 1..=3 {
        c.start(id);
    }
    wait_for_brokers(&c, 3);
    create_topic(&c, 2, "kept", 3, 3);
    let alter = IncrementalAlterConfigsRequest::default().with_resources(vec![incremental_alter_configs_request::AlterConfigsResource::default()
        .with_resource_type(2)
        .with_resource_name(StrBytes::from_static_str("kept"))
        .with_configs(vec![incremental_alter_configs_request::AlterableConfig::default()
            .with_name(StrBytes::from_static_str("retention.ms"))
            .with_config_operation(0)
            .with_value(Some(StrBytes::from_static_str("1234567")))])]);
    assert_eq!(c.broker(3).call(&alter, 1).responses[0].error_code, 0);
    let mut kept = None;
    wait_for("every broker to describe the topic with its config", Duration::from_secs(10), || {
        let seen: Vec<_> = (1..=3).map(|b| topic_id_and_retention(&c, b, "kept")).collect();
        kept = Some(seen[0].clone());
        seen.iter().all(|s| *s == seen[0] && s.1.as_deref() == Some("1234567") && !s.0.is_nil())
    });
    let mut seen = std::collections::BTreeSet::new();
    for round in 0..4 {
        for broker in 1..=3 {
            let id = init_producer_id(&c, broker);
            assert!(seen.insert(id), "producer id {id} handed out twice (round {round}, broker {broker}): {seen:?}");
        }
    }
    // Each broker took one block from the controller; the ids of one broker are consecutive.
    assert_eq!(seen.iter().map(|id| id / 1000).collect::<std::collections::BTreeSet<_>>().len(), 3, "{seen:?}");
    let highest = *seen.last().unwrap();

    // kill -9 of every node at once: the blocks handed out are in the metadata log, so the
    // restarted cluster never hands out an id again.
    for id in 1..=3 {
        c.kill9(id);
    }
    for id in 1..=3 {
        c.start(id);
    }
    wait_for_brokers(&c, 3);
    for broker in 1..=3 {
        let id = init_producer_id(&c, broker);
        assert!(id > highest, "broker {broker} handed out {id} after the restart; {highest} was handed out before");
        assert_eq!(Some(topic_id_and_retention(&c, broker, "kept")), kept, "broker {broker} after the restart");
    }
}

/// The topic's partitions as a broker's Metadata lists them: index -> (leader, replicas).
fn partitions_seen(c: &Controllers, broker: i32, topic: &str) -> BTreeMap<i32, (i32, Vec<i32>)> {
    let req = MetadataRequest::default().with_topics(Some(vec![metadata_request::MetadataRequestTopic::default().with_name(Some(common::topic_name(topic)))]));
    let md = c.broker(broker).call(&req, 12);
    md.topics
        .iter()
        .filter(|t| t.error_code == 0)
        .flat_map(|t| t.partitions.iter().map(|p| (p.partition_index, (p.leader_id.0, p.replica_nodes.iter().map(|r| r.0).collect()))))
        .collect()
}

fn create_topic(c: &Controllers, through: i32, topic: &str, partitions: i32, rf: i16) {
    let create = CreateTopicsRequest::default().with_timeout_ms(30_000).with_topics(vec![create_topics_request::CreatableTopic::default()
        .with_name(common::topic_name(topic))
        .with_num_partitions(partitions)
        .with_replication_factor(rf)]);
    let created = c.broker(through).call(&create, 7);
    assert_eq!(created.topics[0].error_code, 0, "creating {topic}: {:?}", created.topics[0].error_message);
}

#[test]
fn broker_only_nodes_follow_the_controllers_quorum_through_a_controller_failover() {
    let mut c = Controllers::with_observers(3, 2);
    c.extra = vec!["broker.session.timeout.ms=3000".into(), "broker.heartbeat.interval.ms=500".into()];
    for id in 1..=5 {
        c.start(id);
    }
    wait_for_brokers(&c, 2);
    // Only the brokers are listed to clients; topics are placed on them, created through either.
    create_topic(&c, 4, "observed", 4, 2);
    for broker in [4, 5] {
        wait_for(&format!("broker {broker} to see the topic"), Duration::from_secs(10), || partitions_seen(&c, broker, "observed").len() == 4);
        let seen = partitions_seen(&c, broker, "observed");
        assert!(seen.values().all(|(leader, replicas)| [4, 5].contains(leader) && { let mut r = replicas.clone(); r.sort(); r == [4, 5] }), "{seen:?}");
    }
    let ids = [init_producer_id(&c, 4), init_producer_id(&c, 5)];
    assert_ne!(ids[0], ids[1]);

    // The active controller dies: the brokers follow the new one, and creation keeps working.
    let (leader, _) = c.agreed_leader(Duration::from_secs(10));
    c.kill9(leader);
    c.agreed_leader(Duration::from_secs(10));
    create_topic(&c, 5, "after-failover", 2, 2);
    wait_for("broker 4 to see the topic made after the failover", Duration::from_secs(10), || partitions_seen(&c, 4, "after-failover").len() == 2);

    // A broker killed with SIGKILL is fenced out of the other's metadata and comes back.
    c.kill9(5);
    wait_for("broker 5 to be fenced", Duration::from_secs(15), || {
        c.broker(4).call(&MetadataRequest::default().with_topics(Some(vec![])), 12).brokers.len() == 1
    });
    assert!(partitions_seen(&c, 4, "observed").values().all(|(leader, _)| *leader == 4));
    c.start(5);
    wait_for_brokers(&c, 2);

    // /healthz: a broker is healthy while it knows the active controller and is unfenced; with
    // every controller gone it says so (503), and keeps serving its last metadata.
    wait_for("broker 5's /healthz to be 200", Duration::from_secs(10), || c.health(5).is_some_and(|(s, _)| s == 200));
    let (_, h) = c.health(4).unwrap();
    assert!(h["controller"].as_i64().is_some_and(|id| (1..=3).contains(&id)) && h["fenced"] == false, "{h}");
    for id in 1..=3 {
        if c.running.contains_key(&id) {
            c.kill9(id);
        }
    }
    wait_for("broker 4's /healthz to be 503", Duration::from_secs(15), || c.health(4).is_some_and(|(s, h)| s == 503 && h["controller"].is_null()));
    assert_eq!(partitions_seen(&c, 4, "observed").len(), 4);
}

#[test]
fn every_broker_is_named_by_its_endpoint_on_the_listener_a_request_came_in_on() {
    let mut c = Controllers::combined(3);
    c.external_ports = (1..=3).map(|i| (i, free_port())).collect();
    for id in 1..=3 {
        c.start(id);
    }
    wait_for_brokers(&c, 3);
    let external = |id: i32| Client::connect_to(&format!("127.0.0.1:{}", c.external_ports[&id]));
    let endpoints = |md: MetadataResponse| -> BTreeMap<i32, (String, i32)> {
        md.brokers.iter().map(|b| (b.node_id.0, (b.host.to_string(), b.port))).collect()
    };
    let all = MetadataRequest::default().with_topics(Some(vec![]));
    let inside = endpoints(c.broker(2).call(&all, 12));
    let outside = endpoints(external(2).call(&all, 12));
    for id in 1..=3 {
        assert_eq!(inside[&id], (format!("node{id}.invalid"), c.broker_ports[&id] as i32));
        assert_eq!(outside[&id], ("localhost".to_string(), c.external_ports[&id] as i32));
    }
    // The group coordinator, asked through the external listener, is named by its external
    // endpoint.
    let find = FindCoordinatorRequest::default().with_key_type(0).with_coordinator_keys(vec![StrBytes::from_static_str("ext-grp")]);
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let found = external(1).call(&find, 4).coordinators[0].clone();
        if found.error_code == 0 {
            assert_eq!((found.host.to_string(), found.port), ("localhost".to_string(), c.external_ports[&found.node_id.0] as i32));
            break;
        }
        assert!(Instant::now() < deadline, "no coordinator for ext-grp: {found:?}");
        std::thread::sleep(Duration::from_millis(200));
    }
}
