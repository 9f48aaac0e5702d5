package monitor

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/creditflow/creditflow/internal/broker"
	"github.com/creditflow/creditflow/policy"
	"github.com/creditflow/creditflow/producers"
	"github.com/creditflow/creditflow/schemas"
)

// TestOnceFrom reads a topic on the embedded broker with every --from form:
// earliest and a past time read everything, latest and a future time
// nothing; bad bytes are counted, not fatal.
func TestOnceFrom(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b, err := broker.Start(broker.WithTopics(2, "samples", "dead"), broker.WithTopics(1, "policy"))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	w := &kafka.Writer{Addr: kafka.TCP(b.Addrs()...), Topic: "samples", Balancer: &kafka.RoundRobin{}}
	var msgs []kafka.Message
	for i := 0; i < 10; i++ {
		v, err := schemas.Samples().Encode(sample(fmt.Sprint("t", i), fmt.Sprint("p", i/2), 2, int64(i/4), float64(i%2)))
		if err != nil {
			t.Fatal(err)
		}
		msgs = append(msgs, kafka.Message{Value: v})
	}
	msgs = append(msgs, kafka.Message{Value: []byte{0xC3, 0x01, 0xff}})
	if err := w.WriteMessages(ctx, msgs...); err != nil {
		t.Fatal(err)
	}
	w.Close()
	for _, c := range []struct {
		from        string
		samples     int64
		undecodable int64
	}{
		{"earliest", 10, 1}, {"", 10, 1}, {"2020-01-01T00:00:00Z", 10, 1}, {"latest", 0, 0}, {"2099-01-01T00:00:00Z", 0, 0},
	} {
		m, err := New(Source{Brokers: b.Addrs(), Topics: []string{"samples"}, DeadLetters: "dead", From: c.from}, DefaultConfig())
		if err != nil {
			t.Fatal(err)
		}
		s, err := m.Once(ctx)
		if err != nil {
			t.Fatalf("from %q: %v", c.from, err)
		}
		if s.Samples != c.samples || s.Undecodable != c.undecodable || (c.samples > 0 && (s.Groups != 5 || s.ZeroVarianceGroups != 0 || len(s.ByPolicyVersion) != 3)) {
			t.Fatalf("from %q: %+v", c.from, s.Totals)
		}
	}
	// An announced version newer than any sample's: lags are measured from it.
	prod, err := producers.New(producers.Config{Brokers: b.Addrs()})
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	if err := policy.Announce(ctx, prod, "policy", schemas.PolicyAnnouncement{Version: 7, AnnouncedAtMs: 1}); err != nil {
		t.Fatal(err)
	}
	m, err := New(Source{Brokers: b.Addrs(), Topics: []string{"samples"}, Policy: "policy"}, DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	s, err := m.Once(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Versions 0,0,0,0,1,1,1,1,2,2: lags 7,7,7,7,6,6,6,6,5,5.
	if s.NewestAnnouncedVersion == nil || *s.NewestAnnouncedVersion != 7 || !near(s.PolicyLagMean, 6.2) {
		t.Fatalf("announced %v, policy lag mean %v", s.NewestAnnouncedVersion, s.PolicyLagMean)
	}
	if _, err := New(Source{Brokers: b.Addrs(), Topics: []string{"samples"}, From: "yesterday"}, DefaultConfig()); err == nil {
		t.Fatal("--from yesterday accepted")
	}
}
