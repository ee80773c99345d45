package sluice.compat;

import java.io.InputStream;
import java.util.*;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;

import org.apache.kafka.clients.admin.*;
import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.clients.producer.*;
import org.apache.kafka.common.Node;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.TopicPartitionInfo;
import org.apache.kafka.common.errors.UnknownTopicOrPartitionException;

import static sluice.compat.Main.*;

/**
 * leader-failover: an idempotent producer (acks=all) writes to a partition with replication
 * factor 3 and min.insync.replicas=2, the partition's leader is killed with -9, and the same
 * producer must go on, with its own retries, on the new leader. Every acked record must be read
 * back at the offset it was acked at. Needs the cluster that compat/run.sh --nodes 3 starts: it
 * kills and restarts a broker through $COMPAT_NODE_CTL; without that it is a SKIP.
 */
final class Failover {
    private Failover() {}

    static final int BEFORE = 20, AFTER = 20;

    /** An Admin that outlasts a broker that has gone away: requests to it time out, then go elsewhere. */
    static Admin failoverAdmin() {
        Properties p = new Properties();
        p.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, 60000);
        p.put(AdminClientConfig.REQUEST_TIMEOUT_MS_CONFIG, 10000);
        p.put(AdminClientConfig.SOCKET_CONNECTION_SETUP_TIMEOUT_MS_CONFIG, 5000);
        p.put(AdminClientConfig.SOCKET_CONNECTION_SETUP_TIMEOUT_MAX_MS_CONFIG, 10000);
        return Admin.create(p);
    }

    static TopicPartitionInfo partition0(Admin admin, String t) throws Exception {
        TopicDescription d = admin.describeTopics(List.of(t)).allTopicNames().get(70, TimeUnit.SECONDS).get(t);
        return d.partitions().stream().filter(pi -> pi.partition() == 0).findFirst()
                .orElseThrow(() -> new AssertionError("describeTopics: no partition 0 in " + d));
    }

    /** Runs $COMPAT_NODE_CTL ACTION NODE; its output goes to stderr, a non-zero exit fails the scenario. */
    static void nodeCtl(String ctl, String action, int node) throws Exception {
        Process p = new ProcessBuilder(ctl, action, Integer.toString(node)).redirectErrorStream(true).start();
        try (InputStream out = p.getInputStream()) { out.transferTo(System.err); }
        if (!p.waitFor(150, TimeUnit.SECONDS)) {
            p.destroyForcibly();
            throw new AssertionError("node-ctl " + action + " " + node + " did not finish within 150 s");
        }
        check(p.exitValue() == 0, "node-ctl " + action + " " + node + " exited with " + p.exitValue());
    }

    static void produce(KafkaProducer<String, String> p, String t, String prefix, int n, long firstOffset) throws Exception {
        for (int i = 0; i < n; i++) {
            RecordMetadata md = p.send(new ProducerRecord<>(t, 0, prefix + i, "value-" + prefix + i)).get(150, TimeUnit.SECONDS);
            check(md.partition() == 0 && md.offset() == firstOffset + i,
                    prefix + i + " acked at " + md.partition() + "@" + md.offset() + ", expected 0@" + (firstOffset + i));
        }
    }

    static String leaderFailover() throws Exception {
        String ctl = System.getenv("COMPAT_NODE_CTL");
        if (ctl == null || ctl.isEmpty()) throw new Skip("needs a cluster (compat/run.sh --nodes 3)");
        String t = topic("failover");
        TopicPartition tp = new TopicPartition(t, 0);
        try (Admin admin = failoverAdmin()) {
            admin.createTopics(List.of(new NewTopic(t, 1, (short) 3).configs(Map.of("min.insync.replicas", "2"))))
                    .all().get(30, TimeUnit.SECONDS);
            TopicPartitionInfo pi = null;
            long deadline = System.currentTimeMillis() + 30000;
            while (true) {
                try {
                    pi = partition0(admin, t);
                    if (pi.leader() != null && pi.isr().size() == 3) break;
                } catch (ExecutionException e) {
                    if (!(e.getCause() instanceof UnknownTopicOrPartitionException)) throw e;
                }
                if (System.currentTimeMillis() > deadline) throw new AssertionError("partition 0 has no leader with an ISR of 3 after 30 s: " + pi);
                Thread.sleep(200);
            }

            try (KafkaProducer<String, String> p = producer(Map.of(
                    ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, true,
                    ProducerConfig.ACKS_CONFIG, "all",
                    ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, 120000,
                    ProducerConfig.MAX_BLOCK_MS_CONFIG, 120000))) {
                produce(p, t, "before-", BEFORE, 0);

                int killed = partition0(admin, t).leader().id();
                nodeCtl(ctl, "kill9", killed);
                boolean ok = false;
                try {
                    long t0 = System.currentTimeMillis();
                    RecordMetadata first = p.send(new ProducerRecord<>(t, 0, "after-0", "value-after-0")).get(150, TimeUnit.SECONDS);
                    double firstSecs = (System.currentTimeMillis() - t0) / 1000.0;
                    check(first.partition() == 0 && first.offset() == BEFORE, "after-0 acked at " + first.partition() + "@" + first.offset() + ", expected 0@" + BEFORE);
                    for (int i = 1; i < AFTER; i++) {
                        RecordMetadata md = p.send(new ProducerRecord<>(t, 0, "after-" + i, "value-after-" + i)).get(150, TimeUnit.SECONDS);
                        check(md.partition() == 0 && md.offset() == BEFORE + i,
                                "after-" + i + " acked at " + md.partition() + "@" + md.offset() + ", expected 0@" + (BEFORE + i));
                    }

                    int total = BEFORE + AFTER;
                    try (KafkaConsumer<String, String> c = consumer(Map.of())) {
                        c.assign(List.of(tp));
                        c.seek(tp, 0);
                        List<ConsumerRecord<String, String>> got = pollUntil(c, total, 60000);
                        check(got.size() == total, "read back " + got.size() + " records, acked " + total);
                        for (int i = 0; i < total; i++) {
                            ConsumerRecord<String, String> r = got.get(i);
                            String want = i < BEFORE ? "before-" + i : "after-" + (i - BEFORE);
                            check(r.partition() == 0 && r.offset() == i && want.equals(r.key()) && ("value-" + want).equals(r.value()),
                                    "record " + i + " read as " + r.partition() + "@" + r.offset() + " key " + r.key() + ", acked 0@" + i + " key " + want);
                        }
                    }

                    // Brokers apply metadata asynchronously: allow a moment for the leader change to show.
                    TopicPartitionInfo after = null;
                    long until = System.currentTimeMillis() + 10000;
                    while (true) {
                        after = partition0(admin, t);
                        if (after.leader() != null && after.leader().id() != killed) break;
                        if (System.currentTimeMillis() > until)
                            throw new AssertionError("partition 0 leader after the kill of " + killed + ": " + after.leader() + " (" + after + ")");
                        Thread.sleep(200);
                    }
                    Node leader = after.leader();
                    ok = true;
                    return String.format("leader %d killed (-9): %d records acked before and %d after on new leader %d (first after %.1f s), %d read back at offsets 0-%d",
                            killed, BEFORE, AFTER, leader.id(), firstSecs, total, total - 1);
                } finally {
                    try {
                        nodeCtl(ctl, "start", killed);
                    } catch (Exception e) {
                        if (ok) throw e;
                        System.err.println("leader-failover: restarting node " + killed + " failed too: " + e);
                    }
                }
            }
        }
    }
}
