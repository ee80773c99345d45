package sluice.compat;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.*;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;

import org.apache.kafka.clients.admin.*;
import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.clients.producer.*;
import org.apache.kafka.common.*;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.errors.*;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.header.internals.RecordHeader;
import org.apache.kafka.common.record.TimestampType;
import org.apache.kafka.common.serialization.*;

/**
 * Compatibility scenarios for the Apache Kafka Java client (kafka-clients).
 *
 *   java sluice.compat.Main list
 *   java sluice.compat.Main BOOTSTRAP [SCENARIO...]
 *
 * Prints one line per scenario: SCENARIO java NAME PASS|FAIL|SKIP detail
 */
public class Main {
    static final String CLIENT = "java";
    static String bootstrap;
    static final String RUN = Long.toString(System.currentTimeMillis() % 100000000L, 36)
            + Integer.toString(new Random().nextInt(1 << 20), 36);

    interface Scenario { String run() throws Exception; }

    /** Thrown by a scenario that cannot run here (reported as SKIP, not a failure). */
    static final class Skip extends RuntimeException { Skip(String why) { super(why); } }

    static final LinkedHashMap<String, Scenario> SCENARIOS = new LinkedHashMap<>();
    static {
        SCENARIOS.put("produce-assign", Main::produceAssign);
        SCENARIOS.put("compression", Main::compression);
        SCENARIOS.put("subscribe-group", Main::subscribeGroup);
        SCENARIOS.put("consumer-protocol-pattern", Main::consumerProtocolPattern);
        SCENARIOS.put("admin-topics", Main::adminTopics);
        SCENARIOS.put("admin-configs", Main::adminConfigs);
        SCENARIOS.put("admin-records-offsets", Main::adminRecordsOffsets);
        SCENARIOS.put("admin-cluster", Main::adminCluster);
        SCENARIOS.put("streams-wordcount", Streams::wordCount);
        SCENARIOS.put("transactions", Transactions::commitAndAbort);
        SCENARIOS.put("connect-distributed", ConnectScenario::distributed);
        SCENARIOS.put("leader-failover", Failover::leaderFailover);
    }

    public static void main(String[] args) {
        if (args.length == 0) { System.err.println("usage: Main list | Main BOOTSTRAP [SCENARIO...]"); System.exit(2); }
        if (args[0].equals("list")) { SCENARIOS.keySet().forEach(System.out::println); return; }
        bootstrap = args[0];
        List<String> names = args.length > 1 ? Arrays.asList(args).subList(1, args.length) : new ArrayList<>(SCENARIOS.keySet());
        int failed = 0;
        for (String name : names) {
            Scenario s = SCENARIOS.get(name);
            String line;
            if (s == null) { line = "FAIL unknown scenario"; failed++; }
            else {
                try { line = "PASS " + s.run(); }
                catch (Skip k) { line = "SKIP " + k.getMessage(); }
                catch (Throwable t) {
                    failed++;
                    Throwable c = t;
                    while (c instanceof ExecutionException && c.getCause() != null) c = c.getCause();
                    if (System.getenv("COMPAT_DEBUG") != null) t.printStackTrace();
                    line = "FAIL " + c.getClass().getSimpleName() + ": " + String.valueOf(c.getMessage()).replace('\n', ' ');
                }
            }
            System.out.println("SCENARIO " + CLIENT + " " + name + " " + line);
            System.out.flush();
        }
        System.exit(failed == 0 ? 0 : 1);
    }

    // ---------------------------------------------------------------- helpers

    static void check(boolean cond, String what) { if (!cond) throw new AssertionError(what); }

    static String topic(String scenario) { return "compat-java-" + scenario + "-" + RUN; }

    static Admin admin() {
        Properties p = new Properties();
        p.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, 20000);
        p.put(AdminClientConfig.REQUEST_TIMEOUT_MS_CONFIG, 10000);
        return Admin.create(p);
    }

    static KafkaProducer<String, String> producer(Map<String, Object> extra) {
        Properties p = new Properties();
        p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, 20000);
        p.put(ProducerConfig.REQUEST_TIMEOUT_MS_CONFIG, 10000);
        p.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, 20000);
        p.putAll(extra);
        return new KafkaProducer<>(p, new StringSerializer(), new StringSerializer());
    }

    static KafkaConsumer<String, String> consumer(Map<String, Object> extra) {
        Properties p = new Properties();
        p.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        p.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, false);
        p.put(ConsumerConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, 20000);
        p.putAll(extra);
        return new KafkaConsumer<>(p, new StringDeserializer(), new StringDeserializer());
    }

    static void createTopic(Admin admin, String name, int partitions, Map<String, String> configs) throws Exception {
        NewTopic nt = new NewTopic(name, partitions, (short) 1);
        if (configs != null) nt.configs(configs);
        admin.createTopics(List.of(nt)).all().get(20, TimeUnit.SECONDS);
        waitForTopic(admin, name, partitions);
    }

    static void waitForTopic(Admin admin, String name, int partitions) throws Exception {
        long deadline = System.currentTimeMillis() + 15000;
        while (true) {
            try {
                TopicDescription d = admin.describeTopics(List.of(name)).allTopicNames().get(10, TimeUnit.SECONDS).get(name);
                if (d.partitions().size() == partitions && d.partitions().stream().allMatch(p -> p.leader() != null)) return;
            } catch (ExecutionException e) {
                if (!(e.getCause() instanceof UnknownTopicOrPartitionException)) throw e;
            }
            if (System.currentTimeMillis() > deadline) throw new AssertionError("topic " + name + " not ready with " + partitions + " partitions");
            Thread.sleep(200);
        }
    }

    /** What was sent, keyed by partition then offset. */
    static final class Sent {
        final int partition; final long offset; final String key; final String value; final long ts; final List<Header> headers;
        Sent(int partition, long offset, String key, String value, long ts, List<Header> headers) {
            this.partition = partition; this.offset = offset; this.key = key; this.value = value; this.ts = ts; this.headers = headers;
        }
    }

    /** Produce n records across `partitions` partitions with keys, headers and explicit timestamps. */
    static List<Sent> produceRecords(KafkaProducer<String, String> producer, String topic, int partitions, int n) throws Exception {
        long base = System.currentTimeMillis() - 3_600_000L;
        List<Future<RecordMetadata>> futures = new ArrayList<>();
        List<ProducerRecord<String, String>> recs = new ArrayList<>();
        for (int i = 0; i < n; i++) {
            String key = (i % 7 == 3) ? null : "key-" + i;
            String value = (i % 11 == 5) ? null : "value-" + i + "-" + "x".repeat(i % 13) + "-ünïcødé";
            List<Header> hs = new ArrayList<>();
            if (i % 4 != 0) {
                hs.add(new RecordHeader("h-index", Integer.toString(i).getBytes(StandardCharsets.UTF_8)));
                hs.add(new RecordHeader("h-dup", "a".getBytes(StandardCharsets.UTF_8)));
                hs.add(new RecordHeader("h-dup", "b".getBytes(StandardCharsets.UTF_8)));
                hs.add(new RecordHeader("h-empty", new byte[0]));
                hs.add(new RecordHeader("h-null", (byte[]) null));
            }
            ProducerRecord<String, String> r = new ProducerRecord<>(topic, i % partitions, base + i * 1000L, key, value, hs);
            recs.add(r);
            futures.add(producer.send(r));
        }
        producer.flush();
        List<Sent> sent = new ArrayList<>();
        for (int i = 0; i < n; i++) {
            RecordMetadata md = futures.get(i).get(20, TimeUnit.SECONDS);
            ProducerRecord<String, String> r = recs.get(i);
            check(md.partition() == r.partition(), "record " + i + " acked on partition " + md.partition() + ", sent to " + r.partition());
            check(md.timestamp() == r.timestamp(), "record " + i + " ack timestamp " + md.timestamp() + " != " + r.timestamp());
            List<Header> hs = new ArrayList<>();
            r.headers().forEach(hs::add);
            sent.add(new Sent(md.partition(), md.offset(), r.key(), r.value(), r.timestamp(), hs));
        }
        // per partition: offsets must be 0,1,2,... in send order
        Map<Integer, Long> next = new HashMap<>();
        for (Sent s : sent) {
            long exp = next.getOrDefault(s.partition, 0L);
            check(s.offset == exp, "partition " + s.partition + ": acked offset " + s.offset + ", expected " + exp);
            next.put(s.partition, exp + 1);
        }
        return sent;
    }

    static List<ConsumerRecord<String, String>> pollUntil(KafkaConsumer<String, String> c, int n, long timeoutMs) {
        List<ConsumerRecord<String, String>> got = new ArrayList<>();
        long deadline = System.currentTimeMillis() + timeoutMs;
        while (got.size() < n && System.currentTimeMillis() < deadline) {
            for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(200))) got.add(r);
        }
        return got;
    }

    static String hstr(Iterable<Header> hs) {
        StringBuilder sb = new StringBuilder("[");
        for (Header h : hs) sb.append(h.key()).append('=').append(h.value() == null ? "<null>" : new String(h.value(), StandardCharsets.UTF_8)).append(',');
        return sb.append(']').toString();
    }

    /** Every sent record read back exactly once, in per-partition order, with all its fields. */
    static void verify(List<Sent> sent, List<ConsumerRecord<String, String>> got, String topic) {
        check(got.size() == sent.size(), "read back " + got.size() + " records, produced " + sent.size());
        Map<String, Sent> byPos = new HashMap<>();
        for (Sent s : sent) byPos.put(s.partition + "@" + s.offset, s);
        Map<Integer, Long> last = new HashMap<>();
        for (Sent s : sent) last.merge(s.partition, s.offset - 1, Math::min);
        for (ConsumerRecord<String, String> r : got) {
            check(r.topic().equals(topic), "record from topic " + r.topic());
            long prev = last.getOrDefault(r.partition(), -1L);
            check(r.offset() == prev + 1, "partition " + r.partition() + ": offset " + r.offset() + " after " + prev);
            last.put(r.partition(), r.offset());
            Sent s = byPos.get(r.partition() + "@" + r.offset());
            check(s != null, "unexpected record at " + r.partition() + "@" + r.offset());
            String at = " at " + r.partition() + "@" + r.offset();
            check(Objects.equals(s.key, r.key()), "key " + r.key() + " != " + s.key + at);
            check(Objects.equals(s.value, r.value()), "value " + r.value() + " != " + s.value + at);
            check(r.timestamp() == s.ts, "timestamp " + r.timestamp() + " != " + s.ts + at);
            check(r.timestampType() == TimestampType.CREATE_TIME, "timestamp type " + r.timestampType() + at);
            check(hstr(r.headers()).equals(hstr(s.headers)), "headers " + hstr(r.headers()) + " != " + hstr(s.headers) + at);
        }
    }

    static List<TopicPartition> tps(String topic, int partitions) {
        List<TopicPartition> l = new ArrayList<>();
        for (int p = 0; p < partitions; p++) l.add(new TopicPartition(topic, p));
        return l;
    }

    // ---------------------------------------------------------------- scenarios

    /** Producer with defaults (idempotent, acks=all); consumer with assign() + seekToBeginning. */
    static String produceAssign() throws Exception {
        String t = topic("pa");
        try (Admin admin = admin()) { createTopic(admin, t, 3, null); }
        List<Sent> sent;
        try (KafkaProducer<String, String> p = producer(Map.of())) {
            sent = produceRecords(p, t, 3, 60);
        }
        try (KafkaConsumer<String, String> c = consumer(Map.of())) {
            c.assign(tps(t, 3));
            c.seekToBeginning(tps(t, 3));
            verify(sent, pollUntil(c, sent.size(), 20000), t);
            Map<TopicPartition, Long> end = c.endOffsets(tps(t, 3));
            Map<TopicPartition, Long> beg = c.beginningOffsets(tps(t, 3));
            for (int p = 0; p < 3; p++) {
                check(end.get(new TopicPartition(t, p)) == 20L, "endOffset p" + p + "=" + end.get(new TopicPartition(t, p)));
                check(beg.get(new TopicPartition(t, p)) == 0L, "beginningOffset p" + p + "=" + beg.get(new TopicPartition(t, p)));
            }
            // seek into the middle of a partition
            TopicPartition tp1 = new TopicPartition(t, 1);
            c.seek(tp1, 7);
            c.assign(List.of(tp1));
            c.seek(tp1, 7);
            List<ConsumerRecord<String, String>> rest = pollUntil(c, 13, 10000);
            check(rest.size() == 13 && rest.get(0).offset() == 7, "seek to 7: got " + rest.size() + " records from " + (rest.isEmpty() ? -1 : rest.get(0).offset()));
            // offsetsForTimes
            long ts = sent.stream().filter(s -> s.partition == 1 && s.offset == 5).findFirst().get().ts;
            OffsetAndTimestamp oat = c.offsetsForTimes(Map.of(tp1, ts)).get(tp1);
            check(oat != null && oat.offset() == 5, "offsetsForTimes -> " + oat);
        }
        return sent.size() + " records, 3 partitions, idempotent acks=all, keys/headers/timestamps/offsets verified";
    }

    static String compression() throws Exception {
        String[] codecs = {"none", "gzip", "snappy", "lz4", "zstd"};
        String t = topic("comp");
        try (Admin admin = admin()) { createTopic(admin, t, codecs.length, null); }
        int total = 0;
        List<Sent> all = new ArrayList<>();
        for (int i = 0; i < codecs.length; i++) {
            try (KafkaProducer<String, String> p = producer(Map.of(ProducerConfig.COMPRESSION_TYPE_CONFIG, codecs[i], ProducerConfig.LINGER_MS_CONFIG, 50))) {
                long base = System.currentTimeMillis() - 1000;
                List<Future<RecordMetadata>> fs = new ArrayList<>();
                List<ProducerRecord<String, String>> rs = new ArrayList<>();
                for (int j = 0; j < 40; j++) {
                    ProducerRecord<String, String> r = new ProducerRecord<>(t, i, base + j, "k" + j, codecs[i] + "-" + j + "-" + "payload".repeat(j % 5),
                            List.of(new RecordHeader("codec", codecs[i].getBytes(StandardCharsets.UTF_8))));
                    rs.add(r); fs.add(p.send(r));
                }
                p.flush();
                for (int j = 0; j < 40; j++) {
                    RecordMetadata md = fs.get(j).get(20, TimeUnit.SECONDS);
                    check(md.offset() == j, codecs[i] + ": offset " + md.offset() + " for record " + j);
                    List<Header> hs = new ArrayList<>(); rs.get(j).headers().forEach(hs::add);
                    all.add(new Sent(i, md.offset(), rs.get(j).key(), rs.get(j).value(), rs.get(j).timestamp(), hs));
                }
                total += 40;
            }
        }
        try (KafkaConsumer<String, String> c = consumer(Map.of())) {
            c.assign(tps(t, codecs.length));
            c.seekToBeginning(tps(t, codecs.length));
            verify(all, pollUntil(c, total, 20000), t);
        }
        return String.join(",", codecs) + ": " + total + " records verified";
    }

    /** Consumer with subscribe() in a group, commitSync, committed offsets visible to admin. */
    static String subscribeGroup() throws Exception {
        String t = topic("grp");
        String group = "compat-java-group-" + RUN;
        try (Admin admin = admin()) {
            createTopic(admin, t, 2, null);
            List<Sent> sent;
            try (KafkaProducer<String, String> p = producer(Map.of())) { sent = produceRecords(p, t, 2, 30); }
            try (KafkaConsumer<String, String> c = consumer(Map.of(ConsumerConfig.GROUP_ID_CONFIG, group))) {
                c.subscribe(List.of(t));
                verify(sent, pollUntil(c, sent.size(), 25000), t);
                check(c.assignment().size() == 2, "assignment " + c.assignment());
                c.commitSync(Duration.ofSeconds(15));
                Map<TopicPartition, OffsetAndMetadata> com = c.committed(new HashSet<>(tps(t, 2)), Duration.ofSeconds(15));
                for (TopicPartition tp : tps(t, 2)) check(com.get(tp) != null && com.get(tp).offset() == 15, "committed " + tp + " = " + com.get(tp));
            }
            Map<TopicPartition, OffsetAndMetadata> offs = admin.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata().get(20, TimeUnit.SECONDS);
            for (TopicPartition tp : tps(t, 2)) check(offs.get(tp) != null && offs.get(tp).offset() == 15, "admin listConsumerGroupOffsets " + tp + " = " + offs.get(tp));
            Collection<GroupListing> groups = admin.listGroups().all().get(20, TimeUnit.SECONDS);
            check(groups.stream().anyMatch(g -> g.groupId().equals(group)), "group not listed: " + groups);
            // a second consumer in the same group resumes from the committed offsets: nothing left
            try (KafkaConsumer<String, String> c = consumer(Map.of(ConsumerConfig.GROUP_ID_CONFIG, group))) {
                c.subscribe(List.of(t));
                List<ConsumerRecord<String, String>> more = pollUntil(c, 1, 5000);
                check(more.isEmpty(), "re-joined consumer read " + more.size() + " records past the committed offsets");
            }
            admin.deleteConsumerGroups(List.of(group)).all().get(20, TimeUnit.SECONDS);
        }
        return "subscribe + commitSync + committed + listConsumerGroupOffsets + deleteConsumerGroups";
    }

    /** KIP-848 (group.protocol=consumer) with a SubscriptionPattern, which the broker resolves. */
    static String consumerProtocolPattern() throws Exception {
        String prefix = topic("pat");
        String a = prefix + "-a", b = prefix + "-b", other = prefix + "x-c";
        String group = "compat-java-pattern-" + RUN;
        Map<String, List<Sent>> sent = new TreeMap<>();
        try (Admin admin = admin()) {
            createTopic(admin, a, 2, null);
            createTopic(admin, b, 1, null);
            createTopic(admin, other, 1, null);
            try (KafkaProducer<String, String> p = producer(Map.of())) {
                sent.put(a, produceRecords(p, a, 2, 20));
                sent.put(b, produceRecords(p, b, 1, 10));
                produceRecords(p, other, 1, 5);
            }
            try (KafkaConsumer<String, String> c = consumer(Map.of(ConsumerConfig.GROUP_ID_CONFIG, group, ConsumerConfig.GROUP_PROTOCOL_CONFIG, "consumer"))) {
                // The pattern matches whole names: "<prefix>x-c" starts with the prefix but is not "<prefix>-...".
                c.subscribe(new SubscriptionPattern(java.util.regex.Pattern.quote(prefix) + "-.*"));
                List<ConsumerRecord<String, String>> got = pollUntil(c, 30, 30000);
                Map<String, List<ConsumerRecord<String, String>>> byTopic = new TreeMap<>();
                for (ConsumerRecord<String, String> r : got) byTopic.computeIfAbsent(r.topic(), k -> new ArrayList<>()).add(r);
                check(byTopic.keySet().equals(sent.keySet()), "read from " + byTopic.keySet());
                for (String t : sent.keySet()) verify(sent.get(t), byTopic.get(t), t);
                Set<TopicPartition> want = new HashSet<>(tps(a, 2));
                want.addAll(tps(b, 1));
                check(c.assignment().equals(want), "assignment " + c.assignment());
                c.commitSync(Duration.ofSeconds(15));
            }
            Map<TopicPartition, OffsetAndMetadata> offs = admin.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata().get(20, TimeUnit.SECONDS);
            check(offs.size() == 3 && offs.get(new TopicPartition(b, 0)).offset() == 10, "committed " + offs);
        }
        return "SubscriptionPattern resolved by the broker: 2 matching topics read (30 records verified), 1 not; commitSync";
    }

    static String adminTopics() throws Exception {
        String t = topic("at");
        try (Admin admin = admin()) {
            admin.createTopics(List.of(new NewTopic(t, 2, (short) 1))).all().get(20, TimeUnit.SECONDS);
            waitForTopic(admin, t, 2);
            check(admin.listTopics().names().get(20, TimeUnit.SECONDS).contains(t), "listTopics lacks " + t);
            TopicDescription d = admin.describeTopics(List.of(t)).allTopicNames().get(20, TimeUnit.SECONDS).get(t);
            check(d.partitions().size() == 2, "describeTopics partitions " + d.partitions().size());
            check(!d.isInternal(), "internal");
            check(d.topicId() != null && !d.topicId().equals(Uuid.ZERO_UUID), "topicId " + d.topicId());
            for (TopicPartitionInfo pi : d.partitions()) {
                check(pi.leader() != null && pi.replicas().size() == 1 && pi.isr().size() == 1, "partition info " + pi);
            }
            // same topic by id
            TopicDescription byId = admin.describeTopics(TopicCollection.ofTopicIds(List.of(d.topicId()))).allTopicIds().get(20, TimeUnit.SECONDS).get(d.topicId());
            check(byId.name().equals(t), "describe by id -> " + byId.name());
            // existing topic -> TopicExistsException
            try {
                admin.createTopics(List.of(new NewTopic(t, 1, (short) 1))).all().get(20, TimeUnit.SECONDS);
                throw new AssertionError("createTopics on an existing topic succeeded");
            } catch (ExecutionException e) {
                check(e.getCause() instanceof TopicExistsException, "create existing -> " + e.getCause());
            }
            // validateOnly
            String t2 = t + "-v";
            admin.createTopics(List.of(new NewTopic(t2, 1, (short) 1)), new CreateTopicsOptions().validateOnly(true)).all().get(20, TimeUnit.SECONDS);
            check(!admin.listTopics().names().get(20, TimeUnit.SECONDS).contains(t2), "validateOnly created the topic");
            // unknown topic
            try {
                admin.describeTopics(List.of(t + "-nope")).allTopicNames().get(20, TimeUnit.SECONDS);
                throw new AssertionError("describeTopics of a missing topic succeeded");
            } catch (ExecutionException e) {
                check(e.getCause() instanceof UnknownTopicOrPartitionException, "describe missing -> " + e.getCause());
            }
            // createPartitions 2 -> 4; shrinking fails
            admin.createPartitions(Map.of(t, NewPartitions.increaseTo(4))).all().get(20, TimeUnit.SECONDS);
            waitForTopic(admin, t, 4);
            try {
                admin.createPartitions(Map.of(t, NewPartitions.increaseTo(3))).all().get(20, TimeUnit.SECONDS);
                throw new AssertionError("createPartitions 4 -> 3 succeeded");
            } catch (ExecutionException e) {
                check(e.getCause() instanceof InvalidPartitionsException, "shrink -> " + e.getCause());
            }
            // deleteTopics
            admin.deleteTopics(List.of(t)).all().get(20, TimeUnit.SECONDS);
            long deadline = System.currentTimeMillis() + 15000;
            while (admin.listTopics().names().get(20, TimeUnit.SECONDS).contains(t)) {
                if (System.currentTimeMillis() > deadline) throw new AssertionError("topic still listed after delete");
                Thread.sleep(200);
            }
            try {
                admin.deleteTopics(List.of(t)).all().get(20, TimeUnit.SECONDS);
                throw new AssertionError("deleting a deleted topic succeeded");
            } catch (ExecutionException e) {
                check(e.getCause() instanceof UnknownTopicOrPartitionException, "delete missing -> " + e.getCause());
            }
        }
        return "createTopics(+exists,+validateOnly) listTopics describeTopics(name,id,missing) createPartitions(2->4, 4->3 rejected) deleteTopics";
    }

    /**
     * Describes {@code res} until {@code ok} holds, for at most 10 s. A broker may answer from
     * metadata that a change just made has not reached yet (Apache Kafka applies controller
     * records to its brokers asynchronously), so a check right after a change waits for it.
     */
    static Config settledConfig(Admin admin, ConfigResource res, java.util.function.Predicate<Config> ok, String what) throws Exception {
        long deadline = System.currentTimeMillis() + 10000;
        while (true) {
            Config c = admin.describeConfigs(List.of(res)).all().get(20, TimeUnit.SECONDS).get(res);
            if (ok.test(c)) return c;
            if (System.currentTimeMillis() > deadline) throw new AssertionError(what + ": " + c);
            Thread.sleep(200);
        }
    }

    static String adminConfigs() throws Exception {
        String t = topic("ac");
        try (Admin admin = admin()) {
            createTopic(admin, t, 1, Map.of("retention.ms", "3600000"));
            ConfigResource res = new ConfigResource(ConfigResource.Type.TOPIC, t);
            Config c = admin.describeConfigs(List.of(res)).all().get(20, TimeUnit.SECONDS).get(res);
            ConfigEntry e = c.get("retention.ms");
            check(e != null && e.value().equals("3600000") && e.source() == ConfigEntry.ConfigSource.DYNAMIC_TOPIC_CONFIG, "retention.ms " + e);
            ConfigEntry cp = c.get("cleanup.policy");
            check(cp != null && cp.value().equals("delete") && cp.source() == ConfigEntry.ConfigSource.DEFAULT_CONFIG, "cleanup.policy " + cp);
            check(c.get("segment.bytes") != null && c.get("max.message.bytes") != null, "segment.bytes/max.message.bytes missing");

            admin.incrementalAlterConfigs(Map.of(res, List.of(
                    new AlterConfigOp(new ConfigEntry("retention.ms", "7200000"), AlterConfigOp.OpType.SET),
                    new AlterConfigOp(new ConfigEntry("segment.bytes", "1048576"), AlterConfigOp.OpType.SET)))).all().get(20, TimeUnit.SECONDS);
            c = settledConfig(admin, res, x -> x.get("retention.ms").value().equals("7200000"), "after SET retention.ms");
            check(c.get("segment.bytes").value().equals("1048576"), "after SET segment.bytes=" + c.get("segment.bytes").value());

            admin.incrementalAlterConfigs(Map.of(res, List.of(
                    new AlterConfigOp(new ConfigEntry("retention.ms", ""), AlterConfigOp.OpType.DELETE)))).all().get(20, TimeUnit.SECONDS);
            c = settledConfig(admin, res, x -> x.get("retention.ms").source() == ConfigEntry.ConfigSource.DEFAULT_CONFIG, "after DELETE retention.ms");
            e = c.get("retention.ms");
            check(e.value().equals("604800000") && e.source() == ConfigEntry.ConfigSource.DEFAULT_CONFIG, "after DELETE retention.ms " + e);

            try {
                admin.incrementalAlterConfigs(Map.of(res, List.of(
                        new AlterConfigOp(new ConfigEntry("no.such.config", "1"), AlterConfigOp.OpType.SET)))).all().get(20, TimeUnit.SECONDS);
                throw new AssertionError("SET of an unknown topic config succeeded");
            } catch (ExecutionException ex) {
                check(ex.getCause() instanceof InvalidConfigurationException, "unknown config -> " + ex.getCause());
            }
            try {
                admin.incrementalAlterConfigs(Map.of(res, List.of(
                        new AlterConfigOp(new ConfigEntry("retention.ms", "notanumber"), AlterConfigOp.OpType.SET)))).all().get(20, TimeUnit.SECONDS);
                throw new AssertionError("SET retention.ms=notanumber succeeded");
            } catch (ExecutionException ex) {
                check(ex.getCause() instanceof InvalidConfigurationException, "bad value -> " + ex.getCause());
            }

            String brokerId = Integer.toString(admin.describeCluster().nodes().get(20, TimeUnit.SECONDS).iterator().next().id());
            ConfigResource br = new ConfigResource(ConfigResource.Type.BROKER, brokerId);
            Config bc = admin.describeConfigs(List.of(br)).all().get(20, TimeUnit.SECONDS).get(br);
            check(bc.get("log.retention.hours") != null || bc.get("log.retention.ms") != null, "broker config lacks log.retention.*");
            check(bc.get("num.partitions") != null, "broker config lacks num.partitions");

            // missing topic
            ConfigResource missing = new ConfigResource(ConfigResource.Type.TOPIC, t + "-nope");
            try {
                admin.describeConfigs(List.of(missing)).all().get(20, TimeUnit.SECONDS);
                throw new AssertionError("describeConfigs of a missing topic succeeded");
            } catch (ExecutionException ex) {
                check(ex.getCause() instanceof UnknownTopicOrPartitionException, "describeConfigs missing -> " + ex.getCause());
            }
            admin.deleteTopics(List.of(t)).all().get(20, TimeUnit.SECONDS);
        }
        return "describeConfigs(topic,broker,missing) incrementalAlterConfigs(SET,DELETE,unknown key,bad value)";
    }

    static String adminRecordsOffsets() throws Exception {
        String t = topic("ar");
        try (Admin admin = admin()) {
            createTopic(admin, t, 1, null);
            List<Sent> sent;
            // linger so that the 10 records share one batch: timestamp lookups must find records inside a batch
            try (KafkaProducer<String, String> p = producer(Map.of(ProducerConfig.LINGER_MS_CONFIG, 200))) { sent = produceRecords(p, t, 1, 10); }
            TopicPartition tp = new TopicPartition(t, 0);
            check(admin.listOffsets(Map.of(tp, OffsetSpec.earliest())).partitionResult(tp).get().offset() == 0, "earliest != 0");
            check(admin.listOffsets(Map.of(tp, OffsetSpec.latest())).partitionResult(tp).get().offset() == 10, "latest != 10");
            long o = admin.listOffsets(Map.of(tp, OffsetSpec.forTimestamp(sent.get(5).ts))).partitionResult(tp).get().offset();
            check(o == 5, "forTimestamp(ts of #5) -> " + o);
            o = admin.listOffsets(Map.of(tp, OffsetSpec.forTimestamp(sent.get(5).ts - 1))).partitionResult(tp).get().offset();
            check(o == 5, "forTimestamp(ts of #5 - 1) -> " + o);
            ListOffsetsResult.ListOffsetsResultInfo mx = admin.listOffsets(Map.of(tp, OffsetSpec.maxTimestamp())).partitionResult(tp).get();
            check(mx.offset() == 9 && mx.timestamp() == sent.get(9).ts, "maxTimestamp -> " + mx);
            o = admin.listOffsets(Map.of(tp, OffsetSpec.forTimestamp(sent.get(9).ts + 1))).partitionResult(tp).get().offset();
            check(o == -1, "forTimestamp(after last) -> " + o);

            DeletedRecords dr = admin.deleteRecords(Map.of(tp, RecordsToDelete.beforeOffset(4))).lowWatermarks().get(tp).get(20, TimeUnit.SECONDS);
            check(dr.lowWatermark() == 4, "deleteRecords lowWatermark " + dr.lowWatermark());
            check(admin.listOffsets(Map.of(tp, OffsetSpec.earliest())).partitionResult(tp).get().offset() == 4, "earliest after deleteRecords != 4");
            try {
                admin.deleteRecords(Map.of(tp, RecordsToDelete.beforeOffset(11))).lowWatermarks().get(tp).get(20, TimeUnit.SECONDS);
                throw new AssertionError("deleteRecords beyond the high watermark succeeded");
            } catch (ExecutionException ex) {
                check(ex.getCause() instanceof org.apache.kafka.common.errors.OffsetOutOfRangeException, "deleteRecords beyond HW -> " + ex.getCause());
            }
            try (KafkaConsumer<String, String> c = consumer(Map.of())) {
                c.assign(List.of(tp));
                c.seekToBeginning(List.of(tp));
                List<ConsumerRecord<String, String>> got = pollUntil(c, 6, 15000);
                check(got.size() == 6 && got.get(0).offset() == 4, "after deleteRecords read " + got.size() + " from " + (got.isEmpty() ? -1 : got.get(0).offset()));
                verify(sent.subList(4, 10), got, t);
            }
            admin.deleteTopics(List.of(t)).all().get(20, TimeUnit.SECONDS);
        }
        return "listOffsets(earliest,latest,forTimestamp,maxTimestamp) deleteRecords(+beyond HW) re-read from low watermark";
    }

    static String adminCluster() throws Exception {
        try (Admin admin = admin()) {
            DescribeClusterResult r = admin.describeCluster();
            Collection<Node> nodes = r.nodes().get(20, TimeUnit.SECONDS);
            Node ctl = r.controller().get(20, TimeUnit.SECONDS);
            String cid = r.clusterId().get(20, TimeUnit.SECONDS);
            // One broker per bootstrap address (the runner lists every node of a cluster).
            String[] addresses = bootstrap.split(",");
            check(nodes.size() == addresses.length, "nodes " + nodes);
            Node n = nodes.iterator().next();
            check(java.util.Arrays.stream(addresses).anyMatch(a -> a.endsWith(":" + n.port())), "advertised port " + n.port() + " vs bootstrap " + bootstrap);
            check(cid != null && cid.length() == 22, "clusterId " + cid);
            check(ctl != null, "controller null");
            return "cluster " + cid + ", node " + n.id() + " " + n.host() + ":" + n.port();
        }
    }
}
