package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/creditflow/creditflow/consumers"
	"github.com/creditflow/creditflow/processors/stage"
	"github.com/creditflow/creditflow/producers"
	"github.com/creditflow/creditflow/schemas"
)

func init() {
	register("replay", "re-run the advantage stage over the scored topic with new settings (CPU only)", runReplay)
}

func runReplay(args []string) error {
	cfg := stage.DefaultConfig()
	fs := flag.NewFlagSet("replay", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: creditflow replay --topic-samples NEW_TOPIC [flags]\n"+
			"       creditflow replay --jsonl > scored.jsonl     (then: creditflow compute < scored.jsonl)\n\n"+
			"Replays the scored topic — the expensive scorer results — through the advantage stage with new\n"+
			"settings (λ, gating, β, α, δ, windows …) into a new samples topic, under a new consumer group,\n"+
			"and stops once it has caught up with the end of the topic as it was at start. With --jsonl it\n"+
			"writes the scored records as `creditflow compute` input lines instead (SPEC §5.1).\n\nflags:")
		fs.PrintDefaults()
	}
	kf := addKafkaFlags(fs)
	fs.StringVar(&cfg.Topics.Scored, "topic-scored", cfg.Topics.Scored, "scored topic to replay")
	fs.StringVar(&cfg.Topics.Samples, "topic-samples", "", "samples topic to write (must differ from the live one)")
	fs.StringVar(&cfg.Topics.DeadLetters, "topic-dead-letters", cfg.Topics.DeadLetters, "dead-letter topic")
	fs.StringVar(&cfg.Topics.State, "topic-state", cfg.Topics.State, "state changelog topic")
	policyFlags(fs, &cfg)
	cfg.Topics.SamplesStale = "" // default: <topic-samples>.stale, never the live run's
	fs.StringVar(&cfg.GroupID, "group", fmt.Sprintf("creditflow-replay-%d", time.Now().Unix()), "consumer group of the replay")
	fs.StringVar(&cfg.Credit.Method, "method", cfg.Credit.Method, "credit assignment: lapo or attnsr (must match how the topic was scored)")
	credit := creditFlags(fs, &cfg.Credit)
	window := windowFlags(fs, &cfg.Window)
	kafkaSizeFlags(fs, &cfg)
	jsonl := fs.Bool("jsonl", false, "write the scored records as compute input (JSON Lines) to stdout instead of replaying")
	logLevel := fs.String("log-level", "warn", "log level (JSON logs on stderr)")
	if err := loadSettings(fs, args); err != nil {
		return err
	}
	if err := credit(); err != nil {
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
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ends, err := consumers.EndOffsets(ctx, cfg.Brokers, cfg.Security, cfg.Topics.Scored)
	if err != nil {
		return err
	}
	if *jsonl {
		return exportJSONL(ctx, cfg, ends)
	}
	if cfg.Topics.Samples == "" {
		return fmt.Errorf("--topic-samples is required: a replay writes to a new samples topic")
	}
	if cfg.Topics.SamplesStale == "" {
		cfg.Topics.SamplesStale = cfg.Topics.Samples + ".stale"
	}
	if err := cfg.Check(); err != nil {
		return err
	}
	topicCfg := cfg.TopicSpecs(1)[0].Configs // max.message.bytes, as --create-topics sets it
	specs := []producers.TopicSpec{{Name: cfg.Topics.Samples, Partitions: len(ends), ReplicationFactor: 1, Configs: topicCfg}}
	if cfg.MaxPolicyLag >= 0 {
		specs = append(specs, producers.TopicSpec{Name: cfg.Topics.SamplesStale, Partitions: len(ends), ReplicationFactor: 1, Configs: topicCfg})
	}
	if err := producers.EnsureTopics(ctx, cfg.Brokers, cfg.Security, specs...); err != nil {
		return err
	}
	prod, err := producers.New(cfg.ProducerConfig(), producers.WithLogger(cfg.Logger))
	if err != nil {
		return err
	}
	defer prod.Close()
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
	fmt.Printf("replayed %d scored records from %d partitions into %s in %.1fs; %d groups still open at the end of the topic\n",
		records, len(ends), cfg.Topics.Samples, time.Since(start).Seconds(), open)
	return nil
}

// exportJSONL writes every scored record up to ends as a compute input line.
func exportJSONL(ctx context.Context, cfg stage.Config, ends map[int]int64) error {
	w := bufio.NewWriter(os.Stdout)
	defer w.Flush()
	for p := 0; p < len(ends); p++ {
		asm := consumers.NewAssembler(consumers.ReassemblyConfig{}) // records written as chunks
		_, err := consumers.ReadPartitionRange(ctx, cfg.Brokers, cfg.Security, cfg.Topics.Scored, p, 0, func(raw consumers.Record) error {
			if raw.Offset >= ends[p] {
				return nil
			}
			rec, broken := asm.Add(raw)
			for _, b := range broken {
				fmt.Fprintf(os.Stderr, "partition %d offset %d: %s: %s (skipped)\n", p, b.Offset, b.Reason, b.Detail)
			}
			if rec == nil {
				return nil
			}
			r := *rec
			s, err := schemas.ScoredRecords().Decode(r.Value)
			if err != nil {
				fmt.Fprintf(os.Stderr, "partition %d offset %d: %v (skipped)\n", p, r.Offset, err)
				return nil
			}
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
