package client

// Retries: one coalesced request is tried on endpoints in turn with
// exponential backoff and full jitter; rejections reach only the caller at
// fault, and a 413 splits the work.

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/creditflow/creditflow/scorer"
	"github.com/creditflow/creditflow/scorer/protocol"
)

// attemptError classifies a failed attempt.
type attemptError struct {
	kind      string // connection, timeout, server, rejected, status, protocol
	retryable bool
	err       error
	body      protocol.ErrorBody
	status    int
}

func (e *attemptError) Error() string { return e.err.Error() }

func (e *attemptError) Unwrap() error { return e.err }

// rejection is a *scorer.RejectedError on its way to a caller, with the work
// item it belongs to: shiftItem turns its Item, an index within that item,
// into one within the caller's call.
type rejection struct {
	*scorer.RejectedError
	chunk *item
}

func (r *rejection) Unwrap() error { return r.RejectedError }

// send runs one coalesced request with retries and delivers the results.
func (c *Client) send(op string, items []*item) {
	live := items[:0:0]
	for _, it := range items {
		if it.ctx.Err() == nil {
			live = append(live, it)
		} else {
			it.finish(itemResult{err: it.ctx.Err()})
		}
	}
	items = live
	if len(items) == 0 {
		return
	}
	// An attention batch may take the lower-graphs answer when every item
	// wants its graphs in that form.
	lower := op == "attention"
	var jobs []scorer.AttentionJob
	for _, it := range items {
		lower = lower && it.lower
		jobs = append(jobs, it.jobs...)
	}
	binJobs := op == "attention" && protocol.JobsFitBinary(jobs)
	ctx, cancel := context.WithCancel(c.ctx)
	defer cancel()
	var remaining atomic.Int64
	remaining.Store(int64(len(items)))
	for _, it := range items {
		stop := context.AfterFunc(it.ctx, func() {
			if remaining.Add(-1) == 0 {
				cancel()
			}
		})
		defer stop()
	}

	// The request body in each form an endpoint may take (wireForm), each
	// encoded when first needed.
	var bodies [16][]byte
	tokens := 0
	tried := map[*endpoint]bool{}
	var last *attemptError
	for attempt := 0; attempt < c.cfg.retry.MaxAttempts; attempt++ {
		if attempt > 0 {
			c.stats.retries.Add(1)
			c.metrics.Retries.WithLabelValues(op).Inc()
			if !sleepCtx(ctx, c.backoff(attempt)) {
				break
			}
		}
		ep := c.pick(tried)
		if ep == nil {
			last = &attemptError{kind: "connection", retryable: true,
				err: fmt.Errorf("no scorer endpoint: %s resolved to no address", c.dnsNames())}
			continue
		}
		tried[ep] = true
		form := formOf(op, ep, lower, binJobs)
		if bodies[form] == nil {
			b, n, err := c.encode(op, items, form)
			if err != nil {
				for _, it := range items {
					it.finish(itemResult{err: err})
				}
				return
			}
			bodies[form], tokens = b, n
		}
		raw, aerr := c.attempt(ctx, ep, op, form, bodies[form], tokens)
		if aerr == nil {
			derr := c.deliver(op, items, raw) // copies what it keeps
			c.release(raw)
			if derr != nil {
				aerr = &attemptError{kind: "protocol", retryable: true, err: fmt.Errorf("scorer %s: %w", ep.url, derr)}
			} else {
				c.markSuccess(ep)
				return
			}
		}
		c.metrics.Errors.WithLabelValues(ep.url, op, aerr.kind).Inc()
		if ctx.Err() != nil {
			break
		}
		if !aerr.retryable {
			c.refuse(op, items, ep, aerr)
			return
		}
		last = aerr
		c.markFailure(ep, aerr, false)
	}
	var final error
	switch {
	case c.ctx.Err() != nil:
		final = ErrClosed
	case ctx.Err() != nil:
		final = context.Canceled // every caller has gone; they already returned
	default:
		final = fmt.Errorf("%w: %s request failed after %d attempts over %d endpoints: %w", ErrUnavailable, op, c.cfg.retry.MaxAttempts, len(tried), last)
	}
	for _, it := range items {
		if err := it.ctx.Err(); err != nil {
			it.finish(itemResult{err: err})
		} else {
			it.finish(itemResult{err: final})
		}
	}
}

// refuse handles a non-retryable answer: a rejection reaches only the
// callers whose input caused it; the rest is resent.
func (c *Client) refuse(op string, items []*item, ep *endpoint, aerr *attemptError) {
	if aerr.kind != "rejected" {
		for _, it := range items {
			it.finish(itemResult{err: aerr.err})
		}
		return
	}
	if len(items) == 1 && aerr.status == http.StatusRequestEntityTooLarge && items[0].units() > 1 {
		c.splitItem(op, items[0])
		return
	}
	if len(items) == 1 {
		rej := &scorer.RejectedError{Code: aerr.body.Code, Message: aerr.body.Error, ID: aerr.body.ID, Endpoint: ep.url, Item: -1}
		if rej.Code == "" {
			rej.Code = scorer.CodeBadRequest
		}
		if aerr.body.Item != nil {
			rej.Item = *aerr.body.Item
		} else if items[0].units() == 1 {
			// The request held one set or job: that is the one at fault.
			rej.Item = 0
			if len(items[0].sets) == 1 {
				rej.ID = items[0].sets[0].ID
			} else {
				rej.ID = items[0].jobs[0].ID
			}
		}
		items[0].finish(itemResult{err: &rejection{rej, items[0]}})
		return
	}
	// Several callers: find the culprit from the item index, else split.
	if aerr.body.Item != nil && aerr.status == http.StatusBadRequest {
		idx := *aerr.body.Item
		for k, it := range items {
			if idx < it.units() {
				rej := &scorer.RejectedError{Code: scorer.CodeBadRequest, Message: aerr.body.Error, ID: aerr.body.ID, Endpoint: ep.url, Item: idx}
				it.finish(itemResult{err: &rejection{rej, it}})
				rest := slices.Concat(items[:k], items[k+1:])
				c.send(op, rest)
				return
			}
			idx -= it.units()
		}
	}
	half := len(items) / 2
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); c.send(op, items[:half]) }()
	go func() { defer wg.Done(); c.send(op, items[half:]) }()
	wg.Wait()
}

// splitItem sends the two halves of one caller's work separately (after a
// 413) and hands the caller the joined results, or the first error.
func (c *Client) splitItem(op string, it *item) {
	half := it.units() / 2
	parts := [2]*item{
		{ctx: it.ctx, done: make(chan itemResult, 1)},
		{ctx: it.ctx, done: make(chan itemResult, 1)},
	}
	if op == "score" {
		parts[0].sets, parts[1].sets = it.sets[:half], it.sets[half:]
	} else {
		parts[0].jobs, parts[1].jobs = it.jobs[:half], it.jobs[half:]
	}
	for _, p := range parts {
		for _, s := range p.sets {
			p.tokens += s.TokenCount()
		}
		for _, j := range p.jobs {
			p.tokens += len(j.Tokens)
		}
	}
	var wg sync.WaitGroup
	for _, p := range parts {
		wg.Add(1)
		go func() { defer wg.Done(); c.send(op, []*item{p}) }()
	}
	wg.Wait()
	var joined itemResult
	for k, p := range parts {
		r := <-p.done
		if r.err != nil {
			var rej *rejection
			if errors.As(r.err, &rej) && rej.chunk == p {
				cp := *rej.RejectedError
				if cp.Item >= 0 {
					cp.Item += k * half
				}
				r.err = &rejection{&cp, it}
			}
			it.finish(itemResult{err: r.err})
			return
		}
		joined.scores = append(joined.scores, r.scores...)
		joined.graphs = append(joined.graphs, r.graphs...)
	}
	it.finish(joined)
}

func (c *Client) backoff(attempt int) time.Duration {
	d := c.cfg.retry.BaseBackoff << (attempt - 1)
	if d > c.cfg.retry.MaxBackoff || d <= 0 {
		d = c.cfg.retry.MaxBackoff
	}
	return time.Duration(rand.Int64N(int64(d) + 1))
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
