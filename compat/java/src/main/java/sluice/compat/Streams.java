package sluice.compat;

import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.*;
import java.util.concurrent.TimeUnit;

import org.apache.kafka.clients.admin.*;
import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.clients.producer.*;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.serialization.*;
import org.apache.kafka.common.utils.Bytes;
import org.apache.kafka.streams.*;
import org.apache.kafka.streams.kstream.*;
import org.apache.kafka.streams.state.KeyValueStore;
import org.apache.kafka.streams.state.Stores;

import static sluice.compat.Main.*;

/**
 * Kafka Streams (the kafka-streams library, at_least_once) against the broker: a word count
 * whose grouping goes through a repartition topic and whose counts live in a store backed by a
 * compacted changelog topic, both created by Streams itself. The application runs twice with the
 * same application.id; the second instance starts with an empty store, so it only counts on from
 * the first run's totals if it restored them from the changelog and resumed from the committed
 * input offsets.
 */
final class Streams {
    private Streams() {}

    static final String[] WORDS = {"alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta"};

    /** Lines of words, deterministic per (seed, i); each line is 1-4 words. */
    static List<String> lines(int seed, int n) {
        Random r = new Random(seed);
        List<String> out = new ArrayList<>();
        for (int i = 0; i < n; i++) {
            StringBuilder sb = new StringBuilder();
            int k = 1 + r.nextInt(4);
            for (int j = 0; j < k; j++) sb.append(j == 0 ? "" : " ").append(WORDS[r.nextInt(WORDS.length)]);
            out.add(sb.toString());
        }
        return out;
    }

    static void count(Map<String, Long> into, List<String> lines) {
        for (String l : lines) for (String w : l.split(" ")) into.merge(w, 1L, Long::sum);
    }

    static KafkaStreams start(String app, String in, String out, Path stateDir) {
        Properties p = new Properties();
        p.put(StreamsConfig.APPLICATION_ID_CONFIG, app);
        p.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(StreamsConfig.STATE_DIR_CONFIG, stateDir.toString());
        p.put(StreamsConfig.DEFAULT_KEY_SERDE_CLASS_CONFIG, Serdes.StringSerde.class);
        p.put(StreamsConfig.DEFAULT_VALUE_SERDE_CLASS_CONFIG, Serdes.StringSerde.class);
        p.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, 100);
        p.put(StreamsConfig.REPARTITION_PURGE_INTERVAL_MS_CONFIG, 100);
        // no record cache: every count update goes to the changelog and the output topic
        p.put(StreamsConfig.STATESTORE_CACHE_MAX_BYTES_CONFIG, 0);
        p.put(StreamsConfig.consumerPrefix(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG), "earliest");
        // Streams' consumer does not leave the group on close: the next instance's rebalance
        // waits for the old member's session to expire, so keep it short (the brokers' minimum)
        p.put(StreamsConfig.consumerPrefix(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG), 6000);
        StreamsBuilder b = new StreamsBuilder();
        b.<String, String>stream(in)
                .flatMapValues(v -> Arrays.asList(v.split(" ")))
                .groupBy((k, w) -> w)
                .count(Materialized.<String, Long>as(Stores.inMemoryKeyValueStore("counts"))
                        .withKeySerde(Serdes.String()).withValueSerde(Serdes.Long()))
                .toStream()
                .to(out, Produced.with(Serdes.String(), Serdes.Long()));
        KafkaStreams ks = new KafkaStreams(b.build(), p);
        ks.start();
        return ks;
    }

    static void produce(String topic, List<String> lines, int offset) throws Exception {
        try (KafkaProducer<String, String> pr = producer(Map.of(ProducerConfig.ACKS_CONFIG, "all"))) {
            for (int i = 0; i < lines.size(); i++) pr.send(new ProducerRecord<>(topic, "line-" + (offset + i), lines.get(i)));
            pr.flush();
        }
    }

    /**
     * Reads the output topic until every word's latest count equals `want`; returns each word's
     * counts in the order they were written (all partitions; a word always lands on one).
     */
    static Map<String, List<Long>> awaitCounts(KafkaConsumer<String, Long> c, Map<String, List<Long>> seen,
                                               Map<String, Long> want, long timeoutMs) {
        long deadline = System.currentTimeMillis() + timeoutMs;
        while (System.currentTimeMillis() < deadline) {
            for (ConsumerRecord<String, Long> r : c.poll(Duration.ofMillis(200)))
                seen.computeIfAbsent(r.key(), k -> new ArrayList<>()).add(r.value());
            Map<String, Long> latest = new TreeMap<>();
            seen.forEach((w, vs) -> latest.put(w, vs.get(vs.size() - 1)));
            if (latest.equals(new TreeMap<>(want))) return seen;
        }
        Map<String, Long> latest = new TreeMap<>();
        seen.forEach((w, vs) -> latest.put(w, vs.get(vs.size() - 1)));
        throw new AssertionError("counts on the output topic " + latest + ", expected " + new TreeMap<>(want));
    }

    static void awaitRunning(KafkaStreams ks) throws InterruptedException {
        long deadline = System.currentTimeMillis() + 60000;
        while (ks.state() != KafkaStreams.State.RUNNING) {
            check(ks.state() != KafkaStreams.State.ERROR && ks.state() != KafkaStreams.State.NOT_RUNNING, "streams state " + ks.state());
            check(System.currentTimeMillis() < deadline, "streams never reached RUNNING: " + ks.state());
            Thread.sleep(100);
        }
    }

    /** Waits until DeleteRecords from Streams moved a repartition partition's start past 0. */
    static void awaitPurged(Admin admin, String topic) throws Exception {
        long deadline = System.currentTimeMillis() + 20000;
        Map<TopicPartition, OffsetSpec> earliest = new HashMap<>();
        for (TopicPartition tp : tps(topic, 3)) earliest.put(tp, OffsetSpec.earliest());
        while (true) {
            Map<TopicPartition, ListOffsetsResult.ListOffsetsResultInfo> got = admin.listOffsets(earliest).all().get(20, TimeUnit.SECONDS);
            if (got.values().stream().anyMatch(i -> i.offset() > 0)) return;
            check(System.currentTimeMillis() < deadline, "repartition topic never purged: start offsets " + got);
            Thread.sleep(200);
        }
    }

    static String wordCount() throws Exception {
        String in = topic("streams-in"), out = topic("streams-out"), app = "compat-java-streams-" + RUN;
        Path state = Files.createTempDirectory("sluice-compat-streams");
        Map<String, Long> want = new HashMap<>();
        try (Admin admin = admin()) {
            createTopic(admin, in, 3, null);
            createTopic(admin, out, 3, null);
            List<String> first = lines(1, 200), second = lines(2, 150);
            produce(in, first, 0);
            count(want, first);

            Map<String, List<Long>> seen = new HashMap<>();
            Properties cp = new Properties();
            cp.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
            cp.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
            try (KafkaConsumer<String, Long> c = new KafkaConsumer<>(cp, new StringDeserializer(), new LongDeserializer())) {
                c.assign(tps(out, 3));
                c.seekToBeginning(tps(out, 3));

                String changelog = app + "-counts-changelog", repartition = app + "-counts-repartition";
                try (KafkaStreams ks = start(app, in, out, state.resolve("one"))) {
                    awaitRunning(ks);
                    awaitCounts(c, seen, want, 60000);
                    // once committed, Streams deletes what it consumed from the repartition topic
                    awaitPurged(admin, repartition);
                    ks.close(Duration.ofSeconds(30));
                }
                // Streams created its internal topics; the store's changelog is compacted
                Set<String> names = admin.listTopics().names().get(20, TimeUnit.SECONDS);
                check(names.contains(changelog) && names.contains(repartition), "internal topics missing: " + names);
                ConfigResource cr = new ConfigResource(ConfigResource.Type.TOPIC, changelog);
                String policy = admin.describeConfigs(List.of(cr)).all().get(20, TimeUnit.SECONDS).get(cr).get("cleanup.policy").value();
                check(policy.equals("compact"), "changelog cleanup.policy " + policy);
                // every input record was committed
                Map<TopicPartition, OffsetAndMetadata> committed = admin.listConsumerGroupOffsets(app)
                        .partitionsToOffsetAndMetadata().get(20, TimeUnit.SECONDS);
                long committedIn = tps(in, 3).stream().mapToLong(tp -> committed.containsKey(tp) ? committed.get(tp).offset() : -1).sum();
                check(committedIn == first.size(), "committed input offsets add up to " + committedIn + ", produced " + first.size() + ": " + committed);

                // a second instance with an empty store: restores the counts, then counts on
                produce(in, second, first.size());
                count(want, second);
                try (KafkaStreams ks = start(app, in, out, state.resolve("two"))) {
                    awaitRunning(ks);
                    awaitCounts(c, seen, want, 60000);
                    ks.close(Duration.ofSeconds(30));
                }
            }
            // with the cache off and clean shutdowns each word's counts are 1, 2, ... n, once each
            for (Map.Entry<String, List<Long>> e : seen.entrySet()) {
                List<Long> vs = e.getValue();
                for (int i = 0; i < vs.size(); i++)
                    check(vs.get(i) == i + 1, "word " + e.getKey() + ": count #" + (i + 1) + " on the output topic is " + vs.get(i) + " (" + vs + ")");
            }

            // kafka-streams-application-reset: input offsets back to the start, internal topics
            // deleted, and with them the group's offsets for the repartition topic
            int rc = new org.apache.kafka.tools.StreamsResetter().execute(new String[] {
                "--bootstrap-server", bootstrap, "--application-id", app, "--input-topics", in, "--to-earliest", "--force"});
            check(rc == 0, "the application reset tool exited " + rc);
            // a deletion is done once the controller has it; a broker's metadata (Kafka's included)
            // may list the topic a moment longer, so wait for it to go
            long gone = System.currentTimeMillis() + 15000;
            while (true) {
                Set<String> left = admin.listTopics().names().get(20, TimeUnit.SECONDS);
                if (!left.contains(app + "-counts-changelog") && !left.contains(app + "-counts-repartition")) break;
                check(System.currentTimeMillis() < gone, "internal topics left after the reset: " + left);
                Thread.sleep(200);
            }
            long deadline = System.currentTimeMillis() + 15000;
            while (true) {
                Map<TopicPartition, OffsetAndMetadata> after = admin.listConsumerGroupOffsets(app).partitionsToOffsetAndMetadata().get(20, TimeUnit.SECONDS);
                Set<String> topics = new TreeSet<>();
                after.keySet().forEach(tp -> topics.add(tp.topic()));
                boolean atStart = tps(in, 3).stream().allMatch(tp -> after.containsKey(tp) && after.get(tp).offset() == 0);
                if (atStart && topics.equals(Set.of(in))) break;
                check(System.currentTimeMillis() < deadline, "after the reset the group commits " + after);
                Thread.sleep(200);
            }
            admin.deleteTopics(List.of(in, out)).all().get(20, TimeUnit.SECONDS);
        }
        long total = want.values().stream().mapToLong(Long::longValue).sum();
        return "word count over 350 lines (" + total + " words, " + want.size() + " distinct) through repartition + compacted changelog topics; "
                + "repartition records purged; second instance restored the counts and resumed from committed offsets; application reset tool";
    }
}
