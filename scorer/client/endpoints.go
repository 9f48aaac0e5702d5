package client

// Endpoint balancing and health: the least-loaded pick, consecutive-failure
// counting, and the /healthz probe that brings an endpoint back.

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/creditflow/creditflow/scorer/protocol"
)

type endpoint struct {
	url         string
	outstanding atomic.Int64 // tokens in flight
	healthy     atomic.Bool
	rowPieces   atomic.Bool  // its /v1/info advertises protocol.FeatureRowPieces
	binary      atomic.Bool  // its /v1/info advertises protocol.FeatureBinary
	statistics  atomic.Bool  // its /v1/info advertises protocol.FeatureStatistics
	lowerGraphs atomic.Bool  // its /v1/info advertises protocol.FeatureLowerGraphs
	binaryJobs  atomic.Bool  // its /v1/info advertises protocol.FeatureBinaryJobs
	answered    atomic.Bool  // it has answered /v1/info (the flags above are its)
	removed     atomic.Bool  // dropped from the endpoints (its name no longer resolves to it)
	dns         string       // the followed name it is an address of ("" for a URL given as such)
	infoWarned  atomic.Int64 // when an unanswered /v1/info was last logged as a warning (Unix ns)
	mu          sync.Mutex
	fails       int
	probing     bool
}

// pick chooses the endpoint with the least tokens in flight, preferring
// healthy endpoints not yet tried for this request.
func (c *Client) pick(tried map[*endpoint]bool) *endpoint {
	eps := c.endpoints()
	n := len(eps)
	if n == 0 {
		return nil // a followed name resolved to no address (yet)
	}
	start := int(c.rr.Add(1) % uint64(n))
	for pass := 0; pass < 4; pass++ {
		var best *endpoint
		var bestLoad int64
		for k := 0; k < n; k++ {
			ep := eps[(start+k)%n]
			if pass < 2 && !ep.healthy.Load() {
				continue
			}
			if (pass == 0 || pass == 2) && tried[ep] {
				continue
			}
			load := ep.outstanding.Load()
			if best == nil || load < bestLoad {
				best, bestLoad = ep, load
			}
		}
		if best != nil {
			return best
		}
	}
	return eps[start]
}

func (c *Client) markSuccess(ep *endpoint) {
	ep.mu.Lock()
	ep.fails = 0
	ep.mu.Unlock()
}

// markFailure counts a failure of ep; at UnhealthyAfter in a row, or at
// once when now is set (its /healthz failed), ep leaves the rotation and
// its /healthz is probed until it passes.
func (c *Client) markFailure(ep *endpoint, aerr *attemptError, now bool) {
	ep.mu.Lock()
	defer ep.mu.Unlock()
	ep.fails++
	if (ep.fails < c.cfg.unhealthyAfter && !now) || !ep.healthy.Load() || ep.removed.Load() {
		return
	}
	ep.healthy.Store(false)
	c.metrics.Healthy.WithLabelValues(ep.url).Set(0)
	c.cfg.log.Warn().Str("endpoint", ep.url).Int("failures", ep.fails).Str("error", aerr.Error()).
		Msg("scorer endpoint marked unhealthy; probing /healthz")
	if !ep.probing {
		ep.probing = true
		c.wg.Add(1)
		go c.probe(ep)
	}
}

// probe polls ep's /healthz until it answers 200 and, when the model is
// known, reports the same model; then ep takes work again.
func (c *Client) probe(ep *endpoint) {
	defer c.wg.Done()
	for {
		if !sleepCtx(c.ctx, c.cfg.probeInterval) {
			return
		}
		if ep.removed.Load() {
			return // no longer an address of its name
		}
		if err := c.check(ep); err != nil {
			c.cfg.log.Debug().Str("endpoint", ep.url).Str("error", err.Error()).Msg("scorer endpoint still unhealthy")
			continue
		}
		ep.mu.Lock()
		ep.fails = 0
		ep.probing = false
		ep.healthy.Store(true)
		ep.mu.Unlock()
		c.metrics.Healthy.WithLabelValues(ep.url).Set(1)
		c.cfg.log.Info().Str("endpoint", ep.url).Msg("scorer endpoint healthy again")
		return
	}
}

// checkHealth asks ep's /healthz: nil when it answers 200.
func (c *Client) checkHealth(ep *endpoint) error {
	ctx, cancel := context.WithTimeout(c.ctx, min(c.cfg.requestTimeout, 5*time.Second))
	defer cancel()
	req, err := c.newRequest(ctx, http.MethodGet, ep.url+protocol.PathHealth, nil)
	if err != nil {
		return err
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return err
	}
	io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("scorer %s: %s answered %d", ep.url, protocol.PathHealth, resp.StatusCode)
	}
	return nil
}

func (c *Client) check(ep *endpoint) error {
	if err := c.checkHealth(ep); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(c.ctx, min(c.cfg.requestTimeout, 5*time.Second))
	defer cancel()
	select {
	case c.infoLock <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	known, ref := c.infoOK, c.info
	c.unlockInfo()
	if !known {
		return nil
	}
	got, err := c.fetchInfo(ctx, ep)
	if err != nil {
		return err
	}
	if !ref.SameModel(got) {
		return fmt.Errorf("endpoint now serves model %q (%s, %d layers), not %q", got.Name, got.Architecture, got.Layers, ref.Name)
	}
	return nil
}
