//! Every group this node coordinates and its committed offsets: request validation that is not a
//! single group's business (group ids, session timeout bounds, sizes), offset commit/fetch/delete,
//! group listing/deletion, offset expiry, and replay of `__consumer_offsets` at startup.
//!
//! Pure like [`super::classic`]: changes to persist accumulate as [`CoordinatorRecord`]s and
//! delayed answers as [`Completion`]s; the driver drains both with [`GroupCoordinator::drain`]
//! after every call, while still holding the lock, so records reach the log in state order.
//!
//! # Invariants
//! - A group with members, pending members or offsets is never removed from `groups`.
//! - Offset expiry only touches groups that are Empty (Kafka's classic rule): offsets expire
//!   `offsets.retention.minutes` after the later of their commit and the group becoming Empty.

use std::collections::BTreeMap;

use bytes::Bytes;
use kafka_protocol::ResponseError;

use super::classic::{ClassicGroup, GroupState, JoinReply, JoinRequest, Outcome, SyncReply};
use super::consumer::{self, ConsumerGroup, ConsumerGroupLimits, Heartbeat, HeartbeatReply};
use super::records::{CoordinatorRecord, GroupValue, MemberValue, OffsetValue};
use super::{Completion, GroupConfig};

/// A group and its offsets.
#[derive(Debug)]
pub struct GroupEntry {
    /// The classic state; an Empty placeholder while the group is a consumer group.
    pub classic: ClassicGroup,
    /// Set when the group uses the KIP-848 consumer protocol.
    pub consumer: Option<ConsumerGroup>,
    /// (topic, partition) -> committed offset.
    pub offsets: BTreeMap<(String, i32), OffsetValue>,
    /// The KIP-848 records last written (or loaded) for this group, by (key version, member):
    /// what a change is compared against, so only changed records are written.
    persisted: BTreeMap<(i16, String), CoordinatorRecord>,
}

/// A KIP-848 record's identity within its group: (key version, member id or "").
fn consumer_key(r: &CoordinatorRecord) -> Option<(i16, String)> {
    match r {
        CoordinatorRecord::ConsumerGroup { .. } => Some((3, String::new())),
        CoordinatorRecord::ConsumerMember { member, .. } => Some((5, member.clone())),
        CoordinatorRecord::TargetAssignment { .. } => Some((6, String::new())),
        CoordinatorRecord::TargetAssignmentMember { member, .. } => Some((7, member.clone())),
        CoordinatorRecord::CurrentAssignment { member, .. } => Some((8, member.clone())),
        CoordinatorRecord::Offset { .. } | CoordinatorRecord::Group { .. } => None,
    }
}

/// The tombstone of a KIP-848 record.
fn tombstone(r: &CoordinatorRecord) -> CoordinatorRecord {
    match r.clone() {
        CoordinatorRecord::ConsumerGroup { group, .. } => CoordinatorRecord::ConsumerGroup { group, epoch: None },
        CoordinatorRecord::ConsumerMember { group, member, .. } => CoordinatorRecord::ConsumerMember { group, member, value: None },
        CoordinatorRecord::TargetAssignment { group, .. } => CoordinatorRecord::TargetAssignment { group, epoch: None },
        CoordinatorRecord::TargetAssignmentMember { group, member, .. } => {
            CoordinatorRecord::TargetAssignmentMember { group, member, partitions: None }
        }
        CoordinatorRecord::CurrentAssignment { group, member, .. } => CoordinatorRecord::CurrentAssignment { group, member, value: None },
        other => other,
    }
}

/// Records that bring what is persisted for a group to `now` (its consumer group's records, or
/// none once it has no consumer group): tombstones first (members' current assignment and
/// target before their metadata, then the group), then what changed, in `now`'s order.
fn consumer_changes(persisted: &mut BTreeMap<(i16, String), CoordinatorRecord>, now: Vec<CoordinatorRecord>) -> Vec<CoordinatorRecord> {
    let now: Vec<((i16, String), CoordinatorRecord)> = now.into_iter().filter_map(|r| Some((consumer_key(&r)?, r))).collect();
    let keep: std::collections::BTreeSet<&(i16, String)> = now.iter().map(|(k, _)| k).collect();
    let mut gone: Vec<(i16, String)> = persisted.keys().filter(|k| !keep.contains(k)).cloned().collect();
    gone.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    let mut out: Vec<CoordinatorRecord> = gone.iter().filter_map(|k| persisted.remove(k)).map(|r| tombstone(&r)).collect();
    for (k, r) in now {
        if persisted.get(&k) != Some(&r) {
            persisted.insert(k, r.clone());
            out.push(r);
        }
    }
    out
}

/// One partition of an OffsetCommit.
#[derive(Debug, Clone)]
pub struct OffsetCommit {
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
    pub leader_epoch: i32,
    pub metadata: Option<String>,
}

/// A group as ListGroups shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct GroupListing {
    pub group_id: String,
    pub protocol_type: String,
    /// Kafka's state name ("Stable", "Empty", "Reconciling", ...).
    pub state: &'static str,
    /// "classic" or "consumer".
    pub group_type: &'static str,
}

/// The coordinator's whole in-memory state.
#[derive(Debug)]
pub struct GroupCoordinator {
    pub config: GroupConfig,
    groups: BTreeMap<String, GroupEntry>,
    records: Vec<CoordinatorRecord>,
    completions: Vec<Completion>,
}

impl GroupCoordinator {
    pub fn new(config: GroupConfig) -> GroupCoordinator {
        GroupCoordinator { config, groups: BTreeMap::new(), records: Vec::new(), completions: Vec::new() }
    }

    /// Records to append and answers to deliver, produced since the last call.
    pub fn drain(&mut self) -> (Vec<CoordinatorRecord>, Vec<Completion>) {
        (std::mem::take(&mut self.records), std::mem::take(&mut self.completions))
    }

    pub fn group(&self, group_id: &str) -> Option<&GroupEntry> {
        self.groups.get(group_id)
    }

    /// Every group, by id.
    pub fn groups(&self) -> impl Iterator<Item = (&String, &GroupEntry)> {
        self.groups.iter()
    }

    /// Collects a group's completions and, if its metadata changed, its GroupMetadata record.
    fn settle(&mut self, group_id: &str) {
        let Some(entry) = self.groups.get_mut(group_id) else { return };
        self.completions.extend(entry.classic.take_completions());
        if entry.classic.take_metadata_changed() {
            self.records.push(CoordinatorRecord::Group { group: group_id.to_string(), value: Some(snapshot(&entry.classic)) });
        }
    }

    fn new_group(&self, group_id: &str, now_ms: i64) -> GroupEntry {
        GroupEntry {
            classic: ClassicGroup::new(group_id, self.config.initial_rebalance_delay_ms, now_ms),
            consumer: None,
            offsets: BTreeMap::new(),
            persisted: BTreeMap::new(),
        }
    }

    /// JoinGroup.
    pub fn join(&mut self, group_id: &str, req: JoinRequest, token: u64, now_ms: i64) -> Outcome<JoinReply> {
        if group_id.is_empty() {
            return Outcome::Now(JoinReply::error(ResponseError::InvalidGroupId, &req.member_id));
        }
        if req.session_timeout_ms < self.config.min_session_timeout_ms || req.session_timeout_ms > self.config.max_session_timeout_ms {
            return Outcome::Now(JoinReply::error(ResponseError::InvalidSessionTimeout, &req.member_id));
        }
        let metadata_bytes: usize = req.protocols.iter().map(|(n, m)| n.len() + m.len()).sum();
        if metadata_bytes > self.config.max_member_metadata_bytes {
            return Outcome::Now(JoinReply::error(ResponseError::UnknownServerError, &req.member_id));
        }
        if !self.groups.contains_key(group_id) {
            if !req.member_id.is_empty() {
                return Outcome::Now(JoinReply::error(ResponseError::UnknownMemberId, &req.member_id));
            }
            let g = self.new_group(group_id, now_ms);
            self.groups.insert(group_id.to_string(), g);
        }
        if let Some(entry) = self.groups.get_mut(group_id) {
            match &entry.consumer {
                Some(c) if !c.members.is_empty() => {
                    return Outcome::Now(JoinReply::error(ResponseError::InconsistentGroupProtocol, &req.member_id));
                }
                // An empty consumer group turns back into a classic group (offsets stay).
                Some(_) => {
                    entry.consumer = None;
                    self.records.extend(consumer_changes(&mut entry.persisted, Vec::new()));
                }
                None => {}
            }
        }
        let max_size = self.config.max_size;
        let outcome = match self.groups.get_mut(group_id) {
            Some(e) => e.classic.join(req, token, max_size, now_ms),
            None => Outcome::Now(JoinReply::error(ResponseError::UnknownServerError, "")),
        };
        self.settle(group_id);
        outcome
    }

    /// SyncGroup.
    #[allow(clippy::too_many_arguments)]
    pub fn sync(
        &mut self,
        group_id: &str,
        member_id: &str,
        instance_id: Option<&str>,
        generation_id: i32,
        protocol_type: Option<&str>,
        protocol_name: Option<&str>,
        assignments: Vec<(String, Bytes)>,
        token: u64,
        now_ms: i64,
    ) -> Outcome<SyncReply> {
        if group_id.is_empty() {
            return Outcome::Now(SyncReply::error(ResponseError::InvalidGroupId));
        }
        if assignments.iter().any(|(_, a)| a.len() > self.config.max_member_metadata_bytes) {
            return Outcome::Now(SyncReply::error(ResponseError::UnknownServerError));
        }
        let Some(entry) = self.groups.get_mut(group_id) else {
            return Outcome::Now(SyncReply::error(ResponseError::UnknownMemberId));
        };
        let outcome = entry.classic.sync(member_id, instance_id, generation_id, protocol_type, protocol_name, assignments, token, now_ms);
        self.settle(group_id);
        outcome
    }

    /// Heartbeat; `None` is success.
    pub fn heartbeat(&mut self, group_id: &str, member_id: &str, instance_id: Option<&str>, generation_id: i32, now_ms: i64) -> Option<ResponseError> {
        if group_id.is_empty() {
            return Some(ResponseError::InvalidGroupId);
        }
        let Some(entry) = self.groups.get_mut(group_id) else { return Some(ResponseError::UnknownMemberId) };
        let r = entry.classic.heartbeat(member_id, instance_id, generation_id, now_ms);
        self.settle(group_id);
        r
    }

    /// LeaveGroup: one result per (member id, instance id); the outer error is group-level.
    pub fn leave(&mut self, group_id: &str, members: &[(String, Option<String>)], now_ms: i64) -> Result<Vec<Option<ResponseError>>, ResponseError> {
        if group_id.is_empty() {
            return Err(ResponseError::InvalidGroupId);
        }
        let Some(entry) = self.groups.get_mut(group_id) else {
            return Ok(members.iter().map(|_| Some(ResponseError::UnknownMemberId)).collect());
        };
        if entry.classic.state() == GroupState::Dead {
            return Err(ResponseError::CoordinatorNotAvailable);
        }
        let out = members.iter().map(|(m, i)| entry.classic.leave(m, i.as_deref(), now_ms)).collect();
        self.settle(group_id);
        Ok(out)
    }

    /// OffsetCommit for one group; per-partition results in request order.
    pub fn commit_offsets(
        &mut self,
        group_id: &str,
        member_id: &str,
        instance_id: Option<&str>,
        generation_id: i32,
        commits: Vec<OffsetCommit>,
        now_ms: i64,
    ) -> Result<Vec<Option<ResponseError>>, ResponseError> {
        if group_id.is_empty() {
            return Err(ResponseError::InvalidGroupId);
        }
        if !self.groups.contains_key(group_id) {
            if generation_id >= 0 || !member_id.is_empty() {
                return Err(ResponseError::UnknownMemberId);
            }
            let g = self.new_group(group_id, now_ms);
            self.groups.insert(group_id.to_string(), g);
        }
        let max_metadata = self.config.offset_metadata_max_bytes;
        let Some(entry) = self.groups.get_mut(group_id) else { return Err(ResponseError::UnknownServerError) };
        match &entry.consumer {
            Some(c) => c.validate_offset_commit(member_id, generation_id)?,
            None => entry.classic.validate_offset_commit(member_id, instance_id, generation_id, now_ms)?,
        }
        let mut out = Vec::with_capacity(commits.len());
        for c in commits {
            let metadata = c.metadata.unwrap_or_default();
            if metadata.len() > max_metadata {
                out.push(Some(ResponseError::OffsetMetadataTooLarge));
                continue;
            }
            let value = OffsetValue { offset: c.offset, leader_epoch: c.leader_epoch, metadata, commit_timestamp: now_ms, expire_timestamp: None };
            self.records.push(CoordinatorRecord::Offset { group: group_id.to_string(), topic: c.topic.clone(), partition: c.partition, value: Some(value.clone()) });
            entry.offsets.insert((c.topic, c.partition), value);
            out.push(None);
        }
        self.settle(group_id);
        Ok(out)
    }

    /// OffsetFetch for one group: `None` asks for every committed partition. Unknown groups and
    /// partitions without a commit answer offset -1 (Kafka does the same, without an error).
    pub fn fetch_offsets(&self, group_id: &str, partitions: Option<Vec<(String, i32)>>) -> Vec<(String, i32, Option<OffsetValue>)> {
        let entry = self.groups.get(group_id);
        match partitions {
            Some(ps) => ps
                .into_iter()
                .map(|(t, p)| {
                    let v = entry.and_then(|e| e.offsets.get(&(t.clone(), p)).cloned());
                    (t, p, v)
                })
                .collect(),
            None => entry
                .map(|e| e.offsets.iter().map(|((t, p), v)| (t.clone(), *p, Some(v.clone()))).collect())
                .unwrap_or_default(),
        }
    }

    /// OffsetDelete: refused per partition while the (consumer-protocol) group subscribes to the
    /// topic; a non-empty group of another protocol refuses as a whole (NON_EMPTY_GROUP).
    pub fn delete_offsets(&mut self, group_id: &str, partitions: &[(String, i32)]) -> Result<Vec<Option<ResponseError>>, ResponseError> {
        let Some(entry) = self.groups.get_mut(group_id) else { return Err(ResponseError::GroupIdNotFound) };
        if entry.classic.state() == GroupState::Dead {
            return Err(ResponseError::GroupIdNotFound);
        }
        let subscribed = if entry.classic.state() == GroupState::Empty {
            Default::default()
        } else {
            match entry.classic.subscribed_topics() {
                Some(t) => t,
                None => return Err(ResponseError::NonEmptyGroup),
            }
        };
        let mut out = Vec::with_capacity(partitions.len());
        for (t, p) in partitions {
            if subscribed.contains(t) {
                out.push(Some(ResponseError::GroupSubscribedToTopic));
                continue;
            }
            if entry.offsets.remove(&(t.clone(), *p)).is_some() {
                self.records.push(CoordinatorRecord::Offset { group: group_id.to_string(), topic: t.clone(), partition: *p, value: None });
            }
            out.push(None);
        }
        Ok(out)
    }

    /// DeleteGroups for one group.
    pub fn delete_group(&mut self, group_id: &str, now_ms: i64) -> Option<ResponseError> {
        let Some(entry) = self.groups.get_mut(group_id) else { return Some(ResponseError::GroupIdNotFound) };
        if entry.consumer.as_ref().is_some_and(|c| !c.members.is_empty()) {
            return Some(ResponseError::NonEmptyGroup);
        }
        match entry.classic.state() {
            GroupState::Dead => return Some(ResponseError::GroupIdNotFound),
            GroupState::Empty if entry.classic.is_empty() => {}
            _ => return Some(ResponseError::NonEmptyGroup),
        }
        self.remove_group(group_id, now_ms);
        None
    }

    fn remove_group(&mut self, group_id: &str, now_ms: i64) {
        let Some(mut entry) = self.groups.remove(group_id) else { return };
        self.records.extend(consumer_changes(&mut entry.persisted, Vec::new()));
        for (t, p) in entry.offsets.keys() {
            self.records.push(CoordinatorRecord::Offset { group: group_id.to_string(), topic: t.clone(), partition: *p, value: None });
        }
        self.records.push(CoordinatorRecord::Group { group: group_id.to_string(), value: None });
        entry.classic.mark_dead(now_ms);
        self.completions.extend(entry.classic.take_completions());
    }

    /// ConsumerGroupHeartbeat (KIP-848). An empty classic group becomes a consumer group; a
    /// classic group with members refuses (Kafka's answer without online migration).
    pub fn consumer_heartbeat(&mut self, group_id: &str, req: Heartbeat, topics: &BTreeMap<String, i32>, now_ms: i64) -> HeartbeatReply {
        let limits = ConsumerGroupLimits { session_timeout_ms: self.config.consumer_session_timeout_ms, max_size: self.config.consumer_max_size };
        let fail = |e: ResponseError, msg: String, member: &str| HeartbeatReply {
            error: Some(e),
            error_message: Some(msg),
            member_id: member.to_string(),
            member_epoch: -1,
            assignment: None,
        };
        if group_id.is_empty() {
            return fail(ResponseError::InvalidRequest, "GroupId can't be empty.".into(), &req.member_id);
        }
        if !self.groups.contains_key(group_id) {
            if req.member_epoch != 0 {
                return fail(ResponseError::UnknownMemberId, format!("Group {group_id} not found."), &req.member_id);
            }
            let g = self.new_group(group_id, now_ms);
            self.groups.insert(group_id.to_string(), g);
        }
        let Some(entry) = self.groups.get_mut(group_id) else { return fail(ResponseError::UnknownServerError, String::new(), "") };
        if entry.consumer.is_none() {
            if entry.classic.state() != GroupState::Empty || !entry.classic.is_empty() {
                return fail(ResponseError::GroupIdNotFound, format!("Group {group_id} is not a consumer group."), &req.member_id);
            }
            entry.consumer = Some(ConsumerGroup::new(group_id));
        }
        let reply = match entry.consumer.as_mut() {
            Some(c) => c.heartbeat(req, topics, limits, now_ms),
            None => return fail(ResponseError::UnknownServerError, String::new(), ""),
        };
        self.persist_consumer(group_id);
        reply
    }

    /// Queues the records of what changed in a consumer group since they were last written.
    fn persist_consumer(&mut self, group_id: &str) {
        let Some(entry) = self.groups.get_mut(group_id) else { return };
        let now = entry.consumer.as_ref().map(|c| c.persistent_records()).unwrap_or_default();
        self.records.extend(consumer_changes(&mut entry.persisted, now));
    }

    /// OffsetFetch v9+ member check for consumer groups: `None` when the fetch may proceed.
    pub fn validate_offset_fetch(&self, group_id: &str, member_id: Option<&str>, member_epoch: i32) -> Option<ResponseError> {
        let c = self.groups.get(group_id)?.consumer.as_ref()?;
        let member_id = member_id?;
        if member_epoch < 0 {
            return None;
        }
        match c.members.get(member_id) {
            None => Some(ResponseError::UnknownMemberId),
            Some(m) if m.member_epoch != member_epoch => Some(ResponseError::StaleMemberEpoch),
            Some(_) => None,
        }
    }

    pub fn list_groups(&self) -> Vec<GroupListing> {
        self.groups
            .values()
            .map(|e| match &e.consumer {
                Some(c) => GroupListing {
                    group_id: e.classic.group_id.clone(),
                    protocol_type: "consumer".to_string(),
                    state: consumer::state_name(c),
                    group_type: "consumer",
                },
                None => GroupListing {
                    group_id: e.classic.group_id.clone(),
                    protocol_type: e.classic.protocol_type().unwrap_or_default().to_string(),
                    state: e.classic.state().name(),
                    group_type: "classic",
                },
            })
            .collect()
    }

    /// Fires every group's timers; `topics` (name -> partition count) feeds consumer-group
    /// reassignment when a member expires.
    pub fn tick(&mut self, topics: &BTreeMap<String, i32>, now_ms: i64) {
        let mut changed = Vec::new();
        for (id, entry) in self.groups.iter_mut() {
            if let Some(c) = entry.consumer.as_mut() {
                if c.tick(topics, now_ms) {
                    changed.push(id.clone());
                }
            }
        }
        for id in changed {
            self.persist_consumer(&id);
        }
        let ids: Vec<String> = self.groups.keys().cloned().collect();
        for id in ids {
            let changed = self.groups.get_mut(&id).is_some_and(|e| e.classic.tick(now_ms));
            if changed {
                self.settle(&id);
            }
        }
    }

    /// Forgets every group's committed offsets for a deleted topic, as Kafka does when a topic is
    /// deleted (so a topic created again under the name starts with none). Groups are left as
    /// they are; an Empty one left without offsets goes at the next [`Self::expire_offsets`].
    /// Returns how many offsets were removed.
    pub fn forget_topic(&mut self, topic: &str) -> usize {
        let mut removed = 0;
        for (gid, entry) in self.groups.iter_mut() {
            let records = &mut self.records;
            entry.offsets.retain(|(t, p), _| {
                let keep = t != topic;
                if !keep {
                    records.push(CoordinatorRecord::Offset { group: gid.clone(), topic: t.clone(), partition: *p, value: None });
                    removed += 1;
                }
                keep
            });
        }
        removed
    }

    /// Removes expired offsets of Empty groups, and Empty groups left with no offsets.
    /// Returns how many offsets expired.
    pub fn expire_offsets(&mut self, now_ms: i64) -> usize {
        let retention = self.config.offsets_retention_ms;
        let mut expired = 0;
        let mut dead_groups = Vec::new();
        for (gid, entry) in self.groups.iter_mut() {
            if entry.classic.state() != GroupState::Empty || !entry.classic.is_empty() || entry.consumer.as_ref().is_some_and(|c| !c.members.is_empty()) {
                continue;
            }
            let emptied = entry.classic.state_timestamp_ms;
            let before = entry.offsets.len();
            let records = &mut self.records;
            entry.offsets.retain(|(t, p), v| {
                let base = v.commit_timestamp.max(emptied);
                let deadline = v.expire_timestamp.unwrap_or(base.saturating_add(retention));
                let keep = now_ms < deadline;
                if !keep {
                    records.push(CoordinatorRecord::Offset { group: gid.clone(), topic: t.clone(), partition: *p, value: None });
                }
                keep
            });
            expired += before - entry.offsets.len();
            if entry.offsets.is_empty() {
                dead_groups.push(gid.clone());
            }
        }
        for gid in dead_groups {
            self.remove_group(&gid, now_ms);
        }
        expired
    }

    /// Drops every group `drop` names (their `__consumer_offsets` partition went to another
    /// coordinator, or is about to be replayed); returns how many.
    pub fn unload(&mut self, drop: impl Fn(&str) -> bool) -> usize {
        let before = self.groups.len();
        self.groups.retain(|g, _| !drop(g));
        before - self.groups.len()
    }

    /// Applies one record read back from `__consumer_offsets` (startup).
    pub fn replay(&mut self, record: CoordinatorRecord, now_ms: i64) {
        match record {
            CoordinatorRecord::Offset { group, topic, partition, value } => match value {
                Some(v) => {
                    let entry = self.groups.entry(group.clone()).or_insert_with(|| GroupEntry {
                        classic: ClassicGroup::new(&group, self.config.initial_rebalance_delay_ms, now_ms),
                        consumer: None,
                        offsets: BTreeMap::new(),
                        persisted: BTreeMap::new(),
                    });
                    entry.offsets.insert((topic, partition), v);
                }
                None => {
                    if let Some(e) = self.groups.get_mut(&group) {
                        e.offsets.remove(&(topic, partition));
                    }
                }
            },
            CoordinatorRecord::Group { group, value } => match value {
                Some(v) => {
                    let offsets = self.groups.remove(&group).map(|e| e.offsets).unwrap_or_default();
                    let classic = restore(&group, &self.config, v, now_ms);
                    self.groups.insert(group, GroupEntry { classic, consumer: None, offsets, persisted: BTreeMap::new() });
                }
                None => {
                    self.groups.remove(&group);
                }
            },
            // KIP-848 records: into the group's consumer group (made on the first), and into what
            // is known to be persisted, so that only later changes are written again.
            r => {
                let Some(key) = consumer_key(&r) else { return };
                let group = r.group().to_string();
                if matches!(r, CoordinatorRecord::ConsumerGroup { epoch: None, .. }) {
                    // The group's tombstone: it was deleted or became a classic group.
                    if let Some(e) = self.groups.get_mut(&group) {
                        e.consumer = None;
                        e.persisted.clear();
                    }
                    return;
                }
                let initial_rebalance_delay_ms = self.config.initial_rebalance_delay_ms;
                let entry = self.groups.entry(group.clone()).or_insert_with(|| GroupEntry {
                    classic: ClassicGroup::new(&group, initial_rebalance_delay_ms, now_ms),
                    consumer: None,
                    offsets: BTreeMap::new(),
                    persisted: BTreeMap::new(),
                });
                if is_tombstone(&r) {
                    entry.persisted.remove(&key);
                } else {
                    entry.persisted.insert(key, r.clone());
                }
                let session_timeout_ms = self.config.consumer_session_timeout_ms;
                entry.consumer.get_or_insert_with(|| ConsumerGroup::new(&group)).restore(r, now_ms, session_timeout_ms);
            }
        }
    }
}

fn is_tombstone(r: &CoordinatorRecord) -> bool {
    matches!(
        r,
        CoordinatorRecord::ConsumerGroup { epoch: None, .. }
            | CoordinatorRecord::ConsumerMember { value: None, .. }
            | CoordinatorRecord::TargetAssignment { epoch: None, .. }
            | CoordinatorRecord::TargetAssignmentMember { partitions: None, .. }
            | CoordinatorRecord::CurrentAssignment { value: None, .. }
    )
}

fn snapshot(g: &ClassicGroup) -> GroupValue {
    let protocol = g.protocol_name().unwrap_or_default().to_string();
    GroupValue {
        protocol_type: g.protocol_type().unwrap_or_default().to_string(),
        generation_id: g.generation_id(),
        protocol: g.protocol_name().map(str::to_string),
        leader: g.leader_id().map(str::to_string),
        current_state_timestamp: g.state_timestamp_ms,
        members: g
            .members()
            .map(|m| MemberValue {
                member_id: m.member_id.clone(),
                instance_id: m.instance_id.clone(),
                client_id: m.client_id.clone(),
                client_host: m.client_host.clone(),
                rebalance_timeout_ms: m.rebalance_timeout_ms,
                session_timeout_ms: m.session_timeout_ms,
                subscription: m.protocols.iter().find(|(n, _)| *n == protocol).map(|(_, b)| b.clone()).unwrap_or_default(),
                assignment: m.assignment.clone(),
            })
            .collect(),
    }
}

fn restore(group_id: &str, config: &GroupConfig, v: GroupValue, now_ms: i64) -> ClassicGroup {
    let protocol = v.protocol.clone().unwrap_or_default();
    let members = v
        .members
        .into_iter()
        .map(|m| {
            ClassicGroup::persisted_member(
                m.member_id,
                m.instance_id,
                m.client_id,
                m.client_host,
                m.session_timeout_ms,
                m.rebalance_timeout_ms,
                v.protocol_type.clone(),
                vec![(protocol.clone(), m.subscription)],
                m.assignment,
            )
        })
        .collect();
    let protocol_type = if v.protocol_type.is_empty() { None } else { Some(v.protocol_type) };
    let ts = if v.current_state_timestamp >= 0 { v.current_state_timestamp } else { now_ms };
    ClassicGroup::restore(group_id, config.initial_rebalance_delay_ms, v.generation_id, protocol_type, v.protocol, v.leader, ts, members, now_ms)
}


#[cfg(test)]
#[path = "coordinator_tests.rs"]
mod tests;
