// Package cmdutil holds what every loadtest command shares, the bench and
// the fault harnesses alike: the progress lines on stderr and the --json
// result line on stdout, the context that SIGINT and SIGTERM end, rounding
// of reported figures, and waiting: for a while, or for consumer groups to
// settle.
package cmdutil

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/segmentio/kafka-go"
)

// Stderrf prints a progress line on stderr, after the UTC time of day.
func Stderrf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, time.Now().UTC().Format("15:04:05 ")+format+"\n", args...)
}

// SignalContext is a context that SIGINT or SIGTERM ends.
func SignalContext() (context.Context, context.CancelFunc) {
	return signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
}

// PrintJSON prints v as one JSON line on stdout: a command's --json result.
func PrintJSON(v any) {
	b, err := json.Marshal(v)
	if err != nil {
		fmt.Fprintf(os.Stderr, "loadtest: encode result: %v\n", err)
		return
	}
	fmt.Println(string(b))
}

// Round3 rounds x to three decimals, as results report figures.
func Round3(x float64) float64 { return float64(int64(x*1000+0.5)) / 1000 }

// SleepCtx sleeps for d or until ctx ends; it reports whether ctx is still live.
func SleepCtx(ctx context.Context, d time.Duration) bool {
	select {
	case <-ctx.Done():
		return false
	case <-time.After(d):
		return true
	}
}

// GroupsSettled reports whether every consumer group in ids is Stable with
// exactly members members. The harnesses SIGKILL a processor only when its
// groups are settled: the embedded broker (kfake) never expires a member
// whose JoinGroup answer could not be delivered because it died waiting for
// it, so a kill in the middle of a join would leave a member that holds its
// partitions forever, which a real Kafka coordinator expires after the
// session timeout (see docs/guarantees.md, "Not covered").
func GroupsSettled(ctx context.Context, brokers []string, members int, ids ...string) bool {
	c := &kafka.Client{Addr: kafka.TCP(brokers...), Timeout: 5 * time.Second}
	resp, err := c.DescribeGroups(ctx, &kafka.DescribeGroupsRequest{GroupIDs: ids})
	if err != nil || len(resp.Groups) != len(ids) {
		return false
	}
	for _, g := range resp.Groups {
		if g.Error != nil || g.GroupState != "Stable" || len(g.Members) != members {
			return false
		}
	}
	return true
}

// WaitSettled waits up to limit for GroupsSettled; it reports whether the
// groups settled.
func WaitSettled(ctx context.Context, brokers []string, members int, limit time.Duration, ids ...string) bool {
	deadline := time.Now().Add(limit)
	for !GroupsSettled(ctx, brokers, members, ids...) {
		if time.Now().After(deadline) || !SleepCtx(ctx, 250*time.Millisecond) {
			return false
		}
	}
	return true
}
