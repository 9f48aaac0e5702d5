package demo

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"
)

// runWithin runs Run and fails the test when it has not returned after limit.
func runWithin(t *testing.T, limit time.Duration, o Options) (Summary, error) {
	t.Helper()
	type result struct {
		s   Summary
		err error
	}
	done := make(chan result, 1)
	go func() { s, err := Run(context.Background(), o); done <- result{s, err} }()
	select {
	case r := <-done:
		return r.s, r.err
	case <-time.After(limit):
		t.Fatalf("Run has not returned after %v", limit)
		return Summary{}, nil
	}
}

// TestRunRefusesBadOptionsAtOnce: options a run cannot work with are
// refused before anything starts (no broker, no scorer), naming the flag;
// a bad --method, --direction or --lapo-statistic once hung the demo.
func TestRunRefusesBadOptionsAtOnce(t *testing.T) {
	for flag, set := range map[string]func(*Options){
		"--method":         func(o *Options) { o.Method = "bogus" },
		"--direction":      func(o *Options) { o.Direction = "bogus" },
		"--lapo-statistic": func(o *Options) { o.LAPOStatistic = "bogus" },
		"--groups":         func(o *Options) { o.Groups = 0 },
		"--group-size":     func(o *Options) { o.GroupSize = 0 },
		"--partitions":     func(o *Options) { o.Partitions = 0 },
		"--scorers":        func(o *Options) { o.Scorers = 0 },
		"--bad":            func(o *Options) { o.Bad = -1 },
		"--max-ahead":      func(o *Options) { o.MaxAhead = -1 },
		"eps_r":            func(o *Options) { o.Credit.EpsR = 0 },
	} {
		o := Defaults()
		set(&o)
		start := time.Now()
		_, err := runWithin(t, 10*time.Second, o)
		if err == nil || !strings.Contains(err.Error(), flag) {
			t.Errorf("%s: error %v, want one naming %s", flag, err, flag)
		}
		if d := time.Since(start); d > time.Second {
			t.Errorf("%s: refused after %v; want before anything starts", flag, d)
		}
	}
}

// TestRunReturnsOnAnEarlyError: an error after the scorer servers have
// started (here: brokers that refuse connections) ends the run; the
// servers, which stop on cancellation, are stopped before Run waits for
// them.
func TestRunReturnsOnAnEarlyError(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	o := Defaults()
	o.Brokers = []string{addr}
	if _, err := runWithin(t, 60*time.Second, o); err == nil {
		t.Fatal("a run on brokers that refuse connections succeeded")
	}
}
