package python_test

import (
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"
)

// groupReader is a trainer: a SampleStream in consumer group "trainers" that
// reads whole groups (batches(1, whole_groups=True)) with a group timeout far
// longer than any wait the test allows, commits each batch, then prints it;
// a second thread prints the reader's partitions whenever they change.
const groupReader = `import json, sys, threading, time, creditflow
brokers, rid = sys.argv[1], sys.argv[2]
s = creditflow.SampleStream(brokers, "trainers", group_timeout=120)
lock = threading.Lock()
def say(**kw):
    kw.update(reader=rid, t=time.time())
    with lock:
        print(json.dumps(kw), flush=True)
def watch():
    last = None
    while True:
        now = [p for _, p in s.assignment()]
        if now != last:
            say(assigned=now)
            last = now
        time.sleep(0.05)
threading.Thread(target=watch, daemon=True).start()
for batch in s.batches(1, whole_groups=True):
    s.commit()
    groups = {}
    for x in batch:
        groups.setdefault(x["prompt_id"], []).append(x["trajectory_id"])
    say(groups=groups, partial=sorted({x["prompt_id"] for x in batch if x["partial"]}))
`

// readerEvent is one line of groupReader.
type readerEvent struct {
	Reader   string              `json:"reader"`
	T        float64             `json:"t"`
	Assigned []int               `json:"assigned"`
	Groups   map[string][]string `json:"groups"`
	Partial  []string            `json:"partial"`
}

func readerEvents(p *proc) []readerEvent {
	var out []readerEvent
	for _, l := range strings.Split(p.out.String(), "\n") {
		var e readerEvent
		if strings.HasPrefix(l, "{") && json.Unmarshal([]byte(l), &e) == nil {
			out = append(out, e)
		}
	}
	return out
}

// arrival is where and when a group arrived.
type arrival struct {
	reader string
	at     time.Time
	ids    []string
}

// TestTrainersInOneGroupGetWholeGroups: N trainers in one consumer group,
// reading what `creditflow run` writes, each get whole groups — every group
// at exactly one of them, in one batch, long before the group timeout — and
// still do after one of them is SIGKILLed (its partitions reach the others
// after the 6 s session timeout, not librdkafka's 45 s; docs/python.md,
// "Several trainers in one consumer group").
func TestTrainersInOneGroupGetWholeGroups(t *testing.T) {
	py := projectPython(t)
	for _, n := range []int{2, 3} {
		t.Run(fmt.Sprintf("readers_%d", n), func(t *testing.T) {
			const partitions, groups, size = 6, 12, 4
			brokers := startBroker(t)
			run := startProc(t, os.Environ(), creditflowBin(t), "run", "--brokers", brokers, "--create-topics", fmt.Sprint(partitions),
				"--log-level", "warn", "--commit-interval", "200ms", "--metrics-addr=", "--scorers", "local")
			readers := make([]*proc, n)
			for i := range readers {
				readers[i] = startProc(t, pyEnv(t), py, "-c", groupReader, brokers, fmt.Sprint(i))
			}
			dump := func() string {
				var b strings.Builder
				for i, r := range readers {
					fmt.Fprintf(&b, "reader %d:\n%s\n", i, r.out.String())
				}
				return b.String() + "processor:\n" + run.out.String()
			}
			// Every reader owns its share of the partitions before anything is published.
			assigned := func(alive []*proc) map[int]string {
				owner := map[int]string{}
				for _, r := range alive {
					var last []int
					var who string
					for _, e := range readerEvents(r) {
						if e.Assigned != nil {
							last, who = e.Assigned, e.Reader
						}
					}
					for _, p := range last {
						owner[p] = who
					}
				}
				return owner
			}
			shared := func(alive []*proc) bool {
				owner := assigned(alive)
				per := map[string]int{}
				for _, who := range owner {
					per[who]++
				}
				return len(owner) == partitions && len(per) == len(alive)
			}
			deadline := time.Now().Add(90 * time.Second)
			for !shared(readers) {
				if time.Now().After(deadline) {
					t.Fatalf("the readers never shared the %d partitions: %v\n%s", partitions, assigned(readers), dump())
				}
				time.Sleep(100 * time.Millisecond)
			}

			// collect waits until every published group arrived at the alive readers and
			// checks that each arrived whole, once, at one reader, without a partial flag.
			collect := func(alive []*proc, published []string, patience time.Duration) map[string]arrival {
				t.Helper()
				want := map[string][]string{}
				for _, id := range published {
					pid := id[:strings.LastIndexByte(id, '-')]
					want[pid] = append(want[pid], id)
				}
				deadline := time.Now().Add(patience)
				for {
					got := map[string]arrival{}
					for _, r := range alive {
						for _, e := range readerEvents(r) {
							if len(e.Partial) > 0 {
								t.Fatalf("reader %s released partial groups %v\n%s", e.Reader, e.Partial, dump())
							}
							for pid, ids := range e.Groups {
								if _, ok := want[pid]; !ok {
									continue // another round's
								}
								if prev, ok := got[pid]; ok {
									t.Fatalf("group %s arrived twice: at reader %s %v and at reader %s %v\n%s", pid, prev.reader, prev.ids, e.Reader, ids, dump())
								}
								got[pid] = arrival{e.Reader, time.Unix(0, int64(e.T*1e9)), ids}
							}
						}
					}
					if len(got) == len(want) {
						for pid, a := range got {
							sort.Strings(a.ids)
							sort.Strings(want[pid])
							if !slices.Equal(a.ids, want[pid]) {
								t.Fatalf("group %s arrived at reader %s as %v, want %v", pid, a.reader, a.ids, want[pid])
							}
						}
						return got
					}
					if time.Now().After(deadline) {
						t.Fatalf("%d of %d groups arrived within %v (the readers' group timeout is 120 s)\n%s", len(got), len(want), patience, dump())
					}
					time.Sleep(100 * time.Millisecond)
				}
			}

			published := publish(t, py, brokers, "r1", 0, groups, size)
			done := time.Now()
			got := collect(readers, published, 60*time.Second)
			per := map[string]int{}
			var last time.Time
			for _, a := range got {
				per[a.reader]++
				if a.at.After(last) {
					last = a.at
				}
			}
			if len(per) != n {
				t.Fatalf("groups per reader %v: every one of the %d readers should get some", per, n)
			}
			t.Logf("%d readers: groups per reader %v, the last %.1fs after the worker published", n, per, last.Sub(done).Seconds())
			// Whole groups without waiting for the group timeout (120 s here): 6.7-14.3 s measured.
			if took := last.Sub(done); took > 25*time.Second {
				t.Fatalf("the last group reached its reader %v after the worker published, want at most 25s\n%s", took, dump())
			}

			// One reader dies without leaving the group.
			readers[0].kill()
			killed := time.Now()
			alive := readers[1:]
			published = publish(t, py, brokers, "r2", groups, groups, size)
			got = collect(alive, published, 60*time.Second)
			// The watcher prints a reader's partitions up to 50 ms after they change, so a
			// group read from a moved partition may be printed before its new assignment.
			for wait := time.Now().Add(5 * time.Second); !shared(alive); time.Sleep(50 * time.Millisecond) {
				if time.Now().After(wait) {
					t.Fatalf("the survivors do not share every partition: %v\n%s", assigned(alive), dump())
				}
			}
			// When the survivors owned every partition again.
			var rebalanced time.Time
			for _, r := range alive {
				for _, e := range readerEvents(r) {
					if e.Assigned != nil && e.T > float64(killed.UnixNano())/1e9 {
						at := time.Unix(0, int64(e.T*1e9))
						if at.After(rebalanced) {
							rebalanced = at
						}
					}
				}
			}
			last = time.Time{}
			for _, a := range got {
				if a.at.After(last) {
					last = a.at
				}
			}
			took, all := rebalanced.Sub(killed), last.Sub(killed)
			t.Logf("after the SIGKILL: the survivors owned every partition after %.1fs, had every group of the next round after %.1fs",
				took.Seconds(), all.Seconds())
			// The session timeout (6 s) plus a rebalance, far from librdkafka's default 45 s
			// and from the group timeout.
			if took <= 0 || took > 15*time.Second {
				t.Fatalf("the survivors took %v to own the dead reader's partitions, want at most 15s\n%s", took, dump())
			}
		})
	}
}
