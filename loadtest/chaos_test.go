package main

import (
	"context"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/creditflow/creditflow/processors/credit"
	"github.com/creditflow/creditflow/vocab"
)

// TestMain lets the test binary act as a scorer process (scorerCommand
// starts os.Executable with scorer-serve when creditflow has no scorer
// command).
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == scorerServeCmd {
		code, err := scorerServe(os.Args[2:])
		if err != nil {
			os.Stderr.WriteString(err.Error() + "\n")
		}
		os.Exit(code)
	}
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

var (
	binOnce sync.Once
	binDir  string
	binPath string
	binErr  error
)

// creditflowBin builds the creditflow binary once for all tests of the run.
func creditflowBin(t *testing.T) string {
	t.Helper()
	binOnce.Do(func() {
		dir, err := os.MkdirTemp("", "creditflow-loadtest-bin-")
		if err != nil {
			binErr = err
			return
		}
		binDir = dir
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		binPath, binErr = buildBinary(ctx, dir)
	})
	if binErr != nil {
		t.Fatalf("building creditflow: %v", binErr)
	}
	return binPath
}

func testDir(t *testing.T) string {
	dir := filepath.Join(t.TempDir(), "run")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

func chaosOpts(t *testing.T, method vocab.Method, groups int) ChaosOptions {
	o := DefaultChaos()
	o.Method, o.Groups, o.Kills = method, groups, 2
	o.ProduceEvery = 300 * time.Millisecond
	o.Timeout = 5 * time.Minute
	o.Bin = creditflowBin(t)
	o.Dir = testDir(t)
	o.Logf = t.Logf
	return o
}

func checkChaos(t *testing.T, res ChaosResult, err error, wantKills int) {
	t.Helper()
	t.Logf("result: %+v", res)
	if err != nil {
		t.Fatalf("chaos run: %v", err)
	}
	if res.Lost != 0 || res.Mismatched != 0 || res.Invalid != 0 {
		t.Fatalf("lost %d (e.g. %v), mismatched %d (e.g. %v), invalid %d; want all 0", res.Lost, res.LostIDs, res.Mismatched, res.BadIDs, res.Invalid)
	}
	if res.Seen != res.Expected || res.Expected == 0 {
		t.Fatalf("seen %d of %d samples", res.Seen, res.Expected)
	}
	if res.Kills != wantKills {
		t.Fatalf("%d processor kills happened, want %d: the faults were not exercised", res.Kills, wantKills)
	}
	if res.ProcessorStarts != wantKills+1 {
		t.Fatalf("processor started %d times, want %d", res.ProcessorStarts, wantKills+1)
	}
	if res.UnexpectedExits != 0 {
		t.Fatalf("%d child processes died without being stopped (see their logs)", res.UnexpectedExits)
	}
	if res.UnsettledKills != 0 {
		t.Fatalf("%d stops were made while the consumer groups were not settled", res.UnsettledKills)
	}
	if res.StateResets != 0 {
		t.Fatalf("%d partitions found no state snapshot and started the EMA baseline over", res.StateResets)
	}
	if res.Unexpected != 0 || res.DeadLetters != 0 {
		t.Fatalf("%d unexpected samples and %d dead letters (%v) from valid input", res.Unexpected, res.DeadLetters, res.DeadByReason)
	}
}

// TestChaosLAPO: two SIGKILLs of `creditflow run` under load lose no LAPO
// sample and change none (byte-identical to an uninterrupted run).
func TestChaosLAPO(t *testing.T) {
	if testing.Short() {
		t.Skip("chaos harness: about a minute of child processes")
	}
	o := chaosOpts(t, credit.MethodLAPO, 8)
	res, err := RunChaos(context.Background(), o)
	checkChaos(t, res, err, o.Kills)
}

// TestChaosAttnSR: the same for AttnSR, whose samples carry the EMA
// baseline R̄_t: a byte-identical sample after a kill shows the baseline
// continued exactly across the restart. Its state topic has 4 partitions.
func TestChaosAttnSR(t *testing.T) {
	if testing.Short() {
		t.Skip("chaos harness: about a minute of child processes")
	}
	o := chaosOpts(t, credit.MethodAttnSR, 8)
	o.StatePartitions = 4 // snapshots spread over the state topic's partitions
	res, err := RunChaos(context.Background(), o)
	checkChaos(t, res, err, o.Kills)
}

// TestGracefulRestartsNoDuplicates: stops by SIGTERM drain in-flight work,
// write the snapshots and commit, so restarts neither lose nor repeat a
// sample.
func TestGracefulRestartsNoDuplicates(t *testing.T) {
	if testing.Short() {
		t.Skip("chaos harness: about a minute of child processes")
	}
	o := chaosOpts(t, credit.MethodAttnSR, 8)
	o.Graceful = true
	res, err := RunChaos(context.Background(), o)
	checkChaos(t, res, err, o.Kills)
	if res.Duplicates != 0 {
		t.Fatalf("%d duplicate samples after graceful restarts, want 0", res.Duplicates)
	}
	if res.UncleanStops != 0 || !res.CleanShutdown {
		t.Fatalf("%d SIGTERM stops did not end with exit status 0 in time (final stop clean: %v)", res.UncleanStops, res.CleanShutdown)
	}
}

// TestRebalanceTwoReplicas: two replicas in one consumer group; one joins
// under load, one leaves by SIGTERM and rejoins, one is SIGKILLed and
// rejoins; nothing is lost or changed.
func TestRebalanceTwoReplicas(t *testing.T) {
	if testing.Short() {
		t.Skip("rebalance harness: about a minute of child processes")
	}
	o := DefaultRebalance()
	o.Replicas, o.Events, o.Groups = 2, 3, 8
	o.ProduceEvery = 300 * time.Millisecond
	o.Timeout = 5 * time.Minute
	o.Bin = creditflowBin(t)
	o.Dir = testDir(t)
	o.Logf = t.Logf
	res, err := RunRebalance(context.Background(), o)
	t.Logf("result: %+v", res)
	if err != nil {
		t.Fatalf("rebalance run: %v", err)
	}
	if res.Lost != 0 || res.Mismatched != 0 || res.Invalid != 0 {
		t.Fatalf("lost %d (e.g. %v), mismatched %d (e.g. %v), invalid %d; want all 0", res.Lost, res.LostIDs, res.Mismatched, res.BadIDs, res.Invalid)
	}
	if res.UnexpectedExits != 0 {
		t.Fatalf("%d replicas died without being stopped (see their logs)", res.UnexpectedExits)
	}
	if res.Unsettled != 0 {
		t.Fatalf("%d membership changes were made while the consumer groups were not settled", res.Unsettled)
	}
	if res.Joins < 1 || res.Terms+res.Kills < 1 {
		t.Fatalf("membership changes: %d joins, %d SIGTERM, %d SIGKILL: the rebalance was not exercised", res.Joins, res.Terms, res.Kills)
	}
}

// TestCompareDetectsDifferences checks the comparison itself on known
// inputs: a lost sample, a changed byte and an identical duplicate.
func TestCompareDetectsDifferences(t *testing.T) {
	w := workload{groups: 1}
	c := newCollector(nil, topicsFor("x"), w)
	ref := map[string][]byte{}
	for i := 0; i < groupSize; i++ {
		id := "q000000-" + string(rune('0'+i))
		ref[id] = []byte{byte(i), 1, 2}
	}
	c.copies["q000000-0"] = [][]byte{{0, 1, 2}, {0, 1, 2}} // identical duplicate
	c.copies["q000000-1"] = [][]byte{{1, 1, 2}}
	c.copies["q000000-2"] = [][]byte{{2, 1, 9}} // changed
	c.copies["q000000-3"] = [][]byte{{3, 1, 2}, {3, 0, 2}}
	c.copies["other"] = [][]byte{{7}}
	// q000000-4 lost
	r := c.compare(ref, nil)
	if r.Expected != 5 || r.Seen != 4 || r.Lost != 1 || r.Mismatched != 2 || r.Duplicates != 2 || r.Unexpected != 1 {
		t.Fatalf("got %+v; want expected 5, seen 4, lost 1, mismatched 2, duplicates 2, unexpected 1", r)
	}
	if r.LostIDs[0] != "q000000-4" || r.BadIDs[0] != "q000000-2" || r.BadIDs[1] != "q000000-3" {
		t.Fatalf("ids: lost %v, mismatched %v", r.LostIDs, r.BadIDs)
	}
}

// TestProgressTargets: fault moments are spread over the run, in order,
// inside (5%, 90%] of the expected samples.
func TestProgressTargets(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	got := progressTargets(r, 5, 1000)
	if len(got) != 5 {
		t.Fatalf("got %d targets, want 5", len(got))
	}
	for i, x := range got {
		if x < 50 || x > 900 || (i > 0 && x < got[i-1]) {
			t.Fatalf("targets %v: want increasing values in [50, 900]", got)
		}
		if lo, hi := 50+170*i, 50+170*(i+1); x < lo || x > hi {
			t.Fatalf("target %d = %d outside its fifth [%d, %d] of the run", i, x, lo, hi)
		}
	}
}

// TestFaultPlan: each fault's target lies inside the input produced before
// it (its own segment), so every planned fault can happen; segments cover
// every group once, in order.
func TestFaultPlan(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for _, c := range []struct{ n, groups int }{{5, 40}, {2, 8}, {3, 4}, {1, 2}, {0, 5}} {
		p, err := newFaultPlan(r, c.n, c.groups)
		if err != nil {
			t.Fatalf("%d faults, %d groups: %v", c.n, c.groups, err)
		}
		if len(p.targets) != c.n {
			t.Fatalf("%d targets for %d faults", len(p.targets), c.n)
		}
		for i, x := range p.targets {
			lo, hi := p.bounds[i]*groupSize, p.bounds[i+1]*groupSize
			if x <= lo || x > hi {
				t.Fatalf("%d faults, %d groups: target %d = %d outside segment (%d, %d]", c.n, c.groups, i, x, lo, hi)
			}
		}
		prev := 0
		for g := 0; g < c.groups; g++ {
			s := p.segment(g)
			if s < prev || s > c.n {
				t.Fatalf("%d faults, %d groups: group %d in segment %d after %d", c.n, c.groups, g, s, prev)
			}
			prev = s
		}
		if c.n > 0 && (p.segment(0) != 0 || p.segment(c.groups-1) != c.n) {
			t.Fatalf("%d faults, %d groups: first group in segment %d, last in %d", c.n, c.groups, p.segment(0), p.segment(c.groups-1))
		}
	}
	if _, err := newFaultPlan(r, 5, 5); err == nil {
		t.Fatal("5 faults over 5 groups: want an error (needs 6 segments)")
	}
}
