/*
 * rdkbench: a small librdkafka load generator for bench/run.sh.
 *
 *   rdkbench produce -b B -t TOPIC -n N -s SIZE [-X key=val]...
 *       send N records of SIZE bytes (null key, incompressible payload) as fast as
 *       librdkafka accepts them; prints one JSON line (records/s, MB/s, errors).
 *       Acks/idempotence/linger come in as -X (acks=all, enable.idempotence=true, ...).
 *   rdkbench consume -b B -t TOPIC -n N [-X key=val]...
 *       fetch every partition of TOPIC from offset 0 (no consumer group) and read
 *       until N records arrived; prints records/s and MB/s (catch-up read).
 *   rdkbench latency -b B -t TOPIC -r RATE -d SECONDS -s SIZE [-w WARMUP] [-D FILE] [-X ...]
 *       one producer and one group-less consumer (partition 0 of a new, empty topic) in one
 *       process; the producer writes its CLOCK_MONOTONIC send time into each payload at
 *       a fixed RATE/s, the consumer subtracts it on receipt. Prints p50/p99/p99.9/max.
 *       -D writes every measured record as a line "SEND_TIME_S LATENCY_US" (CLOCK_MONOTONIC,
 *       in receive order), to line slow records up with a scheduler trace or /proc/stat.
 *   rdkbench touch -b B -t PREFIX -T TOPICS -P PARTS [-X ...]
 *       produce one record to every partition of topics PREFIX0..PREFIX{TOPICS-1} and
 *       wait for all acks (shows that every partition is served).
 *
 * -X applies to every client the mode creates. Build: cc -O2 rdkbench.c -lrdkafka -lpthread
 */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <librdkafka/rdkafka.h>

static const char *brokers = "127.0.0.1:9092", *topic = "bench";
static long long nrec = 100000;
static int recsize = 1024, rate = 1000, topics_n = 1, parts_n = 1;
static double duration = 10, warmup = 1;
static const char *lat_dump; /* -D FILE */
static char *xconf[64];
static int nx;

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec / 1e9;
}
static int64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}
static void die(const char *m) { fprintf(stderr, "rdkbench: %s\n", m); exit(1); }

static rd_kafka_conf_t *mkconf(const char *const *extra) {
  char err[512];
  rd_kafka_conf_t *c = rd_kafka_conf_new();
  if (rd_kafka_conf_set(c, "bootstrap.servers", brokers, err, sizeof err)) die(err);
  for (int i = 0; extra && extra[i]; i += 2)
    if (rd_kafka_conf_set(c, extra[i], extra[i + 1], err, sizeof err)) die(err);
  for (int i = 0; i < nx; i++) {
    char *kv = strdup(xconf[i]), *eq = strchr(kv, '=');
    if (!eq) die("-X needs key=value");
    *eq = 0;
    if (rd_kafka_conf_set(c, kv, eq + 1, err, sizeof err)) die(err);
    free(kv);
  }
  return c;
}

/* ---------------- produce ---------------- */
static long long delivered, failed;
static double last_dr;
static char first_err[256];
static void dr_cb(rd_kafka_t *rk, const rd_kafka_message_t *m, void *op) {
  (void)rk; (void)op;
  if (m->err) {
    if (!failed) snprintf(first_err, sizeof first_err, "%s", rd_kafka_err2str(m->err));
    failed++;
  } else
    delivered++;
  last_dr = now();
}

static rd_kafka_t *mkproducer(const char *const *extra) {
  char err[512];
  rd_kafka_conf_t *c = mkconf(extra);
  rd_kafka_conf_set_dr_msg_cb(c, dr_cb);
  rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_PRODUCER, c, err, sizeof err);
  if (!rk) die(err);
  return rk;
}

static char *payload_buf(void) {
  char *p = malloc(recsize + 4096);
  unsigned x = 2463534242u;
  for (int i = 0; i < recsize + 4096; i++) { x ^= x << 13; x ^= x >> 17; x ^= x << 5; p[i] = (char)x; }
  return p;
}

static int do_produce(void) {
  rd_kafka_t *rk = mkproducer(NULL);
  rd_kafka_topic_t *rkt = rd_kafka_topic_new(rk, topic, NULL);
  char *buf = payload_buf();
  double t0 = now();
  for (long long i = 0; i < nrec; i++) {
    char *p = buf + (i * 61) % 4096; /* vary bytes a little between records */
    while (rd_kafka_produce(rkt, RD_KAFKA_PARTITION_UA, RD_KAFKA_MSG_F_COPY, p, recsize, NULL, 0, NULL) == -1) {
      rd_kafka_resp_err_t e = rd_kafka_last_error();
      if (e != RD_KAFKA_RESP_ERR__QUEUE_FULL) die(rd_kafka_err2str(e));
      rd_kafka_poll(rk, 1);
    }
    if ((i & 1023) == 0) rd_kafka_poll(rk, 0);
  }
  while (delivered + failed < nrec) rd_kafka_poll(rk, 50);
  double secs = last_dr - t0;
  printf("{\"mode\":\"produce\",\"records\":%lld,\"failed\":%lld,\"secs\":%.4f,\"rps\":%.1f,"
         "\"mbps\":%.3f,\"first_error\":\"%s\"}\n",
         delivered, failed, secs, delivered / secs, delivered * (double)recsize / secs / 1048576.0, first_err);
  rd_kafka_topic_destroy(rkt);
  rd_kafka_destroy(rk);
  return failed ? 3 : 0;
}

/* ---------------- consume ---------------- */
static int partition_count(rd_kafka_t *rk, const char *t) {
  rd_kafka_topic_t *rkt = rd_kafka_topic_new(rk, t, NULL);
  const struct rd_kafka_metadata *md;
  int n = -1;
  for (int tries = 0; tries < 50 && n <= 0; tries++) {
    if (rd_kafka_metadata(rk, 0, rkt, &md, 5000) == RD_KAFKA_RESP_ERR_NO_ERROR) {
      if (md->topic_cnt == 1 && !md->topics[0].err) n = md->topics[0].partition_cnt;
      rd_kafka_metadata_destroy(md);
    }
    if (n <= 0) usleep(100000);
  }
  rd_kafka_topic_destroy(rkt);
  return n;
}

static rd_kafka_t *mkconsumer(void) {
  char err[512];
  /* librdkafka's legacy (simple) consumer: rd_kafka_consume_start_queue() per partition,
   * no group.id, so no coordinator lookup and no commits (sluice has no consumer groups
   * yet; librdkafka 2.0's assign() refuses to work without a group.id). */
  const char *extra[] = {"enable.partition.eof", "true", NULL};
  rd_kafka_conf_t *c = mkconf(extra);
  rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_CONSUMER, c, err, sizeof err);
  if (!rk) die(err);
  return rk;
}

/* start fetching partitions [0, np) of t at offset off into one queue */
static rd_kafka_queue_t *start_parts(rd_kafka_t *rk, const char *t, int np, int64_t off, rd_kafka_topic_t **out) {
  rd_kafka_queue_t *q = rd_kafka_queue_new(rk);
  rd_kafka_topic_t *rkt = rd_kafka_topic_new(rk, t, NULL);
  for (int p = 0; p < np; p++)
    if (rd_kafka_consume_start_queue(rkt, p, off, q) == -1) die(rd_kafka_err2str(rd_kafka_last_error()));
  *out = rkt;
  return q;
}
static void stop_parts(rd_kafka_topic_t *rkt, int np, rd_kafka_queue_t *q) {
  for (int p = 0; p < np; p++) rd_kafka_consume_stop(rkt, p);
  rd_kafka_queue_destroy(q);
  rd_kafka_topic_destroy(rkt);
}

static int do_consume(void) {
  rd_kafka_t *rk = mkconsumer();
  double t0 = now();
  int np = partition_count(rk, topic);
  if (np <= 0) die("no metadata for topic");
  rd_kafka_topic_t *rkt;
  rd_kafka_queue_t *q = start_parts(rk, topic, np, 0, &rkt);
  long long n = 0, bytes = 0, errs = 0;
  double tfirst = 0, tlast = t0, deadline = t0 + 600;
  while (n < nrec && now() < deadline) {
    rd_kafka_message_t *m = rd_kafka_consume_queue(q, 200);
    if (!m) continue;
    if (!m->err) {
      if (!n) tfirst = now();
      n++; bytes += m->len; tlast = now();
    } else if (m->err != RD_KAFKA_RESP_ERR__PARTITION_EOF) {
      if (!errs) fprintf(stderr, "rdkbench consume: %s\n", rd_kafka_message_errstr(m));
      errs++;
    }
    rd_kafka_message_destroy(m);
  }
  double secs = tlast - t0;
  printf("{\"mode\":\"consume\",\"records\":%lld,\"bytes\":%lld,\"partitions\":%d,\"errors\":%lld,\"secs\":%.4f,"
         "\"first_record_secs\":%.4f,\"rps\":%.1f,\"mbps\":%.3f}\n",
         n, bytes, np, errs, secs, tfirst ? tfirst - t0 : -1, n / secs, bytes / secs / 1048576.0);
  stop_parts(rkt, np, q);
  rd_kafka_destroy(rk);
  return n < nrec ? 3 : 0;
}

/* ---------------- latency ---------------- */
static volatile int lat_ready, lat_stop;
static int64_t *lat_ns, *lat_sent;
static long long lat_n, lat_cap, lat_recv;
/* No sample counts until the producer has set this (records already in the topic are skipped). */
static volatile int64_t warm_until_ns = INT64_MAX;

static void *lat_consumer(void *arg) {
  rd_kafka_queue_t *q = arg;
  while (!lat_stop) {
    rd_kafka_message_t *m = rd_kafka_consume_queue(q, 50);
    if (!m) continue;
    int64_t t = now_ns();
    if (m->err == RD_KAFKA_RESP_ERR__PARTITION_EOF) lat_ready = 1;
    else if (!m->err && m->len >= 8 && lat_ready) { /* after EOF: records of this run only */
      int64_t sent;
      memcpy(&sent, m->payload, 8);
      lat_recv++;
      if (sent >= warm_until_ns && lat_n < lat_cap) {
        lat_sent[lat_n] = sent;
        lat_ns[lat_n++] = t - sent;
      }
    } else if (m->err)
      fprintf(stderr, "rdkbench latency consumer: %s\n", rd_kafka_message_errstr(m));
    rd_kafka_message_destroy(m);
  }
  return NULL;
}
static int cmp64(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return x < y ? -1 : x > y;
}
static double pct(double q) {
  if (!lat_n) return -1;
  long long i = (long long)(q * (lat_n - 1) + 0.5);
  return lat_ns[i] / 1e6;
}

static int do_latency(void) {
  rd_kafka_t *c = mkconsumer();
  if (partition_count(c, topic) <= 0) die("no metadata for topic");
  rd_kafka_topic_t *crkt;
  rd_kafka_queue_t *q = start_parts(c, topic, 1, 0, &crkt);
  lat_cap = (long long)(rate * (duration + 5)) + 1000;
  lat_ns = malloc(sizeof(int64_t) * lat_cap);
  lat_sent = malloc(sizeof(int64_t) * lat_cap);
  if (!lat_ns || !lat_sent) die("out of memory");
  pthread_t th;
  pthread_create(&th, NULL, lat_consumer, q);
  double t0 = now();
  while (!lat_ready && now() - t0 < 30) usleep(1000); /* consumer positioned at the end */
  if (!lat_ready) die("consumer never reached end of partition");

  rd_kafka_t *rk = mkproducer(NULL);
  rd_kafka_topic_t *rkt = rd_kafka_topic_new(rk, topic, NULL);
  char *buf = payload_buf();
  int64_t start = now_ns(), step = 1000000000LL / rate;
  warm_until_ns = start + (int64_t)(warmup * 1e9);
  long long total = (long long)(rate * (duration + warmup)), sent = 0;
  for (long long i = 0; i < total; i++) {
    int64_t due = start + i * step;
    struct timespec ts = {due / 1000000000LL, due % 1000000000LL};
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR) {}
    int64_t t = now_ns();
    memcpy(buf, &t, 8);
    if (rd_kafka_produce(rkt, 0, RD_KAFKA_MSG_F_COPY, buf, recsize, NULL, 0, NULL) == 0) sent++;
    rd_kafka_poll(rk, 0);
  }
  rd_kafka_flush(rk, 30000);
  double wait0 = now();
  while (lat_recv < sent && now() - wait0 < 10) usleep(10000);
  lat_stop = 1;
  pthread_join(th, NULL);
  int64_t lag = now_ns() - start;
  (void)lag;
  if (lat_dump) {
    FILE *f = fopen(lat_dump, "w");
    if (!f) die("cannot open the -D file");
    for (long long i = 0; i < lat_n; i++) fprintf(f, "%.6f %.1f\n", lat_sent[i] / 1e9, lat_ns[i] / 1e3);
    if (fclose(f)) die("cannot write the -D file");
  }
  qsort(lat_ns, lat_n, sizeof(int64_t), cmp64);
  double mean = 0;
  for (long long i = 0; i < lat_n; i++) mean += lat_ns[i] / 1e6;
  if (lat_n) mean /= lat_n;
  printf("{\"mode\":\"latency\",\"rate\":%d,\"sent\":%lld,\"received\":%lld,\"measured\":%lld,\"delivery_failed\":%lld,"
         "\"mean_ms\":%.3f,\"p50_ms\":%.3f,\"p99_ms\":%.3f,\"p999_ms\":%.3f,\"max_ms\":%.3f}\n",
         rate, sent, lat_recv, lat_n, failed, mean, pct(0.5), pct(0.99), pct(0.999), pct(1.0));
  rd_kafka_topic_destroy(rkt);
  rd_kafka_destroy(rk);
  stop_parts(crkt, 1, q);
  rd_kafka_destroy(c);
  return (lat_recv < sent || !lat_n) ? 3 : 0;
}

/* ---------------- touch ---------------- */
static int do_touch(void) {
  rd_kafka_t *rk = mkproducer(NULL);
  char *buf = payload_buf(), name[512];
  double t0 = now();
  long long total = (long long)topics_n * parts_n;
  for (int t = 0; t < topics_n; t++) {
    snprintf(name, sizeof name, "%s%d", topic, t);
    rd_kafka_topic_t *rkt = rd_kafka_topic_new(rk, name, NULL);
    for (int p = 0; p < parts_n; p++)
      while (rd_kafka_produce(rkt, p, RD_KAFKA_MSG_F_COPY, buf, recsize, NULL, 0, NULL) == -1) rd_kafka_poll(rk, 1);
    rd_kafka_topic_destroy(rkt);
    rd_kafka_poll(rk, 0);
  }
  while (delivered + failed < total && now() - t0 < 300) rd_kafka_poll(rk, 50);
  double secs = now() - t0;
  printf("{\"mode\":\"touch\",\"partitions\":%lld,\"delivered\":%lld,\"failed\":%lld,\"secs\":%.4f,\"first_error\":\"%s\"}\n",
         total, delivered, failed, secs, first_err);
  rd_kafka_destroy(rk);
  return delivered == total ? 0 : 3;
}

int main(int argc, char **argv) {
  if (argc < 2) die("usage: rdkbench produce|consume|latency|touch [options] (see source header)");
  const char *mode = argv[1];
  int o;
  optind = 2;
  while ((o = getopt(argc, argv, "b:t:n:s:r:d:w:D:T:P:X:")) != -1) {
    switch (o) {
      case 'b': brokers = optarg; break;
      case 't': topic = optarg; break;
      case 'n': nrec = atoll(optarg); break;
      case 's': recsize = atoi(optarg); break;
      case 'r': rate = atoi(optarg); break;
      case 'd': duration = atof(optarg); break;
      case 'w': warmup = atof(optarg); break;
      case 'D': lat_dump = optarg; break;
      case 'T': topics_n = atoi(optarg); break;
      case 'P': parts_n = atoi(optarg); break;
      case 'X': if (nx < 64) xconf[nx++] = optarg; break;
      default: die("bad option");
    }
  }
  if (recsize < 8) recsize = 8;
  if (!strcmp(mode, "produce")) return do_produce();
  if (!strcmp(mode, "consume")) return do_consume();
  if (!strcmp(mode, "latency")) return do_latency();
  if (!strcmp(mode, "touch")) return do_touch();
  die("unknown mode");
  return 2;
}
