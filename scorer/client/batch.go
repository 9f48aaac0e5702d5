package client

// Coalescing: callers' work items wait in a batcher per op until they fill
// the token budget or MaxWait passes, then go out as one request.

import (
	"context"
	"time"

	"github.com/creditflow/creditflow/scorer"
)

// item is one caller's chunk of work waiting in a batcher.
type item struct {
	ctx    context.Context
	tokens int
	sets   []scorer.RowSet
	jobs   []scorer.AttentionJob
	lower  bool            // attention: the caller wants scorer.LowerGraphs
	done   chan itemResult // buffered 1
}

type itemResult struct {
	scores  []scorer.RowScores
	graphs  [][]scorer.StepGraph
	lower   [][]scorer.LowerGraph // when the item asked for them
	version *int64                // attention: the policy version the pod reported
	err     error
}

func (it *item) units() int { return max(len(it.sets), len(it.jobs)) }

func (it *item) finish(r itemResult) {
	select {
	case it.done <- r:
	default:
	}
}

// batcher coalesces items into requests of at most the token budget. A
// batch is sent when it reaches the budget, or when MaxWait has passed since
// its first item and a request slot is free; while no slot is free it keeps
// growing.
func (c *Client) batcher(op string, in chan *item) {
	defer c.wg.Done()
	var (
		batch  []*item
		tokens int
		timer  *time.Timer
		timerC <-chan time.Time
		slotC  chan struct{} // c.slots while the batch is due, else nil
	)
	// flush sends the batch; held says whether a slot is already taken.
	flush := func(held bool) {
		if timer != nil {
			timer.Stop()
		}
		timerC, slotC = nil, nil
		if len(batch) == 0 {
			if held {
				<-c.slots
			}
			return
		}
		b, t := batch, tokens
		batch, tokens = nil, 0
		c.stats.batches.Add(1)
		c.stats.items.Add(int64(len(b)))
		c.metrics.Fill.WithLabelValues(op).Observe(float64(t) / float64(c.cfg.budget))
		c.metrics.Callers.WithLabelValues(op).Observe(float64(len(b)))
		c.wg.Add(1)
		go func() {
			defer c.wg.Done()
			if !held {
				select {
				case c.slots <- struct{}{}:
				case <-c.ctx.Done():
					for _, it := range b {
						it.finish(itemResult{err: ErrClosed})
					}
					return
				}
			}
			defer func() { <-c.slots }()
			c.send(op, b)
		}()
	}
	for {
		select {
		case it := <-in:
			if len(batch) > 0 && tokens+it.tokens > c.cfg.budget {
				flush(false)
			}
			batch = append(batch, it)
			tokens += it.tokens
			switch {
			case tokens >= c.cfg.budget:
				flush(false)
			case c.cfg.maxWait == 0:
				slotC = c.slots
			case timerC == nil && slotC == nil:
				if timer == nil {
					timer = time.NewTimer(c.cfg.maxWait)
				} else {
					timer.Reset(c.cfg.maxWait)
				}
				timerC = timer.C
			}
		case <-timerC:
			timerC = nil
			slotC = c.slots
		case slotC <- struct{}{}:
			flush(true)
		case <-c.ctx.Done():
			for _, it := range batch {
				it.finish(itemResult{err: ErrClosed})
			}
			return
		}
	}
}

// submit queues items and waits for all of them.
func (c *Client) submit(ctx context.Context, q chan *item, items []*item) ([]itemResult, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	for _, it := range items {
		select {
		case q <- it:
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-c.ctx.Done():
			return nil, ErrClosed
		}
	}
	out := make([]itemResult, len(items))
	for i, it := range items {
		select {
		case r := <-it.done:
			if r.err != nil {
				return nil, r.err
			}
			out[i] = r
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-c.ctx.Done():
			return nil, ErrClosed
		}
	}
	return out, nil
}
