package stage

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/creditflow/creditflow/consumers"
	"github.com/creditflow/creditflow/internal/broker"
	"github.com/creditflow/creditflow/internal/kafkasec"
	"github.com/creditflow/creditflow/producers"
	"github.com/creditflow/creditflow/state"
)

// A group whose samples went out in several writes settles (its offsets done,
// its close event acknowledged) on the last write's acknowledgement, not
// before; a failed write leaves it unsettled for the next owner.
func TestEmissionSettlesOnItsLastWrite(t *testing.T) {
	for _, failed := range []bool{false, true} {
		core, _ := state.NewStream[entry, *finalized]("scored", 0, 0, nil, state.DefaultWindow(), nil)
		p := &partition{a: &AdvantageStage{cfg: Config{Metrics: NewMetrics(prometheus.NewRegistry())}}, core: core}
		for o := int64(0); o < 3; o++ {
			core.Reject(o) // in flight, its outputs written by the test
		}
		ev := &state.CloseEvent{Offset: 2, PromptID: "p", Finalized: true}
		ledger := core
		e := &emission{ev: ev, offsets: []int64{0, 1, 2}, started: time.Now(), writes: 3}
		for i := 0; i < 3; i++ {
			if got := ledger.Committable(); got != 0 {
				t.Fatalf("failed=%v: committable %d after %d of 3 writes acknowledged, want 0", failed, got, i)
			}
			var err error
			if failed && i == 1 {
				err = errors.New("partition released")
			}
			p.acked(ack{e: e, err: err})
		}
		want := int64(3)
		if failed {
			want = 0
		}
		if got := ledger.Committable(); got != want {
			t.Fatalf("failed=%v: committable %d after the last write, want %d", failed, got, want)
		}
	}
}

// Sends are coalesced: queued while records wait to be handled, handed to
// the producer together once none waits; a large sample's send, or a full
// queue, goes at once. Every send is acknowledged, in the order queued.
func TestSendsCoalesceUntilNoRecordWaits(t *testing.T) {
	b, err := broker.Start(broker.WithDefaultPartitions(1))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := producers.EnsureTopics(ctx, b.Addrs(), kafkasec.Config{}, producers.TopicSpec{Name: "out", Partitions: 1, ReplicationFactor: 1}); err != nil {
		t.Fatal(err)
	}
	prod, err := producers.New(producers.Config{Brokers: b.Addrs()})
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	ledger, _ := state.NewStream[entry, *finalized]("scored", 0, 0, nil, state.DefaultWindow(), nil)
	p := &partition{a: &AdvantageStage{cfg: Config{Metrics: NewMetrics(prometheus.NewRegistry())}, prod: prod},
		core: ledger, log: zerolog.Nop(),
		out: output{acks: make(chan ack, 1024), sem: make(chan struct{}, 512), unacked: newWindow(64<<20, 1), claimCtx: ctx, emitCtx: ctx}}
	send := func(o int64, size int) {
		ledger.Reject(o) // in flight, its output written by the test
		e := &emission{offsets: []int64{o}, started: time.Now()}
		p.send([]producers.Message{{Topic: "out", Key: []byte("k"), Value: bytes.Repeat([]byte{byte(o)}, size)}}, e, false)
	}
	settle := func(n int) {
		t.Helper()
		for i := 0; i < n; i++ {
			select {
			case k := <-p.out.acks:
				if k.err != nil {
					t.Fatal(k.err)
				}
				p.acked(k)
			case <-ctx.Done():
				t.Fatalf("%d of %d sends acknowledged", i, n)
			}
		}
	}
	waiting := make(chan consumers.Record, 1)
	waiting <- consumers.Record{}
	for o := int64(0); o < 3; o++ {
		send(o, 100)
		p.flushIdle(waiting) // a record waits: keep queueing
	}
	if len(p.out.queued) != 3 || len(p.out.sem) != 0 || ledger.Committable() != 0 {
		t.Fatalf("with a record waiting: %d queued, %d writes in flight, committable %d; want 3, 0, 0", len(p.out.queued), len(p.out.sem), ledger.Committable())
	}
	p.flushIdle(make(chan consumers.Record)) // none waits: one write for the three
	if len(p.out.queued) != 0 {
		t.Fatalf("%d sends still queued with no record waiting", len(p.out.queued))
	}
	settle(3)
	if got := ledger.Committable(); got != 3 {
		t.Fatalf("committable %d after the three sends were acknowledged, want 3", got)
	}
	// A large sample's send goes at once, and so do the sends that filled the queue.
	send(3, 10)
	send(4, emitEachBytes)
	if len(p.out.queued) != 0 {
		t.Fatalf("a large send left %d sends queued", len(p.out.queued))
	}
	settle(2) // (two writes in flight at once may reach the broker in either order)
	for o := int64(5); o < 5+coalesceSends; o++ {
		send(o, 10)
	}
	if len(p.out.queued) != 0 {
		t.Fatalf("%d sends queued past the bound of %d", len(p.out.queued), coalesceSends)
	}
	settle(coalesceSends)
	if got, want := ledger.Committable(), int64(5+coalesceSends); got != want {
		t.Fatalf("committable %d, want %d", got, want)
	}
	// The topic holds every value once, in the order sent.
	var got []byte
	_, err = consumers.ReadPartitionRange(ctx, b.Addrs(), kafkasec.Config{}, "out", 0, -2, func(r consumers.Record) error {
		got = append(got, r.Value[0])
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 5+coalesceSends {
		t.Fatalf("%d records on the topic, want %d", len(got), 5+coalesceSends)
	}
	for i, v := range got {
		if int(v) != i {
			t.Fatalf("record %d holds send %d's value", i, v)
		}
	}
}
