package server

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/creditflow/creditflow/scorer/cpumodel"
	"github.com/creditflow/creditflow/scorer/local"
	"github.com/creditflow/creditflow/scorer/protocol"
)

// fuzzServer posts fuzzed bodies to a real server on the tiny model: whatever
// the body, the server must answer (never panic) and never with a 500, which
// would mean input reached the model unchecked.
func fuzzServer(f *testing.F, path string, seeds ...string) {
	srv := New(local.New(cpumodel.Tiny()), WithMaxTokens(4096), WithMaxRows(64))
	h := srv.Handler()
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		req := httptest.NewRequest(http.MethodPost, path, bytes.NewReader(body))
		req.Header.Set(protocol.Header, protocol.Version)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code >= 500 && rec.Code != http.StatusServiceUnavailable {
			t.Fatalf("status %d for body %q: %s", rec.Code, body, rec.Body.String())
		}
	})
}

func FuzzServerScore(f *testing.F) {
	fuzzServer(f, protocol.PathScore,
		`{"sets":[{"id":"a","rows":[{"context":"AQAAAAIAAAA=","target":"AwAAAAQAAAAFAAAA","span":[0,2]}]}]}`,
		`{"sets":[{"id":"a","rows":[{"context":"","target":"AwAAAA==","span":[0,1]}]}]}`,
		`{"sets":[{"rows":[{"context":"AQAAAA==","target":"AwAAAA==","span":[1,0]}]}]}`,
		`{"sets":[{"rows":[{"context":"/////w==","target":"AwAAAA==","span":[0,1]}]}]}`,
		`{"sets":null}`, `[]`, `{"sets":[{"rows":[{}]}]}`,
		`{"sets":[{"id":"c","tokens":"AQAAAAIAAAADAAAA","target":"AwAAAAQAAAA=","span":[0,2],"rows":[{"pieces":[[0,3]]},{"pieces":[[0,1],"BQAAAA==",[2,3]]}]}]}`,
		`{"sets":[{"tokens":"AQAAAA==","rows":[{"pieces":[[0,5]],"target":"AwAAAA==","span":[0,1]}]}]}`,
		`{"sets":[{"tokens":"AQAAAA==","target":"AwAAAA==","span":[0,1],"rows":[{"pieces":[[1,0],"",[-1,1]]}]}]}`)
}

func FuzzServerAttention(f *testing.F) {
	fuzzServer(f, protocol.PathAttention,
		`{"jobs":[{"id":"a","tokens":"AQAAAAIAAAADAAAABAAAAAUAAAA=","steps":[{"action":[1,2],"observation":[2,3]},{"action":[3,5],"observation":null}],"layers":[0,1]}]}`,
		`{"jobs":[{"tokens":"AQAAAA==","steps":[{"action":[0,1]}],"layers":[7]}]}`,
		`{"jobs":[{"tokens":"AQAAAAIAAAA=","steps":[{"action":[1,0]}],"layers":[0]}]}`,
		`{"jobs":[{"tokens":"AQAAAAIAAAA=","steps":[{"action":[0,1]},{"action":[0,2]}],"layers":[-1]}]}`,
		`{"jobs":[]}`, `{}`)
}
