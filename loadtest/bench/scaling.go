package bench

import (
	"context"
	"fmt"
	"strings"

	"github.com/creditflow/creditflow/loadtest/internal/cmdutil"
	"github.com/creditflow/creditflow/processors/stage"
	"github.com/creditflow/creditflow/schemas"
)

// ScalingCell is the throughput of one partitions x replicas configuration
// (records/s). Replicas are stage instances in one consumer group, each with
// its own producer, all in this process.
type ScalingCell struct {
	Partitions  int     `json:"partitions"`
	Replicas    int     `json:"replicas"`
	Passthrough float64 `json:"passthrough_per_s"`
	Score       float64 `json:"score_per_s"`
	Advantage   float64 `json:"advantage_per_s"`
	Error       string  `json:"error,omitempty"`
}

// scaling measures passthrough, score and advantage throughput for 1, 2 and
// 4 partitions and 1 and 2 replicas on the same records. Each run waits for
// its consumer group to settle with every replica before the input is
// written, so no run measures a rebalance.
func (e *benchEnv) scaling(ctx context.Context, s benchSize, n int, seed uint64) ([]ScalingCell, error) {
	in, err := makeInput(s, n, seed)
	if err != nil {
		return nil, err
	}
	saved := e.partitions
	defer func() { e.partitions = saved }()
	e.prog.size = "scaling"
	var cells []ScalingCell
	for _, p := range []int{1, 2, 4} {
		for _, r := range []int{1, 2} {
			e.partitions = p
			c := ScalingCell{Partitions: p, Replicas: r}
			if err := e.scalingCell(ctx, s, in, &c); err != nil {
				c.Error = err.Error()
			}
			cells = append(cells, c)
			if ctx.Err() != nil {
				return cells, ctx.Err()
			}
		}
	}
	return cells, nil
}

func (e *benchEnv) scalingCell(ctx context.Context, s benchSize, in *benchInput, c *ScalingCell) error {
	n := len(in.values)
	topics, err := e.topics(ctx, c.Partitions)
	if err != nil {
		return err
	}
	defer e.drop(ctx, all(topics)...)
	write := func(topic, schema string, keys, values [][]byte) func() error {
		return func() error { return e.produceAll(ctx, topic, schema, keys, values) }
	}
	// passthrough: start the replicas, wait for the group, then write.
	src, err := e.topics(ctx, c.Partitions)
	if err != nil {
		return err
	}
	defer e.drop(ctx, all(src)...)
	fill := write(src.Trajectories, schemas.Trajectories().Name(), in.keys, in.values)
	pt, err := e.passthrough(ctx, "passthrough", src.Trajectories, e.name("passthrough-out"), stage.DefaultConfig().ScoreReadBuffer(), c.Replicas, n, fill)
	if err != nil {
		return err
	}
	c.Passthrough = pt.PerS
	run := func(which, outTopic string, fill func() error) (float64, error) {
		st, err := e.startStage(ctx, which, s.Method, topics, 0, c.Replicas, nil)
		if err != nil {
			return 0, err
		}
		defer st.stop()
		group := st.cfg.GroupID + "." + which
		if !cmdutil.WaitSettled(ctx, e.brokers, c.Replicas, e.timeout, group) {
			return 0, fmt.Errorf("%s: the consumer group did not settle", which)
		}
		go func() { _ = fill() }()
		r, err := e.measure(ctx, fmt.Sprintf("%s p%d r%d", which, c.Partitions, c.Replicas), n, st.counts(which, outTopic))
		return r.PerS, err
	}
	if c.Score, err = run("score", topics.Scored, write(topics.Trajectories, schemas.Trajectories().Name(), in.keys, in.values)); err != nil {
		return err
	}
	keys, scored, err := e.readAll(ctx, topics.Scored)
	if err != nil {
		return err
	}
	adv, err := e.topics(ctx, c.Partitions)
	if err != nil {
		return err
	}
	defer e.drop(ctx, all(adv)...)
	topicsAdv := topics
	topicsAdv.Scored, topicsAdv.Samples, topicsAdv.State = adv.Scored, adv.Samples, adv.State
	topics = topicsAdv
	if c.Advantage, err = run("advantage", topics.Samples, write(topics.Scored, schemas.ScoredRecords().Name(), keys, scored)); err != nil {
		return err
	}
	c.Passthrough, c.Score, c.Advantage = cmdutil.Round3(c.Passthrough), cmdutil.Round3(c.Score), cmdutil.Round3(c.Advantage)
	return nil
}

// scalingTable is the markdown table of the cells.
func scalingTable(cells []ScalingCell) string {
	var b strings.Builder
	b.WriteString("| partitions | replicas | passthrough /s | score /s | advantage /s |\n|---:|---:|---:|---:|---:|\n")
	for _, c := range cells {
		if c.Error != "" {
			fmt.Fprintf(&b, "| %d | %d | error: %s | | |\n", c.Partitions, c.Replicas, c.Error)
			continue
		}
		fmt.Fprintf(&b, "| %d | %d | %.0f | %.0f | %.0f |\n", c.Partitions, c.Replicas, c.Passthrough, c.Score, c.Advantage)
	}
	return b.String()
}
