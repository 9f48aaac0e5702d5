package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/creditflow/creditflow/consumers"

	"github.com/creditflow/creditflow/internal/broker"
	"github.com/creditflow/creditflow/internal/kafkasec"
	"github.com/creditflow/creditflow/monitor"
	"github.com/creditflow/creditflow/processors/stage"
	"github.com/creditflow/creditflow/producers"
	"github.com/creditflow/creditflow/tokenizer"
)

func init() {
	register("monitor", "live reward monitor over samples topics: a web page, JSON and /metrics (never commits offsets)", runMonitor)
}

const defaultMonitorAddr = "127.0.0.1:8090"

func runMonitor(args []string) error {
	cfg := monitor.DefaultConfig()
	topics := stage.DefaultTopics()
	fs := newFlagSet("monitor", "usage: creditflow monitor [--brokers host:port,...] [--topics creditflow.samples,...] [--once --json]\n\n"+
		"Reads samples topics (the live one, replays) and the dead-letter topic without a consumer group —\n"+
		"it never commits, so no processing group's offsets move — and serves live charts of rewards,\n"+
		"success, zero-variance groups, pass@G, lengths, process signals, staleness and dead letters on\n"+
		"--addr, GET /api/v1/summary (JSON) and /metrics, and a samples view (recent, best, worst; one\n"+
		"sample turn by turn with its tokens colored by advantage, two topics side by side; GET\n"+
		"/api/v1/samples). With --once it reads every topic up to its end as of start-up, prints the\n"+
		"summary and exits. See docs/monitor.md.")
	var topicList, dead, pol, from, addr, logLevel, scored, tok, lagGroups *string
	var lagInterval *time.Duration
	var once, asJSON *bool
	fs.inGroup(groupGeneral, func() {
		fs.String("config", "", "JSON config file: an object of flag names to values (also CREDITFLOW_CONFIG)")
		once = fs.Bool("once", false, "read every topic up to its end offsets as of start-up, print the summary, exit")
		asJSON = fs.Bool("json", false, "with --once: print the summary as one JSON object on the last line of stdout")
		fs.Float64Var(&cfg.SuccessThreshold, "success-threshold", cfg.SuccessThreshold, "a sample with reward >= this is a success (1.0: an exact match for F1 rewards)")
		fs.DurationVar(&cfg.GroupIdle, "group-idle", cfg.GroupIdle, "a partial group closes after this long without a new member")
		fs.IntVar(&cfg.DedupeWindow, "dedupe-window", cfg.DedupeWindow, "trajectory ids remembered per topic to count duplicates once")
		fs.IntVar(&cfg.MaxVersions, "max-versions", cfg.MaxVersions, "policy-version rows kept per topic (the newest)")
		fs.IntVar(&cfg.MaxSources, "max-sources", cfg.MaxSources, "data-source rows kept per topic (later sources share \"other\")")
		fs.IntVar(&cfg.MaxOpenGroups, "max-open-groups", cfg.MaxOpenGroups, "groups per topic waiting for members before the oldest closes as incomplete")
		fs.Float64Var(&cfg.RewardMin, "reward-min", cfg.RewardMin, "lower end of the reward histogram")
		fs.Float64Var(&cfg.RewardMax, "reward-max", cfg.RewardMax, "upper end of the reward histogram")
		fs.IntVar(&cfg.KeepSamples, "keep-samples", cfg.KeepSamples, "samples per topic kept in each list of the samples view (recent, best, worst), as locations")
		fs.IntVar(&cfg.KeepIDs, "keep-ids", cfg.KeepIDs, "trajectory ids per topic remembered with their location for lookups (older ones: the partition is read again)")
		tok = fs.String("tokenizer", "", "a model's tokenizer.json (or its folder) for the sample view's text; default: the built-in byte vocabulary")
	})
	kf := addKafkaFlags(fs)
	var startup *time.Duration
	fs.inGroup(groupKafka, func() {
		startup = fs.Duration("startup-timeout", 10*time.Second, "wait at most this long for a broker to answer, then exit non-zero")
	})
	fs.inGroup(groupTopics, func() {
		topicList = fs.String("topics", topics.Samples, "samples topics to read, comma-separated (two or more are drawn side by side)")
		dead = fs.String("topic-dead-letters", topics.DeadLetters, "dead-letter topic (empty: leave out)")
		from = fs.String("from", "earliest", "where each partition starts: earliest, latest or an RFC 3339 time")
		scored = fs.String("topic-scored", topics.Scored, "scored topic, read for the sample view's S with and without each turn (empty: leave out)")
	})
	fs.inGroup(groupPolicy, func() {
		pol = fs.String("topic-policy", topics.Policy, "policy topic: policy lag is measured from the newest announced version when it is larger than the newest seen (empty: leave out)")
	})
	fs.inGroup(groupObservability, func() {
		addr = fs.String("addr", defaultMonitorAddr, "listen address of the page, /api/v1/summary and /metrics")
		lagGroups = fs.String("lag-groups", defaultLagGroups, "consumer groups whose lag /metrics exports from the brokers' offsets (creditflow_consumer_group_lag_records), as GROUP=TOPIC, comma-separated; present while the group has no member (empty: off)")
		lagInterval = fs.Duration("lag-interval", 15*time.Second, "read the --lag-groups' lag this often")
		logLevel = fs.String("log-level", "warn", "log level (JSON logs on stderr)")
	})
	if err := fs.parse(args, true); err != nil {
		return err
	}
	log, err := newLogger(*logLevel)
	if err != nil {
		return err
	}
	sec, err := kf.security()
	if err != nil {
		return err
	}
	src := monitor.Source{Brokers: splitList(*kf.brokers), Security: sec, Topics: splitList(*topicList), DeadLetters: *dead, Policy: *pol, From: *from, Scored: *scored}
	if err := cfg.Check(); err != nil { // flag values: refused before anything starts
		return asUsage(err)
	}
	if err := src.Check(); err != nil {
		return asUsage(err)
	}
	opts := []monitor.Option{monitor.WithLogger(log)}
	if *tok != "" {
		dec, err := tokenizer.Load(*tok)
		if err != nil {
			return err
		}
		opts = append(opts, monitor.WithTokenizer(dec))
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := sec.WaitReachable(ctx, src.Brokers, *startup); err != nil {
		return err
	}
	if err := existingTopics(ctx, &src); err != nil {
		return err
	}
	m, err := monitor.New(src, cfg, opts...)
	if err != nil {
		return err
	}
	lag, err := groupLagExporter(src.Brokers, sec, *lagGroups, *lagInterval, m.Registerer(), log)
	if err != nil {
		return usageError{err}
	}
	if *once {
		sum, err := m.Once(ctx)
		if err != nil {
			return err
		}
		if *asJSON {
			b, err := json.Marshal(sum)
			if err != nil {
				return err
			}
			fmt.Println(string(b))
		} else {
			printMonitorSummary(sum)
		}
		return nil
	}
	if lag != nil {
		go lag.Run(ctx)
	}
	url, err := startMonitorServer(ctx, m, *addr)
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "creditflow monitor: %s (topics %v, dead letters %q, from %s); stop with Ctrl-C\n", url, src.Topics, src.DeadLetters, src.From)
	return m.Follow(ctx)
}

// existingTopics makes sure the monitor creates no topic: the topics of
// src are looked up without letting the brokers create them (reading a
// missing one would, on a cluster that auto-creates topics). A missing
// samples topic is an error naming it; a missing dead-letter, scored or
// policy topic is left out, with a line on stderr.
func existingTopics(ctx context.Context, src *monitor.Source) error {
	names := append([]string(nil), src.Topics...)
	optional := map[string]*string{}
	for flag, t := range map[string]*string{"--topic-dead-letters": &src.DeadLetters, "--topic-scored": &src.Scored, "--topic-policy": &src.Policy} {
		if *t != "" {
			names = append(names, *t)
			optional[flag] = t
		}
	}
	missing, err := producers.MissingTopics(ctx, src.Brokers, src.Security, names...)
	if err != nil {
		return err
	}
	where := strings.Join(src.Brokers, ",")
	gone := map[string]bool{}
	for _, m := range missing {
		gone[m] = true
	}
	for _, t := range src.Topics {
		if gone[t] {
			return fmt.Errorf("topic %s does not exist on %s (check --topics and --brokers; the monitor creates nothing)", t, where)
		}
	}
	flags := make([]string, 0, len(optional))
	for f := range optional {
		flags = append(flags, f)
	}
	sort.Strings(flags)
	for _, f := range flags {
		if t := optional[f]; gone[*t] {
			fmt.Fprintf(os.Stderr, "creditflow monitor: %s %s does not exist on %s: left out\n", f, *t, where)
			*t = ""
		}
	}
	return nil
}

// defaultLagGroups are the consumer groups of `creditflow run` with the
// default --group and topics.
const defaultLagGroups = "creditflow.score=creditflow.trajectories,creditflow.advantage=creditflow.scored"

// groupLagExporter exports the lag of the groups of spec ("GROUP=TOPIC,…")
// into reg; nil when spec is empty.
func groupLagExporter(brokers []string, sec kafkasec.Config, spec string, interval time.Duration, reg prometheus.Registerer, log zerolog.Logger) (*consumers.LagExporter, error) {
	pairs := splitList(spec)
	if len(pairs) == 0 {
		return nil, nil
	}
	e, err := consumers.NewLagExporter(brokers, sec, interval, reg, log)
	if err != nil {
		return nil, err
	}
	for _, p := range pairs {
		group, topic, ok := strings.Cut(p, "=")
		if !ok || strings.TrimSpace(group) == "" || strings.TrimSpace(topic) == "" {
			return nil, fmt.Errorf("--lag-groups: %q is not GROUP=TOPIC", p)
		}
		e.Watch(strings.TrimSpace(group), strings.TrimSpace(topic))
	}
	return e, nil
}

// startMonitorServer listens on addr and serves m until ctx ends; it
// returns the page's URL.
func startMonitorServer(ctx context.Context, m *monitor.Monitor, addr string) (string, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", fmt.Errorf("monitor: listen on %s: %w (choose another address with --addr)", addr, err)
	}
	go func() { _ = m.Serve(ctx, ln) }()
	return "http://" + ln.Addr().String() + "/", nil
}

// demoMonitor starts a monitor of the demo's samples and dead-letter topics
// on brokers, serving on addr, and returns its URL.
func demoMonitor(ctx context.Context, brokers []string, sec kafkasec.Config, t stage.Topics, addr string, log zerolog.Logger) (string, error) {
	m, err := monitor.New(monitor.Source{Brokers: brokers, Security: sec, Topics: []string{t.Samples}, DeadLetters: t.DeadLetters, Policy: t.Policy, Scored: t.Scored, From: "earliest"},
		monitor.DefaultConfig(), monitor.WithLogger(log))
	if err != nil {
		return "", err
	}
	url, err := startMonitorServer(ctx, m, addr)
	if err != nil {
		return "", err
	}
	go func() { _ = m.Follow(ctx) }()
	return url, nil
}

func printMonitorSummary(s monitor.Summary) {
	w := os.Stdout
	for _, name := range s.TopicOrder {
		t := s.Topics[name]
		fmt.Fprintf(w, "topic             %s\n", name)
		fmt.Fprintf(w, "  samples         %d (duplicates %d, undecodable %d)\n", t.Samples, t.Duplicates, t.Undecodable)
		fmt.Fprintf(w, "  reward mean     %.4f, success rate %.1f%% (reward >= %v)\n", t.RewardMean, 100*t.SuccessRate, s.SuccessThreshold)
		fmt.Fprintf(w, "  groups          %d: zero variance %d, pass@G %.1f%%, partial %d, incomplete %d\n",
			t.Groups, t.ZeroVarianceGroups, 100*t.PassAtG, t.PartialGroups, t.IncompleteGroups)
		for _, v := range t.ByPolicyVersion {
			fmt.Fprintf(w, "  version %-7d samples %d, reward mean %.4f, success %.1f%%, groups %d, zero variance %d\n",
				v.PolicyVersion, v.Samples, v.RewardMean, 100*v.SuccessRate, v.Groups, v.ZeroVarianceGroups)
		}
	}
	reasons := make([]string, 0, len(s.DeadLetters))
	for r := range s.DeadLetters {
		reasons = append(reasons, r)
	}
	sort.Strings(reasons)
	fmt.Fprintf(w, "dead letters      %d", s.DeadLettersTotal)
	for _, r := range reasons {
		fmt.Fprintf(w, "  %s %d", r, s.DeadLetters[r])
	}
	fmt.Fprintln(w)
}

// monitorForRun serves the monitor page over a run's topics (demo, learn).
// Without brokers it starts the embedded broker here, so that the broker
// outlives the run and the page keeps serving after the summary. It returns
// the brokers the run uses, the page's URL and a function that stops what it
// started.
func monitorForRun(ctx context.Context, brokers []string, partitions int, t stage.Topics, addr string, log zerolog.Logger) ([]string, string, func(), error) {
	stop := func() {}
	if len(brokers) == 0 {
		b, err := broker.Start(broker.WithDefaultPartitions(partitions), broker.WithLogger(log))
		if err != nil {
			return nil, "", stop, err
		}
		stop, brokers = b.Close, b.Addrs()
	}
	url, err := demoMonitor(ctx, brokers, kafkasec.Config{}, t, addr, log)
	if err != nil {
		stop()
		return nil, "", func() {}, err
	}
	fmt.Fprintf(os.Stderr, "monitor: %s\n", url)
	return brokers, url, stop, nil
}

// endRun ends a run's command (demo, learn): the summary as one JSON line
// when asked, then, when the monitor page is served, it keeps serving until
// Ctrl-C. It returns the run's error.
func endRun(ctx context.Context, summary any, asJSON, monitorSet bool, monitorURL string, runErr error) error {
	if asJSON {
		b, err := json.Marshal(summary)
		if err != nil {
			return err
		}
		fmt.Println(string(b))
	}
	if monitorSet && ctx.Err() == nil {
		fmt.Fprintf(os.Stderr, "monitor still serving on %s; stop with Ctrl-C\n", monitorURL)
		<-ctx.Done()
	}
	return runErr
}
