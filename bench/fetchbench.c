/*
 * fetchbench: a raw Kafka-protocol fetch loop for bench/run.sh, to show the broker's catch-up read
 * ceiling.
 *
 *   fetchbench -b HOST:PORT -t TOPIC -p PARTITIONS -n RECORDS [-m MAX_BYTES] [-M PARTITION_MAX_BYTES]
 *              [-w MAX_WAIT_MS] [-V FETCH_VERSION] [-i IDLE_SECS]
 *       read partitions [0, PARTITIONS) of TOPIC from offset 0 until RECORDS records arrived;
 *       prints one JSON line (records/s, MiB/s of record batch bytes) like rdkbench.
 *
 * Why: rdkbench consume (librdkafka) and kafka-consumer-perf-test (Java) each saturate their own
 * CPU before either broker does, so their consume figures show the client. This loop does the
 * least a consumer can do: one connection to a single broker that is assumed to lead every
 * partition (single-node bench, no Metadata request), one Fetch in flight at a time (like a real
 * consumer, one per broker), every partition in every request at its next offset. Of the response
 * it parses only the per-partition error code, high watermark and records length, then walks the
 * 61-byte record batch headers to count records (control batches excluded) and find the next
 * offset (last offset of the last whole batch + 1); a trailing partial batch is skipped and fetched
 * again next time. Record bytes go through one small reusable buffer and are discarded, so the
 * client spends little more than the recv() copies.
 *
 * Protocol: ApiVersions v0 first (to fail clearly when the broker does not serve the chosen Fetch
 * version), then Fetch v4 by default: the lowest version Kafka 4.x accepts (KIP-896 removed v0-v3),
 * non-flexible (v4-v11 are; -V picks one), sessionless, read_uncommitted, replica id -1. Defaults
 * follow the Java consumer's: fetch.max.bytes 52428800, max.partition.fetch.bytes 1048576,
 * fetch.min.bytes 1; max wait 500 ms (fetch.max.wait.ms).
 *
 * "bytes" counts whole record batches as sent by the broker (batch headers and per-record framing
 * included: about 1% over the payload with 1 KiB records); "mbps" is bytes / secs / 2^20 (MiB/s, as
 * rdkbench). secs runs from before connect() to the arrival of the last counted batch.
 *
 * Fails (message on stderr, exit 1) on any non-zero error code, unexpected topic/partition,
 * short read, malformed or oversized response (a response may not exceed MAX_BYTES plus one
 * maximal batch plus per-partition overhead), socket timeout, or when no new record arrives for
 * IDLE_SECS (default 30) before RECORDS were counted.
 *
 * Build: cc -O2 -Wall -Wextra fetchbench.c -o fetchbench
 */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#define BUF_CAP (256 * 1024)      /* the one read buffer: record bytes pass through here */
#define BATCH_HDR 61              /* record batch v2 header up to and including recordsCount */
#define BATCH_SLACK (16 << 20)    /* largest single batch allowed past the limits (KIP-74) */
#define MAX_PARTITIONS 100000

static const char *brokers = "127.0.0.1:9092", *topic = "bench";
static int parts = 0, max_wait_ms = 500, fetch_version = 4, idle_secs = 30;
static long long nrec = 0, max_bytes = 52428800, part_max_bytes = 1048576;

static int fd = -1;
static unsigned char *buf;
static size_t rpos, rend;      /* unread bytes are buf[rpos, rend) */
static long long frame_left;   /* bytes of the current response not yet received from the socket */

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void die(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fputs("fetchbench: ", stderr);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  exit(1);
}

/* ---------------- socket ---------------- */
static void connect_broker(void) {
  char host[256];
  const char *colon = strrchr(brokers, ':');
  if (!colon || colon == brokers || (size_t)(colon - brokers) >= sizeof host) die("-b wants HOST:PORT, got %s", brokers);
  memcpy(host, brokers, colon - brokers);
  host[colon - brokers] = 0;
  struct addrinfo hints = {0}, *res, *ai;
  hints.ai_socktype = SOCK_STREAM;
  int rc = getaddrinfo(host, colon + 1, &hints, &res);
  if (rc) die("resolve %s: %s", brokers, gai_strerror(rc));
  for (ai = res; ai; ai = ai->ai_next) {
    fd = socket(ai->ai_family, ai->ai_socktype, ai->ai_protocol);
    if (fd < 0) continue;
    if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0) break;
    close(fd);
    fd = -1;
  }
  freeaddrinfo(res);
  if (fd < 0) die("connect %s: %s", brokers, strerror(errno));
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  /* a broker that stops answering ends the run instead of hanging it */
  struct timeval tv = {max_wait_ms / 1000 + 30, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
}

static void send_all(const unsigned char *p, size_t n) {
  while (n) {
    ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) die("send: %s", w < 0 ? strerror(errno) : "connection closed");
    p += w;
    n -= (size_t)w;
  }
}

/* receive up to n bytes of the current response into buf + at */
static size_t recv_some(size_t at, size_t n) {
  if ((long long)n > frame_left) n = (size_t)frame_left;
  if (!n) die("malformed response: fields run past the end of the response");
  for (;;) {
    ssize_t r = recv(fd, buf + at, n, 0);
    if (r > 0) {
      frame_left -= r;
      return (size_t)r;
    }
    if (r < 0 && errno == EINTR) continue;
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) die("timeout waiting for the broker's response");
    die("short read: %s", r < 0 ? strerror(errno) : "connection closed by the broker");
  }
}

/* exact read outside a response frame (the 4-byte size prefix) */
static void recv_exact(unsigned char *p, size_t n) {
  while (n) {
    ssize_t r = recv(fd, p, n, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) die("timeout waiting for the broker's response");
    if (r <= 0) die("short read: %s", r < 0 ? strerror(errno) : "connection closed by the broker");
    p += r;
    n -= (size_t)r;
  }
}

static const unsigned char *take(size_t n);
static int32_t be32(const unsigned char *p);

/* start reading a response of at most cap bytes; checks the correlation id */
static void begin_response(int32_t corr, long long cap) {
  unsigned char h[4];
  recv_exact(h, 4);
  int32_t size = (int32_t)((uint32_t)h[0] << 24 | (uint32_t)h[1] << 16 | (uint32_t)h[2] << 8 | h[3]);
  if (size < 4) die("malformed response: size %" PRId32, size);
  if (size > cap) die("response of %" PRId32 " bytes exceeds the cap of %lld bytes", size, cap);
  frame_left = size;
  rpos = rend = 0;
  int32_t got = be32(take(4));
  if (got != corr) die("response to correlation id %" PRId32 " arrived, expected %" PRId32, got, corr);
}

/* make n (<= BUF_CAP) bytes available at buf + rpos */
static const unsigned char *need(size_t n) {
  if (rend - rpos < n) {
    if (BUF_CAP - rpos < n) {
      memmove(buf, buf + rpos, rend - rpos);
      rend -= rpos;
      rpos = 0;
    }
    while (rend - rpos < n) rend += recv_some(rend, BUF_CAP - rend);
  }
  return buf + rpos;
}
static const unsigned char *take(size_t n) {
  const unsigned char *p = need(n);
  rpos += n;
  return p;
}
/* discard n bytes of the response (record bytes end here) */
static void skip(long long n) {
  size_t have = rend - rpos;
  if ((long long)have >= n) {
    rpos += (size_t)n;
    return;
  }
  n -= (long long)have;
  rpos = rend = 0;
  if (n > frame_left) die("malformed response: a length runs past the end of the response");
  while (n) n -= (long long)recv_some(0, n < BUF_CAP ? (size_t)n : BUF_CAP);
}
static void end_response(void) {
  if (rpos != rend || frame_left) die("malformed response: %lld bytes left after the last field",
                                      (long long)(rend - rpos) + frame_left);
}
static long long remaining(void) { return (long long)(rend - rpos) + frame_left; }

static int16_t be16(const unsigned char *p) { return (int16_t)((uint16_t)p[0] << 8 | p[1]); }
static int32_t be32(const unsigned char *p) {
  return (int32_t)((uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3]);
}
static int64_t be64(const unsigned char *p) { return (int64_t)((uint64_t)(uint32_t)be32(p) << 32 | (uint32_t)be32(p + 4)); }
static int16_t rd16(void) { return be16(take(2)); }
static int32_t rd32(void) { return be32(take(4)); }
static int64_t rd64(void) { return be64(take(8)); }
static int32_t rd_array_len(const char *what, long long elem_min, int nullable) {
  int32_t n = rd32();
  if (n == -1 && nullable) return -1;
  if (n < 0 || (long long)n * elem_min > remaining()) die("malformed response: %s count %" PRId32, what, n);
  return n;
}

/* ---------------- request building ---------------- */
static unsigned char *req;
static size_t req_len, req_cap;
static void put(const void *p, size_t n) {
  if (req_len + n > req_cap) die("internal: request buffer too small");
  memcpy(req + req_len, p, n);
  req_len += n;
}
static void put8(int8_t v) { put(&v, 1); }
static void put16(int16_t v) { unsigned char b[2] = {(unsigned char)((uint16_t)v >> 8), (unsigned char)v}; put(b, 2); }
static void put32(int32_t v) {
  uint32_t u = (uint32_t)v;
  unsigned char b[4] = {(unsigned char)(u >> 24), (unsigned char)(u >> 16), (unsigned char)(u >> 8), (unsigned char)u};
  put(b, 4);
}
static void put64(int64_t v) { put32((int32_t)((uint64_t)v >> 32)); put32((int32_t)(uint32_t)v); }
static void putstr(const char *s) { put16((int16_t)strlen(s)); put(s, strlen(s)); }

/* request header v1 (non-flexible); the size prefix is patched by finish() */
static void begin_request(int16_t key, int16_t version, int32_t corr) {
  req_len = 0;
  put32(0);
  put16(key);
  put16(version);
  put32(corr);
  putstr("fetchbench");
}
static void finish_and_send(void) {
  uint32_t n = (uint32_t)(req_len - 4);
  req[0] = n >> 24; req[1] = n >> 16; req[2] = n >> 8; req[3] = n;
  send_all(req, req_len);
}

/* ---------------- ApiVersions ---------------- */
static void check_versions(void) {
  begin_request(18, 0, 1);
  finish_and_send();
  begin_response(1, 1 << 20);
  int16_t err = rd16();
  if (err) die("ApiVersions: error code %d", err);
  int32_t n = rd_array_len("ApiVersions api key", 6, 0);
  int found = 0;
  for (int32_t i = 0; i < n; i++) {
    const unsigned char *p = take(6);
    if (be16(p) == 1) {
      int16_t lo = be16(p + 2), hi = be16(p + 4);
      if (fetch_version < lo || fetch_version > hi)
        die("the broker serves Fetch v%d-v%d, not v%d (pick one with -V)", lo, hi, fetch_version);
      found = 1;
    }
  }
  end_response();
  if (!found) die("the broker does not list Fetch in ApiVersions");
}

/* ---------------- fetch loop ---------------- */
static int64_t *next_off, *hwm;
static unsigned char *seen;

static void build_fetch(int32_t corr) {
  begin_request(1, (int16_t)fetch_version, corr);
  put32(-1);                       /* replica_id: a consumer */
  put32(max_wait_ms);
  put32(1);                        /* min_bytes */
  put32((int32_t)max_bytes);
  put8(0);                         /* isolation_level read_uncommitted */
  if (fetch_version >= 7) {
    put32(0);                      /* session_id */
    put32(-1);                     /* session_epoch: FINAL_EPOCH, a sessionless full fetch */
  }
  put32(1);                        /* topics */
  putstr(topic);
  put32(parts);
  for (int p = 0; p < parts; p++) {
    put32(p);
    if (fetch_version >= 9) put32(-1); /* current_leader_epoch: unknown */
    put64(next_off[p]);
    if (fetch_version >= 5) put64(-1); /* log_start_offset: only followers send it */
    put32((int32_t)part_max_bytes);
  }
  if (fetch_version >= 7) put32(0); /* forgotten_topics_data */
  if (fetch_version >= 11) putstr(""); /* rack_id */
}

/* reads one Fetch response; adds to *records / *bytes */
static void read_fetch(int32_t corr, long long cap, long long *records, long long *bytes) {
  begin_response(corr, cap);
  rd32();                                         /* throttle_time_ms */
  if (fetch_version >= 7) {
    int16_t err = rd16();
    if (err) die("Fetch: top-level error code %d", err);
    rd32();                                       /* session_id */
  }
  int32_t ntopics = rd_array_len("topic", 2, 0);
  memset(seen, 0, (size_t)parts);
  for (int32_t t = 0; t < ntopics; t++) {
    int16_t len = rd16();
    if (len < 0 || (size_t)len != strlen(topic) || memcmp(take((size_t)len), topic, (size_t)len))
      die("Fetch: response names a topic that was not asked for");
    int32_t np = rd_array_len("partition", 4 + 2 + 8 + 8 + 4 + 4, 0);
    for (int32_t i = 0; i < np; i++) {
      int32_t p = rd32();
      int16_t err = rd16();
      int64_t hw = rd64();
      if (p < 0 || p >= parts || seen[p]) die("Fetch: unexpected or repeated partition %" PRId32, p);
      seen[p] = 1;
      if (err) die("Fetch: partition %" PRId32 " error code %d (fetch offset %" PRId64 ")", p, err, next_off[p]);
      hwm[p] = hw;
      rd64();                                     /* last_stable_offset */
      if (fetch_version >= 5) rd64();             /* log_start_offset */
      int32_t naborted = rd_array_len("aborted transaction", 16, 1);
      if (naborted > 0) skip(16LL * naborted);
      if (fetch_version >= 11) rd32();            /* preferred_read_replica */
      int32_t rlen = rd32();
      if (rlen < -1 || rlen > remaining()) die("Fetch: partition %" PRId32 " records length %" PRId32, p, rlen);
      long long rem = rlen < 0 ? 0 : rlen;
      while (rem > 0) {
        if (rem < BATCH_HDR) { skip(rem); break; }  /* trailing partial batch */
        const unsigned char *h = take(BATCH_HDR);
        int64_t base = be64(h);
        int32_t blen = be32(h + 8);
        long long total = 12LL + blen;
        if (blen < BATCH_HDR - 12) die("Fetch: partition %" PRId32 " batch at %" PRId64 " has length %" PRId32, p, base, blen);
        if (total > rem) { skip(rem - BATCH_HDR); break; }  /* trailing partial batch */
        if (h[16] != 2) die("Fetch: partition %" PRId32 " batch at %" PRId64 " has magic %d", p, base, h[16]);
        int16_t attrs = be16(h + 21);
        int32_t last_delta = be32(h + 23), count = be32(h + 57);
        if (last_delta < 0 || count < 0) die("Fetch: partition %" PRId32 " batch at %" PRId64 " is malformed", p, base);
        if (base < next_off[p])
          die("Fetch: partition %" PRId32 " batch at %" PRId64 " starts before the fetch offset %" PRId64, p, base, next_off[p]);
        if (!(attrs & 0x20)) *records += count;   /* control batches hold no data records */
        *bytes += total;
        next_off[p] = base + last_delta + 1;
        skip(total - BATCH_HDR);
        rem -= total;
      }
    }
  }
  end_response();
}

int main(int argc, char **argv) {
  int o;
  while ((o = getopt(argc, argv, "b:t:p:n:m:M:w:V:i:")) != -1) {
    switch (o) {
      case 'b': brokers = optarg; break;
      case 't': topic = optarg; break;
      case 'p': parts = atoi(optarg); break;
      case 'n': nrec = atoll(optarg); break;
      case 'm': max_bytes = atoll(optarg); break;
      case 'M': part_max_bytes = atoll(optarg); break;
      case 'w': max_wait_ms = atoi(optarg); break;
      case 'V': fetch_version = atoi(optarg); break;
      case 'i': idle_secs = atoi(optarg); break;
      default: die("usage: fetchbench -b HOST:PORT -t TOPIC -p PARTITIONS -n RECORDS [-m max_bytes] "
                   "[-M partition_max_bytes] [-w max_wait_ms] [-V 4..11] [-i idle_secs]");
    }
  }
  if (parts < 1 || parts > MAX_PARTITIONS) die("-p wants 1..%d partitions", MAX_PARTITIONS);
  if (nrec < 1) die("-n wants a positive record count");
  if (max_bytes < 1 || max_bytes > INT32_MAX) die("-m out of range");
  if (part_max_bytes < 1 || part_max_bytes > INT32_MAX) die("-M out of range");
  if (max_wait_ms < 0 || max_wait_ms > 600000) die("-w out of range");
  if (fetch_version < 4 || fetch_version > 11) die("-V wants a non-flexible Fetch version, 4..11");
  if (idle_secs < 1) die("-i wants at least 1 second");
  size_t tlen = strlen(topic);
  if (tlen < 1 || tlen > 249) die("-t wants a topic name of 1..249 characters");

  /* Largest acceptable response: max_bytes of records (the broker may return one batch past the
   * limits, KIP-74) plus fixed fields per partition (64 bytes covers v11's 46). */
  long long cap = max_bytes + BATCH_SLACK + 1024 + (long long)parts * (64 + 16);
  if (cap > INT32_MAX) cap = INT32_MAX;
  buf = malloc(BUF_CAP);
  req_cap = 128 + tlen + (size_t)parts * 32;
  req = malloc(req_cap);
  next_off = calloc((size_t)parts, sizeof *next_off);
  hwm = calloc((size_t)parts, sizeof *hwm);
  seen = malloc((size_t)parts);
  if (!buf || !req || !next_off || !hwm || !seen) die("out of memory");
  for (int p = 0; p < parts; p++) hwm[p] = -1;

  double t0 = now();
  connect_broker();
  check_versions();
  long long records = 0, bytes = 0, fetches = 0;
  double tfirst = 0, tlast = t0, progress = now();
  int32_t corr = 2;
  while (records < nrec) {
    build_fetch(corr);
    finish_and_send();
    long long before = records;
    read_fetch(corr, cap, &records, &bytes);
    fetches++;
    corr = corr == INT32_MAX ? 2 : corr + 1;
    double t = now();
    if (records > before) {
      if (!before) tfirst = t;
      tlast = progress = t;
    } else if (t - progress > idle_secs) {
      long long hw_sum = 0;
      for (int p = 0; p < parts; p++) hw_sum += hwm[p] > 0 ? hwm[p] : 0;
      die("got %lld of %lld records, none new for %d s (sum of high watermarks %lld)", records, nrec, idle_secs, hw_sum);
    }
  }
  close(fd);
  long long hw_sum = 0, at_hw = 0;
  for (int p = 0; p < parts; p++) {
    hw_sum += hwm[p] > 0 ? hwm[p] : 0;
    at_hw += next_off[p] == hwm[p];
  }
  double secs = tlast - t0;
  printf("{\"mode\":\"fetch\",\"records\":%lld,\"bytes\":%lld,\"partitions\":%d,\"fetches\":%lld,\"fetch_version\":%d,"
         "\"secs\":%.4f,\"first_record_secs\":%.4f,\"rps\":%.1f,\"mbps\":%.3f,\"hw_sum\":%lld,\"partitions_at_hw\":%lld}\n",
         records, bytes, parts, fetches, fetch_version, secs, tfirst ? tfirst - t0 : -1, records / secs,
         bytes / secs / 1048576.0, hw_sum, at_hw);
  return 0;
}
