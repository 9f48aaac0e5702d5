package client

// Model info: asking the endpoints which model they serve, checking they
// agree, and caching the answer.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/creditflow/creditflow/scorer"
	"github.com/creditflow/creditflow/scorer/protocol"
)

func (c *Client) unlockInfo() { <-c.infoLock }

func (c *Client) fetchInfo(ctx context.Context, ep *endpoint) (scorer.ModelInfo, error) {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.requestTimeout)
	defer cancel()
	req, err := c.newRequest(ctx, http.MethodGet, ep.url+protocol.PathInfo, nil)
	if err != nil {
		return scorer.ModelInfo{}, err
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return scorer.ModelInfo{}, fmt.Errorf("scorer %s: %w", ep.url, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return scorer.ModelInfo{}, fmt.Errorf("scorer %s: reading info: %w", ep.url, err)
	}
	if resp.StatusCode != http.StatusOK {
		return scorer.ModelInfo{}, classifyStatus(ep, resp.StatusCode, data).err
	}
	var info scorer.ModelInfo
	if err := json.Unmarshal(data, &info); err != nil {
		return scorer.ModelInfo{}, fmt.Errorf("scorer %s: undecodable info: %w", ep.url, err)
	}
	if info.Protocol != protocol.Version {
		return scorer.ModelInfo{}, &scorer.StatusError{Endpoint: ep.url, Status: resp.StatusCode, Code: scorer.CodeVersionMismatch,
			Message: fmt.Sprintf("scorer speaks protocol %q, client speaks %q", info.Protocol, protocol.Version)}
	}
	ep.rowPieces.Store(slices.Contains(info.Features, protocol.FeatureRowPieces))
	ep.binary.Store(slices.Contains(info.Features, protocol.FeatureBinary))
	ep.statistics.Store(slices.Contains(info.Features, protocol.FeatureStatistics))
	ep.lowerGraphs.Store(slices.Contains(info.Features, protocol.FeatureLowerGraphs))
	ep.binaryJobs.Store(slices.Contains(info.Features, protocol.FeatureBinaryJobs))
	ep.answered.Store(true)
	return info, nil
}

// Info asks every endpoint for its model and returns it; all reachable
// endpoints must serve the same model (name, architecture, layers, vocab,
// max context, placeholder ids), else it is an error. The answer is cached
// for the info TTL. PolicyVersion is the highest any endpoint reports.
func (c *Client) Info(ctx context.Context) (scorer.ModelInfo, error) {
	select {
	case c.infoLock <- struct{}{}:
	case <-ctx.Done():
		return scorer.ModelInfo{}, ctx.Err()
	case <-c.ctx.Done():
		return scorer.ModelInfo{}, ErrClosed
	}
	defer c.unlockInfo()
	if c.infoOK && (c.cfg.infoTTL <= 0 || time.Since(c.infoAt) < c.cfg.infoTTL) {
		return c.info, nil
	}
	type answer struct {
		info scorer.ModelInfo
		err  error
	}
	eps := c.endpoints()
	if len(eps) == 0 {
		return scorer.ModelInfo{}, fmt.Errorf("no scorer endpoint: %s resolved to no address", c.dnsNames())
	}
	answers := make([]answer, len(eps))
	var wg sync.WaitGroup
	for i, ep := range eps {
		wg.Add(1)
		go func() {
			defer wg.Done()
			info, err := c.fetchInfo(ctx, ep)
			answers[i] = answer{info, err}
		}()
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return scorer.ModelInfo{}, err
	}
	var ref *scorer.ModelInfo
	var refURL string
	var errs []error
	for i, a := range answers {
		if a.err != nil {
			var se *scorer.StatusError
			if errors.As(a.err, &se) {
				return scorer.ModelInfo{}, a.err
			}
			errs = append(errs, a.err)
			// A caller waiting for pods to start asks every second: warn
			// once a minute per endpoint, the rest at debug level.
			ev := c.cfg.log.Debug()
			if now := time.Now().UnixNano(); now-eps[i].infoWarned.Load() >= int64(time.Minute) {
				eps[i].infoWarned.Store(now)
				ev = c.cfg.log.Warn()
			}
			ev.Str("endpoint", eps[i].url).Str("error", a.err.Error()).Msg("scorer info unavailable")
			continue
		}
		if ref == nil {
			info := a.info
			ref, refURL = &info, eps[i].url
			continue
		}
		if !ref.SameModel(a.info) {
			return scorer.ModelInfo{}, fmt.Errorf("scorer endpoints serve different models: %s has %q (%s, %d layers, vocab %d, max context %d), %s has %q (%s, %d layers, vocab %d, max context %d); point the client at pods of one model",
				refURL, ref.Name, ref.Architecture, ref.Layers, ref.VocabSize, ref.MaxContext,
				eps[i].url, a.info.Name, a.info.Architecture, a.info.Layers, a.info.VocabSize, a.info.MaxContext)
		}
		ref.PolicyVersion = max(ref.PolicyVersion, a.info.PolicyVersion)
	}
	if ref == nil {
		return scorer.ModelInfo{}, fmt.Errorf("no scorer endpoint answered %s: %w", protocol.PathInfo, errors.Join(errs...))
	}
	c.info, c.infoAt, c.infoOK = *ref, time.Now(), true
	return *ref, nil
}

// ErrNoStatistics is returned by ScoreRows for a set that asks for a
// statistic other than logprob (scorer.StatEntropy, scorer.StatKL) when a scorer
// endpoint does not advertise protocol.FeatureStatistics in its /v1/info:
// it would answer log-probabilities. Upgrade the scorer pods (or the
// creditflow scorer) to a version that computes them, or score logprob.
var ErrNoStatistics = errors.New("scorer does not compute the entropy and kl statistics (no \"statistics\" feature in its /v1/info); upgrade the scorer pods or use the logprob statistic")

// checkStatistics returns ErrNoStatistics, naming the endpoint, unless every
// endpoint that has answered /v1/info advertises protocol.FeatureStatistics
// (it asks them first, through the cached Info).
func (c *Client) checkStatistics(ctx context.Context, stat string) error {
	if _, err := c.Info(ctx); err != nil {
		return err
	}
	for _, ep := range c.endpoints() {
		if ep.answered.Load() && !ep.statistics.Load() {
			return fmt.Errorf("%w (endpoint %s, statistic %s)", ErrNoStatistics, ep.url, stat)
		}
	}
	return nil
}
