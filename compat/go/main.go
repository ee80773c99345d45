// Compatibility scenarios for franz-go (kgo + kadm).
//
//	compat-go list
//	compat-go BOOTSTRAP [SCENARIO...]   (BOOTSTRAP: host:port[,host:port...])
//
// Prints one line per scenario: SCENARIO franz-go NAME PASS|FAIL|SKIP detail
package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

const client = "franz-go"

var (
	bootstrap string
	run       = strconv.FormatInt(time.Now().UnixNano()%1e9, 36) + strconv.Itoa(rand.Intn(1<<20))
)

type scenario struct {
	name    string
	fn      func(ctx context.Context) (string, error)
	timeout time.Duration
}

const defaultTimeout = 40 * time.Second

var scenarios = []scenario{
	{"produce-consume", produceConsume, defaultTimeout},
	{"compression", compression, defaultTimeout},
	{"consumer-group", consumerGroup, defaultTimeout},
	{"admin", admin, defaultTimeout},
	// compat/run.sh runs this one last, alone, with a longer limit (it kills a broker)
	{"leader-failover", leaderFailover, 240 * time.Second},
}

// skipError is returned by a scenario that cannot run here; it prints SKIP and is not a failure.
type skipError struct{ reason string }

func (e skipError) Error() string { return e.reason }

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: compat-go list | compat-go BOOTSTRAP [SCENARIO...]")
		os.Exit(2)
	}
	if os.Args[1] == "list" {
		for _, s := range scenarios {
			fmt.Println(s.name)
		}
		return
	}
	bootstrap = os.Args[1]
	want := os.Args[2:]
	failed := 0
	for _, s := range scenarios {
		if len(want) > 0 && !contains(want, s.name) {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), s.timeout)
		detail, err := s.fn(ctx)
		cancel()
		var skip skipError
		if errors.As(err, &skip) {
			fmt.Printf("SCENARIO %s %s SKIP %s\n", client, s.name, skip.reason)
		} else if err != nil {
			failed++
			fmt.Printf("SCENARIO %s %s FAIL %s\n", client, s.name, strings.ReplaceAll(err.Error(), "\n", " "))
		} else {
			fmt.Printf("SCENARIO %s %s PASS %s\n", client, s.name, detail)
		}
	}
	if failed > 0 {
		os.Exit(1)
	}
}

func contains(l []string, s string) bool {
	for _, x := range l {
		if x == s {
			return true
		}
	}
	return false
}

func topicName(s string) string { return "compat-franzgo-" + s + "-" + run }

func newClient(opts ...kgo.Opt) (*kgo.Client, error) {
	base := []kgo.Opt{kgo.SeedBrokers(strings.Split(bootstrap, ",")...), kgo.RequestTimeoutOverhead(10 * time.Second)}
	return kgo.NewClient(append(base, opts...)...)
}

func createTopic(ctx context.Context, adm *kadm.Client, name string, partitions int32, configs map[string]*string) error {
	return createTopicRF(ctx, adm, name, partitions, 1, configs)
}

func createTopicRF(ctx context.Context, adm *kadm.Client, name string, partitions int32, rf int16, configs map[string]*string) error {
	resp, err := adm.CreateTopics(ctx, partitions, rf, configs, name)
	if err != nil {
		return fmt.Errorf("CreateTopics: %w", err)
	}
	if err := resp.Error(); err != nil {
		return fmt.Errorf("CreateTopics %s: %w", name, err)
	}
	deadline := time.Now().Add(15 * time.Second)
	for {
		td, err := adm.ListTopics(ctx, name)
		if err == nil && td.Has(name) && td[name].Err == nil && len(td[name].Partitions) == int(partitions) {
			ok := true
			for _, p := range td[name].Partitions {
				if p.Leader < 0 || p.Err != nil {
					ok = false
				}
			}
			if ok {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("topic %s not ready (err=%v)", name, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

type sent struct {
	rec *kgo.Record
}

// makeRecords builds n records with keys, headers, explicit timestamps, spread over partitions.
func makeRecords(topic string, partitions, n int) []*kgo.Record {
	base := time.Now().Add(-time.Hour).UnixMilli()
	var recs []*kgo.Record
	for i := 0; i < n; i++ {
		r := &kgo.Record{Topic: topic, Partition: int32(i % partitions), Timestamp: time.UnixMilli(base + int64(i)*1000)}
		if i%7 != 3 {
			r.Key = []byte("key-" + strconv.Itoa(i))
		}
		if i%11 != 5 {
			r.Value = []byte(fmt.Sprintf("value-%d-%s-ünïcødé", i, strings.Repeat("x", i%13)))
		}
		if i%4 != 0 {
			r.Headers = []kgo.RecordHeader{{Key: "h-index", Value: []byte(strconv.Itoa(i))}, {Key: "h-dup", Value: []byte("a")}, {Key: "h-dup", Value: []byte("b")}, {Key: "h-empty", Value: []byte{}}}
		}
		recs = append(recs, r)
	}
	return recs
}

// produce sends synchronously and checks per-partition offsets are 0,1,2,... in send order.
func produce(ctx context.Context, cl *kgo.Client, recs []*kgo.Record) ([]*kgo.Record, error) {
	want := make([]*kgo.Record, len(recs))
	for i, r := range recs {
		c := *r
		c.Headers = append([]kgo.RecordHeader(nil), r.Headers...)
		want[i] = &c
	}
	res := cl.ProduceSync(ctx, recs...)
	if err := res.FirstErr(); err != nil {
		return nil, fmt.Errorf("produce: %w", err)
	}
	// kgo sets Partition/Offset on the records it was given; walk them in send order
	next := map[int32]int64{}
	for i, r := range recs {
		if r.Partition != want[i].Partition {
			return nil, fmt.Errorf("record %d acked on partition %d, sent to %d", i, r.Partition, want[i].Partition)
		}
		if r.Offset != next[r.Partition] {
			return nil, fmt.Errorf("partition %d: record %d acked at offset %d, expected %d", r.Partition, i, r.Offset, next[r.Partition])
		}
		want[i].Offset = r.Offset
		next[r.Partition]++
	}
	return want, nil
}

func hdrs(hs []kgo.RecordHeader) string {
	var b strings.Builder
	for _, h := range hs {
		b.WriteString(h.Key + "=" + string(h.Value) + ",")
	}
	return b.String()
}

func eqNullable(a, b []byte) bool { return (a == nil) == (b == nil) && bytes.Equal(a, b) }

// verify checks that got holds every wanted record exactly once with all its fields, in per-partition order.
func verify(want, got []*kgo.Record) error {
	if len(got) != len(want) {
		return fmt.Errorf("read back %d records, produced %d", len(got), len(want))
	}
	byPos := map[string]*kgo.Record{}
	last := map[int32]int64{}
	for _, w := range want {
		byPos[fmt.Sprintf("%d@%d", w.Partition, w.Offset)] = w
		if v, ok := last[w.Partition]; !ok || w.Offset-1 < v {
			last[w.Partition] = w.Offset - 1
		}
	}
	for _, r := range got {
		at := fmt.Sprintf("%d@%d", r.Partition, r.Offset)
		if r.Offset != last[r.Partition]+1 {
			return fmt.Errorf("partition %d: offset %d after %d", r.Partition, r.Offset, last[r.Partition])
		}
		last[r.Partition] = r.Offset
		w := byPos[at]
		if w == nil {
			return fmt.Errorf("unexpected record at %s", at)
		}
		if !eqNullable(w.Key, r.Key) {
			return fmt.Errorf("key %q (nil=%v) != %q (nil=%v) at %s", r.Key, r.Key == nil, w.Key, w.Key == nil, at)
		}
		if !eqNullable(w.Value, r.Value) {
			return fmt.Errorf("value %q (nil=%v) != %q (nil=%v) at %s", r.Value, r.Value == nil, w.Value, w.Value == nil, at)
		}
		if r.Timestamp.UnixMilli() != w.Timestamp.UnixMilli() {
			return fmt.Errorf("timestamp %d != %d at %s", r.Timestamp.UnixMilli(), w.Timestamp.UnixMilli(), at)
		}
		if r.Attrs.TimestampType() != 0 {
			return fmt.Errorf("timestamp type %d at %s", r.Attrs.TimestampType(), at)
		}
		if hdrs(r.Headers) != hdrs(w.Headers) {
			return fmt.Errorf("headers %s != %s at %s", hdrs(r.Headers), hdrs(w.Headers), at)
		}
	}
	return nil
}

func pollN(ctx context.Context, cl *kgo.Client, n int, timeout time.Duration) ([]*kgo.Record, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var got []*kgo.Record
	for len(got) < n {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			break
		}
		var ferr error
		fs.EachError(func(t string, p int32, err error) {
			if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
				ferr = fmt.Errorf("fetch %s[%d]: %w", t, p, err)
			}
		})
		if ferr != nil {
			return got, ferr
		}
		got = append(got, fs.Records()...)
	}
	return got, nil
}

func partitionsFromStart(topic string, n int) map[string]map[int32]kgo.Offset {
	m := map[int32]kgo.Offset{}
	for p := 0; p < n; p++ {
		m[int32(p)] = kgo.NewOffset().AtStart()
	}
	return map[string]map[int32]kgo.Offset{topic: m}
}

func produceConsume(ctx context.Context) (string, error) {
	t := topicName("pc")
	cl, err := newClient(kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.RequiredAcks(kgo.AllISRAcks()))
	if err != nil {
		return "", err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	if err := createTopic(ctx, adm, t, 3, nil); err != nil {
		return "", err
	}
	want, err := produce(ctx, cl, makeRecords(t, 3, 60))
	if err != nil {
		return "", err
	}
	cons, err := newClient(kgo.ConsumePartitions(partitionsFromStart(t, 3)))
	if err != nil {
		return "", err
	}
	defer cons.Close()
	got, err := pollN(ctx, cons, len(want), 20*time.Second)
	if err != nil {
		return "", err
	}
	if err := verify(want, got); err != nil {
		return "", err
	}
	return fmt.Sprintf("%d records, 3 partitions, idempotent acks=all, keys/headers/timestamps/offsets verified", len(want)), nil
}

func compression(ctx context.Context) (string, error) {
	codecs := []struct {
		name  string
		codec kgo.CompressionCodec
	}{{"none", kgo.NoCompression()}, {"gzip", kgo.GzipCompression()}, {"snappy", kgo.SnappyCompression()}, {"lz4", kgo.Lz4Compression()}, {"zstd", kgo.ZstdCompression()}}
	t := topicName("comp")
	cl, err := newClient()
	if err != nil {
		return "", err
	}
	defer cl.Close()
	if err := createTopic(ctx, kadm.NewClient(cl), t, int32(len(codecs)), nil); err != nil {
		return "", err
	}
	var all []*kgo.Record
	for i, c := range codecs {
		p, err := newClient(kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerBatchCompression(c.codec), kgo.ProducerLinger(20*time.Millisecond))
		if err != nil {
			return "", err
		}
		recs := makeRecords(t, 1, 40)
		for _, r := range recs {
			r.Partition = int32(i)
		}
		want, err := produce(ctx, p, recs)
		p.Close()
		if err != nil {
			return "", fmt.Errorf("%s: %w", c.name, err)
		}
		all = append(all, want...)
	}
	cons, err := newClient(kgo.ConsumePartitions(partitionsFromStart(t, len(codecs))))
	if err != nil {
		return "", err
	}
	defer cons.Close()
	got, err := pollN(ctx, cons, len(all), 20*time.Second)
	if err != nil {
		return "", err
	}
	if err := verify(all, got); err != nil {
		return "", err
	}
	return fmt.Sprintf("none,gzip,snappy,lz4,zstd: %d records verified", len(all)), nil
}

func consumerGroup(ctx context.Context) (string, error) {
	t := topicName("grp")
	g := "compat-franzgo-group-" + run
	cl, err := newClient(kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		return "", err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	if err := createTopic(ctx, adm, t, 2, nil); err != nil {
		return "", err
	}
	want, err := produce(ctx, cl, makeRecords(t, 2, 30))
	if err != nil {
		return "", err
	}
	cons, err := newClient(kgo.ConsumerGroup(g), kgo.ConsumeTopics(t), kgo.DisableAutoCommit(),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		return "", err
	}
	got, err := pollN(ctx, cons, len(want), 25*time.Second)
	if err != nil {
		cons.Close()
		return "", err
	}
	if err := verify(want, got); err != nil {
		cons.Close()
		return "", err
	}
	if err := cons.CommitUncommittedOffsets(ctx); err != nil {
		cons.Close()
		return "", fmt.Errorf("commit: %w", err)
	}
	cons.Close()
	offs, err := adm.FetchOffsets(ctx, g)
	if err != nil {
		return "", fmt.Errorf("FetchOffsets: %w", err)
	}
	for p := int32(0); p < 2; p++ {
		o, ok := offs.Lookup(t, p)
		if !ok || o.At != 15 {
			return "", fmt.Errorf("committed offset for %s[%d] = %+v", t, p, o)
		}
	}
	lg, err := adm.ListGroups(ctx)
	if err != nil {
		return "", fmt.Errorf("ListGroups: %w", err)
	}
	if _, ok := lg[g]; !ok {
		return "", fmt.Errorf("group %s not listed: %v", g, lg.Groups())
	}
	if _, err := adm.DeleteGroups(ctx, g); err != nil {
		return "", fmt.Errorf("DeleteGroups: %w", err)
	}
	return "group consume + commit + FetchOffsets + ListGroups + DeleteGroups", nil
}

func admin(ctx context.Context) (string, error) {
	t := topicName("adm")
	// linger so that the 10 records below share one batch (timestamp lookups must find records inside a batch)
	cl, err := newClient(kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerLinger(200*time.Millisecond))
	if err != nil {
		return "", err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	ret := "3600000"
	if err := createTopic(ctx, adm, t, 2, map[string]*string{"retention.ms": &ret}); err != nil {
		return "", err
	}
	// creating again -> TOPIC_ALREADY_EXISTS
	resp, err := adm.CreateTopics(ctx, 1, 1, nil, t)
	if err != nil {
		return "", err
	}
	if e := resp[t].Err; !errors.Is(e, kerr.TopicAlreadyExists) {
		return "", fmt.Errorf("create existing -> %v", e)
	}
	topics, err := adm.ListTopics(ctx)
	if err != nil {
		return "", err
	}
	if !topics.Has(t) || len(topics[t].Partitions) != 2 || topics[t].ID == [16]byte{} {
		return "", fmt.Errorf("ListTopics: %+v", topics[t])
	}
	cfgs, err := adm.DescribeTopicConfigs(ctx, t)
	if err != nil {
		return "", err
	}
	rc, err := cfgs.On(t, nil)
	if err != nil {
		return "", err
	}
	if c := cfgValue(rc, "retention.ms"); c != "3600000" {
		return "", fmt.Errorf("retention.ms = %v", c)
	}
	v := "7200000"
	ar, err := adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Op: kadm.SetConfig, Name: "retention.ms", Value: &v}}, t)
	if err != nil {
		return "", err
	}
	if _, err := ar.On(t, nil); err != nil {
		return "", fmt.Errorf("AlterTopicConfigs: %w", err)
	}
	// Kafka applies the change through its metadata log: wait (bounded) for a describe to see it.
	cfgDeadline := time.Now().Add(15 * time.Second)
	for {
		cfgs, _ = adm.DescribeTopicConfigs(ctx, t)
		rc, _ = cfgs.On(t, nil)
		c := cfgValue(rc, "retention.ms")
		if c == "7200000" {
			break
		}
		if time.Now().After(cfgDeadline) {
			return "", fmt.Errorf("after alter retention.ms = %v", c)
		}
		time.Sleep(100 * time.Millisecond)
	}
	// broker configs
	md, err := adm.BrokerMetadata(ctx)
	if err != nil {
		return "", err
	}
	// One broker per bootstrap address (the runner lists every node of a cluster).
	if len(md.Brokers) != len(strings.Split(bootstrap, ",")) {
		return "", fmt.Errorf("brokers: %v", md.Brokers)
	}
	bcfg, err := adm.DescribeBrokerConfigs(ctx, md.Brokers[0].NodeID)
	if err != nil {
		return "", fmt.Errorf("DescribeBrokerConfigs: %w", err)
	}
	if len(bcfg) != 1 || bcfg[0].Err != nil || len(bcfg[0].Configs) == 0 {
		return "", fmt.Errorf("DescribeBrokerConfigs: %+v", bcfg)
	}
	// create partitions 2 -> 3
	cp, err := adm.UpdatePartitions(ctx, 3, t)
	if err != nil {
		return "", err
	}
	if e := cp.Error(); e != nil {
		return "", fmt.Errorf("UpdatePartitions: %w", e)
	}
	// produce 10 records to p0 with increasing timestamps, then list offsets
	recs := makeRecords(t, 1, 10)
	want, err := produce(ctx, cl, recs)
	if err != nil {
		return "", err
	}
	ends, err := adm.ListEndOffsets(ctx, t)
	if err != nil {
		return "", err
	}
	if o, _ := ends.Lookup(t, 0); o.Offset != 10 {
		return "", fmt.Errorf("end offset p0 = %d", o.Offset)
	}
	aft, err := adm.ListOffsetsAfterMilli(ctx, want[5].Timestamp.UnixMilli(), t)
	if err != nil {
		return "", err
	}
	if o, _ := aft.Lookup(t, 0); o.Offset != 5 {
		return "", fmt.Errorf("offset after ts of #5 = %d", o.Offset)
	}
	del, err := adm.DeleteRecords(ctx, kadm.Offsets{t: {0: {Topic: t, Partition: 0, At: 4}}})
	if err != nil {
		return "", err
	}
	if e := del.Error(); e != nil {
		return "", fmt.Errorf("DeleteRecords: %w", e)
	}
	if d, _ := del.Lookup(t, 0); d.LowWatermark != 4 {
		return "", fmt.Errorf("low watermark %d", d.LowWatermark)
	}
	starts, err := adm.ListStartOffsets(ctx, t)
	if err != nil {
		return "", err
	}
	if o, _ := starts.Lookup(t, 0); o.Offset != 4 {
		return "", fmt.Errorf("start offset after DeleteRecords = %d", o.Offset)
	}
	dr, err := adm.DeleteTopics(ctx, t)
	if err != nil {
		return "", err
	}
	if e := dr.Error(); e != nil {
		return "", fmt.Errorf("DeleteTopics: %w", e)
	}
	deadline := time.Now().Add(15 * time.Second)
	for {
		all, err := adm.ListTopics(ctx)
		if err == nil && !all.Has(t) {
			break
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("topic still listed after delete")
		}
		time.Sleep(200 * time.Millisecond)
	}
	names := []string{"CreateTopics", "ListTopics", "DescribeTopicConfigs", "AlterTopicConfigs", "BrokerMetadata", "DescribeBrokerConfigs", "UpdatePartitions", "ListEnd/StartOffsets", "ListOffsetsAfterMilli", "DeleteRecords", "DeleteTopics"}
	sort.Strings(names)
	return strings.Join(names, " "), nil
}

func cfgValue(rc kadm.ResourceConfig, key string) string {
	for _, c := range rc.Configs {
		if c.Key == key {
			if c.Value == nil {
				return "<nil>"
			}
			return *c.Value
		}
	}
	return "<missing>"
}

// nodeCtl runs `$COMPAT_NODE_CTL action node` (kill9 or start) and fails on a non-zero exit.
func nodeCtl(ctx context.Context, ctl, action string, node int32) error {
	out, err := exec.CommandContext(ctx, ctl, action, strconv.Itoa(int(node))).CombinedOutput()
	if err != nil {
		return fmt.Errorf("node-ctl %s %d: %w: %s", action, node, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// partition0 returns partition 0 of topic t as the cluster's metadata describes it now.
func partition0(ctx context.Context, adm *kadm.Client, t string) (kadm.PartitionDetail, error) {
	td, err := adm.ListTopics(ctx, t)
	if err != nil {
		return kadm.PartitionDetail{}, fmt.Errorf("ListTopics: %w", err)
	}
	if !td.Has(t) || td[t].Err != nil {
		return kadm.PartitionDetail{}, fmt.Errorf("ListTopics %s: %v", t, td[t].Err)
	}
	p, ok := td[t].Partitions[0]
	if !ok {
		return kadm.PartitionDetail{}, fmt.Errorf("ListTopics %s: no partition 0", t)
	}
	return p, nil
}

// produceAt sends recs one at a time to partition 0 and checks they are acked at offsets first, first+1, ...
func produceAt(ctx context.Context, cl *kgo.Client, recs []*kgo.Record, first int64) error {
	for i, r := range recs {
		if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
			return fmt.Errorf("produce %s: %w", r.Key, err)
		}
		if r.Partition != 0 || r.Offset != first+int64(i) {
			return fmt.Errorf("%s acked at %d@%d, expected 0@%d", r.Key, r.Partition, r.Offset, first+int64(i))
		}
	}
	return nil
}

// leaderFailover kill -9s the leader of a replicated partition between two batches of acks=all
// produces; the producer must ride through the election, and every acked record must be readable.
func leaderFailover(ctx context.Context) (detail string, err error) {
	ctl := os.Getenv("COMPAT_NODE_CTL")
	if ctl == "" {
		return "", skipError{"needs a cluster (compat/run.sh --nodes 3)"}
	}
	t := topicName("failover")
	// idempotent and acks=all are franz-go's defaults; the record timeout covers the election
	cl, err := newClient(kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.RecordDeliveryTimeout(150*time.Second))
	if err != nil {
		return "", err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	minISR := "2"
	if err := createTopicRF(ctx, adm, t, 1, 3, map[string]*string{"min.insync.replicas": &minISR}); err != nil {
		return "", err
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		p, err := partition0(ctx, adm, t)
		if err == nil && p.Err == nil && p.Leader >= 0 && len(p.ISR) == 3 {
			break
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("partition 0 not fully replicated after 30 s: %+v (err=%v)", p, err)
		}
		time.Sleep(200 * time.Millisecond)
	}

	mk := func(prefix string, n int) []*kgo.Record {
		var recs []*kgo.Record
		for i := 0; i < n; i++ {
			k := prefix + "-" + strconv.Itoa(i)
			recs = append(recs, &kgo.Record{Topic: t, Partition: 0, Key: []byte(k), Value: []byte("value-" + k)})
		}
		return recs
	}
	before, after := mk("before", 20), mk("after", 20)
	if err := produceAt(ctx, cl, before, 0); err != nil {
		return "", fmt.Errorf("before failover: %w", err)
	}

	p, err := partition0(ctx, adm, t)
	if err != nil {
		return "", err
	}
	if p.Err != nil || p.Leader < 0 {
		return "", fmt.Errorf("partition 0 has no leader before the kill: %+v", p)
	}
	killed := p.Leader
	if err := nodeCtl(ctx, ctl, "kill9", killed); err != nil {
		return "", err
	}
	defer func() {
		// always bring the broker back, even when the scenario failed or timed out
		sctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		defer cancel()
		if serr := nodeCtl(sctx, ctl, "start", killed); serr != nil {
			if err == nil {
				err = serr
			} else {
				err = fmt.Errorf("%w; %v", err, serr)
			}
		}
	}()

	if err := produceAt(ctx, cl, after, 20); err != nil {
		return "", fmt.Errorf("after killing leader %d: %w", killed, err)
	}

	cons, err := newClient(kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{t: {0: kgo.NewOffset().At(0)}}))
	if err != nil {
		return "", err
	}
	defer cons.Close()
	got, err := pollN(ctx, cons, 40, 60*time.Second)
	if err != nil {
		return "", err
	}
	if len(got) != 40 {
		return "", fmt.Errorf("read back %d records, acked 40", len(got))
	}
	acked := append(append([]*kgo.Record(nil), before...), after...)
	for i, r := range got {
		w := acked[i]
		if r.Partition != 0 || r.Offset != int64(i) || string(r.Key) != string(w.Key) || string(r.Value) != string(w.Value) {
			return "", fmt.Errorf("read %s=%s at %d@%d, acked %s=%s at 0@%d", r.Key, r.Value, r.Partition, r.Offset, w.Key, w.Value, i)
		}
	}
	ends, err := adm.ListEndOffsets(ctx, t)
	if err != nil {
		return "", fmt.Errorf("ListEndOffsets: %w", err)
	}
	if o, _ := ends.Lookup(t, 0); o.Err != nil || o.Offset != 40 {
		return "", fmt.Errorf("end offset after failover = %d (err=%v), expected 40", o.Offset, o.Err)
	}

	p, err = partition0(ctx, adm, t)
	if err != nil {
		return "", err
	}
	if p.Err != nil || p.Leader < 0 || p.Leader == killed {
		return "", fmt.Errorf("partition 0 leader after the kill = %d (killed %d, err=%v)", p.Leader, killed, p.Err)
	}
	return fmt.Sprintf("leader %d killed (-9): 20 records acked before and 20 after on new leader %d, 40 read back at offsets 0-39",
		killed, p.Leader), nil
}
