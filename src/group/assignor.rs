//! Server-side assignors for KIP-848 consumer groups: `uniform` (Kafka's default) and `range`.
//!
//! Pure functions from (members and their subscriptions, topic partition counts, the previous
//! target assignment) to a new target assignment.
//!
//! # Invariants (both assignors)
//! - Every partition of a subscribed, existing topic is assigned to exactly one member that
//!   subscribes to its topic; nothing else is assigned.
//! - `uniform`: members with the same subscription differ by at most one partition, and a
//!   partition stays with its previous owner unless balance requires moving it.
//! - `range`: per topic, subscribers sorted by member id get contiguous ranges; the first
//!   `partitions % members` get one extra (Kafka's RangeAssignor rule).

use std::collections::{BTreeMap, BTreeSet};

/// A topic-partition by topic name.
pub type TopicPartition = (String, i32);

/// member id -> assigned partitions.
pub type Assignment = BTreeMap<String, BTreeSet<TopicPartition>>;

/// The assignors sluice implements, by their Kafka names.
pub const ASSIGNORS: &[&str] = &["uniform", "range"];

/// Runs the named assignor (`uniform` for anything unknown; the caller validates names).
pub fn assign(
    name: &str,
    subscriptions: &BTreeMap<String, BTreeSet<String>>,
    partitions: &BTreeMap<String, i32>,
    previous: &Assignment,
) -> Assignment {
    match name {
        "range" => range(subscriptions, partitions),
        _ => uniform(subscriptions, partitions, previous),
    }
}

fn range(subscriptions: &BTreeMap<String, BTreeSet<String>>, partitions: &BTreeMap<String, i32>) -> Assignment {
    let mut out: Assignment = subscriptions.keys().map(|m| (m.clone(), BTreeSet::new())).collect();
    for (topic, &count) in partitions {
        let members: Vec<&String> = subscriptions.iter().filter(|(_, s)| s.contains(topic)).map(|(m, _)| m).collect();
        if members.is_empty() {
            continue;
        }
        let n = members.len() as i32;
        let (per, extra) = (count / n, count % n);
        let mut next = 0;
        for (i, m) in members.iter().enumerate() {
            let take = per + i32::from((i as i32) < extra);
            let set = out.entry((*m).clone()).or_default();
            for p in next..next + take {
                set.insert((topic.clone(), p));
            }
            next += take;
        }
    }
    out
}

fn uniform(subscriptions: &BTreeMap<String, BTreeSet<String>>, partitions: &BTreeMap<String, i32>, previous: &Assignment) -> Assignment {
    let mut out: Assignment = subscriptions.keys().map(|m| (m.clone(), BTreeSet::new())).collect();
    let subscribed = |m: &str, t: &str| subscriptions.get(m).is_some_and(|s| s.contains(t));
    let all: Vec<TopicPartition> = partitions
        .iter()
        .filter(|(t, _)| subscriptions.values().any(|s| s.contains(*t)))
        .flat_map(|(t, &n)| (0..n).map(move |p| (t.clone(), p)))
        .collect();
    if subscriptions.is_empty() {
        return out;
    }
    let quota = all.len().div_ceil(subscriptions.len());
    // 1. Stickiness: keep what a member had, up to the quota.
    let mut owner: BTreeMap<TopicPartition, String> = BTreeMap::new();
    for (m, parts) in previous {
        let Some(set) = out.get_mut(m) else { continue };
        for tp in parts {
            if set.len() < quota && tp.1 < partitions.get(&tp.0).copied().unwrap_or(0) && subscribed(m, &tp.0) && !owner.contains_key(tp) {
                set.insert(tp.clone());
                owner.insert(tp.clone(), m.clone());
            }
        }
    }
    // 2. Everything else goes to the least loaded subscriber.
    for tp in &all {
        if owner.contains_key(tp) {
            continue;
        }
        let best = out.iter().filter(|(m, _)| subscribed(m, &tp.0)).min_by_key(|(m, s)| (s.len(), (*m).clone())).map(|(m, _)| m.clone());
        if let Some(m) = best {
            out.entry(m.clone()).or_default().insert(tp.clone());
            owner.insert(tp.clone(), m);
        }
    }
    // 3. Balance: move a partition from the most to the least loaded member that can take it,
    // while that narrows the gap (bounded: each move strictly reduces the sum of squares).
    for _ in 0..all.len() * 2 {
        let mut moved = false;
        let mut by_load: Vec<(usize, String)> = out.iter().map(|(m, s)| (s.len(), m.clone())).collect();
        by_load.sort();
        'outer: for (hi_len, hi) in by_load.iter().rev() {
            for (lo_len, lo) in by_load.iter() {
                if hi_len <= &(lo_len + 1) {
                    break;
                }
                let candidate = out[hi].iter().find(|tp| subscribed(lo, &tp.0)).cloned();
                if let Some(tp) = candidate {
                    out.get_mut(hi).map(|s| s.remove(&tp));
                    out.get_mut(lo).map(|s| s.insert(tp));
                    moved = true;
                    break 'outer;
                }
            }
        }
        if !moved {
            break;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn subs(list: &[(&str, &[&str])]) -> BTreeMap<String, BTreeSet<String>> {
        list.iter().map(|(m, ts)| (m.to_string(), ts.iter().map(|t| t.to_string()).collect())).collect()
    }

    #[test]
    fn range_gives_contiguous_ranges_with_extras_first() {
        let s = subs(&[("a", &["t"]), ("b", &["t"]), ("c", &["t"])]);
        let parts = BTreeMap::from([("t".to_string(), 7)]);
        let a = range(&s, &parts);
        let got: Vec<Vec<i32>> = a.values().map(|s| s.iter().map(|tp| tp.1).collect()).collect();
        assert_eq!(got, vec![vec![0, 1, 2], vec![3, 4], vec![5, 6]]);
    }

    #[test]
    fn uniform_keeps_partitions_in_place_when_a_member_joins() {
        let parts = BTreeMap::from([("t".to_string(), 6)]);
        let one = uniform(&subs(&[("a", &["t"])]), &parts, &Assignment::new());
        assert_eq!(one["a"].len(), 6);
        let two = uniform(&subs(&[("a", &["t"]), ("b", &["t"])]), &parts, &one);
        assert_eq!((two["a"].len(), two["b"].len()), (3, 3));
        assert!(two["a"].is_subset(&one["a"]), "a only gives partitions away");
        let three = uniform(&subs(&[("a", &["t"]), ("b", &["t"]), ("c", &["t"])]), &parts, &two);
        assert!(three["b"].is_subset(&two["b"]) && three["a"].is_subset(&two["a"]));
        assert_eq!(three.values().map(BTreeSet::len).collect::<Vec<_>>(), vec![2, 2, 2]);
    }

    proptest! {
        #[test]
        fn every_partition_goes_to_exactly_one_subscriber(
            members in proptest::collection::btree_map("[a-e]", proptest::collection::btree_set("[xyz]", 1..3), 1..5),
            counts in proptest::collection::btree_map("[xyz]", 0..8i32, 1..4),
            use_range in any::<bool>(),
        ) {
            let name = if use_range { "range" } else { "uniform" };
            let a = assign(name, &members, &counts, &Assignment::new());
            let mut seen = BTreeSet::new();
            for (m, parts) in &a {
                for tp in parts {
                    prop_assert!(members[m].contains(&tp.0), "{} got unsubscribed {:?}", m, tp);
                    prop_assert!(seen.insert(tp.clone()), "{:?} assigned twice", tp);
                }
            }
            let expected: usize = counts.iter().filter(|(t, _)| members.values().any(|s| s.contains(*t))).map(|(_, n)| *n as usize).sum();
            prop_assert_eq!(seen.len(), expected);
            if !use_range && members.values().collect::<BTreeSet<_>>().len() == 1 {
                let sizes: Vec<usize> = a.values().map(BTreeSet::len).collect();
                prop_assert!(sizes.iter().max().unwrap() - sizes.iter().min().unwrap() <= 1, "{:?}", sizes);
            }
        }
    }
}
