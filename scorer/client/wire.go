package client

// One request attempt on the wire: encoding the body, sending it, classifying
// the answer, and decoding a 200 into each caller's results.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/creditflow/creditflow/internal/stepgraph"
	"github.com/creditflow/creditflow/scorer"
	"github.com/creditflow/creditflow/scorer/protocol"
)

// wireForm is the form of a request body an endpoint takes and of the
// answer asked for: bit 1 compact score rows (protocol.FeatureRowPieces),
// bit 2 binary bodies (protocol.FeatureBinary), bit 3 the lower-graphs
// attention answer (protocol.FeatureLowerGraphs), bit 4 the binary
// attention request (protocol.FeatureBinaryJobs).
type wireForm int

const (
	formCompact wireForm = 1 << iota
	formBinary
	formLower
	formJobs
)

// formOf is the form of op's requests to ep, from its advertised features;
// lower says whether every item of the request wants lower graphs, binJobs
// whether the jobs have a binary form.
func formOf(op string, ep *endpoint, lower, binJobs bool) wireForm {
	var f wireForm
	if op == "score" && ep.rowPieces.Load() {
		f |= formCompact
	}
	if ep.binary.Load() {
		f |= formBinary
	}
	if op == "attention" && lower && ep.lowerGraphs.Load() {
		f |= formLower
	}
	if op == "attention" && binJobs && ep.binaryJobs.Load() {
		f |= formJobs
	}
	return f
}

// encode writes the request body of items in form.
func (c *Client) encode(op string, items []*item, form wireForm) ([]byte, int, error) {
	tokens := 0
	for _, it := range items {
		tokens += it.tokens
	}
	switch op {
	case "score":
		var sets []scorer.RowSet
		for _, it := range items {
			sets = append(sets, it.sets...)
		}
		var b []byte
		var err error
		if form&formBinary != 0 {
			b, err = protocol.AppendRowsRequest(make([]byte, 0, 64+5*tokens), sets, form&formCompact != 0)
		} else {
			b, err = protocol.AppendScoreRequest(make([]byte, 0, 64+6*tokens), sets, form&formCompact != 0)
		}
		if err != nil {
			return nil, 0, fmt.Errorf("encoding scorer %s request: %w", op, err)
		}
		return b, tokens, nil
	default:
		var jobs []scorer.AttentionJob
		for _, it := range items {
			jobs = append(jobs, it.jobs...)
		}
		var b []byte
		var err error
		if form&formJobs != 0 {
			b, err = protocol.AppendJobsRequest(make([]byte, 0, 256+4*tokens), jobs)
		} else {
			b, err = protocol.AppendAttentionRequest(make([]byte, 0, 256+6*tokens), jobs)
		}
		if err != nil {
			return nil, 0, fmt.Errorf("encoding scorer %s request: %w", op, err)
		}
		return b, tokens, nil
	}
}

func (c *Client) newRequest(ctx context.Context, method, url string, body []byte) (*http.Request, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, rd)
	if err != nil {
		return nil, err
	}
	req.Header.Set(protocol.Header, protocol.Version)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.cfg.tokenFile != nil {
		req.Header.Set("Authorization", "Bearer "+c.cfg.tokenFile.get())
	} else if c.cfg.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.cfg.token)
	}
	return req, nil
}

// answer is a 200 body; binary when it is a binary graphs body, lower when
// a lower-graphs body. buf is the pooled buffer that holds data (release
// gives it back).
type answer struct {
	data   []byte
	binary bool
	lower  bool
	buf    *[]byte
}

// readAnswer reads a response body whole into a buffer of c.answers (give
// it back with release once decoded). A body that states its length is
// read into a buffer of that size at once rather than one grown as it
// arrives: an attention answer is ≈ 86 KB per job of six 30-step layers,
// and growing (and zeroing) a fresh buffer for it would be the largest cost
// of the AttnSR score stage's client (docs/performance-passes.md).
func (c *Client) readAnswer(body io.Reader, length int64) (*[]byte, error) {
	data, _ := c.answers.Get().(*[]byte)
	if data == nil {
		data = new([]byte)
	}
	buf := bytes.NewBuffer((*data)[:0])
	if length > 0 && length <= maxPresizedAnswer {
		buf.Grow(int(length) + bytes.MinRead) // ReadFrom wants MinRead free bytes to see the end
	}
	_, err := buf.ReadFrom(body)
	*data = buf.Bytes()
	return data, err
}

// maxPresizedAnswer bounds the buffer readAnswer sizes from a stated
// Content-Length before reading (a longer body still reads, growing).
const maxPresizedAnswer = 1 << 30

// release gives an answer's buffer back for reuse.
func (c *Client) release(a answer) {
	if a.buf != nil {
		c.answers.Put(a.buf)
	}
}

// attempt sends one request in form to ep and returns the 200 body.
func (c *Client) attempt(ctx context.Context, ep *endpoint, op string, form wireForm, body []byte, tokens int) (answer, *attemptError) {
	actx, cancel := context.WithTimeout(ctx, c.cfg.requestTimeout)
	defer cancel()
	path := protocol.PathScore
	if op == "attention" {
		path = protocol.PathAttention
	}
	req, err := c.newRequest(actx, http.MethodPost, ep.url+path, body)
	if err != nil {
		return answer{}, &attemptError{kind: "protocol", err: fmt.Errorf("scorer %s: building request: %w", ep.url, err)}
	}
	switch {
	case form&formLower != 0:
		req.Header.Set("Accept", protocol.MediaTypeLowerGraphs+", "+protocol.MediaTypeGraphs+", application/json")
	case form&formBinary != 0 && op != "score":
		req.Header.Set("Accept", protocol.MediaTypeGraphs+", application/json")
	}
	if form&formBinary != 0 && op == "score" {
		req.Header.Set("Content-Type", protocol.MediaTypeRows)
	}
	if form&formJobs != 0 {
		req.Header.Set("Content-Type", protocol.MediaTypeJobs)
	}
	ep.outstanding.Add(int64(tokens))
	c.metrics.InFlight.WithLabelValues(ep.url).Inc()
	c.stats.requests.Add(1)
	c.metrics.Requests.WithLabelValues(ep.url, op).Inc()
	start := time.Now()
	defer func() {
		ep.outstanding.Add(-int64(tokens))
		c.metrics.InFlight.WithLabelValues(ep.url).Dec()
		c.metrics.Duration.WithLabelValues(ep.url, op).Observe(time.Since(start).Seconds())
	}()
	resp, err := c.hc.Do(req)
	if err != nil {
		return answer{}, classifyTransport(ctx, actx, ep, err)
	}
	defer resp.Body.Close()
	buf, err := c.readAnswer(resp.Body, resp.ContentLength)
	if err != nil {
		c.answers.Put(buf)
		return answer{}, classifyTransport(ctx, actx, ep, err)
	}
	data := *buf
	if resp.StatusCode == http.StatusOK {
		if v := resp.Header.Get(protocol.Header); v != "" && v != protocol.Version {
			return answer{}, &attemptError{kind: "status", status: resp.StatusCode, err: &scorer.StatusError{Endpoint: ep.url, Status: resp.StatusCode, Code: scorer.CodeVersionMismatch,
				Message: fmt.Sprintf("scorer answers with protocol %q, client speaks %q", v, protocol.Version)}}
		}
		ct := resp.Header.Get("Content-Type")
		return answer{data: data, binary: protocol.IsMediaType(ct, protocol.MediaTypeGraphs), lower: protocol.IsMediaType(ct, protocol.MediaTypeLowerGraphs), buf: buf}, nil
	}
	defer c.answers.Put(buf) // classifyStatus copies what it keeps
	return answer{}, classifyStatus(ep, resp.StatusCode, data)
}

func classifyTransport(ctx, actx context.Context, ep *endpoint, err error) *attemptError {
	if ctx.Err() == nil && actx.Err() != nil {
		return &attemptError{kind: "timeout", retryable: true, err: fmt.Errorf("scorer %s: request timed out: %w", ep.url, err)}
	}
	return &attemptError{kind: "connection", retryable: true, err: fmt.Errorf("scorer %s: %w", ep.url, err)}
}

func classifyStatus(ep *endpoint, status int, data []byte) *attemptError {
	var body protocol.ErrorBody
	if json.Unmarshal(data, &body) != nil || body.Error == "" {
		body = protocol.ErrorBody{Error: strings.TrimSpace(string(data[:min(len(data), 512)]))}
	}
	switch {
	case status >= 500 || status == http.StatusTooManyRequests || status == http.StatusRequestTimeout:
		return &attemptError{kind: "server", retryable: true, status: status, body: body,
			err: fmt.Errorf("scorer %s answered %d %s: %s", ep.url, status, body.Code, body.Error)}
	case (status == http.StatusBadRequest && body.Code != scorer.CodeVersionMismatch) || status == http.StatusRequestEntityTooLarge:
		if status == http.StatusRequestEntityTooLarge && body.Code != scorer.CodeOutOfMemory {
			body.Code = scorer.CodeTooLarge
		}
		return &attemptError{kind: "rejected", status: status, body: body,
			err: &scorer.RejectedError{Code: body.Code, Message: body.Error, ID: body.ID, Endpoint: ep.url, Item: -1}}
	default:
		return &attemptError{kind: "status", status: status, body: body,
			err: &scorer.StatusError{Endpoint: ep.url, Status: status, Code: body.Code, Message: body.Error}}
	}
}

// deliver decodes a 200 body and hands each item its results.
func (c *Client) deliver(op string, items []*item, a answer) error {
	switch op {
	case "score":
		var resp protocol.ScoreResponse
		if err := json.Unmarshal(a.data, &resp); err != nil {
			return fmt.Errorf("undecodable score response: %w", err)
		}
		n := 0
		for _, it := range items {
			n += len(it.sets)
		}
		if len(resp.Results) != n {
			return fmt.Errorf("score response holds %d results for %d sets", len(resp.Results), n)
		}
		k := 0
		outs := make([][]scorer.RowScores, len(items))
		for i, it := range items {
			outs[i] = make([]scorer.RowScores, len(it.sets))
			for j, s := range it.sets {
				w := resp.Results[k]
				if len(w.Scores) != len(s.Rows) {
					return fmt.Errorf("score response set %d holds %d scores for %d rows", k, len(w.Scores), len(s.Rows))
				}
				outs[i][j] = protocol.ScoresFromWire(w)
				outs[i][j].PolicyVersion = resp.PolicyVersion
				k++
			}
		}
		c.metrics.Forwarded.Add(float64(resp.Usage.TokensForwarded))
		c.metrics.RowByRow.Add(float64(resp.Usage.TokensRowByRow))
		c.metrics.Truncations.Add(float64(resp.Usage.Truncations))
		if resp.Usage.Packs > 0 {
			c.metrics.Packs.Add(float64(resp.Usage.Packs))
			c.metrics.MaxPackTokens.Observe(float64(resp.Usage.MaxPackTokens))
		}
		for i, it := range items {
			it.finish(itemResult{scores: outs[i]})
		}
	default:
		return deliverAttention(items, a)
	}
	return nil
}

// deliverAttention decodes an attention answer, K×K or lower graphs, and
// hands each item its graphs in the form it asked for.
func deliverAttention(items []*item, a answer) error {
	n := 0
	for _, it := range items {
		n += len(it.jobs)
	}
	if a.lower {
		resp, err := protocol.DecodeLowerGraphs(a.data)
		if err != nil {
			return fmt.Errorf("undecodable attention response: %w", err)
		}
		if len(resp.Results) != n {
			return fmt.Errorf("attention response holds %d results for %d jobs", len(resp.Results), n)
		}
		k := 0
		for _, it := range items {
			if !it.lower {
				return errors.New("scorer answered lower graphs to a request that did not accept them")
			}
			for _, jb := range it.jobs {
				if err := checkLower(k, resp.Results[k], jb); err != nil {
					return err
				}
				k++
			}
		}
		k = 0
		for _, it := range items {
			it.finish(itemResult{lower: resp.Results[k : k+len(it.jobs)], version: resp.PolicyVersion})
			k += len(it.jobs)
		}
		return nil
	}
	var resp protocol.AttentionResponse
	var err error
	if a.binary {
		resp, err = protocol.DecodeGraphs(a.data)
	} else {
		err = json.Unmarshal(a.data, &resp)
	}
	if err != nil {
		return fmt.Errorf("undecodable attention response: %w", err)
	}
	if len(resp.Results) != n {
		return fmt.Errorf("attention response holds %d results for %d jobs", len(resp.Results), n)
	}
	k := 0
	outs := make([]itemResult, len(items))
	for i, it := range items {
		outs[i].version = resp.PolicyVersion
		for _, jb := range it.jobs {
			g := protocol.GraphsFromWire(resp.Results[k])
			if len(g) != len(jb.Layers) {
				return fmt.Errorf("attention response job %d holds %d graphs for %d layers", k, len(g), len(jb.Layers))
			}
			K := len(jb.Steps)
			for _, sg := range g {
				if len(sg.AA) != K || len(sg.AO) != K {
					return fmt.Errorf("attention response job %d layer %d is not %d×%d", k, sg.Layer, K, K)
				}
			}
			if it.lower { // the same cut a scorer answering lower graphs makes
				lg := make([]scorer.LowerGraph, len(g))
				for l, sg := range g {
					lg[l] = stepgraph.Cut(sg.Layer, sg.AA, sg.AO)
				}
				outs[i].lower = append(outs[i].lower, lg)
			} else {
				outs[i].graphs = append(outs[i].graphs, g)
			}
			k++
		}
	}
	for i, it := range items {
		it.finish(outs[i])
	}
	return nil
}

// checkLower checks job k's lower graphs against the job: one per layer,
// each K×K for the job's K steps.
func checkLower(k int, gs []scorer.LowerGraph, jb scorer.AttentionJob) error {
	if len(gs) != len(jb.Layers) {
		return fmt.Errorf("attention response job %d holds %d graphs for %d layers", k, len(gs), len(jb.Layers))
	}
	K := len(jb.Steps)
	for _, g := range gs {
		if int(g.K) != K {
			return fmt.Errorf("attention response job %d layer %d is not %d×%d", k, g.Layer, K, K)
		}
	}
	return nil
}
