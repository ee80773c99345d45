//! One classic group's state machine (Kafka's `ClassicGroup` + the classic half of
//! `GroupMetadataManager`): membership, rebalances, generations and assignments.
//!
//! ```text
//!            join (first)            all joined / deadline          leader SyncGroup
//!   Empty ───────────────▶ PreparingRebalance ─────────────▶ CompletingRebalance ──────▶ Stable
//!     ▲                        ▲      │ no members left             │                      │
//!     └────────────────────────┼──────┘                             │ member joins/leaves/ │
//!                              └────────────────────────────────────┴──── expires ─────────┘
//!   Dead: deleted (DeleteGroups / all offsets expired); every request gets COORDINATOR_NOT_AVAILABLE.
//! ```
//!
//! Pure: no I/O, no clock. Delayed JoinGroup/SyncGroup answers go to `outbox` as [`Completion`]s
//! keyed by the caller's waiter token; [`ClassicGroup::tick`] fires the timers (session expiry,
//! KIP-394 pending members, join and sync deadlines, the initial rebalance delay).
//!
//! # Invariants
//! - `generation_id` only grows; a member's assignment belongs to the current generation.
//! - A member has at most one parked join and one parked sync; parking a second answers the first.
//! - In Stable and CompletingRebalance every member supports `protocol_name`.
//! - `static_members` and the members' `instance_id`s describe the same mapping.

use std::collections::{BTreeMap, BTreeSet};

use bytes::Bytes;
use kafka_protocol::ResponseError;

pub use messages::*;

use super::{Completion, Reply};

mod messages;

/// One member of a classic group.
#[derive(Debug, Clone)]
pub struct Member {
    pub member_id: String,
    pub instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub session_timeout_ms: i32,
    pub rebalance_timeout_ms: i32,
    pub protocol_type: String,
    /// Supported protocols in preference order, with their metadata (passed through untouched).
    pub protocols: Vec<(String, Bytes)>,
    pub assignment: Bytes,
    join_waiter: Option<u64>,
    sync_waiter: Option<u64>,
    /// Removed at this time unless a heartbeat (or any group request) comes first.
    heartbeat_deadline: i64,
    /// Joined during the current (initial) rebalance; Kafka's `isNew`.
    is_new: bool,
}

impl Member {
    fn metadata_for(&self, protocol: &str) -> Bytes {
        self.protocols.iter().find(|(n, _)| n == protocol).map(|(_, m)| m.clone()).unwrap_or_default()
    }

    fn awaiting_join(&self) -> bool {
        self.join_waiter.is_some()
    }
}

/// The initial rebalance delay (Kafka's `InitialDelayedJoin`) for a group that was Empty.
#[derive(Debug, Clone, Copy)]
struct InitialDelay {
    deadline: i64,
    delay_ms: i64,
    remaining_ms: i64,
}

/// One classic group.
#[derive(Debug, Clone)]
pub struct ClassicGroup {
    pub group_id: String,
    state: GroupState,
    /// When the group entered its current state (GroupMetadataValue.currentStateTimestamp; offset
    /// expiry counts from when the group became Empty).
    pub state_timestamp_ms: i64,
    generation_id: i32,
    protocol_type: Option<String>,
    protocol_name: Option<String>,
    leader_id: Option<String>,
    members: BTreeMap<String, Member>,
    /// KIP-394: member ids handed out with MEMBER_ID_REQUIRED, with their expiry.
    pending_members: BTreeMap<String, i64>,
    /// group.instance.id -> member id.
    static_members: BTreeMap<String, String>,
    /// Members that have not sent SyncGroup since the join phase completed.
    pending_sync: BTreeSet<String>,
    join_deadline: Option<i64>,
    initial_delay: Option<InitialDelay>,
    new_member_added: bool,
    sync_deadline: Option<i64>,
    initial_rebalance_delay_ms: i64,
    outbox: Vec<Completion>,
    /// Set when something Kafka persists as GroupMetadataValue changed.
    metadata_changed: bool,
    /// Rebalances started since the group was created or loaded (for metrics).
    pub rebalances_total: u64,
    rebalance_started_ms: Option<i64>,
    /// How long the last completed rebalance took, from PreparingRebalance to Stable or Empty.
    pub last_rebalance_duration_ms: Option<u64>,
}

fn new_member_id(client_id: &str, instance_id: Option<&str>) -> String {
    let prefix = instance_id.unwrap_or(client_id);
    format!("{prefix}-{}", uuid::Uuid::new_v4())
}

impl ClassicGroup {
    pub fn new(group_id: &str, initial_rebalance_delay_ms: i32, now_ms: i64) -> ClassicGroup {
        ClassicGroup {
            group_id: group_id.to_string(),
            state: GroupState::Empty,
            state_timestamp_ms: now_ms,
            generation_id: 0,
            protocol_type: None,
            protocol_name: None,
            leader_id: None,
            members: BTreeMap::new(),
            pending_members: BTreeMap::new(),
            static_members: BTreeMap::new(),
            pending_sync: BTreeSet::new(),
            join_deadline: None,
            initial_delay: None,
            new_member_added: false,
            sync_deadline: None,
            initial_rebalance_delay_ms: initial_rebalance_delay_ms.max(0) as i64,
            outbox: Vec::new(),
            metadata_changed: false,
            rebalances_total: 0,
            rebalance_started_ms: None,
            last_rebalance_duration_ms: None,
        }
    }

    pub fn state(&self) -> GroupState {
        self.state
    }
    pub fn generation_id(&self) -> i32 {
        self.generation_id
    }
    pub fn protocol_type(&self) -> Option<&str> {
        self.protocol_type.as_deref()
    }
    pub fn protocol_name(&self) -> Option<&str> {
        self.protocol_name.as_deref()
    }
    pub fn leader_id(&self) -> Option<&str> {
        self.leader_id.as_deref()
    }
    pub fn members(&self) -> impl Iterator<Item = &Member> {
        self.members.values()
    }
    pub fn member_count(&self) -> usize {
        self.members.len()
    }
    pub fn is_empty(&self) -> bool {
        self.members.is_empty() && self.pending_members.is_empty()
    }

    /// Parked answers produced since the last call.
    pub fn take_completions(&mut self) -> Vec<Completion> {
        std::mem::take(&mut self.outbox)
    }

    /// Whether GroupMetadataValue must be rewritten; clears the flag.
    pub fn take_metadata_changed(&mut self) -> bool {
        std::mem::replace(&mut self.metadata_changed, false)
    }

    fn transition(&mut self, state: GroupState, now_ms: i64) {
        match state {
            GroupState::PreparingRebalance if self.state != GroupState::PreparingRebalance => {
                self.rebalances_total += 1;
                self.rebalance_started_ms = Some(now_ms);
            }
            GroupState::Stable | GroupState::Empty => {
                if let Some(start) = self.rebalance_started_ms.take() {
                    self.last_rebalance_duration_ms = Some(now_ms.saturating_sub(start).max(0) as u64);
                }
            }
            _ => {}
        }
        self.state = state;
        self.state_timestamp_ms = now_ms;
    }

    /// Marks the group deleted; parked requests get COORDINATOR_NOT_AVAILABLE.
    pub fn mark_dead(&mut self, now_ms: i64) {
        let ids: Vec<String> = self.members.keys().cloned().collect();
        for id in ids {
            self.fail_waiters(&id, ResponseError::CoordinatorNotAvailable);
        }
        self.members.clear();
        self.pending_members.clear();
        self.static_members.clear();
        self.transition(GroupState::Dead, now_ms);
    }

    /// Restores a group from its persisted GroupMetadataValue (startup).
    #[allow(clippy::too_many_arguments)]
    pub fn restore(
        group_id: &str,
        initial_rebalance_delay_ms: i32,
        generation_id: i32,
        protocol_type: Option<String>,
        protocol_name: Option<String>,
        leader_id: Option<String>,
        state_timestamp_ms: i64,
        members: Vec<Member>,
        now_ms: i64,
    ) -> ClassicGroup {
        let mut g = ClassicGroup::new(group_id, initial_rebalance_delay_ms, state_timestamp_ms);
        g.generation_id = generation_id;
        g.protocol_type = protocol_type;
        g.protocol_name = protocol_name;
        g.leader_id = leader_id;
        for mut m in members {
            m.heartbeat_deadline = now_ms + m.session_timeout_ms as i64;
            if let Some(i) = &m.instance_id {
                g.static_members.insert(i.clone(), m.member_id.clone());
            }
            g.members.insert(m.member_id.clone(), m);
        }
        g.state = if g.members.is_empty() { GroupState::Empty } else { GroupState::Stable };
        g
    }

    /// A member as persisted (for [`ClassicGroup::restore`]).
    #[allow(clippy::too_many_arguments)]
    pub fn persisted_member(
        member_id: String,
        instance_id: Option<String>,
        client_id: String,
        client_host: String,
        session_timeout_ms: i32,
        rebalance_timeout_ms: i32,
        protocol_type: String,
        protocols: Vec<(String, Bytes)>,
        assignment: Bytes,
    ) -> Member {
        Member {
            member_id,
            instance_id,
            client_id,
            client_host,
            session_timeout_ms,
            rebalance_timeout_ms,
            protocol_type,
            protocols,
            assignment,
            join_waiter: None,
            sync_waiter: None,
            heartbeat_deadline: 0,
            is_new: false,
        }
    }

    /// Kafka's `supportsProtocols`: the first member sets the type; later members must match it
    /// and share a protocol with every current member.
    fn supports_protocols(&self, protocol_type: &str, protocols: &[(String, Bytes)]) -> bool {
        if self.members.is_empty() {
            return !protocol_type.is_empty() && !protocols.is_empty();
        }
        if self.protocol_type.as_deref() != Some(protocol_type) {
            return false;
        }
        protocols.iter().any(|(p, _)| self.members.values().all(|m| m.protocols.iter().any(|(q, _)| q == p)))
    }

    /// Validates a known member's identity (Kafka's `validateMember`).
    fn validate_member(&self, member_id: &str, instance_id: Option<&str>) -> Result<(), ResponseError> {
        if let Some(instance) = instance_id {
            match self.static_members.get(instance) {
                Some(existing) if existing != member_id => return Err(ResponseError::FencedInstanceId),
                None if !self.members.contains_key(member_id) => return Err(ResponseError::UnknownMemberId),
                _ => {}
            }
        }
        if !self.members.contains_key(member_id) {
            return Err(ResponseError::UnknownMemberId);
        }
        Ok(())
    }

    /// JoinGroup. `token` identifies the parked request if the answer is delayed.
    pub fn join(&mut self, req: JoinRequest, token: u64, max_size: usize, now_ms: i64) -> Outcome<JoinReply> {
        if self.state == GroupState::Dead {
            return Outcome::Now(JoinReply::error(ResponseError::CoordinatorNotAvailable, &req.member_id));
        }
        if !self.supports_protocols(&req.protocol_type, &req.protocols) {
            return Outcome::Now(JoinReply::error(ResponseError::InconsistentGroupProtocol, &req.member_id));
        }
        if req.member_id.is_empty() {
            self.join_unknown_member(req, token, max_size, now_ms)
        } else {
            self.join_known_member(req, token, now_ms)
        }
    }

    fn join_unknown_member(&mut self, req: JoinRequest, token: u64, max_size: usize, now_ms: i64) -> Outcome<JoinReply> {
        if let Some(instance) = req.instance_id.clone() {
            if let Some(old_id) = self.static_members.get(&instance).cloned() {
                return self.replace_static_member(&instance, &old_id, req, token, now_ms);
            }
        }
        if self.members.len() + self.pending_members.len() >= max_size {
            return Outcome::Now(JoinReply::error(ResponseError::GroupMaxSizeReached, ""));
        }
        let member_id = new_member_id(&req.client_id, req.instance_id.as_deref());
        if req.require_known_member_id && req.instance_id.is_none() {
            // KIP-394: hand out the id; the member joins for real with it.
            self.pending_members.insert(member_id.clone(), now_ms + req.session_timeout_ms as i64);
            return Outcome::Now(JoinReply::error(ResponseError::MemberIdRequired, &member_id));
        }
        self.add_member_and_rebalance(member_id, req, token, now_ms);
        Outcome::Parked
    }

    fn join_known_member(&mut self, req: JoinRequest, token: u64, now_ms: i64) -> Outcome<JoinReply> {
        if self.pending_members.remove(&req.member_id).is_some() {
            let id = req.member_id.clone();
            self.add_member_and_rebalance(id, req, token, now_ms);
            return Outcome::Parked;
        }
        if let Err(e) = self.validate_member(&req.member_id, req.instance_id.as_deref()) {
            return Outcome::Now(JoinReply::error(e, &req.member_id));
        }
        let id = req.member_id.clone();
        match self.state {
            GroupState::PreparingRebalance => {
                self.update_member(&id, &req, Some(token), now_ms);
                self.maybe_complete_join(now_ms);
                Outcome::Parked
            }
            GroupState::CompletingRebalance | GroupState::Stable => {
                let unchanged = self.members.get(&id).is_some_and(|m| m.protocols == req.protocols);
                let is_leader = self.leader_id.as_deref() == Some(id.as_str());
                if unchanged && (self.state == GroupState::CompletingRebalance || !is_leader) {
                    // Nothing changed: tell the member where the group is; no rebalance.
                    self.touch(&id, now_ms);
                    Outcome::Now(self.join_reply_for(&id, false))
                } else {
                    self.update_member(&id, &req, Some(token), now_ms);
                    self.prepare_rebalance(now_ms);
                    Outcome::Parked
                }
            }
            GroupState::Empty | GroupState::Dead => Outcome::Now(JoinReply::error(ResponseError::UnknownMemberId, &id)),
        }
    }

    /// KIP-345: a static member rejoining with an empty member id takes over the old member id's
    /// place; the old one is fenced. In Stable with unchanged protocols there is no rebalance.
    fn replace_static_member(
        &mut self,
        instance: &str,
        old_id: &str,
        req: JoinRequest,
        token: u64,
        now_ms: i64,
    ) -> Outcome<JoinReply> {
        let Some(mut member) = self.members.remove(old_id) else {
            self.static_members.remove(instance);
            return Outcome::Now(JoinReply::error(ResponseError::UnknownMemberId, ""));
        };
        if let Some(t) = member.join_waiter.take() {
            self.outbox.push(Completion { token: t, reply: Reply::Join(JoinReply::error(ResponseError::FencedInstanceId, old_id)) });
        }
        if let Some(t) = member.sync_waiter.take() {
            self.outbox.push(Completion { token: t, reply: Reply::Sync(SyncReply::error(ResponseError::FencedInstanceId)) });
        }
        let new_id = new_member_id(&req.client_id, Some(instance));
        let protocols_changed = member.protocols != req.protocols;
        member.member_id = new_id.clone();
        self.static_members.insert(instance.to_string(), new_id.clone());
        if self.leader_id.as_deref() == Some(old_id) {
            self.leader_id = Some(new_id.clone());
        }
        if self.pending_sync.remove(old_id) {
            self.pending_sync.insert(new_id.clone());
        }
        self.members.insert(new_id.clone(), member);
        match self.state {
            GroupState::Stable if !protocols_changed => {
                self.update_member(&new_id, &req, None, now_ms);
                self.metadata_changed = true;
                let is_leader = self.leader_id.as_deref() == Some(new_id.as_str());
                Outcome::Now(self.join_reply_for(&new_id, is_leader))
            }
            _ => {
                self.update_member(&new_id, &req, Some(token), now_ms);
                if self.state == GroupState::PreparingRebalance {
                    self.maybe_complete_join(now_ms);
                } else {
                    self.prepare_rebalance(now_ms);
                }
                Outcome::Parked
            }
        }
    }

    fn add_member_and_rebalance(&mut self, member_id: String, req: JoinRequest, token: u64, now_ms: i64) {
        if let Some(i) = &req.instance_id {
            self.static_members.insert(i.clone(), member_id.clone());
        }
        let member = Member {
            member_id: member_id.clone(),
            instance_id: req.instance_id.clone(),
            client_id: req.client_id.clone(),
            client_host: req.client_host.clone(),
            session_timeout_ms: req.session_timeout_ms,
            rebalance_timeout_ms: req.rebalance_timeout_ms,
            protocol_type: req.protocol_type.clone(),
            protocols: req.protocols.clone(),
            assignment: Bytes::new(),
            join_waiter: Some(token),
            sync_waiter: None,
            heartbeat_deadline: now_ms + req.session_timeout_ms as i64,
            is_new: true,
        };
        self.members.insert(member_id, member);
        if self.protocol_type.is_none() {
            self.protocol_type = Some(req.protocol_type);
        }
        self.new_member_added = true;
        match self.state {
            GroupState::PreparingRebalance => self.maybe_complete_join(now_ms),
            _ => self.prepare_rebalance(now_ms),
        }
    }

    fn update_member(&mut self, id: &str, req: &JoinRequest, token: Option<u64>, now_ms: i64) {
        let mut superseded = None;
        if let Some(m) = self.members.get_mut(id) {
            m.protocols = req.protocols.clone();
            m.session_timeout_ms = req.session_timeout_ms;
            m.rebalance_timeout_ms = req.rebalance_timeout_ms;
            m.client_id = req.client_id.clone();
            m.client_host = req.client_host.clone();
            m.heartbeat_deadline = now_ms + req.session_timeout_ms as i64;
            if let Some(t) = token {
                superseded = m.join_waiter.replace(t);
            }
        }
        if let Some(old) = superseded {
            // The client gave up on its earlier JoinGroup and sent another; answer the old one.
            self.outbox.push(Completion { token: old, reply: Reply::Join(JoinReply::error(ResponseError::UnknownMemberId, id)) });
        }
    }

    fn touch(&mut self, id: &str, now_ms: i64) {
        if let Some(m) = self.members.get_mut(id) {
            m.heartbeat_deadline = now_ms + m.session_timeout_ms as i64;
        }
    }

    fn join_reply_for(&self, id: &str, skip_assignment: bool) -> JoinReply {
        let is_leader = self.leader_id.as_deref() == Some(id);
        let protocol = self.protocol_name.clone().unwrap_or_default();
        let members = if is_leader {
            self.members
                .values()
                .map(|m| JoinedMember { member_id: m.member_id.clone(), instance_id: m.instance_id.clone(), metadata: m.metadata_for(&protocol) })
                .collect()
        } else {
            Vec::new()
        };
        JoinReply {
            error: None,
            generation_id: self.generation_id,
            protocol_type: self.protocol_type.clone(),
            protocol_name: self.protocol_name.clone(),
            leader: self.leader_id.clone().unwrap_or_default(),
            member_id: id.to_string(),
            members,
            skip_assignment,
        }
    }

    fn max_rebalance_timeout(&self) -> i64 {
        self.members.values().map(|m| m.rebalance_timeout_ms as i64).max().unwrap_or(0)
    }

    /// Starts (or restarts) the join phase.
    fn prepare_rebalance(&mut self, now_ms: i64) {
        if self.state == GroupState::CompletingRebalance {
            // Assignments of the unfinished generation are void; parked syncs must rejoin.
            let ids: Vec<String> = self.members.keys().cloned().collect();
            for id in ids {
                if let Some(m) = self.members.get_mut(&id) {
                    m.assignment = Bytes::new();
                    if let Some(t) = m.sync_waiter.take() {
                        self.outbox.push(Completion { token: t, reply: Reply::Sync(SyncReply::error(ResponseError::RebalanceInProgress)) });
                    }
                }
            }
        }
        self.pending_sync.clear();
        self.sync_deadline = None;
        let was_empty = self.state == GroupState::Empty;
        self.transition(GroupState::PreparingRebalance, now_ms);
        if was_empty {
            let delay = self.initial_rebalance_delay_ms;
            let remaining = (self.max_rebalance_timeout() - delay).max(0);
            self.new_member_added = false;
            self.initial_delay = Some(InitialDelay { deadline: now_ms + delay, delay_ms: delay, remaining_ms: remaining });
            self.join_deadline = None;
            if delay == 0 {
                self.fire_initial_delay(now_ms);
            }
        } else {
            self.initial_delay = None;
            self.join_deadline = Some(now_ms + self.max_rebalance_timeout());
            self.maybe_complete_join(now_ms);
        }
    }

    fn fire_initial_delay(&mut self, now_ms: i64) {
        let Some(d) = self.initial_delay else { return };
        if self.new_member_added && d.remaining_ms > 0 {
            let next = d.delay_ms.min(d.remaining_ms);
            self.new_member_added = false;
            self.initial_delay = Some(InitialDelay { deadline: now_ms + next, delay_ms: d.delay_ms, remaining_ms: d.remaining_ms - next });
        } else {
            self.initial_delay = None;
            self.complete_join(now_ms);
        }
    }

    fn all_joined(&self) -> bool {
        self.pending_members.is_empty() && self.members.values().all(Member::awaiting_join)
    }

    fn maybe_complete_join(&mut self, now_ms: i64) {
        if self.state == GroupState::PreparingRebalance && self.initial_delay.is_none() && self.all_joined() {
            self.complete_join(now_ms);
        }
    }

    /// Ends the join phase: drops members that did not rejoin, bumps the generation, picks the
    /// protocol and the leader, and answers every parked JoinGroup.
    fn complete_join(&mut self, now_ms: i64) {
        self.join_deadline = None;
        let gone: Vec<String> = self.members.values().filter(|m| !m.awaiting_join()).map(|m| m.member_id.clone()).collect();
        for id in gone {
            self.remove_member_quietly(&id);
        }
        self.pending_members.clear();
        self.generation_id += 1;
        if self.members.is_empty() {
            self.protocol_name = None;
            self.leader_id = None;
            self.transition(GroupState::Empty, now_ms);
            self.metadata_changed = true;
            return;
        }
        self.protocol_name = self.select_protocol();
        if !self.leader_id.as_ref().is_some_and(|l| self.members.contains_key(l)) {
            self.leader_id = self.members.keys().next().cloned();
        }
        self.transition(GroupState::CompletingRebalance, now_ms);
        let ids: Vec<String> = self.members.keys().cloned().collect();
        let mut max_rebalance = 0i64;
        for id in &ids {
            let reply = self.join_reply_for(id, false);
            if let Some(m) = self.members.get_mut(id) {
                m.is_new = false;
                m.heartbeat_deadline = now_ms + m.session_timeout_ms as i64;
                max_rebalance = max_rebalance.max(m.rebalance_timeout_ms as i64);
                if let Some(t) = m.join_waiter.take() {
                    self.outbox.push(Completion { token: t, reply: Reply::Join(reply) });
                }
            }
        }
        self.pending_sync = ids.into_iter().collect();
        self.sync_deadline = Some(now_ms + max_rebalance);
    }

    /// Kafka's `selectProtocol`: among protocols every member supports, the one most members list
    /// first (each member votes for its most preferred candidate); ties go to the earlier name.
    fn select_protocol(&self) -> Option<String> {
        let mut candidates: Vec<String> = Vec::new();
        if let Some(first) = self.members.values().next() {
            for (p, _) in &first.protocols {
                if self.members.values().all(|m| m.protocols.iter().any(|(q, _)| q == p)) {
                    candidates.push(p.clone());
                }
            }
        }
        let mut votes: BTreeMap<&str, usize> = BTreeMap::new();
        for m in self.members.values() {
            if let Some((p, _)) = m.protocols.iter().find(|(p, _)| candidates.contains(p)) {
                *votes.entry(p.as_str()).or_default() += 1;
            }
        }
        let best = votes.values().copied().max()?;
        votes.into_iter().find(|(_, v)| *v == best).map(|(p, _)| p.to_string())
    }

    fn fail_waiters(&mut self, id: &str, error: ResponseError) {
        if let Some(m) = self.members.get_mut(id) {
            if let Some(t) = m.join_waiter.take() {
                self.outbox.push(Completion { token: t, reply: Reply::Join(JoinReply::error(error, id)) });
            }
            if let Some(t) = m.sync_waiter.take() {
                self.outbox.push(Completion { token: t, reply: Reply::Sync(SyncReply::error(error)) });
            }
        }
    }

    fn remove_member_quietly(&mut self, id: &str) {
        self.fail_waiters(id, ResponseError::UnknownMemberId);
        if let Some(m) = self.members.remove(id) {
            if let Some(i) = &m.instance_id {
                if self.static_members.get(i).map(String::as_str) == Some(id) {
                    self.static_members.remove(i);
                }
            }
        }
        self.pending_sync.remove(id);
        if self.leader_id.as_deref() == Some(id) {
            self.leader_id = None;
        }
    }

    /// Removes a member and moves the group along (Kafka's `removeMemberAndUpdateClassicGroup`).
    fn remove_member(&mut self, id: &str, now_ms: i64) {
        self.remove_member_quietly(id);
        match self.state {
            GroupState::Stable | GroupState::CompletingRebalance => self.prepare_rebalance(now_ms),
            GroupState::PreparingRebalance => self.maybe_complete_join(now_ms),
            GroupState::Empty | GroupState::Dead => {}
        }
    }

    /// SyncGroup. `assignments` is the leader's (member id -> assignment).
    #[allow(clippy::too_many_arguments)]
    pub fn sync(
        &mut self,
        member_id: &str,
        instance_id: Option<&str>,
        generation_id: i32,
        protocol_type: Option<&str>,
        protocol_name: Option<&str>,
        assignments: Vec<(String, Bytes)>,
        token: u64,
        now_ms: i64,
    ) -> Outcome<SyncReply> {
        if self.state == GroupState::Dead {
            return Outcome::Now(SyncReply::error(ResponseError::CoordinatorNotAvailable));
        }
        if let Err(e) = self.validate_member(member_id, instance_id) {
            return Outcome::Now(SyncReply::error(e));
        }
        if generation_id != self.generation_id {
            return Outcome::Now(SyncReply::error(ResponseError::IllegalGeneration));
        }
        if protocol_type.is_some_and(|t| Some(t) != self.protocol_type.as_deref())
            || protocol_name.is_some_and(|n| Some(n) != self.protocol_name.as_deref())
        {
            return Outcome::Now(SyncReply::error(ResponseError::InconsistentGroupProtocol));
        }
        match self.state {
            GroupState::Empty | GroupState::Dead => Outcome::Now(SyncReply::error(ResponseError::UnknownMemberId)),
            GroupState::PreparingRebalance => Outcome::Now(SyncReply::error(ResponseError::RebalanceInProgress)),
            GroupState::CompletingRebalance => {
                self.touch(member_id, now_ms);
                self.pending_sync.remove(member_id);
                let mut superseded = None;
                if let Some(m) = self.members.get_mut(member_id) {
                    superseded = m.sync_waiter.replace(token);
                }
                if let Some(old) = superseded {
                    self.outbox.push(Completion { token: old, reply: Reply::Sync(SyncReply::error(ResponseError::RebalanceInProgress)) });
                }
                if self.leader_id.as_deref() == Some(member_id) {
                    let mut given: BTreeMap<String, Bytes> = assignments.into_iter().collect();
                    for m in self.members.values_mut() {
                        m.assignment = given.remove(&m.member_id).unwrap_or_default();
                    }
                    self.metadata_changed = true;
                    self.transition(GroupState::Stable, now_ms);
                    self.sync_deadline = None;
                    self.pending_sync.clear();
                    let reply_base = SyncReply { error: None, protocol_type: self.protocol_type.clone(), protocol_name: self.protocol_name.clone(), assignment: Bytes::new() };
                    for m in self.members.values_mut() {
                        if let Some(t) = m.sync_waiter.take() {
                            let reply = SyncReply { assignment: m.assignment.clone(), ..reply_base.clone() };
                            self.outbox.push(Completion { token: t, reply: Reply::Sync(reply) });
                        }
                    }
                }
                Outcome::Parked
            }
            GroupState::Stable => {
                self.touch(member_id, now_ms);
                let assignment = self.members.get(member_id).map(|m| m.assignment.clone()).unwrap_or_default();
                Outcome::Now(SyncReply {
                    error: None,
                    protocol_type: self.protocol_type.clone(),
                    protocol_name: self.protocol_name.clone(),
                    assignment,
                })
            }
        }
    }

    /// Heartbeat; `None` is success.
    pub fn heartbeat(&mut self, member_id: &str, instance_id: Option<&str>, generation_id: i32, now_ms: i64) -> Option<ResponseError> {
        if self.state == GroupState::Dead {
            return Some(ResponseError::CoordinatorNotAvailable);
        }
        if let Err(e) = self.validate_member(member_id, instance_id) {
            return Some(e);
        }
        if self.state == GroupState::Empty {
            return Some(ResponseError::UnknownMemberId);
        }
        if generation_id != self.generation_id {
            return Some(ResponseError::IllegalGeneration);
        }
        self.touch(member_id, now_ms);
        match self.state {
            GroupState::PreparingRebalance => Some(ResponseError::RebalanceInProgress),
            _ => None,
        }
    }

    /// One member of a LeaveGroup (v3+ batches several); `None` is success.
    pub fn leave(&mut self, member_id: &str, instance_id: Option<&str>, now_ms: i64) -> Option<ResponseError> {
        if self.state == GroupState::Dead {
            return Some(ResponseError::CoordinatorNotAvailable);
        }
        let id = match instance_id {
            Some(instance) => match self.static_members.get(instance) {
                None => return Some(ResponseError::UnknownMemberId),
                Some(existing) if !member_id.is_empty() && existing != member_id => return Some(ResponseError::FencedInstanceId),
                Some(existing) => existing.clone(),
            },
            None => member_id.to_string(),
        };
        if self.pending_members.remove(&id).is_some() {
            self.maybe_complete_join(now_ms);
            return None;
        }
        if !self.members.contains_key(&id) {
            return Some(ResponseError::UnknownMemberId);
        }
        self.remove_member(&id, now_ms);
        None
    }

    /// Validates an offset commit against the group (Kafka's `ClassicGroup.validateOffsetCommit`).
    pub fn validate_offset_commit(&mut self, member_id: &str, instance_id: Option<&str>, generation_id: i32, now_ms: i64) -> Result<(), ResponseError> {
        if self.state == GroupState::Dead {
            return Err(ResponseError::CoordinatorNotAvailable);
        }
        if generation_id < 0 && self.state == GroupState::Empty {
            return Ok(()); // admin or manual-assignment commit
        }
        if generation_id >= 0 || !member_id.is_empty() || instance_id.is_some() {
            self.validate_member(member_id, instance_id)?;
            if generation_id != self.generation_id {
                return Err(ResponseError::IllegalGeneration);
            }
        } else if self.state != GroupState::Empty {
            return Err(ResponseError::UnknownMemberId);
        }
        if self.state == GroupState::CompletingRebalance {
            return Err(ResponseError::RebalanceInProgress);
        }
        self.touch(member_id, now_ms);
        Ok(())
    }

    /// Fires due timers. Returns true if anything changed.
    pub fn tick(&mut self, now_ms: i64) -> bool {
        let mut changed = false;
        let expired_pending: Vec<String> = self.pending_members.iter().filter(|(_, d)| **d <= now_ms).map(|(id, _)| id.clone()).collect();
        for id in expired_pending {
            self.pending_members.remove(&id);
            changed = true;
            self.maybe_complete_join(now_ms);
        }
        let expired: Vec<String> = self
            .members
            .values()
            .filter(|m| m.heartbeat_deadline <= now_ms && !m.awaiting_join() && m.sync_waiter.is_none())
            .map(|m| m.member_id.clone())
            .collect();
        for id in expired {
            tracing::info!(group = %self.group_id, member = %id, "member session expired; removing it");
            self.remove_member(&id, now_ms);
            changed = true;
        }
        if let Some(d) = self.initial_delay {
            if d.deadline <= now_ms {
                self.fire_initial_delay(now_ms);
                changed = true;
            }
        }
        if self.join_deadline.is_some_and(|d| d <= now_ms) && self.state == GroupState::PreparingRebalance {
            self.complete_join(now_ms);
            changed = true;
        }
        if self.sync_deadline.is_some_and(|d| d <= now_ms) && self.state == GroupState::CompletingRebalance {
            self.sync_deadline = None;
            let late: Vec<String> = self.pending_sync.iter().cloned().collect();
            for id in &late {
                tracing::info!(group = %self.group_id, member = %id, "member did not sync within the rebalance timeout; removing it");
                self.remove_member_quietly(id);
            }
            self.prepare_rebalance(now_ms);
            changed = true;
        }
        changed
    }

    /// Topics the members subscribe to, read from `consumer` protocol metadata (for OffsetDelete);
    /// `None` when the group does not use the consumer protocol.
    pub fn subscribed_topics(&self) -> Option<BTreeSet<String>> {
        if self.protocol_type.as_deref() != Some("consumer") {
            return None;
        }
        let protocol = self.protocol_name.clone()?;
        let mut topics = BTreeSet::new();
        for m in self.members.values() {
            topics.extend(parse_subscription_topics(&m.metadata_for(&protocol)));
        }
        Some(topics)
    }
}

#[cfg(test)]
mod tests;
