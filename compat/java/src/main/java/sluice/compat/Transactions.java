package sluice.compat;

import java.util.*;
import java.util.concurrent.TimeUnit;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.clients.producer.*;
import org.apache.kafka.common.IsolationLevel;
import org.apache.kafka.common.TopicPartition;

import static sluice.compat.Main.*;

/**
 * A transactional producer (initTransactions, a committed and an aborted transaction) and
 * consumers reading with read_committed and read_uncommitted. On a sluice cluster of several
 * brokers transactions are not served yet, so there this scenario is an expected failure
 * (compat/expected-failures-cluster.txt) that must fail quickly and say why.
 */
final class Transactions {
    private Transactions() {}

    static String commitAndAbort() throws Exception {
        String t = topic("txn");
        try (Admin admin = admin()) {
            createTopic(admin, t, 2, null);
        }
        long t0 = System.currentTimeMillis();
        try (KafkaProducer<String, String> p = producer(Map.of(ProducerConfig.TRANSACTIONAL_ID_CONFIG, "compat-java-txn-" + RUN))) {
            try {
                p.initTransactions();
            } catch (RuntimeException e) {
                long ms = System.currentTimeMillis() - t0;
                throw new AssertionError("initTransactions failed after " + ms + " ms: " + e.getClass().getSimpleName() + ": " + e.getMessage(), e);
            }
            p.beginTransaction();
            for (int i = 0; i < 10; i++) p.send(new ProducerRecord<>(t, i % 2, "k" + i, "committed-" + i));
            p.commitTransaction();
            p.beginTransaction();
            for (int i = 0; i < 5; i++) p.send(new ProducerRecord<>(t, i % 2, "k" + i, "aborted-" + i));
            p.flush();
            p.abortTransaction();
            p.beginTransaction();
            p.send(new ProducerRecord<>(t, 0, "k-last", "committed-last"));
            p.commitTransaction();
        }
        List<String> committed = read(t, IsolationLevel.READ_COMMITTED, 11);
        List<String> all = read(t, IsolationLevel.READ_UNCOMMITTED, 16);
        check(committed.stream().allMatch(v -> v.startsWith("committed-")) && committed.size() == 11,
                "read_committed read " + committed);
        check(all.stream().filter(v -> v.startsWith("aborted-")).count() == 5, "read_uncommitted read " + all);
        return "initTransactions, commit 10 + abort 5 + commit 1 on 2 partitions; read_committed sees the 11 committed, read_uncommitted all 16";
    }

    static List<String> read(String t, IsolationLevel level, int want) {
        try (KafkaConsumer<String, String> c = consumer(Map.of(ConsumerConfig.ISOLATION_LEVEL_CONFIG, level.toString()))) {
            List<TopicPartition> tps = tps(t, 2);
            c.assign(tps);
            c.seekToBeginning(tps);
            List<String> got = new ArrayList<>();
            for (ConsumerRecord<String, String> r : pollUntil(c, want, 15000)) got.add(r.value());
            return got;
        }
    }
}
