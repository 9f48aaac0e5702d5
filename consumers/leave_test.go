package consumers_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/creditflow/creditflow/consumers"
	"github.com/creditflow/creditflow/internal/broker"
	"github.com/creditflow/creditflow/internal/broker/brokertest"
)

// TestCloseLeavesWithoutRejoining: Close (what SIGTERM does) sends
// LeaveGroup from the running generation and no JoinGroup first.
//
// kafka-go joins the next generation as soon as one ends. When the
// handlers returned on shutdown before Close, the member rejoined the
// group and only then left. A JoinGroup of the group's leader starts a
// rebalance that the coordinator holds until every other member has
// rejoined or timed out — a member killed without leaving counts until its
// session timeout — so the leave waited seconds ("leaving the consumer
// group did not finish within 5s"). The broker sees the requests here.
func TestCloseLeavesWithoutRejoining(t *testing.T) {
	const group, topic = "leave-group", "leave"
	b := brokertest.Start(t, broker.WithTopics(2, topic))
	var closing atomic.Bool
	var joinsAfterClose, leaves atomic.Int32
	b.Cluster().ControlKey(kmsg.JoinGroup.Int16(), func(r kmsg.Request) (kmsg.Response, error, bool) {
		b.Cluster().KeepControl()
		if r.(*kmsg.JoinGroupRequest).Group == group && closing.Load() {
			joinsAfterClose.Add(1)
		}
		return nil, nil, false
	})
	b.Cluster().ControlKey(kmsg.LeaveGroup.Int16(), func(r kmsg.Request) (kmsg.Response, error, bool) {
		b.Cluster().KeepControl()
		if r.(*kmsg.LeaveGroupRequest).Group == group {
			leaves.Add(1)
		}
		return nil, nil, false
	})

	g, err := consumers.NewGroup(groupCfg(b.Addrs(), group, topic))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	claimed := make(chan struct{}, 4)
	done := make(chan error, 1)
	go func() {
		done <- g.Run(ctx, func(ctx context.Context, c consumers.Claim, commit consumers.CommitFunc) error {
			claimed <- struct{}{}
			<-ctx.Done()
			// Flushing on shutdown still commits within the generation.
			return commit(context.Background(), c.StartOffset)
		})
	}()
	select {
	case <-claimed:
	case err := <-done:
		t.Fatalf("Run: %v", err)
	}
	closing.Store(true)
	if err := g.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	if n := joinsAfterClose.Load(); n != 0 {
		t.Errorf("the member sent %d JoinGroup requests after Close: it rejoined before leaving", n)
	}
	if n := leaves.Load(); n != 1 {
		t.Errorf("the member sent %d LeaveGroup requests, want 1", n)
	}
	client := &kafka.Client{Addr: kafka.TCP(b.Addrs()...), Timeout: 10 * time.Second}
	dg, err := client.DescribeGroups(ctx, &kafka.DescribeGroupsRequest{GroupIDs: []string{group}})
	if err != nil || len(dg.Groups) != 1 {
		t.Fatalf("describe: %v %+v", err, dg)
	}
	if m := dg.Groups[0].Members; len(m) != 0 {
		t.Errorf("members after Close: %+v", m)
	}
}
