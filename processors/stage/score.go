package stage

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/rs/zerolog"

	"github.com/creditflow/creditflow/consumers"
	"github.com/creditflow/creditflow/processors/credit"
	"github.com/creditflow/creditflow/processors/stage/scoring"
	"github.com/creditflow/creditflow/producers"
	"github.com/creditflow/creditflow/schemas"
	"github.com/creditflow/creditflow/scorer"
	"github.com/creditflow/creditflow/vocab"
)

// Directions of LAPO scoring (docs/method.md §2.1); the rows of each are
// planned by package scoring.
const (
	Backward = scoring.Backward
	Forward  = scoring.Forward
)

// ScoreStage reads trajectories, asks the scorer for LAPO row scores or
// AttnSR step graphs, and writes scored trajectories keyed by prompt_id.
//
// Guarantees: a partition's outputs are written in input order, and an input
// offset is committed only after its output (scored record or dead letter)
// is acknowledged, so a crash or rebalance replays work and never loses it.
// Scorer failures are retried with backoff for as long as the partition is
// owned; only a scorer's explicit rejection of a record dead-letters it.
type ScoreStage struct {
	cfg    Config
	scorer scorer.Scorer
	prod   *producers.Producer
	info   scorer.ModelInfo
	layers []int
	limits schemas.Limits
	log    zerolog.Logger
	// buffers holds encoded scored records for reuse once acknowledged.
	buffers *bufferPool
	// trajectories decodes with the token arrays left in the record's
	// bytes (schemas.WithSharedInput): the job holds its record until the
	// scored record is written, and nothing here writes into the arrays.
	trajectories schemas.Codec[schemas.Trajectory]
	groupRef
	scorerState *scorerState
	// scoring is what the credit method asks the scorer for (credit.Lookup).
	scoring credit.Scoring
}

// NewScoreStage checks cfg and asks the scorer which model it serves.
func NewScoreStage(ctx context.Context, cfg Config, src scorer.Scorer, prod *producers.Producer) (*ScoreStage, error) {
	if err := cfg.Check(); err != nil {
		return nil, err
	}
	method, _ := credit.Lookup(cfg.Credit.Method) // Check found it
	cfg.Metrics.forMethod(method)
	cfg.Metrics.unwritable.WithLabelValues("score") // exported at 0 from the start
	info, err := src.Info(ctx)
	if err != nil {
		return nil, fmt.Errorf("score stage: scorer info: %w (is a scorer reachable?)", err)
	}
	s := &ScoreStage{cfg: cfg, scorer: src, prod: prod, info: info, limits: cfg.Limits, groupRef: newGroupRef(), scorerState: &scorerState{},
		log: cfg.Logger.With().Str("stage", "score").Logger(), buffers: newBufferPool(outputBufferBytes),
		trajectories: schemas.Trajectories(schemas.WithSharedInput())}
	s.limits.VocabSize = info.VocabSize
	s.layers = cfg.Layers
	if len(s.layers) == 0 {
		s.layers = credit.AttnSRLayers(info.Layers)
	}
	for _, l := range s.layers {
		if l < 0 || l >= info.Layers {
			return nil, fmt.Errorf("score stage: layer %d outside the scorer model's %d layers", l, info.Layers)
		}
	}
	s.scoring = method.Scoring
	rows := method.Scoring == credit.ScoreRows
	if len(info.PlaceholderIDs) == 0 && rows && cfg.Direction == Backward {
		return nil, fmt.Errorf("score stage: the scorer reports no placeholder ids, which backward LAPO needs")
	}
	if stat := cfg.LAPOStatistic; rows && !scorer.IsLogProb(string(stat)) && !info.HasFeature(scorer.FeatureStatistics) {
		return nil, fmt.Errorf("score stage: --lapo-statistic %s: %w", stat, ErrScorerWithoutStatistics)
	}
	return s, nil
}

// ErrScorerWithoutStatistics is NewScoreStage's error when the LAPO
// statistic is entropy or kl and the scorer does not advertise
// scorer.FeatureStatistics (it would answer log-probabilities).
var ErrScorerWithoutStatistics = errors.New("the scorer does not compute the entropy and kl statistics (no \"statistics\" feature in its info); upgrade the scorer pods or use --lapo-statistic logprob")

// Info is the scorer's model information.
func (s *ScoreStage) Info() scorer.ModelInfo { return s.info }

// Run consumes until ctx ends.
func (s *ScoreStage) Run(ctx context.Context) error {
	g, err := consumers.NewGroup(consumers.Config{
		Brokers: s.cfg.Brokers, GroupID: s.cfg.GroupID + ".score", Topics: []string{s.cfg.Topics.Trajectories},
		Security: s.cfg.Security, StartAt: "earliest", Buffer: s.cfg.scoreReadBuffer(), SessionTimeout: s.cfg.SessionTimeout,
		MaxBytes: s.cfg.fetchBytes(), Reassembly: s.cfg.reassembly("score", s.prod, s.log),
	}, consumers.WithLogger(s.log), consumers.WithRegisterer(s.cfg.Metrics.reg))
	if err != nil {
		return err
	}
	defer g.Close()
	s.store(g)
	return g.Run(ctx, s.claim)
}

type scoreJob struct {
	rec  consumers.Record
	read time.Time
	done chan struct{}
	msgs []producers.Message
	err  error
	// pooled: msgs holds one scored record in a buffer of s.buffers
	pooled bool
}

func (s *ScoreStage) claim(ctx context.Context, claim consumers.Claim, commit consumers.CommitFunc) error {
	log := s.log.With().Str("topic", claim.Topic).Int("partition", claim.Partition).Logger()
	log.Info().Int64("start_offset", claim.StartOffset).Int32("generation", claim.Generation).Msg("partition assigned")
	jobs := make(chan *scoreJob, s.cfg.MaxInFlight)
	win := newWindow(s.cfg.MaxInFlightBytes, 1)
	emitted := make(chan error, 1)
	go func() { emitted <- s.emit(ctx, jobs, commit, win) }()
	inflight := s.cfg.Metrics.inflight.WithLabelValues("score")
	recordsIn := s.cfg.Metrics.recordsIn.WithLabelValues("score")
feed:
	for rec := range claim.Records {
		recordsIn.Inc()
		if !win.acquire(ctx, len(rec.Value)) {
			break feed
		}
		j := &scoreJob{rec: rec, read: time.Now(), done: make(chan struct{})}
		select {
		case jobs <- j:
			inflight.Inc()
			go s.process(ctx, j)
		case <-ctx.Done():
			break feed
		}
	}
	close(jobs)
	err := <-emitted
	log.Info().Msg("partition released")
	return err
}

// emit writes finished jobs in input order, batching those already done:
// produce a batch, then tell the commit bookkeeping (commits.go) which
// offset is acknowledged.
func (s *ScoreStage) emit(ctx context.Context, jobs <-chan *scoreJob, commit consumers.CommitFunc, win *window) error {
	book := newCommits(commit, s.cfg.CommitInterval)
	defer book.close()
	var next *scoreJob
	for {
		batch := s.nextBatch(ctx, jobs, &next, book)
		if batch == nil {
			return nil
		}
		wrote, written, ok := s.produceBatch(ctx, batch)
		if !ok {
			return nil
		}
		s.released(batch, wrote, written, win)
		book.acknowledged(ctx, batch[len(batch)-1].rec.Offset+1)
	}
}

// nextBatch waits for the next job in input order to finish, then takes
// (up to 256) jobs after it that are done already; a job read that is not
// done yet is left in *next. While it waits, book commits an idle
// partition's acknowledged offset. nil: the input or ctx ended.
func (s *ScoreStage) nextBatch(ctx context.Context, jobs <-chan *scoreJob, next **scoreJob, book *commits) []*scoreJob {
	j := *next
	*next = nil
	for j == nil {
		var ok bool
		select {
		case j, ok = <-jobs:
			if !ok {
				return nil
			}
		case <-book.idle():
			book.onIdle(ctx)
		case <-ctx.Done():
			return nil
		}
	}
wait:
	for {
		select {
		case <-j.done:
			break wait
		case <-book.idle():
			book.onIdle(ctx)
		case <-ctx.Done():
			return nil
		}
	}
	batch := []*scoreJob{j}
	for len(batch) < 256 {
		select {
		case nj, ok := <-jobs:
			if !ok {
				return batch
			}
			select {
			case <-nj.done:
				batch = append(batch, nj)
			default:
				*next = nj
				return batch
			}
		default:
			return batch
		}
	}
	return batch
}

// produceBatch writes the batch's outputs and returns what was written per
// job; written reports that the whole batch went at once (the producer
// holds no reference to the outputs any more). When the broker refuses the
// batch for good, the jobs are written one by one (emitAlone). ok false:
// ctx ended, nothing of the batch counts as acknowledged.
func (s *ScoreStage) produceBatch(ctx context.Context, batch []*scoreJob) (wrote [][]producers.Message, written, ok bool) {
	var msgs []producers.Message
	for _, b := range batch {
		if b.err != nil { // only when ctx ended mid-scoring
			return nil, false, false
		}
		msgs = append(msgs, b.msgs...)
	}
	err := produceRetry(ctx, s.prod, msgs, s.log)
	wrote = make([][]producers.Message, len(batch))
	if err == nil {
		for i, b := range batch {
			wrote[i] = b.msgs
		}
		return wrote, true, true
	}
	if !errors.As(err, new(*unwritableError)) {
		return nil, false, false
	}
	for i, b := range batch { // one by one, to find the record the broker will not take
		if wrote[i], err = s.emitAlone(ctx, b); err != nil {
			return nil, false, false
		}
	}
	return wrote, false, true
}

// released counts the written batch in the metrics and frees its window
// bytes and (written at once) its output buffers.
func (s *ScoreStage) released(batch []*scoreJob, wrote [][]producers.Message, written bool, win *window) {
	m := s.cfg.Metrics
	inflight := m.inflight.WithLabelValues("score")
	now := time.Now()
	for i, b := range batch {
		for _, msg := range wrote[i] {
			m.recordsOut.WithLabelValues("score", msg.Topic).Inc()
		}
		m.latency.WithLabelValues("score").Observe(now.Sub(b.read).Seconds())
		inflight.Dec()
		win.release(len(b.rec.Value))
		if written && b.pooled {
			s.buffers.put(b.msgs[0].Value)
		}
	}
}

// emitAlone writes one job's output; when the broker refuses it for good
// (e.g. a scored record over the maximum message size) the input goes to the
// dead-letter topic instead, cut to fit if it must be. It returns what was
// written: the output, the dead letter, or nothing when neither could be.
func (s *ScoreStage) emitAlone(ctx context.Context, j *scoreJob) ([]producers.Message, error) {
	err := produceRetry(ctx, s.prod, j.msgs, s.log)
	if err == nil {
		return j.msgs, nil
	}
	if !errors.As(err, new(*unwritableError)) {
		return nil, err
	}
	detail := "the broker refused the output: " + err.Error()
	rec := j.rec
	if limit := 512 << 10; len(rec.Value) > limit {
		detail = fmt.Sprintf("%s; original cut to its first %d of %d bytes", detail, limit, len(rec.Value))
		rec.Value = rec.Value[:limit]
	}
	msg, derr := s.cfg.deadLetter("score", rec, schemas.ReasonTooLarge, detail)
	if derr == nil {
		derr = produceRetry(ctx, s.prod, []producers.Message{msg}, s.log)
	}
	if derr == nil {
		return []producers.Message{msg}, nil
	}
	if errors.As(derr, new(*unwritableError)) {
		s.cfg.Metrics.unwritable.WithLabelValues("score").Inc()
		s.log.Error().Err(derr).Int64("offset", j.rec.Offset).Int("partition", j.rec.Partition).
			Msg("neither the output nor a dead letter could be written; the record is skipped")
		return nil, nil
	}
	return nil, derr
}

// unwritableError is a produce error that retrying cannot fix.
type unwritableError struct{ err error }

func (e *unwritableError) Error() string { return e.err.Error() }
func (e *unwritableError) Unwrap() error { return e.err }

// produceRetry writes msgs, retrying with backoff until it succeeds, ctx
// ends, or the error is not transient (*unwritableError).
func produceRetry(ctx context.Context, p *producers.Producer, msgs []producers.Message, log zerolog.Logger) error {
	if len(msgs) == 0 {
		return nil
	}
	permanent := func(err error) error {
		if !producers.Retriable(err) {
			return &unwritableError{err}
		}
		return nil
	}
	return retry(ctx, log.With().Int("messages", len(msgs)).Logger(), "produce", permanent, func() error { return p.Produce(ctx, msgs...) })
}

// retry calls f until it succeeds or ctx ends, with exponential backoff (50 ms
// to 5 s); permanent turns an error that retrying cannot fix into the error to
// return (nil: retry).
func retry(ctx context.Context, log zerolog.Logger, what string, permanent func(error) error, f func() error) error {
	backoff := 50 * time.Millisecond
	for {
		err := f()
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if perr := permanent(err); perr != nil {
			return perr
		}
		log.Warn().Err(err).Dur("retry_in_ms", backoff).Msg(what + " failed; retrying")
		select {
		case <-time.After(backoff):
		case <-ctx.Done():
			return ctx.Err()
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

// process decodes, validates and scores one trajectory into j.msgs.
func (s *ScoreStage) process(ctx context.Context, j *scoreJob) {
	defer close(j.done)
	dead := func(reason, detail string) {
		msg, err := s.cfg.deadLetter("score", j.rec, reason, detail)
		if err != nil {
			j.err = err
			return
		}
		s.log.Warn().Str("reason", reason).Str("detail", truncate(detail, 200)).Int64("offset", j.rec.Offset).Msg("dead letter")
		j.msgs = []producers.Message{msg}
	}
	if s.limits.MaxRecordBytes > 0 && len(j.rec.Value) > s.limits.MaxRecordBytes {
		dead(schemas.ReasonTooLarge, fmt.Sprintf("record of %d bytes exceeds the limit of %d", len(j.rec.Value), s.limits.MaxRecordBytes))
		return
	}
	t, err := s.trajectories.Decode(j.rec.Value)
	if err != nil {
		dead(reasonOf(err))
		return
	}
	if err := schemas.ValidateTrajectory(t, s.limits); err != nil {
		dead(reasonOf(err))
		return
	}
	sc, err := s.score(ctx, t)
	if err != nil {
		var rej *scorer.RejectedError
		if errors.As(err, &rej) {
			dead(schemas.ReasonScorerRejected, rej.Error())
			return
		}
		j.err = err
		return
	}
	b, err := schemas.ScoredRecords().AppendEncode(s.buffers.get(), sc)
	if err != nil {
		dead(schemas.ReasonInvalid, "encode scored record: "+err.Error())
		return
	}
	j.msgs = []producers.Message{{
		Topic: s.cfg.Topics.Scored, Key: []byte(t.PromptID), Value: b,
		Headers: []producers.Header{{Key: schemas.HeaderSchema, Value: []byte(schemas.ScoredRecords().Name())}},
	}}
	j.pooled = true
}

// policyVersioner is a scorer that knows which policy version its weights
// are now (the in-process scorer, which can follow the policy topic).
type policyVersioner interface{ PolicyVersion() int64 }

// currentPolicyVersion is the scorer's weights version for a record that
// needs no scorer call (a LAPO trajectory without a gold target or an
// eligible turn): the version the scorer serves now where it can say,
// else the one it reported when the stage started.
func (s *ScoreStage) currentPolicyVersion() int64 {
	if v, ok := s.scorer.(policyVersioner); ok {
		return v.PolicyVersion()
	}
	return s.info.PolicyVersion
}

// score runs the method's scorer calls, retrying transient failures while ctx lasts.
func (s *ScoreStage) score(ctx context.Context, t *schemas.Trajectory) (*schemas.Scored, error) {
	sc := &schemas.Scored{
		Trajectory: *t, Method: string(s.cfg.Credit.Method), Turns: make([]schemas.TurnScore, len(t.Turns)),
		ScorerModel: s.info.Name, ScorerPolicyVersion: s.currentPolicyVersion(), ScoredAtMs: time.Now().UnixMilli(),
	}
	switch s.scoring {
	case credit.ScoreAttention:
		job := scoring.AttentionJob(t, s.layers)
		var graphs []schemas.LowerGraph
		version := int64(-1)
		err := retry(ctx, s.log, "scorer call", scorerRejection, func() (err error) {
			graphs, version, err = attention(ctx, s.scorer, job)
			s.scorerState.observe(ctx, err)
			return err
		})
		if err != nil {
			return nil, err
		}
		if version >= 0 { // the weights that computed these graphs
			sc.ScorerPolicyVersion = version
		}
		sc.Graphs = graphs
	case credit.ScoreRows:
		sc.Direction = schemas.DirectionLabel(string(s.cfg.Direction), string(s.cfg.LAPOStatistic))
		plan, err := scoring.PlanLAPOStatistic(t, s.cfg.Direction, s.cfg.LAPOStatistic, s.cfg.Credit, s.info.PlaceholderIDs)
		if err != nil {
			return nil, err
		}
		if plan.NoGoldTarget() {
			s.cfg.Metrics.noGoldTarget.Inc()
		}
		if plan.Empty() {
			return sc, nil
		}
		var res []scorer.RowScores
		err = retry(ctx, s.log, "scorer call", scorerRejection, func() (err error) {
			res, _, err = s.scorer.ScoreRows(ctx, []scorer.RowSet{plan.RowSet(t.TrajectoryID)})
			s.scorerState.observe(ctx, err)
			return err
		})
		if err != nil {
			return nil, err
		}
		var nonFinite int
		sc.Turns, nonFinite = plan.TurnScores(res[0].Scores)
		s.cfg.Metrics.nonFiniteGains.Add(float64(nonFinite))
		sc.Truncations = int32(res[0].Truncations)
		if v := res[0].PolicyVersion; v != nil { // the weights that computed these scores
			sc.ScorerPolicyVersion = *v
		}
		s.cfg.Metrics.truncations.Add(float64(res[0].Truncations))
	}
	return sc, nil
}

// Rescore scores the trajectory of a scored record again with this
// stage's configuration (its LAPO statistic and scorer; the record's own
// direction),
// retrying transient scorer failures while ctx lasts, and returns the new
// record; a scorer's rejection of the input is returned as the error. A
// replay with another statistic uses it (docs/method.md §2.4).
func (s *ScoreStage) Rescore(ctx context.Context, sc *schemas.Scored) (*schemas.Scored, error) {
	if dir, _, ok := schemas.SplitDirection(sc.Direction); ok && vocab.Direction(dir) != s.cfg.Direction {
		o := *s // the record's direction, not the stage's
		o.cfg.Direction = vocab.Direction(dir)
		return o.score(ctx, &sc.Trajectory)
	}
	return s.score(ctx, &sc.Trajectory)
}

// scorerRejection stops retrying a scorer call when the scorer refused the input.
func scorerRejection(err error) error {
	var rej *scorer.RejectedError
	if errors.As(err, &rej) {
		return err
	}
	return nil
}
