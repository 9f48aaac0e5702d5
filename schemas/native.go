package schemas

import (
	"github.com/linkedin/goavro/v2"

	"github.com/creditflow/creditflow/schemas/internal/avrobin"
)

// canShare reports whether packed arrays can be views of a record's bytes
// (avrobin.CanShare).
var canShare = avrobin.CanShare

var (
	packInt32             = avrobin.Pack[int32]
	packFloat32           = avrobin.Pack[float32]
	packFloat64           = avrobin.Pack[float64]
	unpackInt32           = avrobin.Unpack[int32]
	unpackFloat32         = avrobin.Unpack[float32]
	unpackFloat64         = avrobin.Unpack[float64]
	unpackInt32Portable   = avrobin.UnpackPortable[int32]
	unpackFloat32Portable = avrobin.UnpackPortable[float32]
	unpackFloat64Portable = avrobin.UnpackPortable[float64]
)

// ---- reading goavro native values without panicking ----

// nat reads fields of one decoded Avro record; the first problem is kept in
// err and later reads return zero values.
type nat struct {
	m    map[string]any
	path string
	err  *DecodeError
}

func (n *nat) fail(field, format string, args ...any) {
	if n.err == nil {
		n.err = undecodable("%s.%s: "+format, append([]any{n.path, field}, args...)...)
	}
}

func (n *nat) get(k string) any {
	if n.err != nil {
		return nil
	}
	v, ok := n.m[k]
	if !ok {
		n.fail(k, "missing")
	}
	return v
}

func natAs[V any](n *nat, k string) V {
	var zero V
	v := n.get(k)
	if n.err != nil {
		return zero
	}
	x, ok := v.(V)
	if !ok {
		n.fail(k, "has type %T, want %T", v, zero)
		return zero
	}
	return x
}

func (n *nat) str(k string) string   { return natAs[string](n, k) }
func (n *nat) i32(k string) int32    { return natAs[int32](n, k) }
func (n *nat) i64(k string) int64    { return natAs[int64](n, k) }
func (n *nat) f64(k string) float64  { return natAs[float64](n, k) }
func (n *nat) boolean(k string) bool { return natAs[bool](n, k) }
func (n *nat) raw(k string) []byte   { return natAs[[]byte](n, k) }
func (n *nat) list(k string) []any   { return natAs[[]any](n, k) }

// opt reads a ["null", T] union: ok is false for null.
func natOpt[V any](n *nat, k, branch string) (V, bool) {
	var zero V
	v := n.get(k)
	if n.err != nil || v == nil {
		return zero, false
	}
	u, ok := v.(map[string]any)
	if !ok {
		n.fail(k, "union has type %T", v)
		return zero, false
	}
	x, ok := u[branch].(V)
	if !ok || len(u) != 1 {
		n.fail(k, "union holds %v, want %s", u, branch)
		return zero, false
	}
	return x, true
}

func (n *nat) optF64(k string) *float64 {
	if x, ok := natOpt[float64](n, k, "double"); ok {
		return &x
	}
	return nil
}

func (n *nat) optF32(k string) *float32 {
	if x, ok := natOpt[float32](n, k, "float"); ok {
		return &x
	}
	return nil
}

func (n *nat) optI64(k string) *int64 {
	if x, ok := natOpt[int64](n, k, "long"); ok {
		return &x
	}
	return nil
}

func (n *nat) optStr(k string) *string {
	if x, ok := natOpt[string](n, k, "string"); ok {
		return &x
	}
	return nil
}

// optRaw returns a copy of a ["null", "bytes"] field: nil for null, non-nil
// (possibly empty) otherwise.
func (n *nat) optRaw(k string) []byte {
	if x, ok := natOpt[[]byte](n, k, "bytes"); ok {
		return append(make([]byte, 0, len(x)), x...)
	}
	return nil
}

func (n *nat) elemCheck(k string, b []byte, size int) bool {
	if len(b)%size != 0 {
		n.fail(k, "%d bytes is not a multiple of the %d-byte element size", len(b), size)
		return false
	}
	return n.err == nil
}

// int32s reads a required packed int32 field; empty decodes to nil.
func (n *nat) int32s(k string) []int32 {
	b := n.raw(k)
	if !n.elemCheck(k, b, 4) || len(b) == 0 {
		return nil
	}
	return unpackInt32(b)
}

// float64s reads a required packed float64 field; empty decodes to nil.
func (n *nat) float64s(k string) []float64 {
	b := n.raw(k)
	if !n.elemCheck(k, b, 8) || len(b) == 0 {
		return nil
	}
	return unpackFloat64(b)
}

// uint8s reads a required one-byte-per-element field; empty decodes to nil.
func (n *nat) uint8s(k string) []uint8 {
	b := n.raw(k)
	if n.err != nil || len(b) == 0 {
		return nil
	}
	return append(make([]uint8, 0, len(b)), b...)
}

// optFloat32s reads a ["null", "bytes"] packed float32 field: nil for null,
// non-nil (possibly empty) otherwise.
func (n *nat) optFloat32s(k string) []float32 {
	b, ok := natOpt[[]byte](n, k, "bytes")
	if !ok || !n.elemCheck(k, b, 4) {
		return nil
	}
	return unpackFloat32(b)
}

// records reads an array of records, calling f with a reader for each item.
func (n *nat) records(k string, f func(i int, item *nat)) {
	items := n.list(k)
	for i, it := range items {
		if n.err != nil {
			return
		}
		m, ok := it.(map[string]any)
		if !ok {
			n.fail(k, "item %d has type %T", i, it)
			return
		}
		sub := &nat{m: m, path: n.path + "." + k}
		f(i, sub)
		if sub.err != nil {
			n.err = sub.err
		}
	}
}

// ---- writing goavro native values ----

func optF64(v *float64) any {
	if v == nil {
		return nil
	}
	return goavro.Union("double", *v)
}

func optF32(v *float32) any {
	if v == nil {
		return nil
	}
	return goavro.Union("float", *v)
}

func optStr(v *string) any {
	if v == nil {
		return nil
	}
	return goavro.Union("string", *v)
}

func optI64(v *int64) any {
	if v == nil {
		return nil
	}
	return goavro.Union("long", *v)
}

func optBytes(v []byte) any {
	if v == nil {
		return nil
	}
	return goavro.Union("bytes", v)
}

func optPackedF32(v []float32) any {
	if v == nil {
		return nil
	}
	return goavro.Union("bytes", packFloat32(v))
}

// ---- Trajectory ----

func trajectoryToNative(t *Trajectory) map[string]any {
	turns := make([]any, len(t.Turns))
	for i := range t.Turns {
		tu := &t.Turns[i]
		turns[i] = map[string]any{
			"kind":        tu.Kind,
			"action":      packInt32(tu.Action),
			"observation": packInt32(tu.Observation),
		}
	}
	gold := make([]any, len(t.GoldAnswers))
	for i, g := range t.GoldAnswers {
		gold[i] = g
	}
	return map[string]any{
		"trajectory_id":    t.TrajectoryID,
		"prompt_id":        t.PromptID,
		"group_size":       t.GroupSize,
		"sample_index":     t.SampleIndex,
		"policy_version":   t.PolicyVersion,
		"created_at_ms":    t.CreatedAtMs,
		"prompt":           packInt32(t.Prompt),
		"turns":            turns,
		"reward":           optF64(t.Reward),
		"pred_answer":      optStr(t.PredAnswer),
		"gold_answers":     gold,
		"gold_target":      packInt32(t.GoldTarget),
		"gold_span_start":  t.GoldSpan[0],
		"gold_span_end":    t.GoldSpan[1],
		"rollout_logprobs": optPackedF32(t.RolloutLogprobs),
		"temperature":      optF32(t.Temperature),
		"source":           optStr(t.Source),
	}
}

func trajectoryFromNative(n *nat) *Trajectory {
	t := &Trajectory{
		TrajectoryID:  n.str("trajectory_id"),
		PromptID:      n.str("prompt_id"),
		GroupSize:     n.i32("group_size"),
		SampleIndex:   n.i32("sample_index"),
		PolicyVersion: n.i64("policy_version"),
		CreatedAtMs:   n.i64("created_at_ms"),
		Prompt:        n.int32s("prompt"),
	}
	if items := n.list("turns"); len(items) > 0 {
		t.Turns = make([]Turn, len(items))
	}
	n.records("turns", func(i int, r *nat) {
		t.Turns[i] = Turn{Kind: r.str("kind"), Action: r.int32s("action"), Observation: r.int32s("observation")}
	})
	t.Reward = n.optF64("reward")
	t.PredAnswer = n.optStr("pred_answer")
	for i, g := range n.list("gold_answers") {
		s, ok := g.(string)
		if !ok {
			n.fail("gold_answers", "item %d has type %T", i, g)
			break
		}
		t.GoldAnswers = append(t.GoldAnswers, s)
	}
	t.GoldTarget = n.int32s("gold_target")
	t.GoldSpan = [2]int32{n.i32("gold_span_start"), n.i32("gold_span_end")}
	t.RolloutLogprobs = n.optFloat32s("rollout_logprobs")
	t.Temperature = n.optF32("temperature")
	t.Source = n.optStr("source")
	return t
}

func trajectorySize(t *Trajectory) int {
	n := 64 + len(t.TrajectoryID) + len(t.PromptID) + 4*len(t.Prompt) + 4*len(t.GoldTarget) + 4*len(t.RolloutLogprobs)
	for _, tu := range t.Turns {
		n += 16 + len(tu.Kind) + 4*len(tu.Action) + 4*len(tu.Observation)
	}
	for _, g := range t.GoldAnswers {
		n += 5 + len(g)
	}
	if t.PredAnswer != nil {
		n += len(*t.PredAnswer)
	}
	if t.Source != nil {
		n += len(*t.Source)
	}
	return n
}

// ---- Scored ----

func scoredToNative(s *Scored) map[string]any {
	turns := make([]any, len(s.Turns))
	for i := range s.Turns {
		ts := &s.Turns[i]
		turns[i] = map[string]any{"delta": optF64(ts.Delta), "with": optF64(ts.With), "without": optF64(ts.Without)}
	}
	att := make([]any, len(s.Attention))
	for i := range s.Attention {
		g := &s.Attention[i]
		att[i] = map[string]any{"layer": g.Layer, "k": g.K, "aa": packFloat64(g.AA), "ao": packFloat64(g.AO)}
	}
	return map[string]any{
		"trajectory":            trajectoryToNative(&s.Trajectory),
		"method":                s.Method,
		"direction":             s.Direction,
		"turns":                 turns,
		"attention":             att,
		"scorer_model":          s.ScorerModel,
		"scorer_policy_version": s.ScorerPolicyVersion,
		"truncations":           s.Truncations,
		"scored_at_ms":          s.ScoredAtMs,
		"graphs":                lowerGraphsToNative(s.Graphs),
	}
}

func scoredFromNative(n *nat) *Scored {
	s := &Scored{}
	tm := natAs[map[string]any](n, "trajectory")
	if n.err == nil {
		sub := &nat{m: tm, path: n.path + ".trajectory"}
		s.Trajectory = *trajectoryFromNative(sub)
		if sub.err != nil {
			n.err = sub.err
		}
	}
	s.Method = n.str("method")
	s.Direction = n.str("direction")
	if items := n.list("turns"); len(items) > 0 {
		s.Turns = make([]TurnScore, len(items))
	}
	n.records("turns", func(i int, r *nat) {
		s.Turns[i] = TurnScore{Delta: r.optF64("delta"), With: r.optF64("with"), Without: r.optF64("without")}
	})
	if items := n.list("attention"); len(items) > 0 {
		s.Attention = make([]LayerGraph, len(items))
	}
	n.records("attention", func(i int, r *nat) {
		s.Attention[i] = LayerGraph{Layer: r.i32("layer"), K: r.i32("k"), AA: r.float64s("aa"), AO: r.float64s("ao")}
	})
	s.ScorerModel = n.str("scorer_model")
	s.ScorerPolicyVersion = n.i64("scorer_policy_version")
	s.Truncations = n.i32("truncations")
	s.ScoredAtMs = n.i64("scored_at_ms")
	s.Graphs = lowerGraphsFromNative(n, "graphs")
	return s
}

func scoredSize(s *Scored) int {
	n := trajectorySize(&s.Trajectory) + 64 + len(s.Method) + len(s.Direction) + len(s.ScorerModel) + 27*len(s.Turns)
	for _, g := range s.Attention {
		n += 16 + 8*len(g.AA) + 8*len(g.AO)
	}
	for _, g := range s.Graphs {
		n += 16 + 8*len(g.AA) + 8*len(g.AO) + 8*len(g.Sum)
	}
	return n
}

// ---- Sample ----

func sampleToNative(s *Sample) map[string]any {
	turns := make([]any, len(s.Turns))
	for i := range s.Turns {
		d := &s.Turns[i]
		turns[i] = map[string]any{
			"kind":              d.Kind,
			"eligible":          d.Eligible,
			"delta":             optF64(d.Delta),
			"z":                 optF64(d.Z),
			"z_norm":            optF64(d.ZNorm),
			"gate":              d.Gate,
			"process_advantage": d.ProcessAdvantage,
			"advantage":         d.Advantage,
			"p":                 optF64(d.P),
			"step_reward":       optF64(d.StepReward),
			"weight":            optF64(d.Weight),
		}
	}
	var attn any
	if s.AttnSR != nil {
		a := s.AttnSR
		attn = goavro.Union("io.creditflow.v1.AttnSRDiag", map[string]any{
			"confidence": a.Confidence, "focus": a.Focus, "consensus": a.Consensus,
			"baseline": a.Baseline, "budget": a.Budget,
		})
	}
	mask := s.LossMask
	if mask == nil {
		mask = []uint8{}
	}
	return map[string]any{
		"trajectory_id":         s.TrajectoryID,
		"prompt_id":             s.PromptID,
		"group_size":            s.GroupSize,
		"sample_index":          s.SampleIndex,
		"policy_version":        s.PolicyVersion,
		"created_at_ms":         s.CreatedAtMs,
		"method":                s.Method,
		"output":                s.Output,
		"partial":               s.Partial,
		"reward":                s.Reward,
		"outcome_advantage":     s.OutcomeAdvantage,
		"tokens":                packInt32(s.Tokens),
		"loss_mask":             []byte(mask),
		"advantages":            optPackedF32(s.Advantages),
		"token_rewards":         optPackedF32(s.TokenRewards),
		"rollout_logprobs":      optPackedF32(s.RolloutLogprobs),
		"temperature":           optF32(s.Temperature),
		"turns":                 turns,
		"attnsr":                attn,
		"scorer_policy_version": optI64(s.ScorerPolicyVersion),
		"source":                optStr(s.Source),
	}
}

func sampleFromNative(n *nat) *Sample {
	s := &Sample{
		TrajectoryID:     n.str("trajectory_id"),
		PromptID:         n.str("prompt_id"),
		GroupSize:        n.i32("group_size"),
		SampleIndex:      n.i32("sample_index"),
		PolicyVersion:    n.i64("policy_version"),
		CreatedAtMs:      n.i64("created_at_ms"),
		Method:           n.str("method"),
		Output:           n.str("output"),
		Partial:          n.boolean("partial"),
		Reward:           n.f64("reward"),
		OutcomeAdvantage: n.f64("outcome_advantage"),
		Tokens:           n.int32s("tokens"),
		LossMask:         n.uint8s("loss_mask"),
		Advantages:       n.optFloat32s("advantages"),
		TokenRewards:     n.optFloat32s("token_rewards"),
		RolloutLogprobs:  n.optFloat32s("rollout_logprobs"),
		Temperature:      n.optF32("temperature"),
	}
	if items := n.list("turns"); len(items) > 0 {
		s.Turns = make([]TurnDiag, len(items))
	}
	n.records("turns", func(i int, r *nat) {
		s.Turns[i] = TurnDiag{
			Kind:             r.str("kind"),
			Eligible:         r.boolean("eligible"),
			Delta:            r.optF64("delta"),
			Z:                r.optF64("z"),
			ZNorm:            r.optF64("z_norm"),
			Gate:             r.i32("gate"),
			ProcessAdvantage: r.f64("process_advantage"),
			Advantage:        r.f64("advantage"),
			P:                r.optF64("p"),
			StepReward:       r.optF64("step_reward"),
			Weight:           r.optF64("weight"),
		}
	})
	if m, ok := natOpt[map[string]any](n, "attnsr", "io.creditflow.v1.AttnSRDiag"); ok {
		r := &nat{m: m, path: n.path + ".attnsr"}
		s.AttnSR = &AttnSRDiag{
			Confidence: r.f64("confidence"), Focus: r.f64("focus"), Consensus: r.f64("consensus"),
			Baseline: r.f64("baseline"), Budget: r.f64("budget"),
		}
		if r.err != nil {
			n.err = r.err
		}
	}
	s.ScorerPolicyVersion = n.optI64("scorer_policy_version")
	s.Source = n.optStr("source")
	return s
}

func sampleSize(s *Sample) int {
	n := 0
	if s.Source != nil {
		n = len(*s.Source)
	}
	return n + 148 + len(s.TrajectoryID) + len(s.PromptID) + len(s.Method) + len(s.Output) +
		9*len(s.Tokens) + 4*len(s.TokenRewards) + 4*len(s.RolloutLogprobs) + 80*len(s.Turns)
}

// ---- DeadLetter ----

func deadLetterToNative(d *DeadLetter) map[string]any {
	return map[string]any{
		"reason":    d.Reason,
		"detail":    d.Detail,
		"stage":     d.Stage,
		"topic":     d.Topic,
		"partition": d.Partition,
		"offset":    d.Offset,
		"key":       optBytes(d.Key),
		"value":     optBytes(d.Value),
		"at_ms":     d.AtMs,
	}
}

func deadLetterFromNative(n *nat) *DeadLetter {
	return &DeadLetter{
		Reason:    n.str("reason"),
		Detail:    n.str("detail"),
		Stage:     n.str("stage"),
		Topic:     n.str("topic"),
		Partition: n.i32("partition"),
		Offset:    n.i64("offset"),
		Key:       n.optRaw("key"),
		Value:     n.optRaw("value"),
		AtMs:      n.i64("at_ms"),
	}
}

func deadLetterSize(d *DeadLetter) int {
	return 64 + len(d.Reason) + len(d.Detail) + len(d.Stage) + len(d.Topic) + len(d.Key) + len(d.Value)
}

// ---- PolicyAnnouncement ----

func policyToNative(p *PolicyAnnouncement) map[string]any {
	return map[string]any{"version": p.Version, "checkpoint": p.Checkpoint, "announced_at_ms": p.AnnouncedAtMs}
}

func policyFromNative(n *nat) *PolicyAnnouncement {
	return &PolicyAnnouncement{Version: n.i64("version"), Checkpoint: n.str("checkpoint"), AnnouncedAtMs: n.i64("announced_at_ms")}
}

func policySize(p *PolicyAnnouncement) int { return 32 + len(p.Checkpoint) }
