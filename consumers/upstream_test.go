package consumers_test

import (
	"context"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/creditflow/creditflow/internal/broker"
	"github.com/creditflow/creditflow/internal/broker/brokertest"
	"github.com/creditflow/creditflow/producers"
)

// TestUpstreamReaderStaleCommit documents why consumers.Group does not use
// kafka-go's Reader with a GroupID: a message fetched before a rebalance and
// committed after it is committed under the new generation's id, and the
// coordinator accepts it although its partition now belongs to another
// member. If this test starts failing, kafka-go has changed its behaviour.
func TestUpstreamReaderStaleCommit(t *testing.T) {
	if testing.Short() {
		t.Skip("upstream behaviour check")
	}
	b := brokertest.Start(t, broker.WithTopics(2, "up"))
	brokers := b.Addrs()
	p := newProducer(t, brokers)
	// Ten records in each partition.
	var msgs []producers.Message
	for i := 0; len(msgs) < 20; i++ {
		k := []byte{byte('a' + i%26), byte('0' + i/26)}
		msgs = append(msgs, producers.Message{Topic: "up", Key: k, Value: k})
	}
	if err := p.Produce(context.Background(), msgs...); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	rc := func() *kafka.Reader {
		return kafka.NewReader(kafka.ReaderConfig{Brokers: brokers, GroupID: "up", Topic: "up",
			SessionTimeout: 3 * time.Second, HeartbeatInterval: 200 * time.Millisecond, RebalanceTimeout: 3 * time.Second,
			MaxWait: 100 * time.Millisecond})
	}
	a := rc()
	defer a.Close()
	last := map[int]kafka.Message{}
	for len(last) < 2 {
		m, err := a.FetchMessage(ctx)
		if err != nil {
			t.Fatal(err)
		}
		last[m.Partition] = m
	}
	bReader := rc()
	defer bReader.Close()
	mb, err := bReader.FetchMessage(ctx) // returns once B owns a partition
	if err != nil {
		t.Fatal(err)
	}
	owned := mb.Partition
	stale := last[owned]
	// A no longer owns `owned`, yet commits a message it fetched from it.
	if err := a.CommitMessages(ctx, stale); err != nil {
		t.Skipf("kafka-go rejected the stale commit (%v): upstream fixed?", err)
	}
	got := committed(t, brokers, "up", "up", 2)[owned]
	if got != stale.Offset+1 {
		t.Skipf("stale commit did not land (committed %d): upstream fixed?", got)
	}
	t.Logf("kafka-go Reader committed offset %d on partition %d, which now belongs to another member (it fetched from offset %d)", got, owned, mb.Offset)
}
