//! The coordinator's side of the consumer-lag metrics: a copy of committed offsets and group
//! summaries for [`crate::metrics::GroupsView`] (no I/O; one lock acquisition per call).

use crate::metrics::{CommittedOffset, GroupSummary, GroupsView};

use super::consumer;
use super::Groups;

impl GroupsView for Groups {
    fn committed_offsets(&self) -> Vec<CommittedOffset> {
        self.with_core(|core| {
            core.groups()
                .flat_map(|(group, e)| {
                    e.offsets.iter().map(move |((topic, partition), v)| CommittedOffset {
                        group: group.clone(),
                        topic: topic.clone(),
                        partition: *partition,
                        offset: v.offset,
                        commit_timestamp_ms: v.commit_timestamp,
                    })
                })
                .collect()
        })
    }

    fn groups(&self) -> Vec<GroupSummary> {
        self.with_core(|core| {
            core.groups()
                .map(|(group, e)| match &e.consumer {
                    Some(c) => GroupSummary {
                        group: group.clone(),
                        state: consumer::state_name(c).to_string(),
                        members: c.members.len() as u32,
                        generation: c.group_epoch,
                        rebalances_total: c.group_epoch.max(0) as u64,
                        last_rebalance_duration_ms: None,
                    },
                    None => GroupSummary {
                        group: group.clone(),
                        state: e.classic.state().name().to_string(),
                        members: e.classic.member_count() as u32,
                        generation: e.classic.generation_id(),
                        rebalances_total: e.classic.rebalances_total,
                        last_rebalance_duration_ms: e.classic.last_rebalance_duration_ms,
                    },
                })
                .collect()
        })
    }
}
