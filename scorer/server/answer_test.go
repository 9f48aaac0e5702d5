package server

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"testing"

	"github.com/creditflow/creditflow/scorer/internal/scorertest"
	"github.com/creditflow/creditflow/scorer/local"
	"github.com/creditflow/creditflow/scorer/protocol"
)

// postJSON posts body to url as a v1 request and decodes the 200 answer into out.
func postJSON(t *testing.T, url string, body, out any) {
	t.Helper()
	data, _ := json.Marshal(body)
	req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(data))
	req.Header.Set(protocol.Header, protocol.Version)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	answer, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("%s: status %d: %s", url, resp.StatusCode, answer)
	}
	if err := json.Unmarshal(answer, out); err != nil {
		t.Fatalf("%s: %v", url, err)
	}
}

// The server answers with what the scorer's one call reports: the policy
// version of the graphs where the scorer knows it (absent where it does
// not), and the usage of a score call.
func TestServerAnswersWhatTheScorerReports(t *testing.T) {
	jobs := protocol.JobsToWire(scorertest.MakeJobs(2, 4))
	sets := scorertest.MakeSets(1, 3, 3)
	for _, c := range []struct {
		name    string
		opts    []local.Option
		version int64 // -1: absent
	}{{"versioned", []local.Option{local.WithPolicyVersion(7)}, 7}, {"unversioned", nil, -1}} {
		url, _ := scorertest.Serve(t, New(local.New(scorertest.Tiny(), c.opts...)))
		var att protocol.AttentionResponse
		postJSON(t, url+protocol.PathAttention, jobs, &att)
		switch {
		case len(att.Results) != len(jobs.Jobs):
			t.Errorf("%s: %d results for %d jobs", c.name, len(att.Results), len(jobs.Jobs))
		case c.version < 0 && att.PolicyVersion != nil:
			t.Errorf("%s: attention answer carries policy version %d, the scorer knows none", c.name, *att.PolicyVersion)
		case c.version >= 0 && (att.PolicyVersion == nil || *att.PolicyVersion != c.version):
			t.Errorf("%s: attention answer's policy version %v, want %d", c.name, att.PolicyVersion, c.version)
		}
		var sc protocol.ScoreResponse
		postJSON(t, url+protocol.PathScore, protocol.SetsToWire(sets), &sc)
		rowByRow := int64(0)
		for _, s := range sets {
			rowByRow += int64(s.TokenCount())
		}
		if sc.Usage.TokensRowByRow != rowByRow || sc.Usage.TokensForwarded <= 0 || sc.Usage.TokensForwarded > rowByRow {
			t.Errorf("%s: usage %+v, want %d tokens row by row and at most as many forwarded", c.name, sc.Usage, rowByRow)
		}
	}
}
