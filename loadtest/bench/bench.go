package bench

import (
	"context"
	"flag"
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/creditflow/creditflow/internal/gcpolicy"
	"github.com/creditflow/creditflow/internal/kafkasec"
	"github.com/creditflow/creditflow/internal/pyenv"
	"github.com/creditflow/creditflow/loadtest/internal/cmdutil"
	"github.com/creditflow/creditflow/processors/stage"
	"github.com/creditflow/creditflow/producers"
	"github.com/creditflow/creditflow/schemas"
	"github.com/creditflow/creditflow/vocab"
	"github.com/rs/zerolog"
)

// benchSec is the bench's Kafka security: plaintext (the embedded broker, or
// a test cluster).
var benchSec kafkasec.Config

// SizeResult is what the bench measured for one trajectory size. JSON names
// are stable. Rates are records per second over the same records on the same
// broker; ratios are against the passthrough of those records.
type SizeResult struct {
	Size            string       `json:"size"`
	Method          vocab.Method `json:"method"`
	Records         int          `json:"records"`
	Tokens          int          `json:"tokens"`           // mean tokens per trajectory
	TrajectoryBytes int          `json:"trajectory_bytes"` // mean trajectory record (score stage input)
	RecordBytes     int          `json:"record_bytes"`     // mean scored record (advantage stage input; what an open member holds)

	PassthroughPerS        float64 `json:"passthrough_per_s"`        // trajectories read and written back, no work
	PassthroughScoredPerS  float64 `json:"passthrough_scored_per_s"` // scored records read and written back, no work
	ScorePerS              float64 `json:"score_per_s"`
	ScoreVsPassthrough     float64 `json:"score_vs_passthrough"` // score_per_s / passthrough_per_s
	AdvantagePerS          float64 `json:"advantage_per_s"`
	AdvantageVsPassthrough float64 `json:"advantage_vs_passthrough"` // advantage_per_s / passthrough_scored_per_s
	ScoreUsPerRecord       float64 `json:"score_us_per_record"`
	AdvantageUsPerRecord   float64 `json:"advantage_us_per_record"`
	// CPU time per record of the bench process (stage, clients) plus the
	// embedded broker's process (not the instant scorer's), and the ratios
	// by CPU (passthrough's / the stage's): what the throughput ratios
	// become when the phase has the CPUs to itself.
	PassthroughCPUUs          float64 `json:"passthrough_cpu_us_per_record"`
	PassthroughScoredCPUUs    float64 `json:"passthrough_scored_cpu_us_per_record"`
	ScoreCPUUs                float64 `json:"score_cpu_us_per_record"`
	AdvantageCPUUs            float64 `json:"advantage_cpu_us_per_record"`
	ScoreVsPassthroughCPU     float64 `json:"score_vs_passthrough_cpu"`
	AdvantageVsPassthroughCPU float64 `json:"advantage_vs_passthrough_cpu"`
	// The stages' floors (floor.go): the stage's input read and, for each
	// record, one of the records the stage wrote written, no work. Over the
	// passthrough of the same input they bound score_vs_passthrough and
	// advantage_vs_passthrough for the record formats as they are.
	ScoreFloorPerS              float64 `json:"score_floor_per_s"`
	ScoreFloorVsPassthrough     float64 `json:"score_floor_vs_passthrough"`
	ScoreFloorCPUUs             float64 `json:"score_floor_cpu_us_per_record"`
	AdvantageFloorPerS          float64 `json:"advantage_floor_per_s"`
	AdvantageFloorVsPassthrough float64 `json:"advantage_floor_vs_passthrough"`
	AdvantageFloorCPUUs         float64 `json:"advantage_floor_cpu_us_per_record"`
	OverheadRatePerS            float64 `json:"overhead_rate_per_s"` // the input rate of the latency run: half of advantage_per_s
	OverheadP50Ms               float64 `json:"overhead_p50_ms"`
	OverheadP99Ms               float64 `json:"overhead_p99_ms"`

	OpenGroups                 int     `json:"open_groups"`
	HeapBytes                  uint64  `json:"heap_bytes"`
	RSSBytes                   uint64  `json:"rss_bytes"`        // the bench process: stages and clients
	BrokerRSSBytes             uint64  `json:"broker_rss_bytes"` // the embedded broker's process (0 with --brokers)
	BytesPerOpenMember         float64 `json:"bytes_per_open_member"`
	BytesPerOpenMemberVsRecord float64 `json:"bytes_per_open_member_vs_record"`

	// The trainer's end (sizes with it): samples/s of a Python trainer
	// (SampleStream.batches → to_torch) and of a bare confluent_kafka
	// consumer over the same samples, their ratio, the trainer's floor (the
	// bare consumer plus views of each sample's arrays and the same tensors:
	// a trainer whose decoding costs nothing) and its ratio to the bare
	// consumer, the trainer's ratio to its floor (the target: ≥ 0.8), the
	// same trainer with fastavro decoding and its ratio to the floor, the
	// tensor library, or why it did not run.
	TrainerPerS            float64 `json:"trainer_per_s,omitempty"`
	TrainerConsumerPerS    float64 `json:"trainer_consumer_per_s,omitempty"`
	TrainerVsConsumer      float64 `json:"trainer_vs_consumer,omitempty"`
	TrainerFloorPerS       float64 `json:"trainer_floor_per_s,omitempty"`
	TrainerFloorVsConsumer float64 `json:"trainer_floor_vs_consumer,omitempty"`
	TrainerVsFloor         float64 `json:"trainer_vs_floor,omitempty"`
	TrainerFastavroPerS    float64 `json:"trainer_fastavro_per_s,omitempty"`
	TrainerFastavroVsFloor float64 `json:"trainer_fastavro_vs_floor,omitempty"`
	// CPU time of the Python reading thread per sample (trainer, bare
	// consumer, floor, fastavro trainer) and floor / trainer in CPU: the
	// ratio a loaded machine shifts least.
	TrainerCPUUs         float64 `json:"trainer_cpu_us_per_sample,omitempty"`
	TrainerConsumerCPUUs float64 `json:"trainer_consumer_cpu_us_per_sample,omitempty"`
	TrainerFloorCPUUs    float64 `json:"trainer_floor_cpu_us_per_sample,omitempty"`
	TrainerFastavroCPUUs float64 `json:"trainer_fastavro_cpu_us_per_sample,omitempty"`
	TrainerVsFloorCPU    float64 `json:"trainer_vs_floor_cpu,omitempty"`
	TrainerTensors       string  `json:"trainer_tensors,omitempty"`
	// rounds of the trainer phase (each reader once a round, the rates pooled)
	// and the trainer / floor of each round
	TrainerRounds         int       `json:"trainer_rounds,omitempty"`
	TrainerVsFloorByRound []float64 `json:"trainer_vs_floor_by_round,omitempty"`
	TrainerNote           string    `json:"trainer_note,omitempty"`

	Error string `json:"error,omitempty"` // what failed for this size (the fields it did not reach are 0)
}

// BenchResult is the default size's result with the other sizes in Sizes.
type BenchResult struct {
	SizeResult
	Sizes      []SizeResult `json:"sizes"`
	Partitions int          `json:"partitions"`
	GOMAXPROCS int          `json:"gomaxprocs"`
	// GC is the garbage collector's policy of the bench and its children,
	// the stages' own (internal/gcpolicy): "GC percentage 200 (default),
	// memory limit none (none)" unless GOGC or GOMEMLIMIT set it.
	GC string `json:"gc"`
	// Compression is every producer's codec in the run (--compression).
	Compression string        `json:"compression"`
	Seconds     float64       `json:"seconds"`
	Scaling     []ScalingCell `json:"scaling,omitempty"`
}

type benchOptions struct {
	records      int
	sizes        string
	method       vocab.Method
	partitions   int
	openGroups   int
	repeat       int
	scaling      bool
	timeout      time.Duration
	seed         uint64
	brokers      string
	cpuProfile   string
	profilePhase string
	memProfile   string
	python       string // the trainer phase's interpreter; "" skips the phase
	compression  string // every producer's codec
}

// Cmd runs the bench command with its flags (go run ./loadtest bench -h).
func Cmd(args []string) (int, error) {
	o := benchOptions{records: 2000, partitions: 2, openGroups: 10000, repeat: 3, timeout: 90 * time.Second, seed: 7,
		compression: stage.DefaultCompression}
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.IntVar(&o.records, "records", o.records, "trajectories of the default (search-qa) size; other sizes get about the same bytes")
	var names []string
	for _, s := range benchSizes {
		names = append(names, s.Name)
	}
	fs.StringVar(&o.sizes, "sizes", strings.Join(names, ","), "sizes to run, comma-separated")
	fs.StringVar((*string)(&o.method), "method", "", "run only the sizes of this method (lapo or attnsr); default all")
	fs.IntVar(&o.partitions, "partitions", o.partitions, "partitions per topic")
	fs.IntVar(&o.openGroups, "open-groups", o.openGroups, "open groups of the memory measurement (default size; larger sizes hold about the same bytes)")
	fs.IntVar(&o.repeat, "repeat", o.repeat, "runs of each throughput phase (passthroughs twice as many); rates pool all runs")
	fs.BoolVar(&o.scaling, "scaling", false, "also measure 1, 2, 4 partitions x 1, 2 replicas (default size) and print a markdown table")
	fs.DurationVar(&o.timeout, "timeout", o.timeout, "give up on one phase after this long")
	fs.Uint64Var(&o.seed, "seed", o.seed, "workload seed")
	fs.StringVar(&o.brokers, "brokers", "", "a real cluster's bootstrap list host:port,... (plaintext; default: an embedded broker)")
	fs.StringVar(&o.cpuProfile, "cpuprofile", "", "write a CPU profile of the whole run to this file, the embedded broker's (a child process) to this file + \".broker\" and the instant scorer's (another) to this file + \".scorer\"")
	fs.StringVar(&o.profilePhase, "profile-phase", "", "with --cpuprofile: profile only the first run of this phase (passthrough, score, score-floor, passthrough-scored, advantage or advantage-floor) of the first size")
	fs.StringVar(&o.memProfile, "memprofile", "", "write a heap (allocations) profile at the end to this file")
	fs.StringVar(&o.python, "trainer-python", pyenv.Interpreter(), "the interpreter of the trainer phase (needs numpy and confluent_kafka; torch when present; default: the project's Python environment, creditflow pyenv); empty skips the phase")
	fs.StringVar(&o.compression, "compression", o.compression, "the codec of every producer in the run, the stages' and the passthroughs' alike: lz4, zstd, snappy, gzip or none (what each costs: docs/kafka.md, Compression)")
	asJSON := fs.Bool("json", false, "end with one JSON object on the last line of stdout")
	if err := fs.Parse(args); err != nil {
		return 2, err
	}
	var sizes []benchSize
	for _, n := range strings.Split(o.sizes, ",") {
		n = strings.TrimSpace(n)
		found := false
		for _, s := range benchSizes {
			if s.Name == n && (o.method == "" || o.method == s.Method) {
				sizes, found = append(sizes, s), true
			}
		}
		if !found && n != "" && o.method == "" {
			return 2, fmt.Errorf("unknown size %q: use one of %s", n, strings.Join(names, ", "))
		}
	}
	if len(sizes) == 0 {
		return 2, fmt.Errorf("no size to run (sizes %q, method %q)", o.sizes, o.method)
	}
	if o.compression == "" {
		o.compression = stage.DefaultCompression
	}
	if err := producers.CheckCompression(o.compression); err != nil {
		return 2, fmt.Errorf("--compression: %w", err)
	}
	switch o.profilePhase {
	case "", "passthrough", "score", "score-floor", "passthrough-scored", "advantage", "advantage-floor":
	default:
		return 2, fmt.Errorf("--profile-phase %q: use passthrough, score, score-floor, passthrough-scored, advantage or advantage-floor", o.profilePhase)
	}
	if o.cpuProfile != "" && o.profilePhase == "" {
		stopProfile, err := startCPUProfile(o.cpuProfile)
		if err != nil {
			return 2, err
		}
		defer stopProfile()
	}
	ctx, stop := cmdutil.SignalContext()
	defer stop()
	res, err := runBench(ctx, o, sizes)
	if o.memProfile != "" {
		if f, ferr := os.Create(o.memProfile); ferr == nil {
			_ = pprof.Lookup("allocs").WriteTo(f, 0)
			f.Close()
		}
	}
	printBench(res)
	if *asJSON {
		cmdutil.PrintJSON(res)
	}
	if err != nil {
		return 1, err
	}
	return 0, nil
}

func runBench(ctx context.Context, o benchOptions, sizes []benchSize) (BenchResult, error) {
	start := time.Now()
	res := BenchResult{Partitions: o.partitions, GOMAXPROCS: runtime.GOMAXPROCS(0), Sizes: []SizeResult{}, Compression: o.compression}
	if p, ok := gcpolicy.Applied(); ok {
		res.GC = p.String()
	}
	env := &benchEnv{run: strconv.FormatInt(time.Now().UnixMilli(), 36), partitions: o.partitions, timeout: o.timeout, log: zerolog.Nop(), prog: newBenchProgress(),
		profilePhase: o.profilePhase, cpuProfile: o.cpuProfile, compression: o.compression}
	defer env.prog.close()
	// The embedded broker keeps every record in its memory: each size gets a
	// fresh one. With --cpuprofile the first one writes its profile too.
	brokerProfile, scorerProfile := "", ""
	if o.cpuProfile != "" {
		brokerProfile, scorerProfile = o.cpuProfile+".broker", o.cpuProfile+".scorer"
	}
	useBroker := func() (func(), error) {
		stop, err := env.useBroker(o, brokerProfile)
		brokerProfile = ""
		return stop, err
	}
	client, stopScorer, err := startInstantScorer(ctx, scorerProfile)
	if err != nil {
		return res, err
	}
	defer stopScorer()
	env.scorer = client

	for i, s := range sizes {
		closeBroker, err := useBroker()
		if err != nil {
			return res, err
		}
		r := env.runSize(ctx, s, s.records(o.records), o)
		closeBroker()
		if r.Error != "" {
			cmdutil.Stderrf("bench: %s: %s", s.Name, r.Error)
		}
		if i == 0 {
			res.SizeResult = r
		} else {
			res.Sizes = append(res.Sizes, r)
		}
		if ctx.Err() != nil {
			return res, ctx.Err()
		}
	}
	if o.scaling {
		closeBroker, err := useBroker()
		if err != nil {
			return res, err
		}
		defer closeBroker()
		cells, err := env.scaling(ctx, sizes[0], sizes[0].records(o.records), o.seed)
		res.Scaling = cells
		if err != nil {
			return res, err
		}
	}
	res.Seconds = cmdutil.Round3(time.Since(start).Seconds())
	return res, nil
}

// runSize runs every phase on one size; the first failure ends the size
// and is reported in its Error.
func (e *benchEnv) runSize(ctx context.Context, s benchSize, n int, o benchOptions) (r SizeResult) {
	r = SizeResult{Size: s.Name, Method: s.Method, Records: n}
	fail := func(err error) SizeResult {
		r.Error = err.Error()
		return r
	}
	e.prog.size = s.Name
	in, err := makeInput(s, n, o.seed)
	if err != nil {
		return fail(err)
	}
	r.Tokens, r.TrajectoryBytes = in.tokens, meanLen(in.values)
	maxTokens := 0
	if s.Tokens > 0 {
		maxTokens = s.Tokens
	}

	// The same pre-generated trajectories feed the passthrough and the score
	// stage; the score stage's output feeds the advantage stage and its
	// passthrough. Each is run o.repeat times (the short passthroughs twice as
	// often), interleaved, and the runs are pooled: all records over all time.
	input, err := e.topics(ctx, e.partitions)
	if err != nil {
		return fail(err)
	}
	if err := e.produceAll(ctx, input.Trajectories, schemas.Trajectories().Name(), in.keys, in.values); err != nil {
		return fail(fmt.Errorf("write the input: %w", err))
	}
	var pass, passScored, score, advantage, scoreFloor, advFloor rate
	scoredTopic, samplesTopic := "", ""
	var scoredRecs, sampleRecs []floorRecord
	for rep := 0; rep < max(1, o.repeat); rep++ {
		for k := 0; k < 2; k++ { // short: twice per round
			pt, err := e.passthrough(ctx, "passthrough", input.Trajectories, e.name("passthrough-out"), stage.DefaultConfig().ScoreReadBuffer(), 1, n, nil)
			if err != nil {
				return fail(err)
			}
			pass = pass.plus(pt)
		}
		topics, err := e.topics(ctx, e.partitions)
		if err != nil {
			return fail(err)
		}
		created := all(topics)
		topics.Trajectories = input.Trajectories
		sc, err := e.startStage(ctx, "score", s.Method, topics, maxTokens, 1, nil)
		if err != nil {
			return fail(err)
		}
		st, err := e.measure(ctx, "score", n, sc.counts("score", topics.Scored))
		sc.stop()
		if err != nil {
			return fail(err)
		}
		score = score.plus(st)
		if scoredTopic == "" { // the first run's output feeds the later phases
			scoredTopic = topics.Scored
			created = slices.DeleteFunc(created, func(t string) bool { return t == scoredTopic })
		}
		e.drop(ctx, created...)
		if scoredRecs == nil {
			if scoredRecs, err = e.readFloorRecords(ctx, scoredTopic); err != nil {
				return fail(fmt.Errorf("read scored records for the floor: %w", err))
			}
		}
		for k := 0; k < 2 && len(scoredRecs) > 0; k++ {
			ft, err := e.floor(ctx, "score-floor", input.Trajectories, stage.DefaultConfig().ScoreReadBuffer(), scoredRecs, true, n)
			if err != nil {
				return fail(err)
			}
			scoreFloor = scoreFloor.plus(ft)
		}
		for k := 0; k < 2; k++ {
			ps, err := e.passthrough(ctx, "passthrough-scored", scoredTopic, e.name("passthrough-out"), 256, 1, n, nil)
			if err != nil {
				return fail(err)
			}
			passScored = passScored.plus(ps)
		}
		if topics, err = e.topics(ctx, e.partitions); err != nil {
			return fail(err)
		}
		created = all(topics)
		topics.Scored = scoredTopic
		adv, err := e.startStage(ctx, "advantage", s.Method, topics, maxTokens, 1, nil)
		if err != nil {
			return fail(err)
		}
		at, err := e.measure(ctx, "advantage", n, adv.counts("advantage", topics.Samples))
		adv.stop()
		if err != nil {
			return fail(err)
		}
		advantage = advantage.plus(at)
		if sampleRecs == nil {
			if sampleRecs, err = e.readFloorRecords(ctx, topics.Samples); err != nil {
				return fail(fmt.Errorf("read samples for the floor: %w", err))
			}
		}
		for k := 0; k < 2 && len(sampleRecs) > 0; k++ {
			ft, err := e.floor(ctx, "advantage-floor", scoredTopic, 256, sampleRecs, false, n)
			if err != nil {
				return fail(err)
			}
			advFloor = advFloor.plus(ft)
		}
		if s.Trainer && o.python != "" && rep == max(1, o.repeat)-1 { // the last run's samples feed the trainer phase
			samplesTopic = topics.Samples
			created = slices.DeleteFunc(created, func(t string) bool { return t == samplesTopic })
		}
		e.drop(ctx, created...)
	}
	if samplesTopic != "" {
		tr, err := e.trainer(ctx, o.python, samplesTopic, n, o.repeat)
		e.drop(ctx, samplesTopic)
		if err != nil {
			return fail(err)
		}
		r.TrainerPerS, r.TrainerConsumerPerS, r.TrainerTensors, r.TrainerNote = cmdutil.Round3(tr.PerS), cmdutil.Round3(tr.ConsumerPerS), tr.Tensors, tr.Note
		r.TrainerRounds, r.TrainerVsFloorByRound = tr.Rounds, tr.VsFloorByRound
		if tr.ConsumerPerS > 0 {
			r.TrainerVsConsumer = cmdutil.Round3(tr.PerS / tr.ConsumerPerS)
			r.TrainerFloorPerS, r.TrainerFloorVsConsumer = cmdutil.Round3(tr.FloorPerS), cmdutil.Round3(tr.FloorPerS/tr.ConsumerPerS)
		}
		r.TrainerFastavroPerS = cmdutil.Round3(tr.FastavroPerS)
		if tr.FloorPerS > 0 {
			r.TrainerVsFloor = cmdutil.Round3(tr.PerS / tr.FloorPerS)
			r.TrainerFastavroVsFloor = cmdutil.Round3(tr.FastavroPerS / tr.FloorPerS)
		}
		r.TrainerCPUUs, r.TrainerConsumerCPUUs = cmdutil.Round3(tr.CPUUs), cmdutil.Round3(tr.ConsumerCPUUs)
		r.TrainerFloorCPUUs, r.TrainerFastavroCPUUs = cmdutil.Round3(tr.FloorCPUUs), cmdutil.Round3(tr.FastavroCPUUs)
		if tr.CPUUs > 0 && tr.FloorCPUUs > 0 {
			r.TrainerVsFloorCPU = cmdutil.Round3(tr.FloorCPUUs / tr.CPUUs)
		}
	}
	keys, scored, err := e.readAll(ctx, scoredTopic)
	if err != nil {
		return fail(err)
	}
	e.drop(ctx, input.Trajectories, scoredTopic) // the later phases write their own
	r.RecordBytes = meanLen(scored)
	r.PassthroughPerS, r.PassthroughScoredPerS = cmdutil.Round3(pass.PerS), cmdutil.Round3(passScored.PerS)
	r.ScorePerS, r.AdvantagePerS = cmdutil.Round3(score.PerS), cmdutil.Round3(advantage.PerS)
	r.ScoreVsPassthrough = cmdutil.Round3(score.PerS / pass.PerS)
	r.AdvantageVsPassthrough = cmdutil.Round3(advantage.PerS / passScored.PerS)
	if scoreFloor.PerS > 0 {
		r.ScoreFloorPerS, r.ScoreFloorCPUUs = cmdutil.Round3(scoreFloor.PerS), cmdutil.Round3(scoreFloor.CPUUsPerRec)
		r.ScoreFloorVsPassthrough = cmdutil.Round3(scoreFloor.PerS / pass.PerS)
	}
	if advFloor.PerS > 0 {
		r.AdvantageFloorPerS, r.AdvantageFloorCPUUs = cmdutil.Round3(advFloor.PerS), cmdutil.Round3(advFloor.CPUUsPerRec)
		r.AdvantageFloorVsPassthrough = cmdutil.Round3(advFloor.PerS / passScored.PerS)
	}
	r.ScoreUsPerRecord, r.AdvantageUsPerRecord = cmdutil.Round3(1e6/score.PerS), cmdutil.Round3(1e6/advantage.PerS)
	r.PassthroughCPUUs, r.PassthroughScoredCPUUs = cmdutil.Round3(pass.CPUUsPerRec), cmdutil.Round3(passScored.CPUUsPerRec)
	r.ScoreCPUUs, r.AdvantageCPUUs = cmdutil.Round3(score.CPUUsPerRec), cmdutil.Round3(advantage.CPUUsPerRec)
	if score.CPUUsPerRec > 0 && advantage.CPUUsPerRec > 0 {
		r.ScoreVsPassthroughCPU = cmdutil.Round3(pass.CPUUsPerRec / score.CPUUsPerRec)
		r.AdvantageVsPassthroughCPU = cmdutil.Round3(passScored.CPUUsPerRec / advantage.CPUUsPerRec)
	}

	r.OverheadRatePerS = cmdutil.Round3(r.AdvantagePerS / 2)
	p50, p99, err := e.overhead(ctx, s.Method, keys, scored, r.OverheadRatePerS, maxTokens)
	if err != nil {
		return fail(err)
	}
	r.OverheadP50Ms, r.OverheadP99Ms = cmdutil.Round3(p50), cmdutil.Round3(p99)

	groups := o.openGroups
	if r.RecordBytes > 0 && s.Name != benchSizes[0].Name {
		// About the bytes of the default size's open groups.
		groups = min(groups, max(100, o.openGroups*6000/r.RecordBytes))
	}
	m, err := e.memory(ctx, s.Method, scored, groups, maxTokens)
	if err != nil {
		return fail(err)
	}
	r.OpenGroups, r.HeapBytes, r.RSSBytes, r.BrokerRSSBytes = m.OpenGroups, m.HeapBytes, m.RSSBytes, m.BrokerRSSBytes
	r.BytesPerOpenMember = cmdutil.Round3(m.BytesPerOpenMember)
	if r.RecordBytes > 0 {
		r.BytesPerOpenMemberVsRecord = cmdutil.Round3(m.BytesPerOpenMember / float64(r.RecordBytes))
	}
	return r
}

func printBench(r BenchResult) {
	w := os.Stdout
	fmt.Fprintf(w, "%d partitions, GOMAXPROCS %d, %.1fs; rates in records/s on the same records and broker\n", r.Partitions, r.GOMAXPROCS, r.Seconds)
	if r.GC != "" {
		fmt.Fprintf(w, "%s\n", r.GC)
	}
	if r.Compression != "" {
		fmt.Fprintf(w, "every producer compresses with %s\n", r.Compression)
	}
	fmt.Fprintf(w, "%-11s %7s %6s %9s %9s | %11s %9s %6s | %11s %9s %6s | %8s %8s | %11s %6s\n",
		"size", "records", "tokens", "traj B", "scored B", "passthrough", "score", "ratio", "pass scored", "advantage", "ratio", "p50 ms", "p99 ms", "B/open mbr", "x rec")
	for _, s := range append([]SizeResult{r.SizeResult}, r.Sizes...) {
		if s.Size == "" {
			continue
		}
		fmt.Fprintf(w, "%-11s %7d %6d %9d %9d | %11.0f %9.0f %6.2f | %11.0f %9.0f %6.2f | %8.1f %8.1f | %11.0f %6.2f\n",
			s.Size, s.Records, s.Tokens, s.TrajectoryBytes, s.RecordBytes, s.PassthroughPerS, s.ScorePerS, s.ScoreVsPassthrough,
			s.PassthroughScoredPerS, s.AdvantagePerS, s.AdvantageVsPassthrough, s.OverheadP50Ms, s.OverheadP99Ms,
			s.BytesPerOpenMember, s.BytesPerOpenMemberVsRecord)
		if s.ScoreFloorPerS > 0 || s.AdvantageFloorPerS > 0 {
			fmt.Fprintf(w, "%-11s floors (the input read, the stage's output written, no work): score %.0f/s, %.2f of passthrough; advantage %.0f/s, %.2f of pass scored\n",
				"", s.ScoreFloorPerS, s.ScoreFloorVsPassthrough, s.AdvantageFloorPerS, s.AdvantageFloorVsPassthrough)
		}
		printTrainer(w, s)
		if s.Error != "" {
			fmt.Fprintf(w, "%-11s error: %s\n", "", s.Error)
		}
	}
	if d := r.SizeResult; d.OpenGroups > 0 {
		fmt.Fprintf(w, "memory (%s): %d open groups: Go heap %.1f MiB, RSS %.1f MiB", d.Size, d.OpenGroups,
			float64(d.HeapBytes)/(1<<20), float64(d.RSSBytes)/(1<<20))
		if d.BrokerRSSBytes > 0 {
			fmt.Fprintf(w, "; the embedded broker's process: RSS %.1f MiB", float64(d.BrokerRSSBytes)/(1<<20))
		}
		fmt.Fprintln(w)
	}
	if len(r.Scaling) > 0 {
		fmt.Fprintln(w)
		fmt.Fprint(w, scalingTable(r.Scaling))
	}
}

// benchProgress is the live progress line on stderr.
type benchProgress struct {
	mu       sync.Mutex
	size     string
	phase    string
	in, out  int
	want     int
	began    time.Time
	done     chan struct{}
	stopOnce sync.Once
}

func newBenchProgress() *benchProgress {
	p := &benchProgress{done: make(chan struct{})}
	go func() {
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-p.done:
				return
			case <-t.C:
				p.mu.Lock()
				if p.phase != "" {
					fmt.Fprintf(os.Stderr, "\rbench: %-10s %-18s read %6d, out %6d of %6d (%4.1fs)   ",
						p.size, p.phase, p.in, p.out, p.want, time.Since(p.began).Seconds())
				}
				p.mu.Unlock()
			}
		}
	}()
	return p
}

func (p *benchProgress) start(phase string, want int) {
	p.mu.Lock()
	p.phase, p.want, p.in, p.out, p.began = phase, want, 0, 0, time.Now()
	p.mu.Unlock()
}

func (p *benchProgress) set(in, out int) {
	p.mu.Lock()
	p.in, p.out = in, out
	p.mu.Unlock()
}

func (p *benchProgress) stop() {
	p.mu.Lock()
	if p.phase != "" {
		fmt.Fprintf(os.Stderr, "\rbench: %-10s %-18s %d records in %.1fs%30s\n", p.size, p.phase, p.want, time.Since(p.began).Seconds(), "")
	}
	p.phase = ""
	p.mu.Unlock()
}

func (p *benchProgress) close() { p.stopOnce.Do(func() { close(p.done) }) }

// startCPUProfile writes this process's CPU profile to path until stop.
func startCPUProfile(path string) (stop func(), err error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}
