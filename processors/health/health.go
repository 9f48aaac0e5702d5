// Package health is the operations endpoints of a creditflow process: the
// HTTP server of /metrics and /healthz (Serve), and the readiness and
// liveness checks of `creditflow run` (docs/stream.md, "Health"):
//   - /readyz answers 200 when a broker answered within the last check,
//     every stage has started (the score stage once a scorer answered), its
//     member is in a consumer group generation, and no partition has had
//     records waiting for the stage's handler that it did not take, or
//     (score stage) records taken and not committed, for longer than the
//     readiness window; 503 with the reasons otherwise. The advantage
//     stage's commits legitimately wait for its group windows (an open
//     group holds back the commit of its members' offsets), so its
//     uncommitted records do not count.
//   - /readyz also answers 503 while every scorer call of the score stage
//     has failed for longer than the readiness window.
//   - /livez answers 503 when a partition has had input pending (by the
//     same two measures) without progress for --liveness-stall: the
//     process is stuck and a restart helps. It does not fail while the process waits
//     for brokers or scorers, nor while its scorer calls fail (that is
//     readiness).
//   - /healthz stays what it was: 200 while the process serves HTTP.
package health

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/creditflow/creditflow/consumers"
	"github.com/creditflow/creditflow/internal/kafkasec"
)

// Group is what a stage reports: its consumer group's health, ok
// false before the group exists.
type Group interface {
	Health() (consumers.Health, bool)
}

// scorerHealth is what the score stage reports about its scorer calls.
type scorerHealth interface {
	ScorerFailing() (failing bool, since time.Duration, lastErr string)
	ScorerAnswered() time.Time
}

// Stage is one stage of the process as the checks see it.
type Stage struct {
	name string
	// commitBound: the stage commits what it took within a few commit
	// intervals (the score stage), so uncommitted records are a stall.
	commitBound bool
	mu          sync.Mutex
	waiting     string // what the stage waits for before it starts ("" once started)
	group       Group
}

// scorerDown is the stage's scorer failure, when it has one that lasted
// longer than d.
func (s *Stage) scorerDown(d time.Duration) (string, bool) {
	s.mu.Lock()
	g := s.group
	s.mu.Unlock()
	sh, ok := g.(scorerHealth)
	if !ok {
		return "", false
	}
	failing, since, lastErr := sh.ScorerFailing()
	if !failing || since <= d {
		return "", false
	}
	return fmt.Sprintf("%s stage: every scorer call has failed for %v: %s", s.name, since.Round(time.Second), lastErr), true
}

// Wait says what the stage waits for before it starts: not ready meanwhile.
func (s *Stage) Wait(what string) {
	s.mu.Lock()
	s.waiting = what
	s.mu.Unlock()
}

// Start marks the stage started; g reports its consumer group from then on.
func (s *Stage) Start(g Group) {
	s.mu.Lock()
	s.waiting, s.group = "", g
	s.mu.Unlock()
}

// Checks holds the state behind /readyz and /livez.
type Checks struct {
	readyWindow time.Duration // uncommitted input older than this: not ready
	stall       time.Duration // uncommitted input older than this: not live (0: never)

	mu         sync.Mutex
	brokersErr error // last broker check (errNotChecked before the first)
	stages     []*Stage
}

var errNotChecked = fmt.Errorf("not checked yet")

// New is the checks of a process committing every commitInterval:
// ready while uncommitted input is younger than ten commit intervals (at
// least 10 s), live while it is younger than stall.
func New(commitInterval, stall time.Duration) *Checks {
	return &Checks{readyWindow: max(10*commitInterval, 10*time.Second), stall: stall, brokersErr: errNotChecked}
}

// Stage adds a stage, waiting (not ready) for what waiting says until it
// starts. commitBound: the stage commits what it took within a few commit
// intervals, so its uncommitted records count as a stall.
func (h *Checks) Stage(name, waiting string, commitBound bool) *Stage {
	s := &Stage{name: name, waiting: waiting, commitBound: commitBound}
	h.mu.Lock()
	h.stages = append(h.stages, s)
	h.mu.Unlock()
	return s
}

// SetBrokers records the result of a broker check (nil: a broker answered).
func (h *Checks) SetBrokers(err error) {
	h.mu.Lock()
	h.brokersErr = err
	h.mu.Unlock()
}

// watchBrokers checks the brokers every interval until ctx ends.
func (h *Checks) WatchBrokers(ctx context.Context, sec kafkasec.Config, brokers []string, interval time.Duration) {
	for {
		cctx, cancel := context.WithTimeout(ctx, max(interval, 5*time.Second))
		err := sec.Check(cctx, brokers)
		cancel()
		if ctx.Err() != nil {
			return
		}
		h.SetBrokers(err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(interval):
		}
	}
}

// ready returns the reasons the process is not ready (none: ready) and,
// either way, a line per stage on how it stands.
func (h *Checks) ready() (reasons, info []string) {
	h.mu.Lock()
	brokersErr, stages := h.brokersErr, append([]*Stage(nil), h.stages...)
	h.mu.Unlock()
	if brokersErr != nil {
		reasons = append(reasons, "brokers: "+brokersErr.Error())
	}
	for _, s := range stages {
		s.mu.Lock()
		waiting, g := s.waiting, s.group
		s.mu.Unlock()
		if waiting != "" {
			reasons = append(reasons, s.name+" stage: "+waiting)
			continue
		}
		gh, ok := consumers.Health{}, false
		if g != nil {
			gh, ok = g.Health()
		}
		switch {
		case !ok:
			reasons = append(reasons, s.name+" stage: starting")
		case !gh.Joined:
			reasons = append(reasons, fmt.Sprintf("%s stage: joining consumer group %s", s.name, gh.GroupID))
		default:
			if reason, down := s.scorerDown(h.readyWindow); down {
				reasons = append(reasons, reason)
			}
			reasons = append(reasons, s.stalls(gh, h.readyWindow, "", true)...)
			line := fmt.Sprintf("%s stage: group %s generation %d, %d partitions", s.name, gh.GroupID, gh.Generation, len(gh.Partitions))
			if len(gh.Partitions) == 0 {
				line += " (a spare member: more members than partitions)"
			}
			info = append(info, line)
		}
	}
	return reasons, info
}

// live returns the reasons the process is stuck (none: live).
func (h *Checks) live() []string {
	if h.stall <= 0 {
		return nil
	}
	h.mu.Lock()
	stages := append([]*Stage(nil), h.stages...)
	h.mu.Unlock()
	var reasons []string
	for _, s := range stages {
		s.mu.Lock()
		g := s.group
		s.mu.Unlock()
		if g == nil {
			continue
		}
		gh, ok := g.Health()
		if !ok {
			continue
		}
		if _, down := s.scorerDown(0); down {
			continue // stalled on its scorers: a restart does not bring them back (readiness says so)
		}
		reasons = append(reasons, s.stalls(gh, h.stall, " (--liveness-stall)", false)...)
	}
	return reasons
}

// stalls are the stage's partitions without progress for longer than d:
// records waiting that the handler did not take, and (commit-bound
// stages) records taken and not committed. busy leaves out uncommitted
// records while the stage's scorer answered within d: a busy scorer may
// take longer than d for one record, which holds back its partition's
// commit without anything being stuck (liveness, with its longer limit,
// does not leave them out).
func (s *Stage) stalls(gh consumers.Health, d time.Duration, suffix string, busy bool) []string {
	var out []string
	if busy {
		s.mu.Lock()
		sh, ok := s.group.(scorerHealth)
		s.mu.Unlock()
		if ok && time.Since(sh.ScorerAnswered()) < d {
			gh.Uncommitted = nil
		}
	}
	if st, ok := consumers.Oldest(gh.Waiting); ok && st.For > d {
		out = append(out, fmt.Sprintf("%s stage: %s has %d records waiting that it took none of for %v (more than %v%s)",
			s.name, st.Partition, st.Records, st.For.Round(time.Second), d, suffix))
	}
	if st, ok := consumers.Oldest(gh.Uncommitted); s.commitBound && ok && st.For > d {
		out = append(out, fmt.Sprintf("%s stage: %s has %d records uncommitted for %v (more than %v%s)",
			s.name, st.Partition, st.Records, st.For.Round(time.Second), d, suffix))
	}
	return out
}

// Routes are the handlers of /readyz and /livez, for Serve.
func (h *Checks) Routes() map[string]http.HandlerFunc {
	return map[string]http.HandlerFunc{
		"/readyz": func(w http.ResponseWriter, _ *http.Request) {
			reasons, info := h.ready()
			answer(w, reasons, info)
		},
		"/livez": func(w http.ResponseWriter, _ *http.Request) { answer(w, h.live(), nil) },
	}
}

// answer writes 200 "ok" or 503 "not ok", then one line per reason and
// per info line.
func answer(w http.ResponseWriter, reasons, info []string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	var b strings.Builder
	if len(reasons) == 0 {
		b.WriteString("ok\n")
	} else {
		w.WriteHeader(http.StatusServiceUnavailable)
		b.WriteString("not ok\n")
		for _, r := range reasons {
			b.WriteString("- " + r + "\n")
		}
	}
	for _, l := range info {
		b.WriteString("  " + l + "\n")
	}
	_, _ = w.Write([]byte(b.String()))
}
