//! A broker that is not a voter (`process.roles=broker`) follows the metadata quorum as an
//! observer: it long-polls the active controller for the image past the offset it has
//! ([`ObserveRequest`] on the controllers' listener) and publishes each newer image to its
//! [`super::view::ClusterView`], as a combined node's voter publishes the image it applies.
//! The voters come from `controller.quorum.voters`, or are learned from the answer of any
//! controller at `controller.quorum.bootstrap.servers` (every answer lists them).
//!
//! Sluice's own peer protocol carries this today (the whole image as metadata records, as a
//! snapshot carries it, on every change); following a Kafka KRaft quorum needs KRaft's Fetch
//! and FetchSnapshot instead.
//!
//! # Invariants
//! - The published image's offset never goes backwards.
//! - Only the active controller's image is taken: a voter that is not the leader answers with
//!   the leader it knows and no image.
//!
//! # Failure behaviour
//! A controller that cannot be reached, or that knows no leader, is passed over for the next
//! voter after a short pause; while no controller answers, a warning is logged every
//! [`UNREACHABLE_WARNING`] and the broker keeps its last image (its heartbeats fail too, so
//! the controller fences it and clients are sent elsewhere). An image that does not decode
//! (a record kind or version this broker does not understand) ends [`Observer::run`] with the
//! error, naming the record; the caller stops the process.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::RwLock;
use tokio::sync::watch;

use super::image::MetadataImage;
use super::raft::{image_from_records, ObserveRequest, PeerClient, ANY_VOTER};
use super::ClusterError;

/// How long one observe request may wait at the controller for a newer image.
const OBSERVE_WAIT: Duration = Duration::from_secs(1);
/// The pause before asking the next controller after a failure.
const RETRY_PAUSE: Duration = Duration::from_millis(200);
/// How often "no controller answers" is logged while it lasts.
pub const UNREACHABLE_WARNING: Duration = Duration::from_secs(10);

/// The metadata image as the active controller publishes it, for a broker-only node.
pub struct Observer {
    cluster_id: String,
    /// `controller.quorum.bootstrap.servers`, asked while no voter is known.
    bootstrap: Vec<String>,
    /// Controller id -> `host:port` of its controller listener: `controller.quorum.voters`, or
    /// as the controllers report the quorum's membership.
    voters: RwLock<BTreeMap<i32, String>>,
    image: watch::Sender<Arc<MetadataImage>>,
    /// The active controller as last reported, -1 when none is known.
    leader: AtomicI32,
}

/// Whom the next observe request goes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Target {
    Voter(i32),
    Bootstrap(usize),
}

impl Observer {
    pub fn new(cluster_id: &str, voters: BTreeMap<i32, String>, bootstrap: Vec<String>) -> Arc<Observer> {
        let (image, _) = watch::channel(Arc::new(MetadataImage::default()));
        Arc::new(Observer {
            cluster_id: cluster_id.to_string(),
            bootstrap,
            voters: RwLock::new(voters),
            image,
            leader: AtomicI32::new(-1),
        })
    }

    pub fn subscribe(&self) -> watch::Receiver<Arc<MetadataImage>> {
        self.image.subscribe()
    }

    /// The active controller as last reported.
    pub fn leader(&self) -> Option<i32> {
        Some(self.leader.load(Ordering::Acquire)).filter(|l| *l >= 0)
    }

    /// The address of controller `id`'s controller listener, once known.
    pub fn voter_addr(&self, id: i32) -> Option<String> {
        self.voters.read().get(&id).cloned()
    }

    fn next(&self, current: Target) -> Target {
        let voters = self.voters.read();
        if voters.is_empty() {
            let i = match current {
                Target::Bootstrap(i) => i + 1,
                Target::Voter(_) => 0,
            };
            return Target::Bootstrap(i % self.bootstrap.len().max(1));
        }
        let ids: Vec<i32> = voters.keys().copied().collect();
        match current {
            Target::Voter(id) => Target::Voter(next_voter(&ids, id)),
            Target::Bootstrap(_) => Target::Voter(ids[0]),
        }
    }

    /// Follows the quorum until the task is dropped or an image does not decode.
    pub async fn run(self: Arc<Self>) -> ClusterError {
        let mut clients: BTreeMap<i32, PeerClient> = BTreeMap::new();
        let mut bootstrap: Vec<PeerClient> = self.bootstrap.iter().map(|a| PeerClient::observer(&self.cluster_id, ANY_VOTER, a)).collect();
        let first_voter = self.voters.read().keys().next().copied();
        let mut target = first_voter.map_or(Target::Bootstrap(0), Target::Voter);
        let mut last_answer = Instant::now();
        let mut last_warning = Instant::now();
        loop {
            let after = self.image.borrow().offset;
            let request = ObserveRequest { after, wait_ms: OBSERVE_WAIT.as_millis() as u64 };
            let outcome = match target {
                Target::Voter(id) => match self.voter_addr(id) {
                    Some(addr) => clients.entry(id).or_insert_with(|| PeerClient::observer(&self.cluster_id, id as u64, &addr)).observe(request).await,
                    None => Err(std::io::Error::other(format!("controller {id} is not a voter"))),
                },
                Target::Bootstrap(i) => match bootstrap.get_mut(i) {
                    Some(client) => client.observe(request).await,
                    None => Err(std::io::Error::other("no controller.quorum.bootstrap.servers")),
                },
            };
            let next = match outcome {
                Ok(resp) => {
                    let reported: BTreeMap<i32, String> = resp.voters.iter().map(|(id, addr)| (*id as i32, addr.clone())).collect();
                    if !reported.is_empty() && *self.voters.read() != reported {
                        tracing::info!(voters = ?reported, "the metadata quorum's voters");
                        *self.voters.write() = reported;
                        clients.clear();
                    }
                    let leader = resp.leader.map(|l| l as i32).filter(|l| self.voters.read().contains_key(l));
                    self.leader.store(leader.unwrap_or(-1), Ordering::Release);
                    if resp.offset >= 0 {
                        last_answer = Instant::now();
                        if let Some(encoded) = resp.records.filter(|_| resp.offset > after) {
                            match image_from_records(resp.offset, &encoded) {
                                Ok(image) => {
                                    self.image.send_replace(Arc::new(image));
                                }
                                Err(e) => return e,
                            }
                        }
                        if let (Target::Bootstrap(_), Some(l)) = (target, leader) {
                            target = Target::Voter(l);
                        }
                        continue;
                    }
                    // Not the leader: ask the one it names, or the next voter after a pause.
                    match leader.filter(|l| Target::Voter(*l) != target) {
                        Some(l) => {
                            target = Target::Voter(l);
                            continue;
                        }
                        None => self.next(target),
                    }
                }
                Err(e) => {
                    tracing::debug!(?target, error = %e, "observing the metadata quorum failed");
                    if target == Target::Voter(self.leader.load(Ordering::Acquire)) {
                        // The active controller stopped answering: none is known until one does.
                        self.leader.store(-1, Ordering::Release);
                    }
                    self.next(target)
                }
            };
            if last_answer.elapsed() >= UNREACHABLE_WARNING && last_warning.elapsed() >= UNREACHABLE_WARNING {
                last_warning = Instant::now();
                tracing::warn!(
                    voters = ?*self.voters.read(),
                    bootstrap = ?self.bootstrap,
                    silent_for_s = last_answer.elapsed().as_secs(),
                    metadata_offset = after,
                    "no active controller answers; serving the last metadata image and retrying"
                );
            }
            target = next;
            tokio::time::sleep(RETRY_PAUSE).await;
        }
    }
}

fn next_voter(ids: &[i32], current: i32) -> i32 {
    let i = ids.iter().position(|id| *id == current).unwrap_or(0);
    ids[(i + 1) % ids.len()]
}
