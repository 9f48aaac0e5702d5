package python_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/creditflow/creditflow/consumers"
	"github.com/creditflow/creditflow/internal/kafkasec"
	"github.com/creditflow/creditflow/schemas"
)

// topicSamples reads a samples topic to its end (nil when it does not exist yet).
func topicSamples(t *testing.T, brokers, topic string) []*schemas.Sample {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	bs := strings.Split(brokers, ",")
	parts, err := consumers.Partitions(ctx, bs, kafkasec.Config{}, topic)
	if err != nil {
		return nil
	}
	var out []*schemas.Sample
	for _, p := range parts {
		if _, err := consumers.ReadPartitionRange(ctx, bs, kafkasec.Config{}, topic, p, 0, func(r consumers.Record) error {
			s, err := schemas.Samples().Decode(r.Value)
			if err != nil {
				t.Errorf("%s: undecodable sample: %v", topic, err)
				return nil
			}
			out = append(out, s)
			return nil
		}); err != nil {
			return nil
		}
	}
	return out
}

// topicIDs reads a samples topic to its end and counts records by trajectory id (empty
// when the topic does not exist yet).
func topicIDs(t *testing.T, brokers, topic string) map[string]int {
	t.Helper()
	out := map[string]int{}
	for _, s := range topicSamples(t, brokers, topic) {
		out[s.TrajectoryID]++
	}
	return out
}

// waitArrived waits until every id is on one of the topics; returns the two counts.
func waitArrived(t *testing.T, brokers string, ids []string, timeout time.Duration) (fresh, stale map[string]int) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		fresh, stale = topicIDs(t, brokers, "creditflow.samples"), topicIDs(t, brokers, "creditflow.samples.stale")
		missing := 0
		for _, id := range ids {
			if fresh[id]+stale[id] == 0 {
				missing++
			}
		}
		if missing == 0 {
			return fresh, stale
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d trajectories never reached creditflow.samples or creditflow.samples.stale", missing, len(ids))
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// TestPolicyAnnouncementRoutesStale: `creditflow run --max-policy-lag 1`; a trainer
// announces version 5 mid-run (python3 -m creditflow announce); afterwards samples of
// policies more than one version behind go to creditflow.samples.stale and nowhere else,
// the others to creditflow.samples; a SampleStream with max_policy_lag=1 yields exactly the
// fresh ones.
func TestPolicyAnnouncementRoutesStale(t *testing.T) {
	py := projectPython(t)
	if !strings.Contains(runHelp(t), "max-policy-lag") {
		t.Skip("this build's `creditflow run` has no --max-policy-lag (the stages' side of policy versions is not merged)")
	}
	brokers := startBroker(t)
	run := startProc(t, os.Environ(), creditflowBin(t), "run", "--brokers", brokers, "--create-topics", "4",
		"--log-level", "warn", "--metrics-addr=", "--max-policy-lag", "1", "--scorers", "local")
	_ = run

	early := publish(t, py, brokers, "early", 0, 2, 4, "--policy-version", "1")
	fresh, stale := waitArrived(t, brokers, early, 120*time.Second)
	for _, id := range early {
		if fresh[id] == 0 || stale[id] != 0 {
			t.Fatalf("before any announcement %s went to samples %d times, stale %d times", id, fresh[id], stale[id])
		}
	}

	runPy(t, py, 60*time.Second, "-m", "creditflow", "announce", "--brokers", brokers, "--version", "5", "--checkpoint", "/ckpt/5")
	// The stage follows the policy topic asynchronously: publish lagging probes until one
	// is routed to the stale topic, so the assertions below do not race the announcement.
	for i := 0; ; i++ {
		probe := publish(t, py, brokers, "probe"+itoa(i), 0, 1, 4, "--policy-version", "2")
		_, st := waitArrived(t, brokers, probe, 120*time.Second)
		if st[probe[0]] > 0 {
			break
		}
		if i == 30 {
			t.Fatal("the stage never routed a lagging sample to creditflow.samples.stale after the announcement")
		}
	}

	current := publish(t, py, brokers, "current", 0, 2, 4, "--policy-version", "5")
	edge := publish(t, py, brokers, "edge", 0, 1, 4, "--policy-version", "4") // lag 1: not stale
	lagging := publish(t, py, brokers, "lagging", 0, 2, 4, "--policy-version", "3")
	all := append(append(append([]string{}, current...), edge...), lagging...)
	fresh, stale = waitArrived(t, brokers, all, 120*time.Second)
	for _, id := range append(append([]string{}, current...), edge...) {
		if fresh[id] == 0 || stale[id] != 0 {
			t.Errorf("fresh %s: %d on samples, %d on samples.stale", id, fresh[id], stale[id])
		}
	}
	for _, id := range lagging {
		if stale[id] == 0 || fresh[id] != 0 {
			t.Errorf("lagging %s: %d on samples, %d on samples.stale", id, fresh[id], stale[id])
		}
	}

	// The trainer's own filter: early samples (version 1) are now 4 behind and skipped.
	want := append(append([]string{}, current...), edge...)
	outPath := filepath.Join(t.TempDir(), "trainer.jsonl")
	runPy(t, py, 180*time.Second, "examples/python/trainer.py", "--brokers", brokers, "--expect", itoa(len(want)),
		"--max-policy-lag", "1", "--timeout", "20", "--out", outPath)
	got := map[string]bool{}
	for _, l := range readTrainerOut(t, outPath) {
		got[l.TrajectoryID] = true
		if 5-l.PolicyVersion > 1 {
			t.Errorf("SampleStream(max_policy_lag=1) yielded %s of policy %d", l.TrajectoryID, l.PolicyVersion)
		}
	}
	for _, id := range want {
		if !got[id] {
			t.Errorf("SampleStream did not yield fresh sample %s", id)
		}
	}
}

// TestSampleStreamPolicyLag: the trainer-side filter alone, on any build of the stages.
// Announcements 5 then 3 leave the newest version at 5 (an older one never moves it back);
// SampleStream(max_policy_lag=1) skips and counts the version-1 samples and yields the
// version-5 ones.
func TestSampleStreamPolicyLag(t *testing.T) {
	py := projectPython(t)
	brokers := startBroker(t)
	startProc(t, os.Environ(), creditflowBin(t), "run", "--brokers", brokers, "--create-topics", "4", "--log-level", "warn", "--metrics-addr=", "--scorers", "local")
	old := publish(t, py, brokers, "old", 0, 2, 4, "--policy-version", "1")
	runPy(t, py, 60*time.Second, "-m", "creditflow", "announce", "--brokers", brokers, "--version", "5")
	runPy(t, py, 60*time.Second, "-m", "creditflow", "announce", "--brokers", brokers, "--version", "3")
	if out := string(runPy(t, py, 60*time.Second, "-m", "creditflow", "policy", "--brokers", brokers)); !strings.Contains(out, `"version": 5`) {
		t.Fatalf("newest announced version: %s, want 5", out)
	}
	current := publish(t, py, brokers, "current", 0, 2, 4, "--policy-version", "5")
	waitArrived(t, brokers, append(append([]string{}, old...), current...), 120*time.Second)
	outPath := filepath.Join(t.TempDir(), "trainer.jsonl")
	out := runPy(t, py, 180*time.Second, "examples/python/trainer.py", "--brokers", brokers, "--expect", itoa(len(current)),
		"--max-policy-lag", "1", "--timeout", "20", "--out", outPath)
	if !strings.Contains(string(out), `"stale": 8`) {
		t.Errorf("trainer summary %s: want the 8 version-1 samples counted stale", out)
	}
	got := map[string]bool{}
	for _, l := range readTrainerOut(t, outPath) {
		got[l.TrajectoryID] = true
	}
	if len(got) != len(current) {
		t.Errorf("yielded %d samples, want the %d of version 5", len(got), len(current))
	}
	for _, id := range current {
		if !got[id] {
			t.Errorf("fresh %s not yielded", id)
		}
	}
}
