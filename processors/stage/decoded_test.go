package stage_test

import (
	"context"
	"testing"
	"time"

	"github.com/creditflow/creditflow/harness/demo"
	"github.com/creditflow/creditflow/internal/broker"
	"github.com/creditflow/creditflow/processors/stage"
)

// With a decoded window of one byte every open member but the newest keeps
// only its record's bytes and is decoded again when its group closes; the
// samples are still exactly what compute gives.
func TestAdvantageRedecodesMembersOutOfTheDecodedWindow(t *testing.T) {
	defer stage.SetDecodedBudget(1)()
	b, err := broker.Start(broker.WithDefaultPartitions(1))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	o := demo.Defaults()
	o.Brokers, o.Groups, o.Partitions, o.Bad, o.MaxAhead, o.Timeout = b.Addrs(), 4, 1, 0, 4, 3*time.Minute
	sum, err := demo.Run(context.Background(), o)
	if err != nil {
		t.Fatalf("demo: %v (%+v)", err, sum)
	}
	if sum.Lost != 0 || sum.SamplesOut != 20 {
		t.Fatalf("summary %+v: want 20 samples, 0 lost", sum)
	}
	if n := compareWithCompute(t, b.Addrs(), stage.DefaultTopics(), o.Credit); n != 20 {
		t.Fatalf("%d samples on the topic, want 20", n)
	}
}
