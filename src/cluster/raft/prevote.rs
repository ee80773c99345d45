//! Pre-vote: a voter asks its peers whether they would vote before it starts an election
//! (Raft thesis §9.6; Kafka's KRaft does the same since KIP-996).
//!
//! openraft 0.9 has no pre-vote of its own. A voter that was paused or cut off comes back with
//! its election timer long expired and, left to openraft, at once raises its term; the leader
//! sees that higher term in the voter's next append reply and steps down, and the metadata has
//! no leader for an election's length although nothing was wrong with it. So openraft's own
//! election timer is off (`Config::enable_elect = false`) and [`run_elector`] decides when this
//! voter stands: after a leader's silence, and only once a majority of voters (itself
//! included) grant a pre-vote. Then it asks openraft for the election (`Raft::trigger().elect()`);
//! the election itself, and every safety rule of Raft, stay openraft's. Pre-vote changes
//! nothing a voter stores, so it can only delay an election, never let a second leader in.
//!
//! # Rules ([`grants`], pure)
//! A voter grants a pre-vote when it has not heard from a leader for longer than the leader
//! lease (openraft's `election_timeout_max`, the time within which openraft itself refuses a
//! real vote), when it does not lead a quorum that answered within the lease itself, and when
//! the candidate's log is at least as up to date as its own (Raft's voting rule).
//!
//! # Timing ([`Elector`], pure)
//! A voter that had a leader stands one lease plus a random part of the election timeout
//! after it last heard from it; one that had none (at start, or after a failed election)
//! stands a random election timeout after its last attempt or the last vote it granted. The
//! only voter of a quorum stands at once.
//!
//! # Failure behaviour
//! A peer that does not answer in time counts as a refusal; the voter tries again after the
//! next timeout. Nothing here can stop openraft: an error from `trigger().elect()` (openraft
//! shut down) ends the elector.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use openraft::{LogId, Raft, ServerState};
use rand::Rng;

use super::network::PeerClient;
use super::TypeConfig;

/// A candidate's question.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PreVoteRequest {
    pub candidate: u64,
    pub last_log_id: Option<LogId<u64>>,
}

/// A voter's answer.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PreVoteResponse {
    pub granted: bool,
}

/// What a voter knows of itself when it weighs a pre-vote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Local {
    /// How long since a leader's append or snapshot was accepted here; `None`: never.
    pub since_leader: Option<Duration>,
    /// When this voter leads: how long since a quorum acknowledged it (`None`: not yet).
    pub leading_acked: Option<Option<Duration>>,
    pub last_log_id: Option<LogId<u64>>,
}

/// Whether a voter in state `local` grants `req` (see the module docs).
pub fn grants(local: &Local, req: &PreVoteRequest, lease: Duration) -> bool {
    if let Some(acked) = local.leading_acked {
        if acked.is_some_and(|a| a <= lease) {
            return false;
        }
    }
    if local.since_leader.is_some_and(|s| s <= lease) {
        return false;
    }
    req.last_log_id >= local.last_log_id
}

/// When this voter last heard from a leader and last granted a vote, as the peer server sees
/// them; shared with the elector.
#[derive(Debug, Clone, Default)]
pub struct Contact {
    inner: Arc<parking_lot::Mutex<ContactTimes>>,
}

#[derive(Debug, Clone, Copy, Default)]
struct ContactTimes {
    leader: Option<Instant>,
    voted: Option<Instant>,
}

impl Contact {
    /// A leader's append or snapshot was accepted.
    pub fn heard_leader(&self) {
        self.inner.lock().leader = Some(Instant::now());
    }

    /// This voter granted a candidate its vote.
    pub fn granted_vote(&self) {
        self.inner.lock().voted = Some(Instant::now());
    }

    pub fn since_leader(&self) -> Option<Duration> {
        self.inner.lock().leader.map(|t| t.elapsed())
    }

    fn times(&self) -> ContactTimes {
        *self.inner.lock()
    }
}

/// The elector's timing (see the module docs), without clocks of its own: every call is given
/// `now`.
#[derive(Debug, Clone)]
pub struct Elector {
    timeout_min: Duration,
    /// openraft's `election_timeout_max`, which is also its leader lease.
    lease: Duration,
    last_attempt: Instant,
    /// This round's random part, in `[0, lease - timeout_min]` after a leader and in
    /// `[timeout_min, lease]` otherwise.
    jitter: f64,
}

impl Elector {
    pub fn new(timeout_min: Duration, lease: Duration, now: Instant, jitter: f64) -> Elector {
        Elector { timeout_min, lease, last_attempt: now, jitter: jitter.clamp(0.0, 1.0) }
    }

    /// Whether to stand now, given when a leader was last heard and a vote last granted.
    pub fn due(&self, now: Instant, leader: Option<Instant>, voted: Option<Instant>) -> bool {
        let spread = self.lease.saturating_sub(self.timeout_min).mul_f64(self.jitter);
        let after_leader = leader.map(|t| t + self.lease + spread);
        let after_quiet = [Some(self.last_attempt), voted].into_iter().flatten().max().map(|t| t + self.timeout_min + spread);
        [after_leader, after_quiet].into_iter().flatten().all(|t| now >= t)
    }

    /// An attempt was made at `now` (won or not); `jitter` is the next round's random part.
    pub fn attempted(&mut self, now: Instant, jitter: f64) {
        self.last_attempt = now;
        self.jitter = jitter.clamp(0.0, 1.0);
    }
}

/// Decides when voter `me` stands (see the module docs), until openraft shuts down.
pub async fn run_elector(
    me: u64,
    cluster_id: String,
    raft: Raft<TypeConfig>,
    contact: Contact,
    tick: Duration,
    timeout_min: Duration,
    lease: Duration,
) {
    let mut elector = Elector::new(timeout_min, lease, Instant::now(), rand::thread_rng().gen());
    let mut peers: BTreeMap<u64, PeerClient> = BTreeMap::new();
    loop {
        tokio::time::sleep(tick).await;
        let m = raft.metrics().borrow().clone();
        if m.running_state.is_err() {
            return;
        }
        let membership = m.membership_config.membership().clone();
        let voters: Vec<u64> = membership.voter_ids().collect();
        if m.state == ServerState::Leader || !voters.contains(&me) {
            continue;
        }
        let alone = voters.len() == 1;
        if alone {
            if m.state == ServerState::Candidate {
                continue;
            }
        } else {
            let times = contact.times();
            if !elector.due(Instant::now(), times.leader, times.voted) {
                continue;
            }
        }
        let req = PreVoteRequest { candidate: me, last_log_id: raft.data_metrics().borrow().last_log };
        let mut granted = 1;
        if !alone {
            peers.retain(|id, c| voters.contains(id) && membership.get_node(id).is_some_and(|n| n.addr == c.addr()));
            for id in voters.iter().copied().filter(|id| *id != me) {
                if let Some(node) = membership.get_node(&id) {
                    peers.entry(id).or_insert_with(|| PeerClient::observer(&cluster_id, id, &node.addr));
                }
            }
            let asks = peers.values_mut().map(|c| c.pre_vote(req.clone(), timeout_min / 2));
            granted += futures::future::join_all(asks).await.into_iter().filter(|r| matches!(r, Ok(r) if r.granted)).count();
        }
        elector.attempted(Instant::now(), rand::thread_rng().gen());
        if granted * 2 > voters.len() {
            tracing::info!(term = m.current_term, granted, voters = voters.len(), "pre-vote won; standing for election");
            if raft.trigger().elect().await.is_err() {
                return;
            }
        } else {
            tracing::debug!(term = m.current_term, granted, voters = voters.len(), "pre-vote lost; a leader is still heard");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use openraft::CommittedLeaderId;

    const LEASE: Duration = Duration::from_millis(2000);

    fn log(term: u64, index: u64) -> Option<LogId<u64>> {
        Some(LogId::new(CommittedLeaderId::new(term, 1), index))
    }

    fn follower(since_leader: Option<u64>, last: Option<LogId<u64>>) -> Local {
        Local { since_leader: since_leader.map(Duration::from_millis), leading_acked: None, last_log_id: last }
    }

    #[test]
    fn a_voter_that_hears_its_leader_refuses_a_pre_vote() {
        let req = PreVoteRequest { candidate: 3, last_log_id: log(1, 10) };
        assert!(!grants(&follower(Some(100), log(1, 10)), &req, LEASE));
        assert!(!grants(&follower(Some(2000), log(1, 10)), &req, LEASE));
        assert!(grants(&follower(Some(2001), log(1, 10)), &req, LEASE));
        assert!(grants(&follower(None, log(1, 10)), &req, LEASE));
    }

    #[test]
    fn a_candidate_with_a_shorter_or_older_log_is_refused() {
        let silent = |last| follower(None, last);
        assert!(!grants(&silent(log(1, 11)), &PreVoteRequest { candidate: 3, last_log_id: log(1, 10) }, LEASE));
        assert!(!grants(&silent(log(2, 5)), &PreVoteRequest { candidate: 3, last_log_id: log(1, 10) }, LEASE));
        assert!(!grants(&silent(log(1, 0)), &PreVoteRequest { candidate: 3, last_log_id: None }, LEASE));
        assert!(grants(&silent(log(1, 10)), &PreVoteRequest { candidate: 3, last_log_id: log(2, 3) }, LEASE));
        assert!(grants(&silent(None), &PreVoteRequest { candidate: 3, last_log_id: None }, LEASE));
    }

    #[test]
    fn a_leader_refuses_while_its_quorum_answers_and_grants_once_it_does_not() {
        let req = PreVoteRequest { candidate: 3, last_log_id: log(1, 10) };
        let leader = |acked: Option<u64>| Local { since_leader: None, leading_acked: Some(acked.map(Duration::from_millis)), last_log_id: log(1, 10) };
        assert!(!grants(&leader(Some(50)), &req, LEASE));
        assert!(grants(&leader(Some(5000)), &req, LEASE));
        assert!(grants(&leader(None), &req, LEASE));
    }

    #[test]
    fn a_voter_stands_a_lease_after_its_leader_and_a_timeout_after_a_failed_attempt() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let min = ms(1000);
        // No random part: the earliest each rule allows.
        let mut e = Elector::new(min, LEASE, t0, 0.0);
        // Heard a leader at t0 + 500 ms: due at t0 + 2500 ms, not before.
        let leader = Some(t0 + ms(500));
        assert!(!e.due(t0 + ms(2499), leader, None));
        assert!(e.due(t0 + ms(2500), leader, None));
        // Never heard a leader: a timeout after the start.
        assert!(!e.due(t0 + ms(999), None, None));
        assert!(e.due(t0 + ms(1000), None, None));
        // A vote granted at t0 + 1500 ms defers the next attempt to t0 + 2500 ms.
        assert!(!e.due(t0 + ms(2499), None, Some(t0 + ms(1500))));
        // After an attempt at t0 + 3000 ms with the largest random part: a lease later.
        e.attempted(t0 + ms(3000), 1.0);
        assert!(!e.due(t0 + ms(4999), None, None));
        assert!(e.due(t0 + ms(5000), None, None));
        // The random part also spreads the standing after a leader: up to a timeout more.
        assert!(!e.due(t0 + ms(5000), Some(t0 + ms(2500)), None));
        assert!(e.due(t0 + ms(5000), Some(t0 + ms(1000)), None));
    }
}
