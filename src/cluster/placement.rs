//! Where the replicas of new partitions go: Kafka's round-robin placement from a random start,
//! rack aware (`broker.rack`). A pure function of the brokers, the counts and the random start,
//! so placements are reproducible in tests and simulations.
//!
//! The algorithm is Kafka's (`AdminUtils.assignReplicasToBrokers`):
//! - brokers are listed alternating between racks (racks in name order, brokers in id order
//!   within each rack: `r1-b1, r2-b4, r1-b2, r2-b5, ...`); without racks, in id order;
//! - partition `p`'s first replica (its preferred leader) is broker `(p + start) % n` of that
//!   list, so leaders spread evenly; the others follow at a shift that grows by one every `n`
//!   partitions, so followers spread too;
//! - with racks, a follower is skipped while its rack already holds a replica of the partition
//!   and some rack does not (so a partition spans `min(replication factor, racks)` racks).
//!
//! # Invariants
//! - Every partition gets exactly `replication_factor` distinct brokers.
//! - A replication factor above the number of brokers is refused (INVALID_REPLICATION_FACTOR, with
//!   Kafka's message), never placed with fewer replicas.

/// A broker eligible for new replicas (registered and not fenced).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlacementBroker {
    pub id: i32,
    pub rack: Option<String>,
}

/// Why replicas could not be placed; the client gets INVALID_REPLICATION_FACTOR (38) or
/// INVALID_PARTITIONS (37) with this message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlacementError {
    #[error(
        "Unable to replicate the partition {replication_factor} time(s): The target replication factor of \
         {replication_factor} cannot be reached because only {brokers} broker(s) are registered."
    )]
    NotEnoughBrokers { replication_factor: i16, brokers: usize },
    #[error("Replication factor must be larger than 0.")]
    ReplicationFactorTooSmall,
}

/// The random choices of one placement: where the first leader is and where followers start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Start {
    pub leader: usize,
    pub shift: usize,
}

impl Start {
    /// A random start, as Kafka takes one for every CreateTopics / CreatePartitions.
    pub fn random(brokers: usize) -> Start {
        use rand::Rng;
        let mut rng = rand::thread_rng();
        let n = brokers.max(1);
        Start { leader: rng.gen_range(0..n), shift: rng.gen_range(0..n) }
    }
}

/// Replicas for partitions `first_partition .. first_partition + count` (the first index matters
/// for CreatePartitions, which continues a topic's existing numbering).
pub fn place(
    brokers: &[PlacementBroker],
    first_partition: usize,
    count: usize,
    replication_factor: i16,
    start: Start,
) -> Result<Vec<Vec<i32>>, PlacementError> {
    if replication_factor <= 0 {
        return Err(PlacementError::ReplicationFactorTooSmall);
    }
    let rf = replication_factor as usize;
    if rf > brokers.len() {
        return Err(PlacementError::NotEnoughBrokers { replication_factor, brokers: brokers.len() });
    }
    let arranged = rack_alternated(brokers);
    let n = arranged.len();
    let racks: std::collections::BTreeSet<&Option<String>> = arranged.iter().map(|b| &b.rack).collect();
    let num_racks = racks.len();
    let rack_aware = num_racks > 1;
    let mut out = Vec::with_capacity(count);
    let mut shift = start.shift % n;
    for p in first_partition..first_partition + count {
        if p > 0 && p % n == 0 {
            shift += 1;
        }
        let first = (p + start.leader) % n;
        let mut replicas = vec![arranged[first].id];
        if rack_aware {
            let mut racks_used = vec![&arranged[first].rack];
            let mut k = 0;
            while replicas.len() < rf {
                let b = &arranged[replica_index(first, shift * num_racks, k, n)];
                k += 1;
                let rack_ok = !racks_used.contains(&&b.rack) || racks_used.len() == num_racks;
                if rack_ok && !replicas.contains(&b.id) {
                    replicas.push(b.id);
                    if !racks_used.contains(&&b.rack) {
                        racks_used.push(&b.rack);
                    }
                }
            }
        } else {
            for j in 0..rf - 1 {
                replicas.push(arranged[replica_index(first, shift, j, n)].id);
            }
        }
        out.push(replicas);
    }
    Ok(out)
}

/// Kafka's follower index: the brokers after `first`, at an offset that wraps past `first`.
fn replica_index(first: usize, shift: usize, j: usize, n: usize) -> usize {
    if n == 1 {
        return first;
    }
    (first + 1 + (shift + j) % (n - 1)) % n
}

/// Brokers in id order within each rack, taken one rack at a time in rack-name order.
fn rack_alternated(brokers: &[PlacementBroker]) -> Vec<PlacementBroker> {
    let mut by_rack: std::collections::BTreeMap<&Option<String>, Vec<&PlacementBroker>> = Default::default();
    for b in brokers {
        by_rack.entry(&b.rack).or_default().push(b);
    }
    for list in by_rack.values_mut() {
        list.sort_by_key(|b| b.id);
    }
    let mut out = Vec::with_capacity(brokers.len());
    let mut i = 0;
    while out.len() < brokers.len() {
        for list in by_rack.values() {
            if let Some(b) = list.get(i) {
                out.push((*b).clone());
            }
        }
        i += 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::{BTreeMap, BTreeSet};

    fn brokers(spec: &[(i32, Option<&str>)]) -> Vec<PlacementBroker> {
        spec.iter().map(|(id, rack)| PlacementBroker { id: *id, rack: rack.map(String::from) }).collect()
    }

    #[test]
    fn without_racks_leaders_and_followers_are_striped_round_robin() {
        let b = brokers(&[(3, None), (1, None), (2, None)]);
        let got = place(&b, 0, 6, 2, Start { leader: 0, shift: 0 }).unwrap();
        assert_eq!(got, vec![vec![1, 2], vec![2, 3], vec![3, 1], vec![1, 3], vec![2, 1], vec![3, 2]]);
        // A random start only rotates the same striping.
        let got = place(&b, 0, 3, 3, Start { leader: 1, shift: 0 }).unwrap();
        assert_eq!(got, vec![vec![2, 3, 1], vec![3, 1, 2], vec![1, 2, 3]]);
    }

    #[test]
    fn every_partition_gets_distinct_replicas_and_leaders_spread_evenly() {
        let b = brokers(&[(1, None), (2, None), (3, None), (4, None), (5, None)]);
        for leader in 0..5 {
            for shift in 0..5 {
                let got = place(&b, 0, 50, 3, Start { leader, shift }).unwrap();
                let mut leaders: BTreeMap<i32, usize> = BTreeMap::new();
                for r in &got {
                    assert_eq!(r.iter().collect::<BTreeSet<_>>().len(), 3, "{r:?}");
                    *leaders.entry(r[0]).or_default() += 1;
                }
                assert!(leaders.values().all(|&c| c == 10), "{leaders:?}");
            }
        }
    }

    #[test]
    fn with_racks_each_partition_spans_as_many_racks_as_it_can() {
        let b = brokers(&[(1, Some("a")), (2, Some("a")), (3, Some("b")), (4, Some("b")), (5, Some("c")), (6, Some("c"))]);
        let rack = |id: i32| b.iter().find(|x| x.id == id).unwrap().rack.clone();
        for leader in 0..6 {
            for shift in 0..6 {
                for rf in [2i16, 3, 4] {
                    for r in place(&b, 0, 12, rf, Start { leader, shift }).unwrap() {
                        assert_eq!(r.iter().collect::<BTreeSet<_>>().len(), rf as usize, "{r:?}");
                        let racks: BTreeSet<_> = r.iter().map(|id| rack(*id)).collect();
                        assert_eq!(racks.len(), (rf as usize).min(3), "rf {rf}: {r:?}");
                    }
                }
            }
        }
    }

    #[test]
    fn a_replication_factor_above_the_broker_count_is_refused_with_kafkas_message() {
        let b = brokers(&[(1, None), (2, None)]);
        let err = place(&b, 0, 1, 3, Start { leader: 0, shift: 0 }).unwrap_err();
        assert_eq!(
            err.to_string(),
            "Unable to replicate the partition 3 time(s): The target replication factor of 3 cannot be reached because only 2 broker(s) are registered."
        );
        assert_eq!(place(&b, 0, 1, 0, Start { leader: 0, shift: 0 }), Err(PlacementError::ReplicationFactorTooSmall));
        assert_eq!(place(&b, 0, 1, 1, Start::random(2)).unwrap().len(), 1);
    }
}
