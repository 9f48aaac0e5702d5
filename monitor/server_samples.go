package monitor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/creditflow/creditflow/tokenizer"
)

// WithTokenizer sets the vocabulary the sample view decodes token ids with
// (default: the built-in byte vocabulary).
func WithTokenizer(d *tokenizer.Decoder) Option { return func(m *Monitor) { m.dec = d } }

// lookupTimeout bounds the read of a sample that is not among the ids
// remembered (a scan of its key's partition, then of the others).
const lookupTimeout = 60 * time.Second

// handleSamples is GET /api/v1/samples?order=recent|best|worst&by=reward|process&limit=N[&topic=T].
func (m *Monitor) handleSamples(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	order := q.Get("order")
	if order == "" {
		order = OrderRecent
	}
	by := q.Get("by")
	if by == "" {
		by = ByReward
	}
	limit := 20
	if l := q.Get("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n < 1 {
			httpError(w, http.StatusBadRequest, "limit %q: use a positive integer", l)
			return
		}
		limit = min(n, m.cfg.KeepSamples)
	}
	switch {
	case order != OrderRecent && order != OrderBest && order != OrderWorst:
		httpError(w, http.StatusBadRequest, "order %q: use recent, best or worst", order)
		return
	case by != ByReward && by != ByProcess:
		httpError(w, http.StatusBadRequest, "by %q: use reward or process", by)
		return
	}
	topic := q.Get("topic")
	if topic != "" && !m.reads(topic) {
		httpError(w, http.StatusNotFound, "topic %q is not read by this monitor (it reads %v)", topic, m.src.Topics)
		return
	}
	refs := m.agg.Samples(topic, order, by, limit)
	if refs == nil {
		refs = []SampleRef{}
	}
	writeJSON(w, refs)
}

func (m *Monitor) reads(topic string) bool {
	for _, t := range m.agg.topicNames() {
		if t == topic {
			return true
		}
	}
	return false
}

// handleSample is GET /api/v1/samples/{trajectory_id}[?topic=T]: the
// sample read again from its topic (the first topic that holds it when T
// is not given).
func (m *Monitor) handleSample(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	topics := m.agg.topicNames()
	if t := r.URL.Query().Get("topic"); t != "" {
		if !m.reads(t) {
			httpError(w, http.StatusNotFound, "topic %q is not read by this monitor (it reads %v)", t, m.src.Topics)
			return
		}
		topics = []string{t}
	}
	ctx, cancel := context.WithTimeout(r.Context(), lookupTimeout)
	defer cancel()
	v, err := m.Sample(ctx, id, topics...)
	switch {
	case errors.Is(err, ErrNotFound):
		httpError(w, http.StatusNotFound, "%v", err)
		return
	case err != nil:
		httpError(w, http.StatusBadGateway, "%v", err)
		return
	}
	b, err := json.Marshal(v)
	if err != nil {
		httpError(w, http.StatusInternalServerError, "sample %s: %v", id, err)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_, _ = w.Write(b)
}

// Sample reads the sample trajectoryID again from the first of topics that
// holds it: by the location remembered for its id, else by reading its
// key's partition (then the others).
func (m *Monitor) Sample(ctx context.Context, trajectoryID string, topics ...string) (*SampleView, error) {
	st := m.store()
	for _, t := range topics {
		p, off, ok := m.agg.Locate(t, trajectoryID)
		if !ok {
			continue
		}
		s, rec, err := st.At(ctx, t, p, off)
		if err != nil {
			return nil, err
		}
		if s.TrajectoryID == trajectoryID { // else a hash collision: read on
			return m.scoredView(ctx, NewSampleView(t, s, p, off, rec.Time.UnixMilli(), m.dec)), nil
		}
	}
	for _, t := range topics {
		s, rec, err := st.Find(ctx, t, trajectoryID)
		if errors.Is(err, ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		return m.scoredView(ctx, NewSampleView(t, s, rec.Partition, rec.Offset, rec.Time.UnixMilli(), m.dec)), nil
	}
	return nil, fmt.Errorf("%w: trajectory_id %q in %v", ErrNotFound, trajectoryID, topics)
}

func (m *Monitor) store() *Store { return &Store{Brokers: m.src.Brokers, Security: m.src.Security} }

func httpError(w http.ResponseWriter, code int, format string, args ...any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(map[string]string{"error": fmt.Sprintf(format, args...)})
}
