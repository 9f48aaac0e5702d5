package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/creditflow/creditflow/consumers"
	"github.com/creditflow/creditflow/processors/credit"
	"github.com/creditflow/creditflow/processors/replay"
	"github.com/creditflow/creditflow/processors/stage"
	"github.com/creditflow/creditflow/producers"
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
		fs.IntVar(&cfg.ReplicationFactor, "replication-factor", 0, "replication factor of the output topics the replay creates (0: the brokers' default; above 1 they also get min.insync.replicas 2); existing topics are used as they are")
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
	applyWindow := windowFlags(fs, &cfg.Window)
	kafkaSizeFlags(fs, &cfg)
	topicRetentionFlags(fs, &cfg)
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
	applyWindow()
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
		return replay.ExportJSONL(ctx, cfg, ends, os.Stdout)
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
	if err := replay.CheckOutputs(ctx, cfg, rescoreTo, *appendOut); err != nil {
		return err
	}
	if err := producers.EnsureTopics(ctx, cfg.Brokers, cfg.Security, replay.OutputTopics(cfg, len(ends), rescoreTo)...); err != nil {
		return err
	}
	prod, err := producers.New(cfg.ProducerConfig(), producers.WithLogger(cfg.Logger))
	if err != nil {
		return err
	}
	defer prod.Close()
	if rescoreTo != "" {
		src, _, closeScorer, err := sf.newScorer(cfg.Logger, nil)
		if err != nil {
			return err
		}
		written, rescored, err := replay.Rescore(ctx, cfg, src, prod, ends, rescoreTo)
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
	res, err := replay.Run(ctx, cfg, prod, ends)
	if err != nil {
		return err
	}
	fmt.Printf("replayed %d scored records from %d partitions into %s in %.1fs; %d groups still open at the end of the topic\n"+
		"(the replay's state is in %s, its dead letters in %s)\n",
		res.Records, len(ends), cfg.Topics.Samples, res.Seconds, res.OpenGroups, cfg.Topics.State, cfg.Topics.DeadLetters)
	return nil
}
