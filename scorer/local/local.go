package local

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/creditflow/creditflow/scorer"
	"github.com/creditflow/creditflow/scorer/cpumodel"
	"github.com/creditflow/creditflow/scorer/internal/scorermetrics"
	"github.com/creditflow/creditflow/scorer/protocol"
	"github.com/prometheus/client_golang/prometheus"
)

// Scorer is the in-process reference scorer: it runs a cpumodel.Model in this
// process, with the guarantees of the package. ScoreRows passes all rows of
// one call to the model in a single call; Swap replaces the model (a new
// checkpoint of the same model) atomically.
type Scorer struct {
	cur     atomic.Pointer[localModel]
	sem     chan struct{}
	metrics *localMetrics
}

// localModel is one loaded model and what Info reports about it.
type localModel struct {
	m    *cpumodel.Model
	info scorer.ModelInfo
}

// Option configures a Scorer.
type Option func(*config)

type config struct {
	policyVersion int64
	maxConcurrent int
	reg           prometheus.Registerer
	inProcess     bool
}

// WithPolicyVersion sets the policy version reported by Info (default -1:
// unknown, weights that were never announced as a policy version).
func WithPolicyVersion(v int64) Option {
	return func(c *config) { c.policyVersion = v }
}

// WithMaxConcurrent bounds the model calls running at once (default GOMAXPROCS).
func WithMaxConcurrent(n int) Option {
	return func(c *config) {
		if n > 0 {
			c.maxConcurrent = n
		}
	}
}

// WithRegisterer registers the scorer's metrics as a scorer server's
// (creditflow_scorer_local_tokens_forwarded_total, …_row_by_row_total,
// …_truncations_total, creditflow_scorer_local_model_duration_seconds{op})
// with reg: the names a scorer pod exports.
func WithRegisterer(reg prometheus.Registerer) Option {
	return func(c *config) { c.reg, c.inProcess = reg, false }
}

// WithInProcessRegisterer registers the scorer's metrics under the names a
// processor's scorer client exports (creditflow_scorer_tokens_forwarded_total,
// …_row_by_row_total, creditflow_scorer_truncations_total and
// creditflow_scorer_request_duration_seconds{endpoint="in-process",op}), for
// a processor that scores in-process: its dashboard panels are the same as
// with remote scorers.
func WithInProcessRegisterer(reg prometheus.Registerer) Option {
	return func(c *config) { c.reg, c.inProcess = reg, true }
}

type localMetrics struct {
	forwarded   prometheus.Counter
	rowByRow    prometheus.Counter
	truncations prometheus.Counter
	duration    *prometheus.HistogramVec
	endpoint    string // in-process: the endpoint label of duration
}

// observe records the duration of one model call of op.
func (m *localMetrics) observe(op string, start time.Time) {
	if m.endpoint != "" {
		m.duration.WithLabelValues(m.endpoint, op).Observe(time.Since(start).Seconds())
		return
	}
	m.duration.WithLabelValues(op).Observe(time.Since(start).Seconds())
}

func newLocalMetrics(reg prometheus.Registerer, inProcess bool) *localMetrics {
	if inProcess {
		c := scorermetrics.NewClient(nil) // the client's definitions, so the names and help match
		m := &localMetrics{forwarded: c.Forwarded, rowByRow: c.RowByRow, truncations: c.Truncations, duration: c.Duration, endpoint: "in-process"}
		if reg != nil {
			m.forwarded = scorermetrics.Shared(reg, m.forwarded)
			m.rowByRow = scorermetrics.Shared(reg, m.rowByRow)
			m.truncations = scorermetrics.Shared(reg, m.truncations)
			m.duration = scorermetrics.Shared(reg, m.duration)
		}
		return m
	}
	m := &localMetrics{
		forwarded: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "creditflow_scorer_local_tokens_forwarded_total",
			Help: "Tokens forwarded through the model by the in-process scorer (with prefix sharing).",
		}),
		rowByRow: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "creditflow_scorer_local_tokens_row_by_row_total",
			Help: "Tokens a row-by-row computation without prefix sharing would have forwarded.",
		}),
		truncations: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "creditflow_scorer_local_truncations_total",
			Help: "Rows whose context was cut from the left to fit the model's max context.",
		}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "creditflow_scorer_local_model_duration_seconds",
			Help:    "Duration of model calls in the in-process scorer, by op (score, attention).",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 18),
		}, []string{"op"}),
	}
	if reg != nil {
		m.forwarded = scorermetrics.Shared(reg, m.forwarded)
		m.rowByRow = scorermetrics.Shared(reg, m.rowByRow)
		m.truncations = scorermetrics.Shared(reg, m.truncations)
		m.duration = scorermetrics.Shared(reg, m.duration)
	}
	return m
}

// New wraps m as a scorer.Scorer.
func New(m *cpumodel.Model, opts ...Option) *Scorer {
	cfg := config{maxConcurrent: runtime.GOMAXPROCS(0), policyVersion: -1}
	for _, o := range opts {
		o(&cfg)
	}
	l := &Scorer{
		sem:     make(chan struct{}, cfg.maxConcurrent),
		metrics: newLocalMetrics(cfg.reg, cfg.inProcess),
	}
	l.cur.Store(&localModel{m: m, info: modelInfo(m, cfg.policyVersion)})
	return l
}

func modelInfo(m *cpumodel.Model, version int64) scorer.ModelInfo {
	mi := m.Info()
	return scorer.ModelInfo{
		Protocol:       protocol.Version,
		Name:           mi.Name,
		Architecture:   mi.Architecture,
		Layers:         mi.Layers,
		VocabSize:      mi.VocabSize,
		MaxContext:     mi.MaxContext,
		PolicyVersion:  version,
		PlaceholderIDs: append([]int32(nil), mi.PlaceholderIDs...),
		Features:       []string{scorer.FeatureStatistics},
	}
}

// Swap makes m, the weights of policy version, the model of every call that
// starts from now on; calls already running finish on the previous one. m
// must be a checkpoint of the same model: same architecture, layers,
// vocabulary, max context and placeholder ids (clients require that of all
// pods; the reported name stays the first model's). Else Swap returns an
// error and keeps the current model.
func (l *Scorer) Swap(m *cpumodel.Model, version int64) error {
	old := l.cur.Load()
	next := modelInfo(m, version)
	next.Name = old.info.Name
	if !old.info.SameModel(next) {
		return fmt.Errorf("checkpoint of policy version %d is not the served model: %s, %d layers, vocab %d, max context %d (serving %s, %d layers, vocab %d, max context %d)",
			version, next.Architecture, next.Layers, next.VocabSize, next.MaxContext,
			old.info.Architecture, old.info.Layers, old.info.VocabSize, old.info.MaxContext)
	}
	l.cur.Store(&localModel{m: m, info: next})
	return nil
}

// PolicyVersion is the policy version of the weights new calls use now
// (-1: never announced as a version).
func (l *Scorer) PolicyVersion() int64 { return l.cur.Load().info.PolicyVersion }

// Info reports the model; it never fails.
func (l *Scorer) Info(ctx context.Context) (scorer.ModelInfo, error) {
	cur := l.cur.Load()
	info := cur.info
	info.PlaceholderIDs = append([]int32(nil), cur.info.PlaceholderIDs...)
	info.Features = append([]string(nil), cur.info.Features...)
	return info, nil
}

func (l *Scorer) acquire(ctx context.Context) error {
	select {
	case l.sem <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (l *Scorer) release() { <-l.sem }

// ScoreRows scores all rows of all logprob sets in one model call and each
// set of another statistic (scorer.StatEntropy, scorer.StatKL) in one of its
// own, and reports the tokens it cost.
//
// Every RowScores carries the policy version of the weights that computed it.
func (l *Scorer) ScoreRows(ctx context.Context, sets []scorer.RowSet) ([]scorer.RowScores, scorer.Usage, error) {
	cur := l.cur.Load()
	sets, err := expandSets(sets)
	if err != nil {
		return nil, scorer.Usage{}, err
	}
	if err := validateSets(cur.info, sets); err != nil {
		return nil, scorer.Usage{}, err
	}
	if err := ctx.Err(); err != nil {
		return nil, scorer.Usage{}, err
	}
	var lp []scorer.RowSet // the logprob sets, in order
	for _, s := range sets {
		if scorer.IsLogProb(s.Statistic) {
			lp = append(lp, s)
		}
	}
	if len(lp) == len(sets) {
		return l.scoreLogProb(ctx, cur, sets)
	}
	out := make([]scorer.RowScores, len(sets))
	var usage scorer.Usage
	if len(lp) > 0 {
		res, u, err := l.scoreLogProb(ctx, cur, lp)
		if err != nil {
			return nil, scorer.Usage{}, err
		}
		usage = addUsage(usage, u)
		k := 0
		for i, s := range sets {
			if scorer.IsLogProb(s.Statistic) {
				out[i] = res[k]
				k++
			}
		}
	}
	for i, s := range sets {
		if scorer.IsLogProb(s.Statistic) {
			continue
		}
		r, u, err := l.scoreStatistic(ctx, cur, s)
		if err != nil {
			return nil, scorer.Usage{}, err
		}
		usage = addUsage(usage, u)
		out[i] = r
	}
	return out, usage, nil
}

func addUsage(a, b scorer.Usage) scorer.Usage {
	return scorer.Usage{TokensForwarded: a.TokensForwarded + b.TokensForwarded,
		TokensRowByRow: a.TokensRowByRow + b.TokensRowByRow, Truncations: a.Truncations + b.Truncations}
}

// scoreStatistic answers one validated set of the entropy or kl statistic
// (cpumodel.ScoreRowsStatistic: rows one by one, no prefix sharing); its
// truncations count every context cut, the reference contexts' too.
func (l *Scorer) scoreStatistic(ctx context.Context, cur *localModel, s scorer.RowSet) (scorer.RowScores, scorer.Usage, error) {
	if err := l.acquire(ctx); err != nil {
		return scorer.RowScores{}, scorer.Usage{}, err
	}
	start := time.Now()
	scores, u, err := cur.m.ScoreRowsStatistic(s.Rows, s.Statistic)
	l.metrics.observe("score", start)
	l.release()
	if err != nil {
		return scorer.RowScores{}, scorer.Usage{}, fmt.Errorf("model scoring the %s statistic of set %q: %w", s.Statistic, s.ID, err)
	}
	if len(scores) != len(s.Rows) {
		return scorer.RowScores{}, scorer.Usage{}, fmt.Errorf("model returned %d scores for %d rows", len(scores), len(s.Rows))
	}
	l.metrics.forwarded.Add(float64(u.TokensForwarded))
	l.metrics.rowByRow.Add(float64(u.TokensRowByRow))
	l.metrics.truncations.Add(float64(u.Truncations))
	version := cur.info.PolicyVersion
	return scorer.RowScores{Scores: scores, Truncations: int(u.Truncations), PolicyVersion: &version}, u, nil
}

// scoreLogProb scores the rows of validated logprob sets in one model call.
func (l *Scorer) scoreLogProb(ctx context.Context, cur *localModel, sets []scorer.RowSet) ([]scorer.RowScores, scorer.Usage, error) {
	var all []scorer.Row
	for _, s := range sets {
		all = append(all, s.Rows...)
	}
	out := make([]scorer.RowScores, len(sets))
	if len(all) == 0 {
		return out, scorer.Usage{}, nil
	}
	if err := l.acquire(ctx); err != nil {
		return nil, scorer.Usage{}, err
	}
	start := time.Now()
	scores, usage, err := cur.m.ScoreRows(all)
	l.metrics.observe("score", start)
	l.release()
	if err != nil {
		return nil, scorer.Usage{}, fmt.Errorf("model scoring %d rows of %d sets: %w", len(all), len(sets), err)
	}
	if len(scores) != len(all) {
		return nil, scorer.Usage{}, fmt.Errorf("model returned %d scores for %d rows", len(scores), len(all))
	}
	l.metrics.forwarded.Add(float64(usage.TokensForwarded))
	l.metrics.rowByRow.Add(float64(usage.TokensRowByRow))
	l.metrics.truncations.Add(float64(usage.Truncations))
	// Per-set truncations: a row is cut when context and target do not fit.
	var counted int64
	off := 0
	for i, s := range sets {
		version := cur.info.PolicyVersion
		r := scorer.RowScores{Scores: append([]float64(nil), scores[off:off+len(s.Rows)]...), PolicyVersion: &version}
		for _, row := range s.Rows {
			if cur.info.MaxContext > 0 && len(row.Context)+len(row.Target) > cur.info.MaxContext {
				r.Truncations++
			}
		}
		counted += int64(r.Truncations)
		off += len(s.Rows)
		out[i] = r
	}
	if counted != usage.Truncations && len(sets) > 1 {
		// The model cut differently than the rule above predicts: ask it per
		// set so that each set's count is the model's own.
		for i, s := range sets {
			if err := l.acquire(ctx); err != nil {
				return nil, scorer.Usage{}, err
			}
			_, u, err := cur.m.ScoreRows(s.Rows)
			l.release()
			if err != nil {
				return nil, scorer.Usage{}, fmt.Errorf("model scoring set %q: %w", s.ID, err)
			}
			out[i].Truncations = int(u.Truncations)
		}
	} else if counted != usage.Truncations && len(sets) == 1 {
		out[0].Truncations = int(usage.Truncations)
	}
	return out, usage, nil
}

// Attention computes the step graphs of every job, in the form opts asks
// for, with the policy version of the weights that computed every graph
// (scorer.NewAttentionResult); jobs run concurrently up to the concurrency
// limit.
func (l *Scorer) Attention(ctx context.Context, jobs []scorer.AttentionJob, opts scorer.AttentionOptions) (scorer.AttentionResult, error) {
	cur := l.cur.Load()
	if err := validateJobs(cur.info, jobs); err != nil {
		return scorer.AttentionResult{PolicyVersion: -1}, err
	}
	out := make([][]scorer.StepGraph, len(jobs))
	errs := make([]error, len(jobs))
	var wg sync.WaitGroup
	for i, jb := range jobs {
		if err := l.acquire(ctx); err != nil {
			wg.Wait()
			return scorer.AttentionResult{PolicyVersion: -1}, err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer l.release()
			start := time.Now()
			g, err := cur.m.StepGraphs(jb.Tokens, jb.Steps, jb.Layers)
			l.metrics.observe("attention", start)
			if err == nil && len(g) != len(jb.Layers) {
				err = fmt.Errorf("model returned %d step graphs for %d layers", len(g), len(jb.Layers))
			}
			out[i], errs[i] = g, err
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			return scorer.AttentionResult{PolicyVersion: -1}, fmt.Errorf("model step graphs for job %d (%q): %w", i, jobs[i].ID, err)
		}
	}
	return scorer.NewAttentionResult(opts, out, cur.info.PolicyVersion), nil
}
