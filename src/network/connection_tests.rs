//! A large produce's append held at the device, on a runtime of one thread: other connections
//! are served meanwhile, and the requests behind it on its own connection wait for it.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion, StrBytes};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::api::topic_name;
use crate::broker::Broker;
use crate::config::BrokerConfig;
use crate::log::io::WriteGate;
use crate::network::Server;
use crate::protocol::record_batch::{encode_uncompressed_batch, SimpleRecord};

/// `size | request header | body` for `req` at `version`.
fn frame<R: Encodable + HeaderVersion>(key: ApiKey, version: i16, correlation_id: i32, req: &R) -> BytesMut {
    let header = RequestHeader::default()
        .with_request_api_key(key as i16)
        .with_request_api_version(version)
        .with_correlation_id(correlation_id)
        .with_client_id(Some(StrBytes::from_static_str("connection-tests")));
    let mut buf = BytesMut::new();
    buf.put_i32(0);
    header.encode(&mut buf, R::header_version(version)).unwrap();
    req.encode(&mut buf, version).unwrap();
    let n = (buf.len() - 4) as i32;
    buf[0..4].copy_from_slice(&n.to_be_bytes());
    buf
}

/// Reads one response, checks its correlation id and decodes it; 10 s at most.
async fn response<R: Decodable>(s: &mut TcpStream, key: ApiKey, version: i16, correlation_id: i32) -> R {
    let read = async {
        let len = s.read_i32().await.unwrap() as usize;
        let mut body = vec![0u8; len];
        s.read_exact(&mut body).await.unwrap();
        Bytes::from(body)
    };
    let mut body = tokio::time::timeout(Duration::from_secs(10), read).await.expect("a response within 10 s");
    let header = ResponseHeader::decode(&mut body, key.response_header_version(version)).unwrap();
    assert_eq!(header.correlation_id, correlation_id);
    R::decode(&mut body, version).unwrap()
}

fn produce(topic: &str, value_len: usize) -> ProduceRequest {
    let value = vec![b'v'; value_len];
    let batch = encode_uncompressed_batch(&[SimpleRecord { timestamp: 1_700_000_000_000, key: None, value: Some(&value) }]);
    ProduceRequest::default().with_acks(1).with_timeout_ms(5000).with_topic_data(vec![produce_request::TopicProduceData::default()
        .with_name(topic_name(topic))
        .with_partition_data(vec![produce_request::PartitionProduceData::default().with_index(0).with_records(Some(batch.into()))])])
}

#[tokio::test(flavor = "current_thread")]
async fn a_large_append_held_at_the_device_holds_the_requests_behind_it_not_other_connections() {
    let dir = tempfile::tempdir().unwrap();
    let pairs = [("log.dirs", dir.path().display().to_string()), ("listeners", "PLAINTEXT://127.0.0.1:0".to_string())];
    let config = BrokerConfig::from_pairs(pairs.map(|(k, v)| (k.to_string(), v))).unwrap().config;
    // Writes of 64 KiB or more wait at the gate; everything smaller passes.
    let gate = WriteGate::closed_from(64 << 10);
    let broker = Arc::new(Broker::open_with_io(config, gate.backend()).unwrap());
    for t in ["big", "small"] {
        broker.create_topic(t, 1, 1, BTreeMap::new()).unwrap();
    }
    let server = Server::bind(Arc::clone(&broker)).await.unwrap();
    let addr = server.local_addrs()[0];
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let serving = tokio::spawn(server.run(async move { drop(stopped.await) }));

    // Connection A: a produce of 100 KiB, then ListOffsets for its partition, in one write.
    let mut a = TcpStream::connect(addr).await.unwrap();
    let list_offsets = ListOffsetsRequest::default().with_replica_id(BrokerId(-1)).with_topics(vec![
        list_offsets_request::ListOffsetsTopic::default()
            .with_name(topic_name("big"))
            .with_partitions(vec![list_offsets_request::ListOffsetsPartition::default().with_partition_index(0).with_timestamp(-1)]),
    ]);
    let mut buf = frame(ApiKey::Produce, 9, 1, &produce("big", 100 << 10));
    buf.extend_from_slice(&frame(ApiKey::ListOffsets, 7, 2, &list_offsets));
    a.write_all(&buf).await.unwrap();
    // Its append reaches the device and waits there. On this runtime's only thread, that wait
    // would stop this loop until the gate gives up (10 s), and the check below would fail.
    while gate.counts() == (0, 0) {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    assert_eq!(gate.counts(), (1, 0), "the append waited at the gate on the runtime thread");

    // Connection B is served meanwhile, a small produce to another partition included.
    let mut b = TcpStream::connect(addr).await.unwrap();
    b.write_all(&frame(ApiKey::ApiVersions, 3, 7, &ApiVersionsRequest::default())).await.unwrap();
    let versions: ApiVersionsResponse = response(&mut b, ApiKey::ApiVersions, 3, 7).await;
    assert_eq!(versions.error_code, 0);
    b.write_all(&frame(ApiKey::Produce, 9, 8, &produce("small", 100))).await.unwrap();
    let small: ProduceResponse = response(&mut b, ApiKey::Produce, 9, 8).await;
    assert_eq!((small.responses[0].partition_responses[0].error_code, small.responses[0].partition_responses[0].base_offset), (0, 0));
    assert_eq!(gate.counts(), (1, 0), "A's append is still held");

    // Once the device takes the write, A gets its answers in order, and ListOffsets ran after
    // the append it came behind.
    gate.open();
    let produced: ProduceResponse = response(&mut a, ApiKey::Produce, 9, 1).await;
    let p = &produced.responses[0].partition_responses[0];
    assert_eq!((p.error_code, p.base_offset), (0, 0));
    let offsets: ListOffsetsResponse = response(&mut a, ApiKey::ListOffsets, 7, 2).await;
    assert_eq!(offsets.topics[0].partitions[0].offset, 1, "ListOffsets sees the append before it");
    assert_eq!(gate.counts(), (0, 0), "no write gave up waiting");

    stop.send(()).unwrap();
    serving.await.unwrap();
}
