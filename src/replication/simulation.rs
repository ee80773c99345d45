//! A seeded simulation of one partition replicated on three brokers under an active
//! controller, built from the pure cores the broker runs: the controller's decisions
//! ([`Controller`]: registrations, heartbeats, session expiry, AlterPartition, unclean and
//! leaderless elections) and the metadata image they apply to; the leader's view of its
//! followers ([`LeaderState`]: high watermark, ISR changes, the min-ISR floor); the follower's
//! truncation point ([`truncation_point`]); the leader-epoch lookup ([`end_offset_for`]). What
//! the I/O layers do between them is mirrored here in a few lines each, in memory:
//! `Partition::become_leader` / `become_follower` (`broker/cluster.rs` sets the roles from the
//! image), the leader's fetch checks (`api/fetch.rs`: leader epoch, the follower's last fetched
//! epoch answered with a diverging epoch, progress counted only for a consistent fetch), the
//! follower's append and truncation (`fetcher.rs`), the epoch cache's assignment on append.
//!
//! A schedule is a seeded random sequence of steps: acks=all produces (the produce waits in a
//! purgatory until the leader's high watermark passes it), follower fetch requests and their
//! answers (delivered later, dropped if the link went or the follower's role moved on),
//! metadata reaching a broker, heartbeats, the leader's ISR rounds, the controller's timer
//! rounds, consumer reads up to a leader's high watermark, time passing, and faults: kill -9 and
//! restart (the log survives, as the page cache does; the high watermark comes back from an older
//! checkpoint), a broker cut off from every peer and the controller (what SIGSTOP or a network
//! partition looks like from outside), one link cut, everything healed. The controller itself
//! never fails here: its quorum is tested in `cluster/raft/tests.rs`.
//!
//! Eligible leader replicas (KIP-966) are on, as in a new cluster: the ISR may empty and a
//! leader come from the ELR, or be the last known leader after every replica restarted (each
//! restart here is a crash, so the restarted broker leaves the ELR).
//!
//! After every step: every acknowledged record and every record a consumer read is at its
//! offset in the current leader's log; no offset was acknowledged or read with two values; the
//! image's leader is in its ISR and the ISR within the replicas; each epoch cache increases. At
//! the end everything is healed and every replica must converge on the leader's log. The checks
//! are shown to fail: acknowledging acks=1 writes as if they were acks=all, or allowing unclean
//! elections, makes the simulation report lost records.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::Arc;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use uuid::Uuid;

use super::fetcher::truncation_point;
use super::leader::LeaderState;
use crate::cluster::controller::{codes, AlterIsr, Controller, Heartbeat, Registration, ELR_FEATURE, RECOVERED, RECOVERING};
use crate::cluster::image::{MetadataImage, PartitionState};
use crate::cluster::placement::Start;
use crate::cluster::records::{MetadataRecord, VersionedRecord};
use crate::log::epoch::end_offset_for;

/// The controller's end of a link.
const CONTROLLER: i32 = 0;
const BROKERS: [i32; 3] = [1, 2, 3];
const SESSION_MS: i64 = 6_000;
const LAG_MS: i64 = 3_000;
const MIN_ISR: usize = 2;
const TOPIC: &str = "sim";
/// The controller's timer round, as `cluster::driver::TICK`.
const TICK_MS: i64 = 250;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Acks {
    /// Acknowledged once the high watermark passes the record.
    All,
    /// Counted as acknowledged at the leader's append (what acks=1 promises, which is less).
    One,
}

#[derive(Debug, Clone, Copy)]
struct Settings {
    acks: Acks,
    unclean: bool,
    steps: usize,
}

#[derive(Debug)]
enum Role {
    None,
    Leader(LeaderState),
    Follower { leader: i32, epoch: i32 },
}

/// One broker's copy of the partition.
struct Replica {
    /// `(leader epoch of the batch, value)`; the index is the offset.
    log: Vec<(i32, u64)>,
    /// The leader-epoch cache: `(epoch, start offset)`.
    epochs: Vec<(i32, i64)>,
    hw: i64,
    checkpointed_hw: i64,
    role: Role,
}

impl Replica {
    fn leo(&self) -> i64 {
        self.log.len() as i64
    }

    fn latest_epoch(&self) -> i32 {
        self.epochs.last().map_or(-1, |e| e.0)
    }

    /// An append in `epoch`; the epoch cache takes a new epoch where its first batch lands,
    /// as `LeaderEpochCache::assign` does on append.
    fn push(&mut self, epoch: i32, value: u64) {
        let at = self.leo();
        if self.epochs.last().is_none_or(|&(e, _)| epoch > e) {
            self.epochs.retain(|&(_, s)| s < at);
            self.epochs.push((epoch, at));
        }
        self.log.push((epoch, value));
    }

    fn truncate(&mut self, to: i64) -> usize {
        if to >= self.leo() {
            // `log::Partition::truncate_to`: an epoch started at the log end and never written
            // in leaves the cache all the same.
            let leo = self.leo();
            self.epochs.retain(|&(_, s)| s < leo);
            return 0;
        }
        let dropped = self.log.len() - to as usize;
        self.log.truncate(to as usize);
        self.epochs.retain(|&(_, s)| s < to);
        self.hw = self.hw.min(to);
        dropped
    }
}

struct Broker {
    alive: bool,
    incarnation: u8,
    /// The broker epoch from its registration; -1 until registered.
    epoch: i64,
    /// The metadata image as this broker last received it.
    image: Arc<MetadataImage>,
    replica: Replica,
}

/// A fetch answer on its way from the leader to a follower.
struct FetchAnswer {
    leader: i32,
    epoch: i32,
    base: i64,
    records: Vec<(i32, u64)>,
    hw: i64,
    diverging: Option<(i32, i64)>,
}

struct Sim {
    seed: u64,
    settings: Settings,
    rng: StdRng,
    now: i64,
    controller: Controller,
    image: Arc<MetadataImage>,
    brokers: BTreeMap<i32, Broker>,
    /// Cut links as (smaller, larger) node ids; [`CONTROLLER`] is 0.
    cut: BTreeSet<(i32, i32)>,
    inflight: BTreeMap<i32, FetchAnswer>,
    /// Produces waiting for the high watermark: (broker, leader epoch, offset, value).
    purgatory: Vec<(i32, i32, i64, u64)>,
    acked: BTreeMap<i64, u64>,
    read: BTreeMap<i64, u64>,
    next_value: u64,
    trace: VecDeque<String>,
    step: usize,
    stats: Stats,
    /// When the controller's next timer round is due (every [`TICK_MS`], as `driver.rs` runs it).
    next_tick: i64,
}

/// What the schedules did, to show they reach the states that matter.
#[derive(Debug, Default, Clone, Copy)]
struct Stats {
    acked: usize,
    refused_below_min_isr: usize,
    truncations: usize,
    records_truncated: usize,
    isr_changes: usize,
    kills: usize,
    isolations: usize,
    /// Summed over schedules: how often leadership moved.
    leader_epochs: i64,
    /// Leaders that came from the eligible leader replicas (the ISR was empty).
    elr_elections: usize,
}

impl std::ops::AddAssign for Stats {
    fn add_assign(&mut self, o: Stats) {
        self.acked += o.acked;
        self.refused_below_min_isr += o.refused_below_min_isr;
        self.truncations += o.truncations;
        self.records_truncated += o.records_truncated;
        self.isr_changes += o.isr_changes;
        self.kills += o.kills;
        self.isolations += o.isolations;
        self.leader_epochs += o.leader_epochs;
        self.elr_elections += o.elr_elections;
    }
}

impl Sim {
    fn new(seed: u64, settings: Settings) -> Sim {
        let empty = Arc::new(MetadataImage::default());
        let brokers = BROKERS
            .iter()
            .map(|&id| {
                let replica = Replica { log: Vec::new(), epochs: Vec::new(), hw: 0, checkpointed_hw: 0, role: Role::None };
                (id, Broker { alive: true, incarnation: 1, epoch: -1, image: empty.clone(), replica })
            })
            .collect();
        let mut sim = Sim {
            seed,
            settings,
            rng: StdRng::seed_from_u64(seed),
            now: 0,
            controller: Controller::new(SESSION_MS).with_min_isr_default(MIN_ISR as i32),
            image: empty,
            brokers,
            cut: BTreeSet::new(),
            inflight: BTreeMap::new(),
            purgatory: Vec::new(),
            acked: BTreeMap::new(),
            read: BTreeMap::new(),
            next_value: 1,
            trace: VecDeque::new(),
            step: 0,
            stats: Stats::default(),
            next_tick: TICK_MS,
        };
        // Eligible leader replicas on, as a new cluster has them.
        sim.apply(&[VersionedRecord {
            version: 0,
            record: MetadataRecord::FeatureLevel { name: ELR_FEATURE.into(), feature_level: 1 },
        }]);
        for id in BROKERS {
            sim.heartbeat(id);
        }
        for id in BROKERS {
            sim.heartbeat(id);
        }
        let records = sim
            .controller
            .create_topic(&sim.image, TOPIC, 1, 3, &BTreeMap::new(), &BTreeMap::new(), Start { leader: 0, shift: 0 })
            .expect("three unfenced brokers take a topic");
        sim.apply(&records);
        for id in BROKERS {
            sim.sync(id);
        }
        sim
    }

    fn note(&mut self, what: String) {
        if self.trace.len() == 40 {
            self.trace.pop_front();
        }
        self.trace.push_back(format!("#{} t={}ms {what}", self.step, self.now));
    }

    fn apply(&mut self, records: &[VersionedRecord]) {
        if records.is_empty() {
            return;
        }
        let mut image = (*self.image).clone();
        for r in records {
            let offset = image.offset + 1;
            let leaderless = Sim::partition(&image).is_some_and(|p| p.isr.is_empty());
            image.apply(offset, &r.record).expect("the controller's records apply to its image");
            if leaderless && Sim::partition(&image).is_some_and(|p| p.leader >= 0) {
                self.stats.elr_elections += 1;
                self.note(format!("leader {} elected with the ISR empty", Sim::partition(&image).map_or(-1, |p| p.leader)));
            }
        }
        self.image = Arc::new(image);
    }

    fn linked(&self, a: i32, b: i32) -> bool {
        let up = |n: i32| n == CONTROLLER || self.brokers[&n].alive;
        up(a) && up(b) && !self.cut.contains(&(a.min(b), a.max(b)))
    }

    fn partition(image: &MetadataImage) -> Option<&PartitionState> {
        image.topic(TOPIC)?.partitions.get(&0)
    }

    /// `broker/cluster.rs`: the broker takes its role from the image it received.
    fn sync(&mut self, id: i32) {
        if !self.linked(id, CONTROLLER) {
            return;
        }
        let image = self.image.clone();
        let now = self.now;
        let b = self.brokers.get_mut(&id).unwrap();
        b.image = image.clone();
        let Some(p) = Self::partition(&image) else { return };
        let leo = b.replica.leo();
        let before = format!("{:?}", role_name(&b.replica.role));
        if !p.replicas.contains(&id) {
            b.replica.role = Role::None;
        } else if p.leader == id {
            match &mut b.replica.role {
                Role::Leader(l) if l.leader_epoch == p.leader_epoch => l.update(p.partition_epoch, p.replicas.clone(), p.isr.clone(), now),
                _ => {
                    // `Partition::become_leader`: the new epoch starts at the log end in the cache.
                    if b.replica.epochs.last().is_none_or(|&(e, _)| p.leader_epoch > e) {
                        b.replica.epochs.push((p.leader_epoch, leo));
                    }
                    let mut l = LeaderState::new(id, p.leader_epoch, p.partition_epoch, p.replicas.clone(), p.isr.clone(), leo, now);
                    l.min_isr = MIN_ISR;
                    b.replica.role = Role::Leader(l);
                }
            }
        } else {
            b.replica.role = Role::Follower { leader: p.leader, epoch: p.leader_epoch };
        }
        let after = format!("{:?}", role_name(&b.replica.role));
        if before != after {
            self.note(format!("broker {id}: {before} -> {after} (isr {:?})", p.isr));
        }
        self.advance_hw(id);
    }

    /// `Partition::advance_high_watermark`, then the purgatory: produces the high watermark
    /// passed are acknowledged; those of an epoch this broker no longer leads fail.
    fn advance_hw(&mut self, id: i32) {
        let now = self.now;
        let b = self.brokers.get_mut(&id).unwrap();
        let leo = b.replica.leo();
        let epoch = match &b.replica.role {
            Role::Leader(l) => {
                if let Some(hw) = l.high_watermark(leo, now, LAG_MS) {
                    b.replica.hw = b.replica.hw.max(hw.min(leo));
                }
                Some(l.leader_epoch)
            }
            _ => None,
        };
        let hw = b.replica.hw;
        let mut done = Vec::new();
        self.purgatory.retain(|&(broker, e, offset, value)| {
            if broker != id {
                return true;
            }
            if Some(e) != epoch {
                return false;
            }
            if offset < hw {
                done.push((offset, value));
                return false;
            }
            true
        });
        for (offset, value) in done {
            self.ack(id, offset, value);
        }
    }

    fn ack(&mut self, id: i32, offset: i64, value: u64) {
        self.note(format!("broker {id}: acknowledged value {value} at offset {offset}"));
        if let Some(old) = self.acked.insert(offset, value) {
            self.acked.insert(offset, old);
            self.violation(format!("offset {offset} acknowledged twice: values {old} and {value}"));
        }
    }

    fn violation(&mut self, what: String) {
        panic!(
            "seed {} ({:?}), step {}: {what}\nlast steps:\n{}",
            self.seed,
            self.settings,
            self.step,
            self.trace.iter().cloned().collect::<Vec<_>>().join("\n")
        );
    }

    fn produce(&mut self, id: i32) {
        let acks = self.settings.acks;
        let b = self.brokers.get_mut(&id).unwrap();
        let Role::Leader(l) = &b.replica.role else { return };
        if acks == Acks::All && !l.has_min_isr() {
            self.stats.refused_below_min_isr += 1; // NOT_ENOUGH_REPLICAS
            return;
        }
        let (epoch, value) = (l.leader_epoch, self.next_value);
        self.next_value += 1;
        let offset = b.replica.leo();
        b.replica.push(epoch, value);
        self.note(format!("broker {id}: appended value {value} at offset {offset} in epoch {epoch}"));
        match acks {
            Acks::All => self.purgatory.push((id, epoch, offset, value)),
            Acks::One => self.ack(id, offset, value),
        }
        self.advance_hw(id);
    }

    /// The follower's fetch reaches its leader (`api/fetch.rs`); the answer goes in flight.
    fn fetch_request(&mut self, id: i32) {
        let Role::Follower { leader, epoch } = self.brokers[&id].replica.role else { return };
        if leader < 0 || self.inflight.contains_key(&id) || !self.linked(id, leader) {
            return;
        }
        let (fetch_offset, last_epoch, broker_epoch) = {
            let f = &self.brokers[&id];
            (f.replica.leo(), f.replica.latest_epoch(), f.epoch)
        };
        let now = self.now;
        let n = self.rng.gen_range(0..=4usize);
        let lb = self.brokers.get_mut(&leader).unwrap();
        let leo = lb.replica.leo();
        let Role::Leader(l) = &mut lb.replica.role else { return }; // NOT_LEADER_OR_FOLLOWER
        if l.leader_epoch != epoch {
            return; // FENCED_LEADER_EPOCH / UNKNOWN_LEADER_EPOCH
        }
        let epoch_ends_here = |last: i32| matches!(end_offset_for(&lb.replica.epochs, last, leo), Some((e, end)) if e == last && end >= fetch_offset);
        let consistent = fetch_offset <= leo && (last_epoch < 0 || epoch_ends_here(last_epoch));
        if consistent {
            l.on_fetch(id, broker_epoch, fetch_offset.min(leo), leo, now);
        }
        let diverging = (last_epoch >= 0 && !epoch_ends_here(last_epoch))
            .then(|| end_offset_for(&lb.replica.epochs, last_epoch, leo).unwrap_or((-1, -1)));
        let records = if diverging.is_none() && fetch_offset < leo {
            lb.replica.log[fetch_offset as usize..(fetch_offset as usize + n).min(leo as usize)].to_vec()
        } else {
            Vec::new()
        };
        self.advance_hw(leader);
        let hw = self.brokers[&leader].replica.hw;
        self.inflight.insert(id, FetchAnswer { leader, epoch, base: fetch_offset, records, hw, diverging });
    }

    /// The answer reaches the follower (`fetcher.rs`), unless the link went, the follower
    /// restarted, or it follows another leader or epoch by now.
    fn fetch_response(&mut self, id: i32) {
        let Some(a) = self.inflight.remove(&id) else { return };
        if !self.linked(id, a.leader) {
            return;
        }
        let f = self.brokers.get_mut(&id).unwrap();
        if !matches!(f.replica.role, Role::Follower { leader, epoch } if leader == a.leader && epoch == a.epoch) || f.replica.leo() != a.base {
            return;
        }
        if let Some((epoch, end)) = a.diverging {
            let local = end_offset_for(&f.replica.epochs, epoch, f.replica.leo());
            let to = if end < 0 { f.replica.hw } else { truncation_point(epoch, end, local, f.replica.leo()) };
            let dropped = f.replica.truncate(to);
            self.stats.truncations += 1;
            self.stats.records_truncated += dropped;
            self.note(format!("broker {id}: diverged from {} at epoch {epoch} end {end}: truncated to {to}, {dropped} dropped", a.leader));
            return;
        }
        for (epoch, value) in &a.records {
            f.replica.push(*epoch, *value);
        }
        f.replica.hw = f.replica.hw.max(a.hw.min(f.replica.leo()));
    }

    fn heartbeat(&mut self, id: i32) {
        if !self.linked(id, CONTROLLER) {
            return;
        }
        self.sync(id);
        let b = &self.brokers[&id];
        if b.epoch < 0 {
            let reg = Registration {
                broker_id: id,
                incarnation_id: Uuid::from_bytes([b.incarnation; 16]),
                endpoints: Vec::new(),
                features: Vec::new(),
                rack: None,
                previous_broker_epoch: -1,
            };
            if let Ok((records, epoch)) = self.controller.register(&self.image, &reg, self.now) {
                self.apply(&records);
                self.brokers.get_mut(&id).unwrap().epoch = epoch;
                self.note(format!("broker {id}: registered in epoch {epoch}"));
            }
            return;
        }
        let hb = Heartbeat { broker_id: id, broker_epoch: b.epoch, metadata_offset: b.image.offset, want_shutdown: false };
        match self.controller.heartbeat(&self.image, &hb, self.now) {
            Ok((records, _)) => self.apply(&records),
            Err(r) if r.code == codes::STALE_BROKER_EPOCH || r.code == codes::BROKER_ID_NOT_REGISTERED => {
                self.brokers.get_mut(&id).unwrap().epoch = -1;
            }
            Err(_) => {}
        }
    }

    /// `broker/cluster.rs::propose_isr_changes`: the leader asks the controller for its ISR
    /// change; a refusal or a lost request lets it propose again.
    fn isr_round(&mut self, id: i32) {
        let now = self.now;
        let reachable = self.linked(id, CONTROLLER);
        let b = self.brokers.get_mut(&id).unwrap();
        let (hw, leo, broker_epoch, image) = (b.replica.hw, b.replica.leo(), b.epoch, b.image.clone());
        let Role::Leader(l) = &mut b.replica.role else { return };
        let Some(p) = Self::partition(&image) else { return };
        let topic_id = image.topic_ids[TOPIC];
        let req = if p.leader_recovery_state == RECOVERING && p.leader == id && p.leader_epoch == l.leader_epoch {
            AlterIsr {
                broker_id: id,
                broker_epoch,
                topic_id,
                partition: 0,
                leader_epoch: l.leader_epoch,
                partition_epoch: p.partition_epoch,
                new_isr: vec![(id, broker_epoch)],
                leader_recovery_state: RECOVERED,
            }
        } else {
            let eligible = |r: i32| image.brokers.get(&r).is_some_and(|x| !x.fenced && !x.in_controlled_shutdown);
            let Some(change) = l.isr_change(hw, leo, now, LAG_MS, eligible) else { return };
            l.set_pending(&change);
            AlterIsr {
                broker_id: id,
                broker_epoch,
                topic_id,
                partition: 0,
                leader_epoch: l.leader_epoch,
                partition_epoch: change.partition_epoch,
                new_isr: change.isr,
                leader_recovery_state: RECOVERED,
            }
        };
        if !reachable {
            l.clear_pending();
            return;
        }
        match self.controller.alter_partition(&self.image, &req) {
            Ok(records) => {
                self.apply(&records);
                self.stats.isr_changes += 1;
                let isr: Vec<i32> = req.new_isr.iter().map(|(r, _)| *r).collect();
                self.note(format!("broker {id}: AlterPartition to {isr:?} taken"));
            }
            Err(code) => {
                if let Role::Leader(l) = &mut self.brokers.get_mut(&id).unwrap().replica.role {
                    l.clear_pending();
                }
                let image_epoch = self.image.brokers.get(&id).map(|b| b.epoch);
                self.note(format!("broker {id}: AlterPartition {req:?} refused with {code} (image: broker epoch {image_epoch:?})"));
            }
        }
    }

    /// The active controller's timer round (`driver.rs::tick`).
    fn controller_tick(&mut self) {
        let mut records = self.controller.expire_sessions(&self.image, self.now);
        if records.is_empty() {
            let unclean = self.settings.unclean;
            records = self.controller.elect_unclean(&self.image, |_| unclean);
        }
        if !records.is_empty() {
            self.apply(&records);
            let p = Self::partition(&self.image).unwrap();
            let fenced: Vec<i32> = self.image.brokers.values().filter(|b| b.fenced).map(|b| b.id).collect();
            self.note(format!("controller: leader {} epoch {} isr {:?}, fenced {fenced:?}", p.leader, p.leader_epoch, p.isr));
        }
    }

    /// A consumer reads everything below a leader's high watermark (a leader by its own image).
    fn consume(&mut self, id: i32) {
        let b = &self.brokers[&id];
        if !matches!(b.replica.role, Role::Leader(_)) {
            return;
        }
        let got: Vec<(i64, u64)> = b.replica.log[..b.replica.hw as usize].iter().enumerate().map(|(o, (_, v))| (o as i64, *v)).collect();
        for (offset, value) in got {
            if let Some(old) = self.read.insert(offset, value) {
                if old != value {
                    self.violation(format!("offset {offset} read as {old} and later as {value} (from broker {id})"));
                }
            }
        }
    }

    fn kill(&mut self, id: i32) {
        let b = self.brokers.get_mut(&id).unwrap();
        b.alive = false;
        b.replica.role = Role::None;
        self.inflight.remove(&id);
        self.purgatory.retain(|p| p.0 != id);
        self.stats.kills += 1;
        self.note(format!("broker {id}: killed"));
    }

    fn restart(&mut self, id: i32) {
        let b = self.brokers.get_mut(&id).unwrap();
        b.alive = true;
        b.incarnation += 1;
        b.epoch = -1;
        b.replica.hw = b.replica.checkpointed_hw.min(b.replica.leo());
        self.note(format!("broker {id}: restarted"));
    }

    /// Time passes; the controller's timer rounds due meanwhile run (a controller that missed
    /// them would take itself for paused and restart every session).
    fn advance(&mut self, dt: i64) {
        let until = self.now + dt;
        while self.next_tick <= until {
            self.now = self.next_tick;
            self.next_tick += TICK_MS;
            self.controller_tick();
            self.check();
        }
        self.now = until;
    }

    fn one_step(&mut self) {
        self.step += 1;
        let id = BROKERS[self.rng.gen_range(0..BROKERS.len())];
        let alive = self.brokers[&id].alive;
        // Per mille: mostly the cluster working, now and then a fault, and time passing at
        // about 40 ms a step, so that sessions (6 s) and the lag time (3 s) run out during
        // faults that last a few hundred steps.
        match self.rng.gen_range(0..1000) {
            0..200 if alive => self.produce(id),
            200..380 if alive => self.fetch_request(id),
            380..530 if alive => self.fetch_response(id),
            530..610 if alive => self.sync(id),
            610..690 if alive => self.heartbeat(id),
            690..760 if alive => self.isr_round(id),
            760..800 if alive => self.heartbeat(id),
            800..850 if alive => self.consume(id),
            850..930 => {
                let dt = self.rng.gen_range(1..=1000);
                self.advance(dt);
            }
            930..933 if alive => self.kill(id),
            933..943 if !alive => self.restart(id),
            943..946 => {
                for other in [CONTROLLER].into_iter().chain(BROKERS) {
                    if other != id {
                        self.cut.insert((id.min(other), id.max(other)));
                    }
                }
                self.stats.isolations += 1;
                self.note(format!("broker {id}: cut off from every node"));
            }
            946..950 => {
                let other = [CONTROLLER].into_iter().chain(BROKERS).filter(|o| *o != id).nth(self.rng.gen_range(0..3)).unwrap();
                self.cut.insert((id.min(other), id.max(other)));
                self.note(format!("link {id}-{other} cut"));
            }
            950..955 => {
                self.cut.clear();
                self.note("every link healed".into());
            }
            955..965 if alive => self.brokers.get_mut(&id).unwrap().replica.checkpointed_hw = self.brokers[&id].replica.hw,
            _ => {}
        }
        self.check();
    }

    /// The safety invariants, after every step.
    fn check(&mut self) {
        let Some(p) = Self::partition(&self.image).cloned() else { return };
        // With eligible leader replicas the ISR may be empty, but then nothing leads; the ELR
        // is outside the ISR.
        let elr_outside = p.eligible_leader_replicas.iter().all(|r| p.replicas.contains(r) && !p.isr.contains(r));
        if (p.isr.is_empty() && p.leader >= 0)
            || p.isr.iter().any(|r| !p.replicas.contains(r))
            || (p.leader >= 0 && !p.isr.contains(&p.leader))
            || !elr_outside
        {
            self.violation(format!(
                "image: leader {} isr {:?} elr {:?} replicas {:?}",
                p.leader, p.isr, p.eligible_leader_replicas, p.replicas
            ));
        }
        let broken = self.brokers.iter().find(|(_, b)| {
            let e = &b.replica.epochs;
            e.windows(2).any(|w| w[0].0 >= w[1].0 || w[0].1 > w[1].1) || b.replica.hw > b.replica.leo()
        });
        if let Some((id, b)) = broken {
            let what = format!("broker {id}: epochs {:?}, hw {} leo {}", b.replica.epochs, b.replica.hw, b.replica.leo());
            self.violation(what);
        }
        // The leader the image names, once it has taken the role: it has every record that was
        // acknowledged or read, at its offset.
        let Some(leader) = self.brokers.get(&p.leader) else { return };
        if !matches!(&leader.replica.role, Role::Leader(l) if l.leader_epoch == p.leader_epoch) {
            return;
        }
        let log = &leader.replica.log;
        let missing = self
            .acked
            .iter()
            .map(|(o, v)| ("acknowledged", *o, *v))
            .chain(self.read.iter().map(|(o, v)| ("read", *o, *v)))
            .find(|(_, o, v)| log.get(*o as usize).map(|x| x.1) != Some(*v));
        if let Some((kind, offset, value)) = missing {
            let found = log.get(offset as usize).map(|x| x.1);
            self.violation(format!(
                "lost: value {value} {kind} at offset {offset}; leader {} (epoch {}) has {found:?} there",
                p.leader, p.leader_epoch
            ));
        }
    }

    /// Heals every fault and runs the cluster without faults until the replicas agree.
    fn converge(&mut self) {
        self.cut.clear();
        for id in BROKERS {
            if !self.brokers[&id].alive {
                self.restart(id);
            }
        }
        for _ in 0..400 {
            self.step += 1;
            self.advance(100);
            for id in BROKERS {
                self.heartbeat(id);
                self.fetch_response(id);
                self.fetch_request(id);
                self.isr_round(id);
            }
            self.check();
            let p = Self::partition(&self.image).unwrap().clone();
            let Some(leader) = self.brokers.get(&p.leader) else { continue };
            let all_in = p.isr.len() == BROKERS.len();
            let same = self.brokers.values().all(|b| b.replica.log == leader.replica.log);
            if all_in && same {
                return;
            }
        }
        let p = Self::partition(&self.image).unwrap().clone();
        let state: Vec<String> = self
            .brokers
            .iter()
            .map(|(id, b)| format!("broker {id} ({}, epoch {}): epochs {:?} hw {} log {:?}", role_name(&b.replica.role), b.epoch, b.replica.epochs, b.replica.hw, b.replica.log))
            .collect();
        self.violation(format!("no convergence after healing: leader {} isr {:?}\n{}", p.leader, p.isr, state.join("\n")));
    }
}

fn role_name(role: &Role) -> String {
    match role {
        Role::None => "none".into(),
        Role::Leader(l) => format!("leader in epoch {}", l.leader_epoch),
        Role::Follower { leader, epoch } => format!("follower of {leader} in epoch {epoch}"),
    }
}

/// Runs one schedule; a violation panics with the seed and the last steps.
fn run(seed: u64, settings: Settings) -> Sim {
    let mut sim = Sim::new(seed, settings);
    for _ in 0..settings.steps {
        sim.one_step();
    }
    sim.converge();
    sim.stats.acked = sim.acked.len();
    sim.stats.leader_epochs = Sim::partition(&sim.image).map_or(0, |p| p.leader_epoch as i64);
    sim
}

/// How many schedules: `SLUICE_SIM_SCHEDULES` (for long runs, `make sim`), else `default`.
fn schedules(default: u64) -> u64 {
    std::env::var("SLUICE_SIM_SCHEDULES").ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// Whether some schedule among `seeds` reports lost records.
fn finds_loss(settings: Settings, seeds: std::ops::Range<u64>) -> Option<String> {
    seeds.into_iter().find_map(|seed| {
        let outcome = std::panic::catch_unwind(|| run(seed, settings));
        match outcome {
            Ok(_) => None,
            Err(e) => {
                let message = e.downcast_ref::<String>().cloned().unwrap_or_default();
                Some(message).filter(|m| m.contains("lost:"))
            }
        }
    })
}

#[test]
fn seeded_schedules_of_kills_partitions_and_slow_replicas_lose_no_acknowledged_record() {
    let settings = Settings { acks: Acks::All, unclean: false, steps: 3000 };
    let mut total = Stats::default();
    let n = schedules(300);
    for seed in 0..n {
        total += run(seed, settings).stats;
    }
    eprintln!("{n} schedules: {total:?}");
    // The schedules reach what matters: acknowledged records, refusals below the min-ISR
    // floor, ISR changes, followers truncating diverged records, leadership moving, leaders
    // elected with the ISR empty (from the eligible leader replicas, or the last known leader).
    assert!(total.acked > 10 * n as usize, "{total:?}");
    assert!(total.elr_elections > 0, "{total:?}");
    assert!(total.refused_below_min_isr > 0 && total.isr_changes > n as usize, "{total:?}");
    assert!(total.records_truncated > 0, "{total:?}");
    assert!(total.leader_epochs > n as i64, "{total:?}");
}

#[test]
fn schedules_where_a_new_leader_had_not_written_in_its_epoch_lose_nothing() {
    // Found by `make sim` with eligible leader replicas on: a leader that had not appended in
    // its epoch answered a follower's last fetched epoch as unknown, the follower truncated to
    // its own (older) high watermark, dropping acknowledged records, and then led from the
    // ELR (seed 5490). With the epoch started at the log end, a follower that was leader
    // without writing kept the unwritten epoch and looped on truncation (seed 3).
    for seed in [3, 5490] {
        run(seed, Settings { acks: Acks::All, unclean: false, steps: 3000 });
    }
}

#[test]
fn the_simulation_finds_the_loss_of_acks_1_writes_when_a_leader_fails() {
    let settings = Settings { acks: Acks::One, unclean: false, steps: 3000 };
    let found = finds_loss(settings, 0..200);
    assert!(found.is_some(), "no schedule lost an acks=1 write");
}

#[test]
fn the_simulation_finds_the_loss_an_unclean_election_causes() {
    let settings = Settings { acks: Acks::All, unclean: true, steps: 3000 };
    let found = finds_loss(settings, 0..400);
    assert!(found.is_some(), "no schedule lost a write to an unclean election");
}
