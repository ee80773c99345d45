//! Dynamic broker configs through IncrementalAlterConfigs/DescribeConfigs: Kafka's precedence
//! (node > cluster default > server.properties > default), refusal of static keys, validation,
//! and persistence across a restart.

mod common;

use common::{Broker, Client};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_string())
}

const TOPIC: i8 = 2;
const BROKER: i8 = 4;

fn alter(c: &mut Client, entity: &str, key: &str, value: Option<&str>) -> (i16, Option<String>) {
    let op = if value.is_some() { 0 } else { 1 };
    let req = IncrementalAlterConfigsRequest::default().with_resources(vec![
        incremental_alter_configs_request::AlterConfigsResource::default().with_resource_type(BROKER).with_resource_name(s(entity)).with_configs(
            vec![incremental_alter_configs_request::AlterableConfig::default()
                .with_name(s(key))
                .with_config_operation(op)
                .with_value(value.map(s))],
        ),
    ]);
    let r = c.call(&req, 1).responses.remove(0);
    (r.error_code, r.error_message.map(|m| m.to_string()))
}

/// (value, source) of `key` on a resource.
fn describe(c: &mut Client, resource_type: i8, name: &str, key: &str) -> (String, i8) {
    let req = DescribeConfigsRequest::default().with_include_synonyms(true).with_resources(vec![
        describe_configs_request::DescribeConfigsResource::default()
            .with_resource_type(resource_type)
            .with_resource_name(s(name))
            .with_configuration_keys(Some(vec![s(key)])),
    ]);
    let r = c.call(&req, 4).results.remove(0);
    assert_eq!(r.error_code, 0, "{:?}", r.error_message);
    let e = r.configs.into_iter().find(|e| e.name.as_str() == key).unwrap_or_else(|| panic!("{key} missing"));
    (e.value.unwrap().to_string(), e.config_source)
}

fn create_topic(c: &mut Client, name: &str) {
    let r = c.call(
        &CreateTopicsRequest::default().with_topics(vec![create_topics_request::CreatableTopic::default()
            .with_name(common::topic_name(name))
            .with_num_partitions(1)
            .with_replication_factor(1)]),
        7,
    );
    assert_eq!(r.topics[0].error_code, 0);
}

#[test]
fn dynamic_broker_configs_follow_kafkas_precedence_and_survive_restart() {
    let b = Broker::start(&["log.retention.ms=1000000"]);
    let mut c = b.connect();
    create_topic(&mut c, "t");
    assert_eq!(describe(&mut c, TOPIC, "t", "retention.ms"), ("1000000".into(), 4));

    // Cluster-wide default, then this node: the node wins.
    assert_eq!(alter(&mut c, "", "log.retention.ms", Some("2000000")).0, 0);
    assert_eq!(describe(&mut c, TOPIC, "t", "retention.ms"), ("2000000".into(), 3));
    assert_eq!(alter(&mut c, "1", "log.retention.ms", Some("3000000")).0, 0);
    assert_eq!(describe(&mut c, TOPIC, "t", "retention.ms"), ("3000000".into(), 2));
    assert_eq!(describe(&mut c, BROKER, "1", "log.retention.ms"), ("3000000".into(), 2));

    // Static keys and bad values are refused with Kafka's codes; nothing changes.
    assert_eq!(alter(&mut c, "1", "num.partitions", Some("3")).0, ResponseError::InvalidRequest.code());
    let (code, msg) = alter(&mut c, "1", "log.segment.bytes", Some("10"));
    assert_eq!(code, ResponseError::InvalidConfig.code());
    assert!(msg.unwrap_or_default().contains("log.segment.bytes"));
    assert_eq!(alter(&mut c, "7", "log.retention.ms", Some("1")).0, ResponseError::InvalidRequest.code());

    let dir = b.stop();
    let b = Broker::start_in(dir, &["log.retention.ms=1000000"]);
    let mut c = b.connect();
    assert_eq!(describe(&mut c, TOPIC, "t", "retention.ms"), ("3000000".into(), 2));

    // Deleting the node's value falls back to the cluster default, then to server.properties.
    assert_eq!(alter(&mut c, "1", "log.retention.ms", None).0, 0);
    assert_eq!(describe(&mut c, TOPIC, "t", "retention.ms"), ("2000000".into(), 3));
    assert_eq!(alter(&mut c, "", "log.retention.ms", None).0, 0);
    assert_eq!(describe(&mut c, TOPIC, "t", "retention.ms"), ("1000000".into(), 4));
}
