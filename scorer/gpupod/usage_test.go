package pod_test

import (
	"context"
	"math/rand"
	"testing"
	"time"

	"github.com/creditflow/creditflow/scorer/client"
	"github.com/creditflow/creditflow/scorer/cpumodel"
	"github.com/creditflow/creditflow/scorer/protocol"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// testUsage reads the pod's packing figures (usage.packs, usage.max_pack_tokens
// of a --packing tree answer) through protocol.WireUsage and through the Go
// client's series, as the score stage exports them.
func testUsage(t *testing.T, p *pod) {
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	sets := searchSets(rand.New(rand.NewSource(11)), 5, 256, cpumodel.TinyDelete)

	var resp protocol.ScoreResponse
	if st := postJSON(t, p.url+protocol.PathScore, podToken, wireSets(sets), &resp); st != 200 {
		t.Fatalf("score request: status %d", st)
	}
	u := resp.Usage
	if u.Packs <= 0 || u.MaxPackTokens <= 0 || u.MaxPackTokens > 4096 || u.MaxPackTokens > u.TokensForwarded {
		t.Fatalf("usage %+v: want packs > 0 and 0 < max_pack_tokens <= min(4096, tokens_forwarded) from a tree-packing pod", u)
	}

	reg := prometheus.NewRegistry()
	c := newClient(t, p.url, client.WithRegisterer(reg))
	for i := 0; i < 2; i++ {
		if _, _, err := c.ScoreRows(ctx, sets); err != nil {
			t.Fatal(err)
		}
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]*dto.Metric{}
	for _, mf := range mfs {
		if len(mf.Metric) == 1 {
			byName[mf.GetName()] = mf.Metric[0]
		}
	}
	packs, hist := byName["creditflow_scorer_packs_total"], byName["creditflow_scorer_max_pack_tokens"]
	if packs == nil || hist == nil {
		t.Fatalf("client series lack creditflow_scorer_packs_total or creditflow_scorer_max_pack_tokens")
	}
	// The client may split or coalesce the sets into requests of its own: its
	// counters add the answers' packs, one histogram observation per answer.
	h := hist.GetHistogram()
	if packs.GetCounter().GetValue() < 2 || h.GetSampleCount() < 2 || h.GetSampleSum() > float64(4096*h.GetSampleCount()) || h.GetSampleSum() <= 0 {
		t.Errorf("client series: packs_total %v, max_pack_tokens count %d sum %v; want >= 2 packs over >= 2 answers, each <= 4096 tokens",
			packs.GetCounter().GetValue(), h.GetSampleCount(), h.GetSampleSum())
	}
	t.Logf("one answer: packs %d, max_pack_tokens %d, tokens_forwarded %d; client: packs_total %v over %d answers",
		u.Packs, u.MaxPackTokens, u.TokensForwarded, packs.GetCounter().GetValue(), h.GetSampleCount())
}
