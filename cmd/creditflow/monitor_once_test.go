package main

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"math"
	"os"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/linkedin/goavro/v2"
	"github.com/segmentio/kafka-go"

	"github.com/creditflow/creditflow/harness/demo"
	"github.com/creditflow/creditflow/internal/broker"
	"github.com/creditflow/creditflow/internal/broker/brokertest"
	"github.com/creditflow/creditflow/processors/stage"
)

// readTopic reads every record of topic with its own kafka-go readers (one
// per partition, no group), up to the end offsets as they are now.
func readTopic(t *testing.T, ctx context.Context, brokers []string, topic string) [][]byte {
	t.Helper()
	conn, err := kafka.DialContext(ctx, "tcp", brokers[0])
	if err != nil {
		t.Fatal(err)
	}
	parts, err := conn.ReadPartitions(topic)
	conn.Close()
	if err != nil {
		t.Fatal(err)
	}
	var out [][]byte
	for _, p := range parts {
		lc, err := kafka.DialLeader(ctx, "tcp", brokers[0], topic, p.ID)
		if err != nil {
			t.Fatal(err)
		}
		first, end, err := lc.ReadOffsets()
		lc.Close()
		if err != nil {
			t.Fatal(err)
		}
		if first >= end {
			continue
		}
		r := kafka.NewReader(kafka.ReaderConfig{Brokers: brokers, Topic: topic, Partition: p.ID, MaxWait: 100 * time.Millisecond})
		_ = r.SetOffset(first)
		for {
			m, err := r.ReadMessage(ctx)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, m.Value)
			if m.Offset+1 >= end {
				break
			}
		}
		r.Close()
	}
	return out
}

type independentRow struct {
	Samples            int64
	RewardSum          float64
	Successes          int64
	Groups             int64
	ZeroVarianceGroups int64
}

// independentSummary decodes samples with goavro and the schema file itself
// (not the project's codecs) and aggregates them naively.
func independentSummary(t *testing.T, values [][]byte) (total independentRow, byVersion map[int64]*independentRow, dups, bad int64) {
	t.Helper()
	schema, err := os.ReadFile("../../schemas/sample.avsc")
	if err != nil {
		t.Fatal(err)
	}
	codec, err := goavro.NewCodec(string(schema))
	if err != nil {
		t.Fatal(err)
	}
	type member struct {
		prompt  string
		version int64
		reward  float64
	}
	seen := map[string]member{}
	for _, v := range values {
		if len(v) < 10 || v[0] != 0xC3 || v[1] != 0x01 {
			bad++
			continue
		}
		native, rest, err := codec.NativeFromBinary(v[10:])
		if err != nil || len(rest) != 0 {
			bad++
			continue
		}
		m := native.(map[string]any)
		id := m["trajectory_id"].(string)
		if _, ok := seen[id]; ok {
			dups++
			continue
		}
		seen[id] = member{m["prompt_id"].(string), m["policy_version"].(int64), m["reward"].(float64)}
	}
	byVersion = map[int64]*independentRow{}
	groups := map[string][]member{}
	ids := make([]string, 0, len(seen))
	for id := range seen {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		mb := seen[id]
		groups[mb.prompt] = append(groups[mb.prompt], mb)
		for _, r := range []*independentRow{&total, row(byVersion, mb.version)} {
			r.Samples++
			r.RewardSum += mb.reward
			if mb.reward >= 1.0 {
				r.Successes++
			}
		}
	}
	for _, ms := range groups {
		zero := true
		for _, mb := range ms {
			zero = zero && mb.reward == ms[0].reward
		}
		for _, r := range []*independentRow{&total, row(byVersion, ms[0].version)} {
			r.Groups++
			if zero {
				r.ZeroVarianceGroups++
			}
		}
	}
	return total, byVersion, dups, bad
}

func row(m map[int64]*independentRow, v int64) *independentRow {
	if m[v] == nil {
		m[v] = &independentRow{}
	}
	return m[v]
}

// captureStdout runs fn with os.Stdout redirected and returns what it wrote.
func captureStdout(t *testing.T, fn func() error) (string, error) {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout := os.Stdout
	os.Stdout = w
	done := make(chan []byte)
	go func() { b, _ := io.ReadAll(r); done <- b }()
	runErr := fn()
	os.Stdout = stdout
	w.Close()
	return string(<-done), runErr
}

// TestMonitorOnceAgainstIndependentReading runs a demo on the embedded
// broker, adds duplicates and bad bytes to the samples topic, and checks
// `creditflow monitor --once --json` against a reading of the topic with its
// own consumer and its own decoding: counts, reward mean, success rate,
// groups, zero-variance groups and the by-version rows. It also checks that
// the monitor created no consumer group.
func TestMonitorOnceAgainstIndependentReading(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the whole pipeline")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	b := brokertest.Start(t, broker.WithDefaultPartitions(3))
	o := demo.Defaults()
	// 40 groups: policy versions 0, 1 and 2; of 3 members, so that some
	// groups have every reward equal.
	o.Brokers, o.Groups, o.GroupSize, o.Bad = b.Addrs(), 40, 3, 2
	sum, err := demo.Run(ctx, o)
	if err != nil {
		t.Fatalf("demo: %v", err)
	}
	topics := stage.DefaultTopics()

	// At-least-once delivery: five samples delivered again; and bad bytes.
	values := readTopic(t, ctx, b.Addrs(), topics.Samples)
	w := &kafka.Writer{Addr: kafka.TCP(b.Addrs()...), Topic: topics.Samples, Balancer: &kafka.RoundRobin{}}
	var extra []kafka.Message
	for _, v := range values[:5] {
		extra = append(extra, kafka.Message{Value: v})
	}
	for _, junk := range [][]byte{[]byte("not avro"), {0xC3, 0x01, 1, 2, 3}, values[7][:len(values[7])/2]} {
		extra = append(extra, kafka.Message{Value: junk})
	}
	if err := w.WriteMessages(ctx, extra...); err != nil {
		t.Fatal(err)
	}
	w.Close()

	groupsBefore := consumerGroups(t, ctx, b.Addrs())
	out, err := captureStdout(t, func() error {
		return runMonitor([]string{"--brokers", strings.Join(b.Addrs(), ","), "--once", "--json", "--log-level", "error"})
	})
	if err != nil {
		t.Fatalf("monitor: %v\n%s", err, out)
	}
	if after := consumerGroups(t, ctx, b.Addrs()); strings.Join(after, ",") != strings.Join(groupsBefore, ",") {
		t.Fatalf("the monitor changed the consumer groups: %v → %v", groupsBefore, after)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	var got struct {
		Samples, Duplicates, Undecodable, Groups int64
		RewardMean                               float64          `json:"reward_mean"`
		SuccessRate                              float64          `json:"success_rate"`
		ZeroVarianceGroups                       int64            `json:"zero_variance_groups"`
		DeadLetters                              map[string]int64 `json:"dead_letters"`
		ByPolicyVersion                          []struct {
			PolicyVersion      int64   `json:"policy_version"`
			Samples            int64   `json:"samples"`
			RewardMean         float64 `json:"reward_mean"`
			SuccessRate        float64 `json:"success_rate"`
			Groups             int64   `json:"groups"`
			ZeroVarianceGroups int64   `json:"zero_variance_groups"`
		} `json:"by_policy_version"`
	}
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &got); err != nil {
		t.Fatalf("last line is not the summary: %v\n%s", err, out)
	}

	want, byVersion, dups, bad := independentSummary(t, readTopic(t, ctx, b.Addrs(), topics.Samples))
	if want.Samples != int64(sum.SamplesOut) || dups != 5 || bad != 3 || len(byVersion) != 3 || want.ZeroVarianceGroups == 0 {
		t.Fatalf("independent reading: %+v, %d duplicates, %d bad, %d versions (demo wrote %d samples)", want, dups, bad, len(byVersion), sum.SamplesOut)
	}
	close := func(a, b float64) bool { return math.Abs(a-b) <= 1e-9 }
	if got.Samples != want.Samples || got.Duplicates != dups || got.Undecodable != bad || got.Groups != want.Groups ||
		got.ZeroVarianceGroups != want.ZeroVarianceGroups || !close(got.RewardMean, want.RewardSum/float64(want.Samples)) ||
		!close(got.SuccessRate, float64(want.Successes)/float64(want.Samples)) {
		t.Fatalf("monitor %+v\nindependent %+v (duplicates %d, bad %d)", got, want, dups, bad)
	}
	if len(got.ByPolicyVersion) != len(byVersion) {
		t.Fatalf("by version: %+v, want %d rows", got.ByPolicyVersion, len(byVersion))
	}
	for i, r := range got.ByPolicyVersion {
		w := byVersion[r.PolicyVersion]
		if w == nil || (i > 0 && r.PolicyVersion <= got.ByPolicyVersion[i-1].PolicyVersion) || r.Samples != w.Samples || r.Groups != w.Groups ||
			r.ZeroVarianceGroups != w.ZeroVarianceGroups || !close(r.RewardMean, w.RewardSum/float64(w.Samples)) ||
			!close(r.SuccessRate, float64(w.Successes)/float64(w.Samples)) {
			t.Fatalf("version row %+v, independent %+v", r, w)
		}
	}
	var dead int64
	for _, n := range got.DeadLetters {
		dead += n
	}
	if dead != int64(sum.DeadLetters) {
		t.Fatalf("dead letters %v, the demo counted %d", got.DeadLetters, sum.DeadLetters)
	}
	t.Logf("%d samples, %d groups (%d zero-variance), reward mean %.4f, success rate %.4f, %d versions",
		got.Samples, got.Groups, got.ZeroVarianceGroups, got.RewardMean, got.SuccessRate, len(byVersion))
}

func consumerGroups(t *testing.T, ctx context.Context, brokers []string) []string {
	t.Helper()
	c := &kafka.Client{Addr: kafka.TCP(brokers...), Timeout: 10 * time.Second}
	resp, err := c.ListGroups(ctx, &kafka.ListGroupsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if resp.Error != nil && !errors.Is(resp.Error, context.Canceled) {
		t.Fatal(resp.Error)
	}
	var out []string
	for _, g := range resp.Groups {
		out = append(out, g.GroupID)
	}
	sort.Strings(out)
	return out
}
