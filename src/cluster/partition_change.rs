//! One partition's next leader, ISR and eligible leader replicas: Kafka's
//! `PartitionChangeBuilder`, with eligible leader replicas (ELR, KIP-966). Pure: the caller
//! says what the ISR should become, who may lead and which replicas shut down uncleanly, and
//! gets the `PartitionChange` record, or `None` when nothing changes.
//!
//! # Eligible leader replicas
//! With `eligible.leader.replicas.version` at 1 (what a new cluster gets, as on Kafka 4.1+):
//! - while the ISR is at least `min.insync.replicas`, the ELR and the last known ELR are empty;
//! - when it falls below, the members it loses (and the ELR it had) become the ELR, less any
//!   replica known to have shut down uncleanly: below the minimum the high watermark does not
//!   move and acks=all writes are refused, so each of them holds every committed record;
//! - the ISR may become empty (the last member fenced or shut down); the partition then keeps
//!   its last leader in the last known ELR;
//! - a leader comes from the ISR, or, with the ISR empty, from the ELR (the ISR then becomes
//!   that replica alone); with both empty, the last known leader may lead again once it is
//!   back, as an unclean election (leader recovery state RECOVERING), as Kafka's balanced
//!   recovery does;
//! - an unclean election clears the ELR and the last known ELR.
//!
//! Without ELR (the feature at 0: a metadata log written before it) the ISR never becomes
//! empty: its last member stays in it, and nothing leads until it is back.
//!
//! # Reassignment
//! A reassignment in progress has its replicas as the target followed by the replicas being
//! removed, with the adding and removing sets beside them ([`Builder::reassign`]). Every change
//! finishes it as soon as it can, as Kafka's `completeReassignmentIfNeeded` does: once the ISR,
//! less the replicas being removed, is not empty and holds every target replica, the replica set
//! becomes the target, the removed replicas leave the ISR and the ELR, and, if the leader was
//! one of them, a target replica in the ISR leads. A change that takes replicas out of the
//! replica set bumps the leader epoch even when the leader stays, so that a removed replica's
//! fetches are fenced.

use uuid::Uuid;

use super::image::PartitionState;
use super::records::PartitionChange;

/// Kafka's `LeaderRecoveryState.RECOVERING`.
const RECOVERING: i8 = 1;

/// How a leader is chosen when the current one may not stay.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Election {
    /// From the ISR (or the ELR when the ISR is empty), in replica order.
    Online,
    /// The first replica if it qualifies, else as `Online`.
    Preferred,
    /// As `Online`, else any replica that may lead (records may be lost).
    Unclean,
}

/// The change to make to one partition.
pub struct Builder<'a> {
    p: &'a PartitionState,
    topic_id: Uuid,
    index: i32,
    acceptable: &'a dyn Fn(i32) -> bool,
    elr: bool,
    min_isr: usize,
    election: Election,
    isr: Vec<i32>,
    target_elr: Vec<i32>,
    unclean_shutdown: Vec<i32>,
    recovery_state: i8,
    replicas: Vec<i32>,
    adding: Vec<i32>,
    removing: Vec<i32>,
}

impl<'a> Builder<'a> {
    /// A builder for partition `index` of `topic_id`, now `p`: `acceptable` says which replicas
    /// may lead (registered, unfenced, not shutting down, ...); `elr` whether eligible leader
    /// replicas are on; `min_isr` the topic's effective `min.insync.replicas`.
    pub fn new(
        p: &'a PartitionState,
        topic_id: Uuid,
        index: i32,
        acceptable: &'a dyn Fn(i32) -> bool,
        elr: bool,
        min_isr: i32,
    ) -> Builder<'a> {
        Builder {
            p,
            topic_id,
            index,
            acceptable,
            elr,
            min_isr: min_isr.max(1) as usize,
            election: Election::Online,
            isr: p.isr.clone(),
            target_elr: p.eligible_leader_replicas.clone(),
            unclean_shutdown: Vec::new(),
            recovery_state: p.leader_recovery_state,
            replicas: p.replicas.clone(),
            adding: p.adding_replicas.clone(),
            removing: p.removing_replicas.clone(),
        }
    }

    /// Starts (or replaces) a reassignment to `target`, as Kafka's `PartitionReassignmentReplicas`
    /// merges it: the replicas become the target followed by the current replicas not in it.
    pub fn reassign(mut self, target: &[i32]) -> Self {
        let current = &self.p.replicas;
        self.removing = current.iter().copied().filter(|r| !target.contains(r)).collect();
        self.adding = target.iter().copied().filter(|r| !current.contains(r)).collect();
        self.replicas = target.iter().copied().chain(self.removing.iter().copied()).collect();
        self
    }

    /// Cancels the reassignment in progress, as Kafka's `PartitionReassignmentRevert` does: the
    /// replicas being added leave the replica set and the ISR (if that would empty the ISR, the
    /// replicas that stay become it).
    pub fn revert(mut self) -> Self {
        let adding = std::mem::take(&mut self.adding);
        self.removing.clear();
        self.replicas.retain(|r| !adding.contains(r));
        self.isr.retain(|r| !adding.contains(r));
        if self.isr.is_empty() {
            self.isr = self.replicas.clone();
        }
        self
    }

    pub fn isr(mut self, isr: Vec<i32>) -> Self {
        self.isr = isr;
        self
    }

    pub fn election(mut self, election: Election) -> Self {
        self.election = election;
        self
    }

    /// Replicas whose broker came back from an unclean shutdown: they leave the ELR.
    pub fn unclean_shutdown(mut self, replicas: Vec<i32>) -> Self {
        self.unclean_shutdown = replicas;
        self
    }

    pub fn recovery_state(mut self, state: i8) -> Self {
        self.recovery_state = state;
        self
    }

    fn valid_leader(&self, r: i32) -> bool {
        r >= 0 && self.replicas.contains(&r) && (self.isr.contains(&r) || (self.isr.is_empty() && self.target_elr.contains(&r))) && (self.acceptable)(r)
    }

    /// The last known leader may lead again: ISR and ELR empty, and it alone in the last known ELR.
    fn last_known_leader(&self) -> Option<i32> {
        if !self.elr || !self.isr.is_empty() || !self.target_elr.is_empty() {
            return None;
        }
        match self.p.last_known_elr[..] {
            [only] if (self.acceptable)(only) && self.replicas.contains(&only) => Some(only),
            _ => None,
        }
    }

    /// Kafka's `completeReassignmentIfNeeded`: the reassignment in progress ends once every
    /// target replica is in the ISR (less the replicas being removed, which may not empty it).
    fn complete_reassignment(&mut self) {
        if self.adding.is_empty() && self.removing.is_empty() {
            return;
        }
        let isr: Vec<i32> = self.isr.iter().copied().filter(|r| !self.removing.contains(r)).collect();
        let target: Vec<i32> = self.replicas.iter().copied().filter(|r| !self.removing.contains(r)).collect();
        if isr.is_empty() || !target.iter().all(|r| isr.contains(r)) {
            return;
        }
        let removing = std::mem::take(&mut self.removing);
        self.adding.clear();
        self.replicas = target;
        self.isr = isr;
        self.target_elr.retain(|r| !removing.contains(r));
    }

    /// (leader, unclean), or `None` for no leader.
    fn elect(&self) -> Option<(i32, bool)> {
        let replicas = &self.replicas;
        if self.election == Election::Preferred {
            if let Some(&first) = replicas.first().filter(|r| self.valid_leader(**r)) {
                return Some((first, false));
            }
        }
        if self.valid_leader(self.p.leader) {
            return Some((self.p.leader, false));
        }
        if let Some(r) = replicas.iter().copied().find(|r| self.valid_leader(*r)) {
            return Some((r, false));
        }
        if let Some(r) = self.last_known_leader() {
            return Some((r, true));
        }
        if self.election == Election::Unclean {
            return replicas.iter().copied().find(|r| (self.acceptable)(*r)).map(|r| (r, true));
        }
        None
    }

    /// Kafka's `maybePopulateTargetElr`.
    fn populate_elr(&mut self) {
        if !self.elr {
            return;
        }
        if self.isr.len() >= self.min_isr {
            self.target_elr.clear();
            return;
        }
        let mut candidates = self.target_elr.clone();
        candidates.extend(self.p.isr.iter().copied());
        let mut elr: Vec<i32> =
            candidates
            .into_iter()
            .filter(|r| self.replicas.contains(r) && !self.isr.contains(r) && !self.unclean_shutdown.contains(r))
            .collect();
        elr.sort_unstable();
        elr.dedup();
        self.target_elr = elr;
    }

    /// The record, or `None` when nothing changes.
    pub fn build(mut self) -> Option<PartitionChange> {
        let p = self.p;
        let mut c = PartitionChange::new(self.topic_id, self.index);
        self.complete_reassignment();
        self.populate_elr();
        let elected = self.elect();
        let new_leader = elected.map_or(-1, |(l, _)| l);
        let mut unclean = false;
        if new_leader != p.leader {
            if let Some((leader, was_unclean)) = elected {
                if self.target_elr.contains(&leader) {
                    // Led from the ELR: it alone is the ISR now.
                    self.isr = vec![leader];
                    self.target_elr.retain(|r| *r != leader);
                } else if was_unclean {
                    unclean = true;
                    c.isr = Some(vec![leader]);
                    if p.leader_recovery_state != RECOVERING {
                        c.leader_recovery_state = RECOVERING;
                    }
                }
            }
            c.leader = new_leader;
        } else if p.replicas.iter().any(|r| !self.replicas.contains(r)) {
            // Replicas leave: the same leader in a new epoch fences their fetches (Kafka's
            // `triggerLeaderEpochBumpForReplicaReassignmentIfNeeded`).
            c.leader = p.leader;
        }
        // ELR: cleared by an unclean election or when off.
        if unclean || !self.elr {
            self.target_elr.clear();
        }
        if self.target_elr != p.eligible_leader_replicas {
            c.eligible_leader_replicas = Some(self.target_elr.clone());
        }
        if c.isr.is_none() && (!self.isr.is_empty() || self.elr) && self.isr != p.isr {
            c.isr = Some(self.isr.clone());
        }
        // The last known ELR holds the last leader of a partition whose ISR became empty
        // (untouched with ELR off, as Kafka leaves it).
        if self.elr {
            if c.isr.as_ref().is_some_and(|i| i.is_empty()) && p.last_known_elr[..] != [p.leader] {
                c.last_known_elr = Some(vec![p.leader]).filter(|_| p.leader >= 0);
            } else if (c.leader >= 0 || (p.leader != -1 && c.leader != -1)) && !p.last_known_elr.is_empty() {
                c.last_known_elr = Some(Vec::new());
            }
        }
        if c.leader_recovery_state == -1 && self.recovery_state != p.leader_recovery_state {
            c.leader_recovery_state = self.recovery_state;
        }
        if self.replicas != p.replicas {
            c.replicas = Some(self.replicas.clone());
        }
        if self.removing != p.removing_replicas {
            c.removing_replicas = Some(self.removing.clone());
        }
        if self.adding != p.adding_replicas {
            c.adding_replicas = Some(self.adding.clone());
        }
        let unchanged = c.isr.is_none()
            && c.replicas.is_none()
            && c.removing_replicas.is_none()
            && c.adding_replicas.is_none()
            && c.leader == -2
            && c.eligible_leader_replicas.is_none()
            && c.last_known_elr.is_none()
            && c.leader_recovery_state == -1;
        (!unchanged).then_some(c)
    }
}

#[cfg(test)]
#[path = "partition_change_tests.rs"]
mod tests;
