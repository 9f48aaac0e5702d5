package protocol

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/creditflow/creditflow/scorer"
)

func randomAttentionJobs(r *rand.Rand) []scorer.AttentionJob {
	jobs := make([]scorer.AttentionJob, r.IntN(4))
	for i := range jobs {
		j := &jobs[i]
		if r.IntN(3) > 0 {
			j.ID = []string{"t-1", "traj/é", `a"b`, "x<y>&", ""}[r.IntN(5)]
		}
		j.Tokens = make([]int32, r.IntN(2000))
		for k := range j.Tokens {
			j.Tokens[k] = int32(r.Uint32())
		}
		j.Steps = make([]scorer.Step, r.IntN(6))
		for k := range j.Steps {
			a := r.IntN(1000) - 5
			j.Steps[k] = scorer.Step{Action: [2]int{a, a + r.IntN(50)}}
			if r.IntN(3) > 0 {
				j.Steps[k].Observation = [2]int{a + 50, a + 50 + r.IntN(60)}
			}
		}
		switch r.IntN(3) {
		case 0:
			j.Layers = nil
		case 1:
			j.Layers = []int{}
		default:
			j.Layers = []int{r.IntN(30), r.IntN(30) - 3}
		}
	}
	return jobs
}

func decodeBoth(t *testing.T, body []byte) {
	t.Helper()
	var fast, ref AttentionRequest
	errFast := DecodeAttentionRequest(body, &fast)
	errRef := json.NewDecoder(bytes.NewReader(body)).Decode(&ref)
	if (errFast == nil) != (errRef == nil) {
		t.Fatalf("direct decoder error %v, encoding/json error %v for %.80q", errFast, errRef, body)
	}
	if errRef == nil && !reflect.DeepEqual(fast, ref) {
		t.Fatalf("direct decoder gave\n%+v\nencoding/json\n%+v\nfor %.200q", fast, ref, body)
	}
}

// TestDecodeAttentionRequestMatchesEncodingJSON: on the bodies
// AppendAttentionRequest writes, on those bodies cut or with a byte
// changed, and on bodies in other JSON forms, DecodeAttentionRequest gives
// what encoding/json gives, and an error exactly where it gives one.
func TestDecodeAttentionRequestMatchesEncodingJSON(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	direct := 0
	for i := 0; i < 300; i++ {
		body, err := AppendAttentionRequest(nil, randomAttentionJobs(r))
		if err != nil {
			t.Fatal(err)
		}
		decodeBoth(t, body)
		if p := (attnParser{b: body}); p.request(new(AttentionRequest)) {
			direct++
		}
		for m := 0; m < 20; m++ {
			b := append([]byte(nil), body...)
			switch r.IntN(3) {
			case 0:
				b = b[:r.IntN(len(b)+1)]
			case 1:
				b[r.IntN(len(b))] = "0123456789-,[]{}\":nul \\A/+="[r.IntN(27)]
			default:
				b = append(b, " \n}x"[r.IntN(4)])
			}
			decodeBoth(t, b)
		}
	}
	if direct < 150 {
		t.Fatalf("the direct parser read %d of 300 bodies that AppendAttentionRequest wrote", direct)
	}
	for _, body := range []string{
		`{"jobs":[]}`, `{"jobs":null}`, `{}`, ` {"jobs":[]}`, `{"Jobs":[]}`,
		`{"jobs":[{"tokens":"AQAAAA==","steps":[],"layers":null}]}`,
		`{"jobs":[{"tokens":"AQAAAA==","steps":[{"action":[0,1],"observation":null}],"layers":[1, 2]}]}`,
		`{"jobs":[{"tokens":"AQAAAA==","steps":[{"action":[0,01],"observation":null}],"layers":null}]}`,
		`{"jobs":[{"tokens":"AQAAAA=","steps":[],"layers":null}]}`,
		`{"jobs":[{"tokens":"AQAAAA==","steps":[],"layers":[99999999999999999999]}]}`,
		`{"jobs":[{"id":"\u0074","tokens":"AQAAAA==","steps":[],"layers":null}]}`,
		`{"jobs":[{"tokens":"AQAAAA==","steps":[],"layers":null,"extra":1}]}`,
	} {
		decodeBoth(t, []byte(body))
	}
}

// BenchmarkDecodeAttentionRequest: a request of 54 AttnSR jobs (1,200
// tokens, 30 steps, six layers), decoded directly and by encoding/json.
func BenchmarkDecodeAttentionRequest(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 1))
	jobs := make([]scorer.AttentionJob, 54)
	for i := range jobs {
		j := &jobs[i]
		j.ID = "trajectory-" + string(rune('a'+i%26))
		j.Tokens = make([]int32, 1200)
		for k := range j.Tokens {
			j.Tokens[k] = int32(r.IntN(151936))
		}
		for k := 0; k < 30; k++ {
			j.Steps = append(j.Steps, scorer.Step{Action: [2]int{40 * k, 40*k + 20}, Observation: [2]int{40*k + 20, 40*k + 40}})
		}
		j.Layers = []int{8, 10, 12, 14, 16, 18}
	}
	body, err := AppendAttentionRequest(nil, jobs)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("direct", func(b *testing.B) {
		b.SetBytes(int64(len(body)))
		for b.Loop() {
			var req AttentionRequest
			if err := DecodeAttentionRequest(body, &req); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("encoding-json", func(b *testing.B) {
		b.SetBytes(int64(len(body)))
		for b.Loop() {
			var req AttentionRequest
			if err := json.NewDecoder(bytes.NewReader(body)).Decode(&req); err != nil {
				b.Fatal(err)
			}
		}
	})
}
