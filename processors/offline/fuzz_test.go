package offline

import (
	"bytes"
	"io"
	"testing"

	"github.com/creditflow/creditflow/processors/credit"
)

// FuzzCompute: any input to `creditflow compute`, for both methods, ends in
// output or an error naming the line, never a panic.
func FuzzCompute(f *testing.F) {
	f.Add([]byte(`{"trajectory_id":"a","prompt_id":"p","group_size":2,"reward":1,"prompt_tokens":3,"turns":[{"kind":"search","action_tokens":2,"observation_tokens":4,"delta":0.5},{"kind":"answer","action_tokens":1,"observation_tokens":0}]}
{"trajectory_id":"b","prompt_id":"p","group_size":2,"pred_answer":"x","gold_answers":["x"],"prompt_tokens":3,"turns":[{"kind":"search","action_tokens":2,"observation_tokens":4,"delta":-1e308}]}`), false)
	f.Add([]byte(`{"trajectory_id":"a","prompt_id":"p","group_size":1,"reward":0,"prompt_tokens":1,"turns":[{"kind":"tool","action_tokens":1,"observation_tokens":1},{"kind":"answer","action_tokens":1,"observation_tokens":0}],"attention":[{"layer":0,"aa":[[0,0],[0.5,0]],"ao":[[0,0],[0.25,0]]}]}`), true)
	f.Add([]byte(`{"trajectory_id":"a","prompt_id":"p","group_size":-1,"reward":1,"prompt_tokens":-4,"turns":[{"kind":"search","action_tokens":-2,"observation_tokens":1e9,"delta":1}],"attention":[{"layer":0,"aa":[[1]],"ao":[]}]}`), true)
	f.Add([]byte(`{"trajectory_id":"a","prompt_id":"p","group_size":1,"reward":1,"prompt_tokens":9223372036854775807,"turns":[{"kind":"search","action_tokens":9223372036854775807,"observation_tokens":2000000000,"delta":0.5}]}`), false)
	f.Fuzz(func(t *testing.T, in []byte, attnsr bool) {
		cfg := credit.DefaultConfig()
		if attnsr {
			cfg.Method = credit.MethodAttnSR
		}
		_ = Compute(bytes.NewReader(in), io.Discard, io.Discard, cfg, WithTokens(true))
	})
}
