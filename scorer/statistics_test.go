package scorer_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"math"
	"net/http"
	"reflect"
	"strings"
	"testing"

	"github.com/creditflow/creditflow/scorer"
	"github.com/creditflow/creditflow/scorer/client"
	"github.com/creditflow/creditflow/scorer/internal/scorertest"
	"github.com/creditflow/creditflow/scorer/local"
	"github.com/creditflow/creditflow/scorer/protocol"
	"github.com/creditflow/creditflow/scorer/server"
)

// statSets builds, from LAPO backward sets, the sets of one statistic as the
// score stage asks for them: entropy the same rows; kl one row per removed
// turn, whose context is c_full and whose reference is c_−t. compact also
// gives every set in the compact form.
func statSets(sets []scorer.RowSet, stat string, compact bool) []scorer.RowSet {
	var out []scorer.RowSet
	for _, s := range sets {
		n := scorer.RowSet{ID: s.ID + "-" + stat, Statistic: stat}
		if stat == scorer.StatKL {
			for _, r := range s.Rows[1:] {
				row := s.Rows[0]
				row.ReferenceContext = r.Context
				n.Rows = append(n.Rows, row)
			}
		} else {
			n.Rows = append(n.Rows, s.Rows...)
		}
		if compact {
			c := scorertest.CompactOf(n)
			c.Statistic = stat
			for j := range c.Rows {
				c.Rows[j].ReferenceContext = n.Rows[j].ReferenceContext
			}
			n = c
		}
		out = append(out, n)
	}
	return out
}

// offlineStatistic is what scorer/cpumodel computes for each set (the offline
// `creditflow score --statistic`).
func offlineStatistic(t *testing.T, sets []scorer.RowSet) [][]float64 {
	t.Helper()
	out := make([][]float64, len(sets))
	for i, s := range sets {
		e, err := scorer.ExpandSet(s)
		if err != nil {
			t.Fatal(err)
		}
		stat := s.Statistic
		if stat == "" {
			stat = scorer.StatLogProb
		}
		if out[i], _, err = scorertest.Tiny().ScoreRowsStatistic(e.Rows, stat); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

func closeScores(t *testing.T, what string, got []scorer.RowScores, want [][]float64, tol float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d results for %d sets", what, len(got), len(want))
	}
	for i := range want {
		if len(got[i].Scores) != len(want[i]) {
			t.Fatalf("%s: set %d has %d scores for %d rows", what, i, len(got[i].Scores), len(want[i]))
		}
		for j, w := range want[i] {
			if g := got[i].Scores[j]; math.IsNaN(g) || math.Abs(g-w) > tol*math.Max(1, math.Abs(w)) {
				t.Fatalf("%s: set %d row %d = %v, want %v", what, i, j, g, w)
			}
		}
	}
}

// TestStatisticsOverProtocol scores entropy and kl sets (full and compact,
// mixed with logprob sets in one call) through the client and the server
// over the in-process scorer, in both request forms, and checks them
// against scorer/cpumodel's offline statistic to 1e-12; the server answers the
// JSON and binary forms alike.
func TestStatisticsOverProtocol(t *testing.T) {
	url, _ := scorertest.Serve(t, server.New(local.New(scorertest.Tiny())))
	base := scorertest.MakeSets(41, 4, 2)
	var sets []scorer.RowSet
	sets = append(sets, base[0])
	for _, stat := range []string{scorer.StatEntropy, scorer.StatKL} {
		sets = append(sets, statSets(base[:2], stat, false)...)
		sets = append(sets, statSets(base[2:], stat, true)...)
	}
	want := offlineStatistic(t, sets)
	for i, s := range sets {
		if s.Statistic == scorer.StatEntropy {
			for j, v := range want[i] {
				if !(v > 0) {
					t.Fatalf("set %d row %d: entropy %v is not positive", i, j, v)
				}
			}
		}
	}
	c := newClient(t, []string{url})
	info, err := c.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if !info.HasFeature(protocol.FeatureStatistics) {
		t.Fatalf("server features %v lack %s", info.Features, protocol.FeatureStatistics)
	}
	got, _, err := c.ScoreRows(context.Background(), sets)
	if err != nil {
		t.Fatal(err)
	}
	closeScores(t, "client", got, want, 1e-12)
	inproc, _, err := local.New(scorertest.Tiny()).ScoreRows(context.Background(), sets)
	if err != nil {
		t.Fatal(err)
	}
	closeScores(t, "in-process", inproc, want, 1e-12)

	// Both request forms decode to the same request and get the same answer.
	h := map[string]string{protocol.Header: protocol.Version, "Content-Type": "application/json"}
	jsonBody, err := protocol.AppendScoreRequest(nil, sets, true)
	if err != nil {
		t.Fatal(err)
	}
	binBody, err := protocol.AppendRowsRequest(nil, sets, true)
	if err != nil {
		t.Fatal(err)
	}
	var fromJSON protocol.ScoreRequest
	if err := json.Unmarshal(jsonBody, &fromJSON); err != nil {
		t.Fatal(err)
	}
	fromBin, err := protocol.DecodeRowsRequest(binBody, 1<<20, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(fromJSON, fromBin) {
		t.Fatal("binary and JSON statistic requests decode differently")
	}
	if fromJSON.Sets[1].Statistic != scorer.StatEntropy || fromJSON.Sets[len(sets)-1].Rows[0].Reference == nil {
		t.Fatal("statistic or reference lost on the wire")
	}
	a := postOK(t, url+protocol.PathScore, h, jsonBody)
	hb := map[string]string{protocol.Header: protocol.Version, "Content-Type": protocol.MediaTypeRows}
	if b := postOK(t, url+protocol.PathScore, hb, binBody); !bytes.Equal(a, b) {
		t.Fatalf("answers differ for JSON and binary requests:\n%s\n%s", a, b)
	}
	// The hand-written JSON is encoding/json's.
	full := make([]scorer.RowSet, len(sets))
	for i, s := range sets {
		if full[i], err = scorer.ExpandSet(s); err != nil {
			t.Fatal(err)
		}
	}
	direct, _ := protocol.AppendScoreRequest(nil, full, false)
	viaJSON, _ := json.Marshal(protocol.SetsToWire(full))
	if !bytes.Equal(direct, viaJSON) {
		t.Fatalf("AppendScoreRequest differs from encoding/json:\n%s\n%s", direct, viaJSON)
	}
}

// TestLogProbRequestBytesUnchanged: a logprob set, named or not, travels as
// it did before statistics existed (no statistic, no reference, no flag bit).
func TestLogProbRequestBytesUnchanged(t *testing.T) {
	sets := scorertest.MakeSets(5, 3, 3)
	named := make([]scorer.RowSet, len(sets))
	for i, s := range sets {
		named[i] = s
		named[i].Statistic = scorer.StatLogProb
	}
	for _, compact := range []bool{false, true} {
		in := sets
		nin := named
		if compact {
			in, nin = make([]scorer.RowSet, len(sets)), make([]scorer.RowSet, len(sets))
			for i := range sets {
				in[i] = scorertest.CompactOf(sets[i])
				nin[i] = in[i]
				nin[i].Statistic = scorer.StatLogProb
			}
		}
		a, _ := protocol.AppendScoreRequest(nil, in, compact)
		b, _ := protocol.AppendScoreRequest(nil, nin, compact)
		if !bytes.Equal(a, b) || strings.Contains(string(a), "statistic") || strings.Contains(string(a), "reference") {
			t.Fatalf("compact=%v: a logprob JSON request changed with the statistic named", compact)
		}
		x, _ := protocol.AppendRowsRequest(nil, in, compact)
		y, _ := protocol.AppendRowsRequest(nil, nin, compact)
		if !bytes.Equal(x, y) {
			t.Fatalf("compact=%v: a logprob binary request changed with the statistic named", compact)
		}
	}
	kl := statSets(sets[:1], scorer.StatKL, false)
	x, _ := protocol.AppendRowsRequest(nil, kl, false)
	if x[4+4+4+len(kl[0].ID)]&8 == 0 {
		t.Fatal("a kl set's binary flags lack the statistic bit")
	}
}

// noStatistics is a scorer that does not advertise scorer.FeatureStatistics
// (as scorers from before the feature).
type noStatistics struct{ scorer.Scorer }

func (n noStatistics) Info(ctx context.Context) (scorer.ModelInfo, error) {
	info, err := n.Scorer.Info(ctx)
	info.Features = nil
	return info, err
}

// TestStatisticsRejections: the server answers 400 for an unknown
// statistic, a kl row without a reference, a reference on another
// statistic's row, and a statistic its scorer does not compute; the client
// returns ErrNoStatistics before sending to a server without the feature,
// and the in-process scorer rejects the same input.
func TestStatisticsRejections(t *testing.T) {
	url, _ := scorertest.Serve(t, server.New(local.New(scorertest.Tiny())))
	set := scorertest.MakeSets(9, 1, 1)[0]
	kl := statSets([]scorer.RowSet{set}, scorer.StatKL, false)[0]
	h := map[string]string{protocol.Header: protocol.Version, "Content-Type": "application/json"}
	body := func(s scorer.RowSet) []byte {
		req := protocol.SetsToWire([]scorer.RowSet{s})
		req.Sets[0].Statistic = s.Statistic // as sent, even when invalid
		b, err := json.Marshal(req)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	unknown := set
	unknown.Statistic = "variance"
	noRef := kl
	noRef.Rows = append([]scorer.Row(nil), kl.Rows...)
	noRef.Rows[0].ReferenceContext = nil
	refOnEntropy := kl
	refOnEntropy.Statistic = scorer.StatEntropy
	badRef := kl
	badRef.Rows = append([]scorer.Row(nil), kl.Rows...)
	badRef.Rows[0].ReferenceContext = []int32{1, 1 << 20}
	for name, c := range map[string]struct {
		set  scorer.RowSet
		want string
	}{
		"unknown statistic":       {unknown, "variance"},
		"kl without reference":    {noRef, "reference"},
		"reference with entropy":  {refOnEntropy, "reference"},
		"reference outside vocab": {badRef, "reference token"},
	} {
		status, eb := scorertest.Post(t, url+protocol.PathScore, h, body(c.set))
		if status != http.StatusBadRequest || eb.Code != scorer.CodeBadRequest || !strings.Contains(eb.Error, c.want) {
			t.Errorf("%s: %d %+v, want 400 bad_request naming %q", name, status, eb, c.want)
		}
		_, _, err := local.New(scorertest.Tiny()).ScoreRows(context.Background(), []scorer.RowSet{c.set})
		if _, ok := scorertest.AsRejected(err); !ok {
			t.Errorf("%s: in-process scorer answered %v, want a rejection", name, err)
		}
	}
	// A server whose scorer does not compute statistics.
	oldURL, _ := scorertest.Serve(t, server.New(noStatistics{local.New(scorertest.Tiny())}))
	status, eb := scorertest.Post(t, oldURL+protocol.PathScore, h, body(kl))
	if status != http.StatusBadRequest || !strings.Contains(eb.Error, "does not compute") {
		t.Errorf("kl on a scorer without statistics: %d %+v, want 400", status, eb)
	}
	c := newClient(t, []string{oldURL})
	if _, _, err := c.ScoreRows(context.Background(), []scorer.RowSet{kl}); !errors.Is(err, client.ErrNoStatistics) {
		t.Fatalf("client to a server without statistics: %v, want ErrNoStatistics", err)
	}
	if _, _, err := c.ScoreRows(context.Background(), []scorer.RowSet{set}); err != nil {
		t.Fatalf("logprob on a server without statistics: %v", err)
	}
}
