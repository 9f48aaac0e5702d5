package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/creditflow/creditflow/consumers"
	"github.com/creditflow/creditflow/processors/credit"
	"github.com/creditflow/creditflow/processors/stage"
	"github.com/creditflow/creditflow/producers"
	"github.com/creditflow/creditflow/schemas"
	"github.com/creditflow/creditflow/vocab"
)

func init() {
	register("replay", "re-run the advantage stage over the scored topic with new settings (CPU only)", runReplay)
}

func runReplay(args []string) error {
	cfg := stage.DefaultConfig()
	fs := newFlagSet("replay", "usage: creditflow replay --topic-samples NEW_TOPIC [flags]\n"+
		"       creditflow replay --jsonl > scored.jsonl     (then: creditflow compute < scored.jsonl)\n\n"+
		"Replays the scored topic — the expensive scorer results — through the advantage stage with new\n"+
		"settings (λ, gating, β, α, δ, windows …) into a new samples topic, under a new consumer group,\n"+
		"and stops once it has caught up with the end of the topic as it was at start. With --jsonl it\n"+
		"writes the scored records as `creditflow compute` input lines instead (docs/offline.md).\n\n"+
		"A replay never writes into a live topic: it refuses the live samples, scored, dead-letter and\n"+
		"state topics, and any output topic that already holds records unless --append. Its state and\n"+
		"dead letters go to its own topics, <topic-samples>.state and <topic-samples>.dead-letters.\n\n"+
		"With --lapo-statistic, LAPO records measured with another statistic (docs/method.md §2.4) are\n"+
		"scored again from their trajectories, on --scorers or the in-process model, into\n"+
		"<topic-samples>.scored (the other records are copied there), and the replay reads that topic.")
	var appendOut, jsonl *bool
	var logLevel *string
	var startup *time.Duration
	fs.inGroup(groupGeneral, func() {
		fs.String("config", "", "JSON config file: an object of flag names to values (also CREDITFLOW_CONFIG)")
		jsonl = fs.Bool("jsonl", false, "write the scored records as compute input (JSON Lines) to stdout instead of replaying")
		appendOut = fs.Bool("append", false, "allow writing to output topics that already hold records (never to a live topic)")
	})
	kf := addKafkaFlags(fs)
	fs.inGroup(groupKafka, func() {
		fs.StringVar(&cfg.GroupID, "group", fmt.Sprintf("creditflow-replay-%d", time.Now().Unix()), "consumer group of the replay")
		startup = fs.Duration("startup-timeout", 30*time.Second, "at start, wait at most this long for a broker to answer, then exit non-zero")
		fs.IntVar(&cfg.ReplicationFactor, "replication-factor", 0, "replication factor of the output topics the replay creates (0: the brokers' default); existing topics are used as they are")
	})
	fs.inGroup(groupTopics, func() {
		fs.StringVar(&cfg.Topics.Scored, "topic-scored", cfg.Topics.Scored, "scored topic to replay")
		fs.StringVar(&cfg.Topics.Samples, "topic-samples", "", "new samples topic to write (never a live topic; must be new or empty unless --append)")
		fs.StringVar(&cfg.Topics.DeadLetters, "topic-dead-letters", "", "the replay's own dead-letter topic (default: <topic-samples>.dead-letters)")
		fs.StringVar(&cfg.Topics.State, "topic-state", "", "the replay's own state changelog topic (default: <topic-samples>.state)")
	})
	policyFlags(fs, &cfg)
	cfg.Topics.SamplesStale = "" // default: <topic-samples>.stale, never the live run's
	fs.inGroup(groupCredit, func() {
		fs.StringVar((*string)(&cfg.Credit.Method), "method", string(cfg.Credit.Method), "credit assignment: lapo or attnsr (must match how the topic was scored)")
	})
	var statistic *string
	fs.inGroup(groupLAPO, func() {
		statistic = fs.String("lapo-statistic", "", "re-score LAPO records measured with another statistic with this one: logprob, entropy or kl (default: replay the records as scored)")
	})
	var sf scorerFlags
	fs.inGroup(groupScorer, func() { sf = addScorerFlags(fs, false) })
	applyCredit := creditFlags(fs, &cfg.Credit)
	window := windowFlags(fs, &cfg.Window)
	kafkaSizeFlags(fs, &cfg)
	fs.inGroup(groupObservability, func() {
		logLevel = fs.String("log-level", "warn", "log level (JSON logs on stderr)")
	})
	if err := fs.parse(args, true); err != nil {
		return err
	}
	if err := applyCredit(); err != nil {
		return err
	}
	var err error
	if cfg.Logger, err = newLogger(*logLevel); err != nil {
		return err
	}
	cfg.Brokers = splitList(*kf.brokers)
	window()
	cfg.IdleAfter = 0 // a replay's event time comes from the records only
	if cfg.Security, err = kf.security(); err != nil {
		return err
	}
	switch { // flag combinations: refused before anything is read
	case *jsonl && *statistic != "":
		return usagef("--jsonl writes the scored topic as it is: replay with --lapo-statistic first, then export its <topic-samples>.scored with --jsonl --topic-scored")
	case !*jsonl && cfg.Topics.Samples == "":
		return usagef("--topic-samples is required: a replay writes to a new samples topic")
	}
	if *statistic != "" {
		if err := credit.CheckStatistic(vocab.Statistic(*statistic)); err != nil {
			return usagef("--lapo-statistic: %w", err)
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := cfg.Security.WaitReachable(ctx, cfg.Brokers, *startup); err != nil {
		return err
	}
	// Looked up without auto-creation: a replay never creates the topic it reads.
	ends, err := consumers.TopicEnds(ctx, cfg.Brokers, cfg.Security, cfg.Topics.Scored)
	if err != nil {
		return err
	}
	if ends == nil {
		return fmt.Errorf("scored topic %s does not exist on %s (check --topic-scored and --brokers)", cfg.Topics.Scored, strings.Join(cfg.Brokers, ","))
	}
	if *jsonl {
		return exportJSONL(ctx, cfg, ends)
	}
	rescoreTo := ""
	if *statistic != "" {
		cfg.LAPOStatistic = vocab.Statistic(*statistic)
		rescoreTo = cfg.Topics.Samples + ".scored"
	}
	if cfg.Topics.State == "" {
		cfg.Topics.State = cfg.Topics.Samples + ".state"
	}
	if cfg.Topics.DeadLetters == "" {
		cfg.Topics.DeadLetters = cfg.Topics.Samples + ".dead-letters"
	}
	if cfg.Topics.SamplesStale == "" {
		cfg.Topics.SamplesStale = cfg.Topics.Samples + ".stale"
	}
	if err := cfg.Check(); err != nil {
		return asUsage(err)
	}
	if err := checkReplayOutputs(ctx, cfg, rescoreTo, *appendOut); err != nil {
		return err
	}
	topicCfg := cfg.TopicSpecs(1)[0].Configs // max.message.bytes, as --create-topics sets it
	specs := []producers.TopicSpec{
		{Name: cfg.Topics.Samples, Partitions: len(ends), ReplicationFactor: cfg.ReplicationFactor, Configs: topicCfg},
		{Name: cfg.Topics.DeadLetters, Partitions: 1, ReplicationFactor: cfg.ReplicationFactor, Configs: topicCfg},
		{Name: cfg.Topics.State, Partitions: 1, ReplicationFactor: cfg.ReplicationFactor, Compact: true, Configs: topicCfg},
	}
	if cfg.MaxPolicyLag >= 0 {
		specs = append(specs, producers.TopicSpec{Name: cfg.Topics.SamplesStale, Partitions: len(ends), ReplicationFactor: cfg.ReplicationFactor, Configs: topicCfg})
	}
	if rescoreTo != "" {
		specs = append(specs, producers.TopicSpec{Name: rescoreTo, Partitions: len(ends), ReplicationFactor: cfg.ReplicationFactor, Configs: topicCfg})
	}
	if err := producers.EnsureTopics(ctx, cfg.Brokers, cfg.Security, specs...); err != nil {
		return err
	}
	prod, err := producers.New(cfg.ProducerConfig(), producers.WithLogger(cfg.Logger))
	if err != nil {
		return err
	}
	defer prod.Close()
	if rescoreTo != "" {
		scorer, _, closeScorer, err := sf.newScorer(cfg.Logger, nil)
		if err != nil {
			return err
		}
		written, rescored, err := rescoreTopic(ctx, cfg, scorer, prod, ends, rescoreTo)
		closeScorer()
		if err != nil {
			return fmt.Errorf("re-scoring %s with the %s statistic into %s: %w", cfg.Topics.Scored, cfg.LAPOStatistic, rescoreTo, err)
		}
		fmt.Printf("re-scored %d of %d scored records with the %s statistic into %s\n", rescored, written, cfg.LAPOStatistic, rescoreTo)
		cfg.Topics.Scored = rescoreTo
		if ends, err = consumers.EndOffsets(ctx, cfg.Brokers, cfg.Security, rescoreTo); err != nil {
			return err
		}
	}
	a, err := stage.NewAdvantageStage(cfg, prod)
	if err != nil {
		return err
	}
	start := time.Now()
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- a.Run(rctx) }()
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	for caughtUp := false; !caughtUp; {
		select {
		case err := <-done:
			cancel()
			return err
		case <-ctx.Done():
			cancel()
			<-done
			return ctx.Err()
		case <-tick.C:
			pos := a.Positions()
			caughtUp = true
			for p, end := range ends {
				if pos[p].Next < end || pos[p].InFlight > 0 {
					caughtUp = false
				}
			}
		}
	}
	cancel()
	if err := <-done; err != nil {
		return err
	}
	open := 0
	var records int64
	for p, pos := range a.Positions() {
		open += pos.OpenGroups
		records += min(pos.Next, ends[p])
	}
	fmt.Printf("replayed %d scored records from %d partitions into %s in %.1fs; %d groups still open at the end of the topic\n"+
		"(the replay's state is in %s, its dead letters in %s)\n",
		records, len(ends), cfg.Topics.Samples, time.Since(start).Seconds(), open, cfg.Topics.State, cfg.Topics.DeadLetters)
	return nil
}

// checkReplayOutputs refuses outputs that would touch a live pipeline: a
// replay never writes to the live topics (the default topic names and the
// scored topic it reads), its outputs (samples, state, dead letters and,
// with --max-policy-lag, stale samples; with --lapo-statistic, the
// re-scored records rescoreTo) are distinct, and, unless
// appendOK, each output topic is new or empty. It runs before anything is
// written and creates no topic.
func checkReplayOutputs(ctx context.Context, cfg stage.Config, rescoreTo string, appendOK bool) error {
	live := stage.DefaultTopics()
	liveNames := map[string]string{
		live.Trajectories: "the live trajectories topic", live.Scored: "the live scored topic",
		live.Samples: "the live samples topic", live.DeadLetters: "the live dead-letter topic", live.State: "the live state topic",
	}
	if live.SamplesStale != "" {
		liveNames[live.SamplesStale] = "the live stale-samples topic"
	}
	if live.Policy != "" {
		liveNames[live.Policy] = "the policy topic"
	}
	liveNames[cfg.Topics.Scored] = "the scored topic this replay reads"
	outs := []struct{ flag, topic string }{
		{"--topic-samples", cfg.Topics.Samples}, {"--topic-state", cfg.Topics.State}, {"--topic-dead-letters", cfg.Topics.DeadLetters},
	}
	if cfg.MaxPolicyLag >= 0 {
		outs = append(outs, struct{ flag, topic string }{"--topic-samples-stale", cfg.Topics.SamplesStale})
	}
	if rescoreTo != "" {
		outs = append(outs, struct{ flag, topic string }{"--lapo-statistic (<topic-samples>.scored)", rescoreTo})
	}
	seen := map[string]string{}
	for _, o := range outs {
		if what, ok := liveNames[o.topic]; ok {
			return fmt.Errorf("%s %s is %s: a replay never writes into a live topic; write to a new topic, e.g. --topic-samples %s.replay-1",
				o.flag, o.topic, what, live.Samples)
		}
		if other, ok := seen[o.topic]; ok {
			return fmt.Errorf("%s and %s both name %s: give the replay's outputs distinct topics", other, o.flag, o.topic)
		}
		seen[o.topic] = o.flag
	}
	if appendOK {
		return nil
	}
	for _, o := range outs {
		ends, err := consumers.TopicEnds(ctx, cfg.Brokers, cfg.Security, o.topic)
		if err != nil {
			return err
		}
		var n int64
		for _, e := range ends {
			n += e
		}
		if n > 0 {
			return fmt.Errorf("%s %s already holds records (end offsets sum to %d): a replay writes to a new topic; pick a new name, or pass --append to add to it",
				o.flag, o.topic, n)
		}
	}
	return nil
}

// exportJSONL writes every scored record up to ends as a compute input line.
func exportJSONL(ctx context.Context, cfg stage.Config, ends map[int]int64) error {
	w := bufio.NewWriter(os.Stdout)
	defer w.Flush()
	for p := 0; p < len(ends); p++ {
		err := eachScored(ctx, cfg, p, ends[p], func(_ consumers.Record, s *schemas.Scored) error {
			b, err := json.Marshal(stage.ComputeInput(s))
			if err != nil {
				return err
			}
			_, err = w.Write(append(b, '\n'))
			return err
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// eachScored calls fn with every scored record of partition p of
// cfg.Topics.Scored below offset end, put back together where it was
// written as chunks and decoded; broken chunks and undecodable records are
// reported on stderr and skipped.
func eachScored(ctx context.Context, cfg stage.Config, p int, end int64, fn func(rec consumers.Record, s *schemas.Scored) error) error {
	asm := consumers.NewAssembler(consumers.ReassemblyConfig{})
	_, err := consumers.ReadPartitionRange(ctx, cfg.Brokers, cfg.Security, cfg.Topics.Scored, p, 0, func(raw consumers.Record) error {
		if raw.Offset >= end {
			return nil
		}
		rec, broken := asm.Add(raw)
		for _, b := range broken {
			fmt.Fprintf(os.Stderr, "partition %d offset %d: %s: %s (skipped)\n", p, b.Offset, b.Reason, b.Detail)
		}
		if rec == nil {
			return nil
		}
		s, err := schemas.ScoredRecords().Decode(rec.Value)
		if err != nil {
			fmt.Fprintf(os.Stderr, "partition %d offset %d: %v (skipped)\n", p, rec.Offset, err)
			return nil
		}
		return fn(*rec, s)
	})
	return err
}
