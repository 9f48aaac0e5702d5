package protocol

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/creditflow/creditflow/scorer"
)

// The binary attention request decodes to exactly the request its JSON
// form decodes to (encoding/json the reference), empty and absent layers,
// empty observations and ids with quotes and non-ASCII included; cut short
// anywhere or with a byte after its end it is an error.
func TestJobsRequestMatchesJSON(t *testing.T) {
	r := rand.New(rand.NewPCG(21, 22))
	for n := 0; n < 300; n++ {
		jobs := randomAttentionJobs(r)
		js, err := AppendAttentionRequest(nil, jobs)
		if err != nil {
			t.Fatal(err)
		}
		var want AttentionRequest
		if err := json.NewDecoder(bytes.NewReader(js)).Decode(&want); err != nil {
			t.Fatal(err)
		}
		b, err := AppendJobsRequest(nil, jobs)
		if err != nil {
			t.Fatal(err)
		}
		got, err := DecodeJobsRequest(b)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("binary request decoded to\n%+v\nJSON to\n%+v", got, want)
		}
		if n < 20 {
			for c := 0; c < len(b); c++ {
				if _, err := DecodeJobsRequest(b[:c]); err == nil {
					t.Fatalf("a jobs body cut to %d of %d bytes decoded", c, len(b))
				}
			}
			if _, err := DecodeJobsRequest(append(b, 0)); err == nil {
				t.Fatal("a jobs body with a byte after its end decoded")
			}
		}
	}
}

// Jobs the binary form cannot carry as JSON does are refused by the
// encoder (the client then sends JSON); mutated bodies are errors or
// requests, never panics.
func TestJobsRequestLimits(t *testing.T) {
	for name, j := range map[string]scorer.AttentionJob{
		"id not UTF-8":      {ID: "a\xffb", Tokens: []int32{1}},
		"span beyond int32": {Tokens: []int32{1}, Steps: []scorer.Step{{Action: [2]int{0, 1 << 40}}}},
		"layer beyond":      {Tokens: []int32{1}, Layers: []int{-1 << 33}},
	} {
		if JobsFitBinary([]scorer.AttentionJob{j}) {
			t.Errorf("%s: fits the binary form", name)
		}
		if _, err := AppendJobsRequest(nil, []scorer.AttentionJob{j}); err == nil {
			t.Errorf("%s: encoded", name)
		}
	}
	r := rand.New(rand.NewPCG(3, 4))
	valid, err := AppendJobsRequest(nil, []scorer.AttentionJob{{ID: "x", Tokens: []int32{1, 2, 3}, Steps: []scorer.Step{{Action: [2]int{0, 1}, Observation: [2]int{1, 3}}}, Layers: []int{2}}})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 20000; i++ {
		b := append([]byte(nil), valid...)
		for m := 1 + r.IntN(3); m > 0; m-- {
			b[r.IntN(len(b))] = byte(r.Uint32())
		}
		_, _ = DecodeJobsRequest(b)
	}
}
