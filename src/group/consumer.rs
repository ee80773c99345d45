//! One KIP-848 consumer group (`group.protocol=consumer`): members heartbeat with epochs, the
//! coordinator runs the assignor ([`super::assignor`]) and hands each member its partitions as
//! the previous owners release them.
//!
//! ```text
//!  membership/subscription/metadata change ──▶ group epoch + 1 ──▶ new target assignment
//!  member at an older epoch:
//!     owns partitions not in its target ──▶ told to revoke them (assignment without them),
//!                                            stays at its epoch until it reports them gone
//!     otherwise                          ──▶ moves to the assignment epoch and gets its target
//!                                            minus partitions other members still hold
//!  member at the current epoch           ──▶ receives released partitions as they free up
//! ```
//!
//! Pure: no I/O and no clock (every call takes `now_ms`). Topic metadata comes in as
//! `topic name -> partition count`; the api layer maps names to topic ids.
//!
//! A member subscribes to topic names, to a regular expression (`SubscribedTopicRegex`, RE2
//! syntax as Kafka's RE2/J, matched against the whole topic name), or both. A regex is resolved
//! against the topics when a member first brings it and again at most every
//! [`REGEX_REFRESH_MS`] (Kafka's batch refresh interval), so a topic created later joins the
//! subscription within that time; a change in what it matches rebalances the group.
//!
//! # Invariants
//! - No partition is in two members' `assigned` ∪ `pending_revocation` sets at once: a partition
//!   is handed out only after its previous owner acknowledged the revocation (or was removed).
//! - `assignment_epoch == group_epoch` after every call (the assignor runs synchronously) and
//!   every member's epoch is at most the group epoch.
//! - A member that does not heartbeat within the session timeout, or does not revoke within its
//!   rebalance timeout, is removed and its partitions become free.
//!
//! # Persistence
//! The group is kept in `__consumer_offsets` as Kafka's KIP-848 records
//! ([`ConsumerGroup::persistent_records`]: group epoch, each member's metadata, target and
//! current assignment, the target's epoch), which the coordinator writes as they change. A
//! coordinator that loads them ([`ConsumerGroup::restore`]: after a restart, or as the new
//! leader of the group's partition) has every member at its epoch with its assignment; each
//! gets a fresh session timeout to heartbeat in, and the first call after the load takes the
//! topics as they are without a rebalance (unless they changed).
//!
//! Partition counts are not persisted, so topics that gained partitions while no coordinator ran
//! are noticed at the next heartbeat like any other change.

use std::collections::btree_map::Entry;
use std::collections::{BTreeMap, BTreeSet};

use kafka_protocol::ResponseError;
use regex::{Regex, RegexBuilder};

use super::assignor::{self, Assignment, TopicPartition};
use super::records::{ConsumerMemberValue, CoordinatorRecord, CurrentAssignmentValue, NamedPartitions};

/// How often a subscribed regex is matched against the topics again (Kafka's
/// `REGEX_BATCH_REFRESH_INTERVAL_MS`).
pub const REGEX_REFRESH_MS: i64 = 10_000;

/// The most memory one compiled regex may take: a client's pattern cannot make the broker
/// allocate without bound (the `regex` crate refuses larger programs at compile time).
const REGEX_SIZE_LIMIT: usize = 1 << 20;

/// A regex some member subscribes to, and the topics it matched when last resolved.
#[derive(Debug, Clone)]
struct ResolvedRegex {
    regex: Regex,
    topics: BTreeSet<String>,
    /// None until first matched against the topics.
    resolved_at_ms: Option<i64>,
}

/// RE2/J's quoted text, `\Q...\E` (to the end when `\E` is missing), which Java's
/// `Pattern.quote` writes and the regex crate does not read, as escaped literal text; every
/// other escape is passed through as it is.
fn expand_quoted(pattern: &str) -> String {
    let mut out = String::with_capacity(pattern.len());
    let mut chars = pattern.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('Q') => {
                let rest = chars.as_str();
                let (literal, after) = rest.split_once("\\E").unwrap_or((rest, ""));
                out.push_str(&regex::escape(literal));
                chars = after.chars();
            }
            Some(n) => {
                out.push('\\');
                out.push(n);
            }
            None => out.push('\\'),
        }
    }
    out
}

/// Compiles a subscription regex so that it must match a whole topic name (RE2/J's `matches()`).
fn compile_regex(pattern: &str) -> Result<Regex, String> {
    RegexBuilder::new(&format!("^(?:{})$", expand_quoted(pattern)))
        .size_limit(REGEX_SIZE_LIMIT)
        .dfa_size_limit(REGEX_SIZE_LIMIT)
        .build()
        .map_err(|e| {
            let text = e.to_string();
            let last = text.lines().last().unwrap_or_default().trim();
            last.strip_prefix("error: ").unwrap_or(last).to_string()
        })
}

/// A member of a consumer group.
#[derive(Debug, Clone)]
pub struct ConsumerMember {
    pub member_id: String,
    pub instance_id: Option<String>,
    pub rack_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub subscribed_topics: BTreeSet<String>,
    /// A non-empty regular expression the member subscribes to besides its topic names.
    pub subscribed_regex: Option<String>,
    pub server_assignor: Option<String>,
    pub rebalance_timeout_ms: i32,
    pub member_epoch: i32,
    pub previous_member_epoch: i32,
    /// What the member owns, as last told.
    pub assigned: BTreeSet<TopicPartition>,
    /// Partitions the member was told to give up and has not confirmed yet.
    pub pending_revocation: BTreeSet<TopicPartition>,
    session_deadline: i64,
    revocation_deadline: Option<i64>,
    last_sent: Option<BTreeSet<TopicPartition>>,
}

/// A ConsumerGroupHeartbeat as the core sees it (topic ids already mapped to names).
#[derive(Debug, Clone, Default)]
pub struct Heartbeat {
    pub member_id: String,
    pub member_epoch: i32,
    pub instance_id: Option<String>,
    pub rack_id: Option<String>,
    pub rebalance_timeout_ms: i32,
    pub subscribed_topic_names: Option<Vec<String>>,
    /// None = unchanged; "" = no regex any more (Kafka counts only a non-empty regex).
    pub subscribed_topic_regex: Option<String>,
    pub server_assignor: Option<String>,
    /// Partitions the member reports owning; None = unchanged since the last heartbeat.
    pub owned: Option<BTreeSet<TopicPartition>>,
    pub client_id: String,
    pub client_host: String,
}

/// The answer to a heartbeat.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct HeartbeatReply {
    pub error: Option<ResponseError>,
    pub error_message: Option<String>,
    pub member_id: String,
    pub member_epoch: i32,
    /// Present when the member's assignment changed since the last answer.
    pub assignment: Option<BTreeSet<TopicPartition>>,
}

impl HeartbeatReply {
    fn error(e: ResponseError, message: &str, member_id: &str) -> HeartbeatReply {
        HeartbeatReply { error: Some(e), error_message: Some(message.to_string()), member_id: member_id.to_string(), member_epoch: -1, assignment: None }
    }
}

/// Consumer group settings (Kafka's `group.consumer.*` keys).
#[derive(Debug, Clone, Copy)]
pub struct ConsumerGroupLimits {
    pub session_timeout_ms: i64,
    pub max_size: usize,
}

/// KIP-848 group states as ConsumerGroupDescribe/ListGroups name them.
pub fn state_name(g: &ConsumerGroup) -> &'static str {
    if g.members.is_empty() {
        "Empty"
    } else if g.members.values().any(|m| {
        m.member_epoch != g.assignment_epoch || !m.pending_revocation.is_empty() || Some(&m.assigned) != g.target.get(&m.member_id)
    }) {
        "Reconciling"
    } else {
        "Stable"
    }
}

/// One consumer group.
#[derive(Debug, Clone, Default)]
pub struct ConsumerGroup {
    pub group_id: String,
    pub group_epoch: i32,
    pub assignment_epoch: i32,
    pub members: BTreeMap<String, ConsumerMember>,
    pub target: Assignment,
    /// Partition counts of subscribed topics when the target was computed.
    partition_counts: BTreeMap<String, i32>,
    static_members: BTreeMap<String, String>,
    /// A member joined since the target was computed.
    membership_changed: bool,
    /// Every regex some member subscribes to, resolved.
    regexes: BTreeMap<String, ResolvedRegex>,
    /// Loaded from records and not yet called since: the next call resolves regexes and takes
    /// partition counts without rebalancing.
    restored: bool,
}

impl ConsumerGroup {
    pub fn new(group_id: &str) -> ConsumerGroup {
        ConsumerGroup { group_id: group_id.to_string(), ..Default::default() }
    }

    /// The assignor the members prefer (most votes; `uniform` by default, as Kafka).
    pub fn assignor_name(&self) -> &'static str {
        let mut votes: BTreeMap<&str, usize> = BTreeMap::new();
        for m in self.members.values() {
            if let Some(a) = m.server_assignor.as_deref() {
                *votes.entry(a).or_default() += 1;
            }
        }
        let best = votes.iter().max_by_key(|(_, v)| **v).map(|(a, _)| *a).unwrap_or("uniform");
        assignor::ASSIGNORS.iter().copied().find(|a| *a == best).unwrap_or("uniform")
    }

    /// The topics a member subscribes to: its names and what its regex matched.
    fn member_topic_names<'a>(&'a self, m: &'a ConsumerMember) -> impl Iterator<Item = &'a String> {
        let matched = m.subscribed_regex.as_ref().and_then(|r| self.regexes.get(r)).into_iter().flat_map(|r| r.topics.iter());
        m.subscribed_topics.iter().chain(matched)
    }

    /// The topics a member subscribes to, as a set.
    pub fn member_topics(&self, m: &ConsumerMember) -> BTreeSet<String> {
        self.member_topic_names(m).cloned().collect()
    }

    fn subscribed_counts(&self, topics: &BTreeMap<String, i32>) -> BTreeMap<String, i32> {
        let subscribed: BTreeSet<&String> = self.members.values().flat_map(|m| self.member_topic_names(m)).collect();
        topics.iter().filter(|(t, _)| subscribed.contains(t)).map(|(t, n)| (t.clone(), *n)).collect()
    }

    /// The entry for `pattern`, compiled on first use (then not yet resolved); a pattern that does
    /// not compile gets the compiler's reason and no entry.
    fn regex_entry(&mut self, pattern: &str) -> Result<&mut ResolvedRegex, String> {
        match self.regexes.entry(pattern.to_string()) {
            Entry::Occupied(e) => Ok(e.into_mut()),
            Entry::Vacant(v) => Ok(v.insert(ResolvedRegex { regex: compile_regex(pattern)?, topics: BTreeSet::new(), resolved_at_ms: None })),
        }
    }

    /// Resolves regexes members brought since the last call, and every regex again once
    /// [`REGEX_REFRESH_MS`] have passed since it was resolved; forgets regexes no member uses.
    /// A regex whose matches changed marks the group for a rebalance.
    fn refresh_regexes(&mut self, topics: &BTreeMap<String, i32>, now_ms: i64) {
        let used: BTreeSet<String> = self.members.values().filter_map(|m| m.subscribed_regex.clone()).collect();
        self.regexes.retain(|r, _| used.contains(r));
        for pattern in used {
            // Members' regexes were compiled when they brought them; one that fails here is skipped.
            let Ok(entry) = self.regex_entry(&pattern) else { continue };
            if entry.resolved_at_ms.is_some_and(|at| now_ms - at < REGEX_REFRESH_MS) {
                continue;
            }
            let matched: BTreeSet<String> = topics.keys().filter(|t| entry.regex.is_match(t)).cloned().collect();
            let changed = entry.resolved_at_ms.is_none() || entry.topics != matched;
            entry.topics = matched;
            entry.resolved_at_ms = Some(now_ms);
            self.membership_changed |= changed;
        }
    }

    /// Bumps the group epoch and recomputes the target assignment.
    fn rebalance(&mut self, topics: &BTreeMap<String, i32>) {
        self.group_epoch += 1;
        self.partition_counts = self.subscribed_counts(topics);
        let subs: BTreeMap<String, BTreeSet<String>> = self.members.iter().map(|(id, m)| (id.clone(), self.member_topics(m))).collect();
        self.target = assignor::assign(self.assignor_name(), &subs, &self.partition_counts, &self.target);
        self.assignment_epoch = self.group_epoch;
    }

    /// Partitions held (owned or awaiting revocation) by members other than `id`.
    fn held_by_others(&self, id: &str) -> BTreeSet<TopicPartition> {
        self.members.values().filter(|m| m.member_id != id).flat_map(|m| m.assigned.iter().chain(&m.pending_revocation).cloned()).collect()
    }

    fn remove_member(&mut self, id: &str, topics: &BTreeMap<String, i32>) {
        if let Some(m) = self.members.remove(id) {
            if let Some(i) = &m.instance_id {
                if self.static_members.get(i).map(String::as_str) == Some(id) {
                    self.static_members.remove(i);
                }
            }
            self.target.remove(id);
            self.rebalance(topics);
        }
    }

    /// Kafka's MemberState of a member: 0 stable, 1 revoking, 2 waiting for partitions others
    /// still hold.
    fn member_state(&self, m: &ConsumerMember) -> i8 {
        if !m.pending_revocation.is_empty() {
            1
        } else if m.member_epoch == self.assignment_epoch && Some(&m.assigned) != self.target.get(&m.member_id) {
            2
        } else {
            0
        }
    }

    /// The group as Kafka's KIP-848 records, all with values.
    pub fn persistent_records(&self) -> Vec<CoordinatorRecord> {
        let group = || self.group_id.clone();
        let named = |set: &BTreeSet<TopicPartition>| {
            let mut out = NamedPartitions::new();
            for (t, p) in set {
                out.entry(t.clone()).or_default().push(*p);
            }
            out
        };
        let mut out = vec![CoordinatorRecord::ConsumerGroup { group: group(), epoch: Some(self.group_epoch) }];
        for m in self.members.values() {
            out.push(CoordinatorRecord::ConsumerMember {
                group: group(),
                member: m.member_id.clone(),
                value: Some(ConsumerMemberValue {
                    instance_id: m.instance_id.clone(),
                    rack_id: m.rack_id.clone(),
                    client_id: m.client_id.clone(),
                    client_host: m.client_host.clone(),
                    subscribed_topic_names: m.subscribed_topics.iter().cloned().collect(),
                    subscribed_topic_regex: m.subscribed_regex.clone(),
                    rebalance_timeout_ms: m.rebalance_timeout_ms,
                    server_assignor: m.server_assignor.clone(),
                }),
            });
        }
        for (member, set) in &self.target {
            out.push(CoordinatorRecord::TargetAssignmentMember { group: group(), member: member.clone(), partitions: Some(named(set)) });
        }
        out.push(CoordinatorRecord::TargetAssignment { group: group(), epoch: Some(self.assignment_epoch) });
        for m in self.members.values() {
            out.push(CoordinatorRecord::CurrentAssignment {
                group: group(),
                member: m.member_id.clone(),
                value: Some(CurrentAssignmentValue {
                    member_epoch: m.member_epoch,
                    previous_member_epoch: m.previous_member_epoch,
                    state: self.member_state(m),
                    assigned: named(&m.assigned),
                    pending_revocation: named(&m.pending_revocation),
                }),
            });
        }
        out
    }

    /// Applies one KIP-848 record read back from `__consumer_offsets`; members get
    /// `session_timeout_ms` from `now_ms` to heartbeat. Offset and classic records are not for
    /// this (ignored).
    pub fn restore(&mut self, record: CoordinatorRecord, now_ms: i64, session_timeout_ms: i64) {
        self.restored = true;
        let set = |parts: NamedPartitions| -> BTreeSet<TopicPartition> {
            parts.into_iter().flat_map(|(t, ps)| ps.into_iter().map(move |p| (t.clone(), p))).collect()
        };
        match record {
            CoordinatorRecord::ConsumerGroup { epoch, .. } => self.group_epoch = epoch.unwrap_or(0),
            CoordinatorRecord::TargetAssignment { epoch, .. } => self.assignment_epoch = epoch.unwrap_or(0),
            CoordinatorRecord::TargetAssignmentMember { member, partitions, .. } => match partitions {
                Some(p) => {
                    self.target.insert(member, set(p));
                }
                None => {
                    self.target.remove(&member);
                }
            },
            CoordinatorRecord::ConsumerMember { member, value: None, .. } => {
                if let Some(m) = self.members.remove(&member) {
                    if let Some(i) = m.instance_id {
                        self.static_members.remove(&i);
                    }
                }
            }
            CoordinatorRecord::ConsumerMember { member, value: Some(v), .. } => {
                let m = self.restored_member(&member, now_ms, session_timeout_ms);
                m.instance_id = v.instance_id.clone();
                m.rack_id = v.rack_id;
                m.client_id = v.client_id;
                m.client_host = v.client_host;
                m.subscribed_topics = v.subscribed_topic_names.into_iter().collect();
                m.subscribed_regex = v.subscribed_topic_regex.filter(|r| !r.is_empty());
                m.rebalance_timeout_ms = v.rebalance_timeout_ms;
                m.server_assignor = v.server_assignor;
                if let Some(i) = v.instance_id {
                    self.static_members.insert(i, member);
                }
            }
            CoordinatorRecord::CurrentAssignment { member, value: Some(v), .. } => {
                let m = self.restored_member(&member, now_ms, session_timeout_ms);
                m.member_epoch = v.member_epoch;
                m.previous_member_epoch = v.previous_member_epoch;
                m.assigned = set(v.assigned);
                m.pending_revocation = set(v.pending_revocation);
                m.revocation_deadline = (!m.pending_revocation.is_empty()).then(|| now_ms + m.rebalance_timeout_ms.max(0) as i64);
            }
            _ => {}
        }
    }

    fn restored_member(&mut self, id: &str, now_ms: i64, session_timeout_ms: i64) -> &mut ConsumerMember {
        self.members.entry(id.to_string()).or_insert_with(|| ConsumerMember {
            member_id: id.to_string(),
            instance_id: None,
            rack_id: None,
            client_id: String::new(),
            client_host: String::new(),
            subscribed_topics: BTreeSet::new(),
            subscribed_regex: None,
            server_assignor: None,
            rebalance_timeout_ms: 0,
            member_epoch: 0,
            previous_member_epoch: -1,
            assigned: BTreeSet::new(),
            pending_revocation: BTreeSet::new(),
            session_deadline: now_ms + session_timeout_ms,
            revocation_deadline: None,
            last_sent: None,
        })
    }

    /// The first call after a load: regexes resolved and partition counts taken as they are,
    /// without a rebalance of their own (the loaded target stands).
    fn settle_restored(&mut self, topics: &BTreeMap<String, i32>, now_ms: i64) {
        if std::mem::take(&mut self.restored) {
            self.refresh_regexes(topics, now_ms);
            self.membership_changed = false;
            self.partition_counts = self.subscribed_counts(topics);
        }
    }

    /// ConsumerGroupHeartbeat. `topics`: every existing topic's partition count.
    pub fn heartbeat(&mut self, req: Heartbeat, topics: &BTreeMap<String, i32>, limits: ConsumerGroupLimits, now_ms: i64) -> HeartbeatReply {
        self.settle_restored(topics, now_ms);
        if let Some(a) = req.server_assignor.as_deref() {
            if !assignor::ASSIGNORS.contains(&a) {
                return HeartbeatReply::error(ResponseError::UnsupportedAssignor, &format!("ServerAssignor {a} is not supported. Supported assignors: uniform, range."), &req.member_id);
            }
        }
        if let Some(r) = req.subscribed_topic_regex.as_deref().filter(|r| !r.is_empty()) {
            if let Err(e) = self.regex_entry(r) {
                return HeartbeatReply::error(ResponseError::InvalidRegularExpression, &format!("SubscribedTopicRegex `{r}` is not a valid regular expression: {e}."), &req.member_id);
            }
        }
        match req.member_epoch {
            -1 | -2 => return self.leave(req, topics),
            0 => {
                // Apache Kafka 4.4's checks and messages.
                if req.rebalance_timeout_ms == -1 {
                    return HeartbeatReply::error(ResponseError::InvalidRequest, "RebalanceTimeoutMs must be provided in first request.", &req.member_id);
                }
                if req.subscribed_topic_names.is_none() && req.subscribed_topic_regex.is_none() {
                    return HeartbeatReply::error(ResponseError::InvalidRequest, "Either SubscribedTopicNames or SubscribedTopicRegex must be non-null when (re-)joining.", &req.member_id);
                }
                if let Err(r) = self.admit(&req, limits) {
                    return r;
                }
            }
            e if e > 0 => {
                let Some(m) = self.members.get(&req.member_id) else {
                    return HeartbeatReply::error(ResponseError::UnknownMemberId, &format!("Member {} is not a member of group {}.", req.member_id, self.group_id), &req.member_id);
                };
                let lost_response = e == m.previous_member_epoch && req.owned.as_ref().is_some_and(|o| o.is_subset(&m.assigned));
                if e != m.member_epoch && !lost_response {
                    return HeartbeatReply::error(ResponseError::FencedMemberEpoch, &format!("The consumer group member has a smaller member epoch ({e}) than the one known by the group coordinator ({}). The member must abandon all its partitions and rejoin.", m.member_epoch), &req.member_id);
                }
            }
            e => return HeartbeatReply::error(ResponseError::InvalidRequest, &format!("MemberEpoch {e} is invalid."), &req.member_id),
        }
        let id = req.member_id.clone();
        let mut changed = false;
        if let Some(m) = self.members.get_mut(&id) {
            m.session_deadline = now_ms + limits.session_timeout_ms;
            if let Some(names) = &req.subscribed_topic_names {
                let subs: BTreeSet<String> = names.iter().cloned().collect();
                changed |= subs != m.subscribed_topics;
                m.subscribed_topics = subs;
            }
            if let Some(r) = &req.subscribed_topic_regex {
                let r = (!r.is_empty()).then(|| r.clone());
                changed |= r != m.subscribed_regex;
                m.subscribed_regex = r;
            }
            if req.server_assignor.is_some() && req.server_assignor != m.server_assignor {
                m.server_assignor = req.server_assignor.clone();
                changed = true;
            }
            if req.rebalance_timeout_ms > 0 {
                m.rebalance_timeout_ms = req.rebalance_timeout_ms;
            }
            if req.rack_id.is_some() {
                m.rack_id = req.rack_id.clone();
            }
        }
        self.refresh_regexes(topics, now_ms);
        if changed || self.membership_changed || self.subscribed_counts(topics) != self.partition_counts {
            self.membership_changed = false;
            self.rebalance(topics);
        }
        self.reconcile(&id, req.owned.as_ref(), now_ms);
        let Some(m) = self.members.get_mut(&id) else { return HeartbeatReply::error(ResponseError::UnknownMemberId, "member vanished", &id) };
        let assignment = (m.last_sent.as_ref() != Some(&m.assigned)).then(|| m.assigned.clone());
        if assignment.is_some() {
            m.last_sent = Some(m.assigned.clone());
        }
        HeartbeatReply { error: None, error_message: None, member_id: id, member_epoch: m.member_epoch, assignment }
    }

    /// Epoch 0: a new member, a member rejoining after being fenced, or a static member coming back.
    fn admit(&mut self, req: &Heartbeat, limits: ConsumerGroupLimits) -> Result<(), HeartbeatReply> {
        let mut inherited: Option<ConsumerMember> = None;
        if let Some(instance) = &req.instance_id {
            if let Some(old_id) = self.static_members.get(instance).cloned() {
                if old_id != req.member_id {
                    match self.members.get(&old_id) {
                        Some(old) if old.member_epoch != -2 => {
                            return Err(HeartbeatReply::error(ResponseError::UnreleasedInstanceId, &format!("Static member {instance} is still in use by member {old_id}."), &req.member_id));
                        }
                        _ => {
                            // The previous incarnation left temporarily (-2): take over its state.
                            inherited = self.members.remove(&old_id);
                            if let Some(t) = self.target.remove(&old_id) {
                                self.target.insert(req.member_id.clone(), t);
                            }
                        }
                    }
                }
            }
        }
        if !self.members.contains_key(&req.member_id) && inherited.is_none() && self.members.len() >= limits.max_size {
            return Err(HeartbeatReply::error(ResponseError::GroupMaxSizeReached, &format!("The consumer group has reached its maximum capacity of {} members.", limits.max_size), &req.member_id));
        }
        let rejoining = self.members.remove(&req.member_id);
        let base = inherited.or(rejoining.clone());
        let member = ConsumerMember {
            member_id: req.member_id.clone(),
            instance_id: req.instance_id.clone(),
            rack_id: req.rack_id.clone(),
            client_id: req.client_id.clone(),
            client_host: req.client_host.clone(),
            subscribed_topics: base.as_ref().map(|b| b.subscribed_topics.clone()).unwrap_or_default(),
            subscribed_regex: base.as_ref().and_then(|b| b.subscribed_regex.clone()),
            server_assignor: base.as_ref().and_then(|b| b.server_assignor.clone()),
            rebalance_timeout_ms: req.rebalance_timeout_ms,
            member_epoch: base.as_ref().map_or(0, |b| b.member_epoch.max(0)),
            previous_member_epoch: base.as_ref().map_or(-1, |b| b.previous_member_epoch),
            // A fenced member that rejoins starts from nothing (it dropped its partitions).
            assigned: if rejoining.is_some() { BTreeSet::new() } else { base.as_ref().map(|b| b.assigned.clone()).unwrap_or_default() },
            pending_revocation: BTreeSet::new(),
            session_deadline: 0,
            revocation_deadline: None,
            last_sent: None,
        };
        let member = if rejoining.is_some() { ConsumerMember { member_epoch: 0, ..member } } else { member };
        self.members.insert(member.member_id.clone(), member);
        if let Some(i) = &req.instance_id {
            self.static_members.insert(i.clone(), req.member_id.clone());
        }
        self.membership_changed = true;
        Ok(())
    }

    fn leave(&mut self, req: Heartbeat, topics: &BTreeMap<String, i32>) -> HeartbeatReply {
        let epoch = req.member_epoch;
        let id = match (&req.instance_id, self.members.contains_key(&req.member_id)) {
            (_, true) => req.member_id.clone(),
            (Some(i), false) => match self.static_members.get(i) {
                Some(id) => id.clone(),
                None => return HeartbeatReply::error(ResponseError::UnknownMemberId, "unknown static member", &req.member_id),
            },
            (None, false) => return HeartbeatReply::error(ResponseError::UnknownMemberId, "unknown member", &req.member_id),
        };
        if epoch == -2 && req.instance_id.is_some() {
            if let Some(m) = self.members.get_mut(&id) {
                m.member_epoch = -2;
            }
        } else {
            self.remove_member(&id, topics);
        }
        HeartbeatReply { error: None, error_message: None, member_id: req.member_id, member_epoch: epoch, assignment: None }
    }

    /// Moves one member towards its target (Kafka's CurrentAssignmentBuilder, simplified).
    fn reconcile(&mut self, id: &str, owned: Option<&BTreeSet<TopicPartition>>, now_ms: i64) {
        let others = self.held_by_others(id);
        let target = self.target.get(id).cloned().unwrap_or_default();
        let assignment_epoch = self.assignment_epoch;
        let Some(m) = self.members.get_mut(id) else { return };
        if !m.pending_revocation.is_empty() {
            match owned {
                Some(o) if o.is_disjoint(&m.pending_revocation) => {
                    m.pending_revocation.clear();
                    m.revocation_deadline = None;
                }
                _ => return, // still revoking
            }
        }
        if m.member_epoch != assignment_epoch {
            let revoke: BTreeSet<TopicPartition> = m.assigned.difference(&target).cloned().collect();
            if !revoke.is_empty() {
                m.assigned.retain(|tp| !revoke.contains(tp));
                m.pending_revocation = revoke;
                m.revocation_deadline = Some(now_ms + m.rebalance_timeout_ms.max(0) as i64);
                return;
            }
            m.previous_member_epoch = m.member_epoch;
            m.member_epoch = assignment_epoch;
        }
        m.assigned = target.into_iter().filter(|tp| m.assigned.contains(tp) || !others.contains(tp)).collect();
    }

    /// Removes members past their session timeout or revocation deadline. Returns true if any.
    pub fn tick(&mut self, topics: &BTreeMap<String, i32>, now_ms: i64) -> bool {
        self.settle_restored(topics, now_ms);
        let expired: Vec<String> = self
            .members
            .values()
            .filter(|m| m.session_deadline <= now_ms || m.revocation_deadline.is_some_and(|d| d <= now_ms))
            .map(|m| m.member_id.clone())
            .collect();
        for id in &expired {
            tracing::info!(group = %self.group_id, member = %id, "consumer group member expired; removing it");
            self.remove_member(id, topics);
        }
        !expired.is_empty()
    }

    /// Offset commit validation for a consumer group.
    pub fn validate_offset_commit(&self, member_id: &str, member_epoch: i32) -> Result<(), ResponseError> {
        if member_epoch < 0 && member_id.is_empty() {
            return if self.members.is_empty() { Ok(()) } else { Err(ResponseError::UnknownMemberId) };
        }
        let m = self.members.get(member_id).ok_or(ResponseError::UnknownMemberId)?;
        if member_epoch != m.member_epoch {
            return Err(ResponseError::StaleMemberEpoch);
        }
        Ok(())
    }
}

#[cfg(test)]
#[path = "consumer_tests.rs"]
mod tests;
