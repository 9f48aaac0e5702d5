package main

import (
	"context"
	"fmt"
	"syscall"
	"time"

	"github.com/creditflow/creditflow/harness/demo"
	"github.com/creditflow/creditflow/schemas"
	"github.com/creditflow/creditflow/vocab"
)

// validateSample decodes a sample and checks it as a trainer needs it.
func validateSample(b []byte) error {
	s, err := schemas.Samples().Decode(b)
	if err != nil {
		return err
	}
	return demo.Check(s)
}

// refResult is the output of the uninterrupted reference run.
type refResult struct {
	samples map[string][]byte
	seconds float64
	dead    int
}

// runReference runs w through one uninterrupted `creditflow run` (topics
// "ref.*", group "ref", the in-process scorer) and returns every sample's
// bytes by trajectory id. Every copy of a sample in the reference must be
// byte-identical and every expected sample must appear.
func runReference(ctx context.Context, e *env, w workload, method vocab.Method, timeout time.Duration) (refResult, error) {
	start := time.Now()
	t := topicsFor("ref")
	if err := e.createTopics(ctx, t); err != nil {
		return refResult{}, err
	}
	p := newProc("reference", e.bin, e.dir, processorArgs(e.brokers, "ref", t, method, nil)...)
	if err := p.start(); err != nil {
		return refResult{}, err
	}
	defer p.stop(syscall.SIGTERM, 40*time.Second)
	col := newCollector(e, t, w)
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go col.run(cctx)
	if err := e.produce(ctx, w, t.Trajectories, 0, nil); err != nil {
		return refResult{}, err
	}
	if !col.waitFor(ctx, w.expected(), start.Add(timeout)) {
		seen, _ := col.progress()
		return refResult{}, fmt.Errorf("reference run: %d of %d samples after %v (processor: %s; log %s)",
			seen, w.expected(), time.Since(start).Round(time.Second), p.lastExit(), p.logf)
	}
	secs := time.Since(start).Seconds()
	ref, differ := col.reference()
	if len(differ) > 0 {
		return refResult{}, fmt.Errorf("reference run: copies of %d samples differ from each other (e.g. %s): the pipeline is not deterministic", len(differ), differ[0])
	}
	dead, _ := col.deadLetters()
	return refResult{samples: ref, seconds: secs, dead: dead}, nil
}
