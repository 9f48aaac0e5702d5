// Package brokertest starts embedded brokers (package broker) for tests:
// Start fails the test when the broker cannot start and closes it when the
// test and its cleanups registered before it have finished.
package brokertest

import (
	"testing"

	"github.com/creditflow/creditflow/internal/broker"
)

// Start starts an embedded broker with opts, closed at the end of the test.
func Start(tb testing.TB, opts ...broker.Option) *broker.Broker {
	tb.Helper()
	b, err := broker.Start(opts...)
	if err != nil {
		tb.Fatalf("starting the embedded broker: %v", err)
	}
	tb.Cleanup(b.Close)
	return b
}
