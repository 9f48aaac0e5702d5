package gpu

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
)

func (c *Client) unlockInfo() { <-c.infoLock }

func (c *Client) fetchInfo(ctx context.Context, ep *endpoint) (ModelInfo, error) {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.requestTimeout)
	defer cancel()
	req, err := c.newRequest(ctx, http.MethodGet, ep.url+PathInfo, nil)
	if err != nil {
		return ModelInfo{}, err
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return ModelInfo{}, fmt.Errorf("scorer %s: %w", ep.url, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return ModelInfo{}, fmt.Errorf("scorer %s: reading info: %w", ep.url, err)
	}
	if resp.StatusCode != http.StatusOK {
		return ModelInfo{}, classifyStatus(ep, resp.StatusCode, data).err
	}
	var info ModelInfo
	if err := json.Unmarshal(data, &info); err != nil {
		return ModelInfo{}, fmt.Errorf("scorer %s: undecodable info: %w", ep.url, err)
	}
	if info.Protocol != ProtocolVersion {
		return ModelInfo{}, &StatusError{Endpoint: ep.url, Status: resp.StatusCode, Code: CodeVersionMismatch,
			Message: fmt.Sprintf("scorer speaks protocol %q, client speaks %q", info.Protocol, ProtocolVersion)}
	}
	ep.rowPieces.Store(slices.Contains(info.Features, FeatureRowPieces))
	ep.binary.Store(slices.Contains(info.Features, FeatureBinary))
	return info, nil
}

func sameModel(a, b ModelInfo) bool {
	return a.Name == b.Name && a.Architecture == b.Architecture && a.Layers == b.Layers &&
		a.VocabSize == b.VocabSize && a.MaxContext == b.MaxContext && slices.Equal(a.PlaceholderIDs, b.PlaceholderIDs)
}

// Info asks every endpoint for its model and returns it; all reachable
// endpoints must serve the same model (name, architecture, layers, vocab,
// max context, placeholder ids), else it is an error. The answer is cached
// for the info TTL. PolicyVersion is the highest any endpoint reports.
func (c *Client) Info(ctx context.Context) (ModelInfo, error) {
	select {
	case c.infoLock <- struct{}{}:
	case <-ctx.Done():
		return ModelInfo{}, ctx.Err()
	case <-c.ctx.Done():
		return ModelInfo{}, ErrClosed
	}
	defer c.unlockInfo()
	if c.infoOK && (c.cfg.infoTTL <= 0 || time.Since(c.infoAt) < c.cfg.infoTTL) {
		return c.info, nil
	}
	type answer struct {
		info ModelInfo
		err  error
	}
	answers := make([]answer, len(c.eps))
	var wg sync.WaitGroup
	for i, ep := range c.eps {
		wg.Add(1)
		go func() {
			defer wg.Done()
			info, err := c.fetchInfo(ctx, ep)
			answers[i] = answer{info, err}
		}()
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return ModelInfo{}, err
	}
	var ref *ModelInfo
	var refURL string
	var errs []error
	for i, a := range answers {
		if a.err != nil {
			var se *StatusError
			if errors.As(a.err, &se) {
				return ModelInfo{}, a.err
			}
			errs = append(errs, a.err)
			c.cfg.log.Warn().Str("endpoint", c.eps[i].url).Str("error", a.err.Error()).Msg("scorer info unavailable")
			continue
		}
		if ref == nil {
			info := a.info
			ref, refURL = &info, c.eps[i].url
			continue
		}
		if !sameModel(*ref, a.info) {
			return ModelInfo{}, fmt.Errorf("scorer endpoints serve different models: %s has %q (%s, %d layers, vocab %d, max context %d), %s has %q (%s, %d layers, vocab %d, max context %d); point the client at pods of one model",
				refURL, ref.Name, ref.Architecture, ref.Layers, ref.VocabSize, ref.MaxContext,
				c.eps[i].url, a.info.Name, a.info.Architecture, a.info.Layers, a.info.VocabSize, a.info.MaxContext)
		}
		ref.PolicyVersion = max(ref.PolicyVersion, a.info.PolicyVersion)
	}
	if ref == nil {
		return ModelInfo{}, fmt.Errorf("no scorer endpoint answered %s: %w", PathInfo, errors.Join(errs...))
	}
	c.info, c.infoAt, c.infoOK = *ref, time.Now(), true
	return *ref, nil
}
