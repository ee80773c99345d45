//! Framing of Fetch responses whose records stay in the segment files.
//!
//! Every other response is a kafka-protocol message encoded into one buffer. A Fetch response
//! is mostly record bytes that already sit in the page cache, and copying them into a buffer
//! costs more than everything else the broker does to serve them. So the fetch handler returns a
//! [`FetchReply`] whose records are [`FileSlice`]s, and [`frame`] turns it into
//! [`ResponsePart`]s: encoded bytes for the fields, and file ranges the connection sends with
//! `sendfile(2)`.
//!
//! This module writes the Fetch response layout (versions 4 to 17) by hand, which is the price
//! of not copying the records. Of the tagged fields it writes KIP-951's: a partition's
//! `CurrentLeader` (tag 1) and the response's `NodeEndpoints` (tag 0). `frame_matches_kafka_protocol_encoding` checks it byte for byte
//! against kafka-protocol's own encoder for every supported version.
//!
//! # Invariants
//! - The frame's size prefix equals the summed length of all parts minus 4.
//! - Slices no longer than the inline limit are read into the buffer (one positional read):
//!   for a small fetch, one `write` beats a `write` + `sendfile` pair per partition.
//! - Records are never null: a partition without data gets empty records, as before.
//!
//! # Failure behaviour
//! A failed read of an inlined slice is returned as an error; the caller closes the
//! connection (a response cannot be half sent), and the client retries the fetch.
use std::io;

use bytes::{BufMut, Bytes, BytesMut};
use uuid::Uuid;

use crate::log::FileSlice;

/// Slices up to this size are copied into the response buffer instead of sent with sendfile.
pub const INLINE_MAX: usize = 32 * 1024;

/// One partition of a [`FetchReply`].
#[derive(Debug, Clone)]
pub struct PartitionReply {
    pub partition_index: i32,
    pub error_code: i16,
    pub high_watermark: i64,
    pub last_stable_offset: i64,
    pub log_start_offset: i64,
    /// `(producer_id, first_offset)`; `None` is sent as null (read_uncommitted).
    pub aborted_transactions: Option<Vec<(i64, i64)>>,
    pub preferred_read_replica: i32,
    /// `None` is sent as empty records.
    pub records: Option<FileSlice>,
    /// KIP-951: `(leader id, leader epoch)` of the partition's leader, sent with
    /// NOT_LEADER_OR_FOLLOWER (tagged field 1, versions 12+).
    pub current_leader: Option<(i32, i32)>,
    /// For a follower whose log diverged: `(epoch, end offset)` (tagged field 0, versions 12+).
    pub diverging_epoch: Option<(i32, i64)>,
}

/// A broker's endpoint in a Fetch response's `NodeEndpoints` (KIP-951, versions 16+).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeEndpointReply {
    pub node_id: i32,
    pub host: String,
    pub port: i32,
    pub rack: Option<String>,
}

/// One topic of a [`FetchReply`]: its name (versions < 13) or id (13+).
#[derive(Debug, Clone)]
pub struct TopicReply {
    pub name: String,
    pub topic_id: Uuid,
    pub partitions: Vec<PartitionReply>,
}

/// A Fetch response before framing.
#[derive(Debug, Clone, Default)]
pub struct FetchReply {
    pub throttle_time_ms: i32,
    pub error_code: i16,
    pub session_id: i32,
    pub responses: Vec<TopicReply>,
    /// The endpoints of the leaders named in `current_leader`s (tagged field 0, versions 16+).
    pub node_endpoints: Vec<NodeEndpointReply>,
}

impl FetchReply {
    /// A response that carries only a top-level error (fetch session errors).
    pub fn error(code: i16) -> FetchReply {
        FetchReply {
            error_code: code,
            ..FetchReply::default()
        }
    }
}

/// A piece of a framed response, written in order.
#[derive(Debug)]
pub enum ResponsePart {
    Bytes(Bytes),
    /// Sent with sendfile.
    File(FileSlice),
}

impl ResponsePart {
    pub fn len(&self) -> usize {
        match self {
            ResponsePart::Bytes(b) => b.len(),
            ResponsePart::File(f) => f.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Writes buffers and slices in order, starting a new buffer after each slice.
struct Builder {
    done: Vec<ResponsePart>,
    head: Option<BytesMut>,
    cur: BytesMut,
    flexible: bool,
    inline_max: usize,
}

impl Builder {
    fn put_uvarint(&mut self, mut v: u32) {
        while v >= 0x80 {
            self.cur.put_u8((v as u8) | 0x80);
            v >>= 7;
        }
        self.cur.put_u8(v as u8);
    }

    /// Array length: compact (n + 1, 0 = null) when flexible, else i32 (-1 = null).
    fn put_len(&mut self, n: Option<usize>) {
        if self.flexible {
            self.put_uvarint(n.map_or(0, |n| n as u32 + 1));
        } else {
            self.cur.put_i32(n.map_or(-1, |n| n as i32));
        }
    }

    fn put_string(&mut self, s: &str) {
        if self.flexible {
            self.put_uvarint(s.len() as u32 + 1);
        } else {
            self.cur.put_i16(s.len() as i16);
        }
        self.cur.put_slice(s.as_bytes());
    }

    /// One tagged field `tag` holding `data`, or none when `data` is `None` (flexible versions only).
    fn put_one_tag(&mut self, tag: u32, data: Option<&[u8]>) {
        self.put_tags(&[(tag, data)]);
    }

    /// The tagged fields that have data, in the order given (ascending tags; flexible only).
    fn put_tags(&mut self, tags: &[(u32, Option<&[u8]>)]) {
        if !self.flexible {
            return;
        }
        let present = tags.iter().filter(|(_, d)| d.is_some()).count();
        self.put_uvarint(present as u32);
        for (tag, data) in tags {
            if let Some(data) = data {
                self.put_uvarint(*tag);
                self.put_uvarint(data.len() as u32);
                self.cur.put_slice(data);
            }
        }
    }

    /// No tagged fields (flexible versions only).
    fn put_no_tags(&mut self) {
        if self.flexible {
            self.cur.put_u8(0);
        }
    }

    fn put_records(&mut self, records: Option<&FileSlice>) -> io::Result<()> {
        let len = records.map_or(0, FileSlice::len);
        self.put_len(Some(len));
        match records {
            Some(s) if s.len() <= self.inline_max => s.read_into(&mut self.cur)?,
            Some(s) => {
                let next = BytesMut::with_capacity(256);
                let buf = std::mem::replace(&mut self.cur, next);
                if self.head.is_none() && self.done.is_empty() {
                    self.head = Some(buf);
                } else {
                    self.done.push(ResponsePart::Bytes(buf.freeze()));
                }
                self.done.push(ResponsePart::File(s.clone()));
            }
            None => {}
        }
        Ok(())
    }

    fn finish(mut self) -> Vec<ResponsePart> {
        let mut head = self
            .head
            .take()
            .unwrap_or_else(|| std::mem::take(&mut self.cur));
        let total =
            head.len() + self.done.iter().map(ResponsePart::len).sum::<usize>() + self.cur.len();
        head[0..4].copy_from_slice(&((total - 4) as i32).to_be_bytes());
        let mut parts = Vec::with_capacity(self.done.len() + 2);
        parts.push(ResponsePart::Bytes(head.freeze()));
        parts.append(&mut self.done);
        if !self.cur.is_empty() {
            parts.push(ResponsePart::Bytes(self.cur.freeze()));
        }
        parts
    }
}

/// Frames `reply` as the Fetch response `version` (4..=17) to request `correlation_id`:
/// size prefix, response header, body. Slices longer than `inline_max` become
/// [`ResponsePart::File`]s; everything else is in the byte parts.
pub fn frame(
    reply: &FetchReply,
    correlation_id: i32,
    version: i16,
    inline_max: usize,
) -> io::Result<Vec<ResponsePart>> {
    debug_assert!((4..=17).contains(&version));
    let flexible = version >= 12;
    let mut b = Builder {
        done: Vec::new(),
        head: None,
        cur: BytesMut::with_capacity(1024),
        flexible,
        inline_max,
    };
    b.cur.put_i32(0); // size, patched in finish
    b.cur.put_i32(correlation_id);
    b.put_no_tags(); // response header v1
    b.cur.put_i32(reply.throttle_time_ms);
    if version >= 7 {
        b.cur.put_i16(reply.error_code);
        b.cur.put_i32(reply.session_id);
    }
    b.put_len(Some(reply.responses.len()));
    for t in &reply.responses {
        if version >= 13 {
            b.cur.put_slice(t.topic_id.as_bytes());
        } else {
            b.put_string(&t.name);
        }
        b.put_len(Some(t.partitions.len()));
        for p in &t.partitions {
            b.cur.put_i32(p.partition_index);
            b.cur.put_i16(p.error_code);
            b.cur.put_i64(p.high_watermark);
            b.cur.put_i64(p.last_stable_offset);
            if version >= 5 {
                b.cur.put_i64(p.log_start_offset);
            }
            b.put_len(p.aborted_transactions.as_ref().map(Vec::len));
            for &(producer_id, first_offset) in p.aborted_transactions.iter().flatten() {
                b.cur.put_i64(producer_id);
                b.cur.put_i64(first_offset);
                b.put_no_tags();
            }
            if version >= 11 {
                b.cur.put_i32(p.preferred_read_replica);
            }
            b.put_records(p.records.as_ref())?;
            let leader = p.current_leader.map(|(id, epoch)| {
                let mut d = [0u8; 9]; // LeaderIdAndEpoch: id, epoch, no tagged fields
                d[0..4].copy_from_slice(&id.to_be_bytes());
                d[4..8].copy_from_slice(&epoch.to_be_bytes());
                d
            });
            let diverging = p.diverging_epoch.map(|(epoch, end)| {
                let mut d = [0u8; 13]; // EpochEndOffset: epoch, end offset, no tagged fields
                d[0..4].copy_from_slice(&epoch.to_be_bytes());
                d[4..12].copy_from_slice(&end.to_be_bytes());
                d
            });
            b.put_tags(&[(0, diverging.as_ref().map(|d| &d[..])), (1, leader.as_ref().map(|d| &d[..]))]);
        }
        b.put_no_tags();
    }
    let endpoints = (version >= 16 && !reply.node_endpoints.is_empty()).then(|| encode_node_endpoints(&reply.node_endpoints));
    b.put_one_tag(0, endpoints.as_deref());
    Ok(b.finish())
}

/// `NodeEndpoints` as a compact array (flexible encoding).
fn encode_node_endpoints(endpoints: &[NodeEndpointReply]) -> Vec<u8> {
    let mut b = Builder { done: Vec::new(), head: None, cur: BytesMut::with_capacity(64), flexible: true, inline_max: 0 };
    b.put_len(Some(endpoints.len()));
    for e in endpoints {
        b.cur.put_i32(e.node_id);
        b.put_string(&e.host);
        b.cur.put_i32(e.port);
        match &e.rack {
            Some(r) => b.put_string(r),
            None => b.put_uvarint(0),
        }
        b.put_no_tags();
    }
    b.cur.to_vec()
}

#[cfg(test)]
mod tests {
    use std::io::Write;
    use std::sync::Arc;

    use kafka_protocol::messages::fetch_response::{
        AbortedTransaction, EpochEndOffset, FetchableTopicResponse, LeaderIdAndEpoch, NodeEndpoint, PartitionData,
    };
    use kafka_protocol::messages::{BrokerId, FetchResponse, ProducerId};
    use proptest::prelude::*;

    use super::*;
    use crate::api::{frame_response, topic_name};
    use crate::log::io::StdBackend;
    use crate::log::IoBackend;

    /// The same reply as kafka-protocol's message, records read into memory. kafka-protocol
    /// refuses to encode a non-default value in a field the version lacks, so those are left
    /// at their defaults (the hand encoder skips them).
    fn to_message(reply: &FetchReply, version: i16) -> FetchResponse {
        let topics = reply
            .responses
            .iter()
            .map(|t| {
                let partitions = t
                    .partitions
                    .iter()
                    .map(|p| {
                        PartitionData::default()
                            .with_partition_index(p.partition_index)
                            .with_error_code(p.error_code)
                            .with_high_watermark(p.high_watermark)
                            .with_last_stable_offset(p.last_stable_offset)
                            .with_log_start_offset(if version >= 5 {
                                p.log_start_offset
                            } else {
                                -1
                            })
                            .with_preferred_read_replica(BrokerId(p.preferred_read_replica))
                            .with_aborted_transactions(p.aborted_transactions.as_ref().map(|a| {
                                a.iter()
                                    .map(|&(pid, first)| {
                                        AbortedTransaction::default()
                                            .with_producer_id(ProducerId(pid))
                                            .with_first_offset(first)
                                    })
                                    .collect()
                            }))
                            .with_records(Some(
                                p.records
                                    .as_ref()
                                    .map(|s| s.to_bytes().unwrap())
                                    .unwrap_or_default(),
                            ))
                            .with_current_leader(match p.current_leader {
                                Some((id, epoch)) if version >= 12 => LeaderIdAndEpoch::default()
                                    .with_leader_id(BrokerId(id))
                                    .with_leader_epoch(epoch),
                                _ => LeaderIdAndEpoch::default(),
                            })
                            .with_diverging_epoch(match p.diverging_epoch {
                                Some((epoch, end)) if version >= 12 => {
                                    EpochEndOffset::default().with_epoch(epoch).with_end_offset(end)
                                }
                                _ => EpochEndOffset::default(),
                            })
                    })
                    .collect();
                FetchableTopicResponse::default()
                    .with_topic(topic_name(if version < 13 { &t.name } else { "" }))
                    .with_topic_id(if version >= 13 {
                        t.topic_id
                    } else {
                        Uuid::nil()
                    })
                    .with_partitions(partitions)
            })
            .collect();
        FetchResponse::default()
            .with_throttle_time_ms(reply.throttle_time_ms)
            .with_error_code(if version >= 7 { reply.error_code } else { 0 })
            .with_session_id(if version >= 7 { reply.session_id } else { 0 })
            .with_responses(topics)
            .with_node_endpoints(if version >= 16 {
                reply
                    .node_endpoints
                    .iter()
                    .map(|e| {
                        NodeEndpoint::default()
                            .with_node_id(BrokerId(e.node_id))
                            .with_host(crate::api::str_bytes(&e.host))
                            .with_port(e.port)
                            .with_rack(e.rack.as_deref().map(crate::api::str_bytes))
                    })
                    .collect()
            } else {
                Vec::new()
            })
    }

    fn joined(parts: &[ResponsePart]) -> Vec<u8> {
        let mut out = Vec::new();
        for p in parts {
            match p {
                ResponsePart::Bytes(b) => out.extend_from_slice(b),
                ResponsePart::File(f) => out.extend_from_slice(&f.to_bytes().unwrap()),
            }
        }
        out
    }

    /// A file of `len` distinct bytes and a way to cut slices of it.
    fn data_file(len: usize) -> (tempfile::TempDir, Arc<dyn crate::log::SegmentFile>) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("00000000000000000000.log");
        let mut f = std::fs::File::create(&path).unwrap();
        f.write_all(
            &(0..len)
                .map(|i| (i * 7 + i / 251) as u8)
                .collect::<Vec<_>>(),
        )
        .unwrap();
        drop(f);
        let file: Arc<dyn crate::log::SegmentFile> = StdBackend.open(&path).unwrap().into();
        (dir, file)
    }

    type PartSpec = (i32, i16, i64, Option<Vec<(i64, i64)>>, Option<(u16, u16)>, Option<(i32, i32)>);
    type TopicSpec = (String, u128, Vec<PartSpec>);
    type EndpointSpec = (i32, String, i32, Option<String>);

    fn endpoints_strategy() -> impl Strategy<Value = Vec<EndpointSpec>> {
        proptest::collection::vec(
            (any::<i32>(), "[a-z0-9.]{0,12}", any::<i32>(), proptest::option::of("[a-z0-9-]{0,6}")),
            0..3,
        )
    }

    fn reply_strategy() -> impl Strategy<Value = (i32, i16, i32, Vec<TopicSpec>)>
    {
        let part = (
            any::<i32>(),
            any::<i16>(),
            any::<i64>(),
            proptest::option::of(proptest::collection::vec(
                (any::<i64>(), any::<i64>()),
                0..3,
            )),
            proptest::option::of((any::<u16>(), 0u16..3000)),
            // Never LeaderIdAndEpoch's default (-1, -1), which kafka-protocol leaves out.
            proptest::option::of((0..i32::MAX, any::<i32>())),
        );
        let topic = (
            "[a-z._-]{0,20}",
            any::<u128>(),
            proptest::collection::vec(part, 0..5),
        );
        (
            any::<i32>(),
            any::<i16>(),
            any::<i32>(),
            proptest::collection::vec(topic, 0..4),
        )
    }

    proptest! {
        #[test]
        fn frame_matches_kafka_protocol_encoding(
            version in 4i16..=17,
            correlation_id in any::<i32>(),
            inline_max in prop_oneof![Just(0usize), Just(100), Just(INLINE_MAX)],
            (throttle, error, session, topics) in reply_strategy(),
            endpoints in endpoints_strategy(),
        ) {
            let (_dir, file) = data_file(70_000);
            let reply = FetchReply {
                throttle_time_ms: throttle,
                error_code: error,
                session_id: session,
                responses: topics.into_iter().map(|(name, id, parts)| TopicReply {
                    name,
                    topic_id: Uuid::from_u128(id),
                    partitions: parts.into_iter().map(|(index, code, hw, aborted, records, current_leader)| PartitionReply {
                        partition_index: index,
                        error_code: code,
                        high_watermark: hw,
                        last_stable_offset: hw.wrapping_sub(1),
                        log_start_offset: hw / 2,
                        aborted_transactions: aborted,
                        preferred_read_replica: -1,
                        records: records.map(|(pos, len)| FileSlice::new(file.clone(), u64::from(pos), usize::from(len))),
                        current_leader,
                        // Never EpochEndOffset's default (-1, -1), which kafka-protocol leaves out.
                        diverging_epoch: (index % 3 == 0).then_some((index & 0x7fff_ffff, hw)),
                    }).collect(),
                }).collect(),
                node_endpoints: endpoints
                    .into_iter()
                    .map(|(node_id, host, port, rack)| NodeEndpointReply { node_id, host, port, rack })
                    .collect(),
            };
            let parts = frame(&reply, correlation_id, version, inline_max).unwrap();
            // Fields a version lacks are not sent: compare against the message without them.
            let expected = frame_response(correlation_id, version, &to_message(&reply, version)).unwrap();
            prop_assert_eq!(joined(&parts), expected.to_vec());
            for p in &parts {
                if let ResponsePart::File(f) = p {
                    prop_assert!(f.len() > inline_max, "a slice of {} bytes was not inlined", f.len());
                }
            }
        }
    }

    #[test]
    fn large_slices_become_file_parts_between_byte_parts() {
        let (_dir, file) = data_file(200_000);
        let part = |i, pos, len| PartitionReply {
            partition_index: i,
            error_code: 0,
            high_watermark: 10,
            last_stable_offset: 10,
            log_start_offset: 0,
            aborted_transactions: None,
            preferred_read_replica: -1,
            records: Some(FileSlice::new(file.clone(), pos, len)),
            current_leader: None,
            diverging_epoch: None,
        };
        let reply = FetchReply {
            responses: vec![TopicReply {
                name: "t".into(),
                topic_id: Uuid::nil(),
                partitions: vec![
                    part(0, 0, 100_000),
                    part(1, 100_000, 10),
                    part(2, 100_010, 50_000),
                ],
            }],
            ..FetchReply::default()
        };
        let parts = frame(&reply, 7, 16, INLINE_MAX).unwrap();
        let kinds: Vec<&str> = parts
            .iter()
            .map(|p| match p {
                ResponsePart::Bytes(_) => "bytes",
                ResponsePart::File(_) => "file",
            })
            .collect();
        assert_eq!(kinds, ["bytes", "file", "bytes", "file", "bytes"]);
        let total: usize = parts.iter().map(ResponsePart::len).sum();
        let ResponsePart::Bytes(head) = &parts[0] else {
            panic!("starts with bytes")
        };
        assert_eq!(
            i32::from_be_bytes(head[0..4].try_into().unwrap()) as usize,
            total - 4
        );
    }

    #[test]
    fn a_slice_cut_short_by_truncation_is_an_error_not_other_bytes() {
        let (_dir, file) = data_file(1000);
        file.set_len(500).unwrap();
        let reply = FetchReply {
            responses: vec![TopicReply {
                name: "t".into(),
                topic_id: Uuid::nil(),
                partitions: vec![PartitionReply {
                    partition_index: 0,
                    error_code: 0,
                    high_watermark: 1,
                    last_stable_offset: 1,
                    log_start_offset: 0,
                    aborted_transactions: None,
                    preferred_read_replica: -1,
                    records: Some(FileSlice::new(file.clone(), 400, 200)),
                    current_leader: None,
                    diverging_epoch: None,
                }],
            }],
            ..FetchReply::default()
        };
        let err = frame(&reply, 1, 12, INLINE_MAX).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::UnexpectedEof);
    }
}
