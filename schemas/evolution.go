package schemas

import (
	_ "embed"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"reflect"

	"github.com/creditflow/creditflow/schemas/internal/shape"
	"github.com/linkedin/goavro/v2"
)

// Schema evolution (docs/wire-format.md, "Schema evolution").
//
// A record names its writer schema by fingerprint. Besides the current
// schema, every codec keeps the earlier versions of its schema that were
// ever published (the files under v1/, registered in history below) and
// resolves a record written with one of them to the current reader schema:
// the body is decoded with the writer schema, then every field the writer
// did not have takes its default. Records written with the current schema
// take the direct path and pay nothing for this (one extra comparison only
// when the fingerprint is not the current one).
//
// Allowed changes, checked when the codecs are built (a schema that breaks
// them makes every codec of that record fail with a build error, and the
// tests fail): new fields are appended at the END of a record's field list
// and have a default; nothing else changes (no field removed, renamed,
// re-typed or re-ordered; docs and defaults of existing fields may change,
// they are not part of the wire format).

var (
	//go:embed v1/trajectory.avsc
	v1TrajectorySchema string
	//go:embed v1/scored.avsc
	v1ScoredSchema string
	//go:embed v1/sample.avsc
	v1SampleSchema string
	// The second generation of Scored: Trajectory.source, graphs only in
	// attention (K×K).
	//go:embed v2/scored.avsc
	v2ScoredSchema string
	// The third generation of Scored: compact graphs with G_AA and G_AO
	// only (LowerGraph without sum).
	//go:embed v3/scored.avsc
	v3ScoredSchema string
)

// history lists, per record, the earlier writer schemas decoders still
// accept, oldest first. Register a schema here (and keep its file) before
// changing the current one.
var history = map[string][]string{
	NameTrajectory: {v1TrajectorySchema},
	NameScored:     {v1ScoredSchema, v2ScoredSchema, v3ScoredSchema},
	NameSample:     {v1SampleSchema},
}

// writer is one earlier version of a record's schema.
type writer struct {
	fp    [8]byte
	avro  *goavro.Codec
	shape *shape.Shape
	fill  *filler // what the reader has and the writer lacks; nil when nothing
}

// compileHistory builds the writers of record name against the current
// (reader) schema.
func compileHistory(name, reader string) ([]*writer, error) {
	var out []*writer
	for i, ws := range history[name] {
		ac, err := goavro.NewCodec(ws)
		if err != nil {
			return nil, fmt.Errorf("build Avro codec for %s writer schema %d: %w", name, i+1, err)
		}
		w := &writer{avro: ac}
		binary.LittleEndian.PutUint64(w.fp[:], ac.Rabin)
		if w.shape, err = shape.Compile(ac.CanonicalSchema()); err != nil {
			return nil, fmt.Errorf("compile shape of %s writer schema %d: %w", name, i+1, err)
		}
		if w.fill, err = resolveSchemas(ws, reader); err != nil {
			return nil, fmt.Errorf("%s writer schema %d does not resolve to the current schema: %w", name, i+1, err)
		}
		out = append(out, w)
	}
	return out, nil
}

// filler adds the reader's missing fields, with their defaults, to a
// goavro native record decoded with the writer schema.
type filler struct {
	add     []fieldDefault
	records map[string]*filler // record-typed fields whose record changed
	items   map[string]*filler // array-of-record fields whose item record changed
}

type fieldDefault struct {
	name  string
	value func() any // a fresh value each time (decoded values never share)
}

func (f *filler) apply(m map[string]any) {
	if f == nil {
		return
	}
	for _, d := range f.add {
		m[d.name] = d.value()
	}
	for k, sub := range f.records {
		if r, ok := m[k].(map[string]any); ok {
			sub.apply(r)
		}
	}
	for k, sub := range f.items {
		if list, ok := m[k].([]any); ok {
			for _, it := range list {
				if r, ok := it.(map[string]any); ok {
					sub.apply(r)
				}
			}
		}
	}
}

// resolveSchemas checks that writer evolves into reader by the allowed
// changes and returns the filler for records written with writer.
func resolveSchemas(writer, reader string) (*filler, error) {
	var w, r any
	if err := json.Unmarshal([]byte(writer), &w); err != nil {
		return nil, fmt.Errorf("parse writer schema: %w", err)
	}
	if err := json.Unmarshal([]byte(reader), &r); err != nil {
		return nil, fmt.Errorf("parse reader schema: %w", err)
	}
	return resolveNode(w, r, "")
}

func resolveNode(w, r any, path string) (*filler, error) {
	wm, wok := w.(map[string]any)
	rm, rok := r.(map[string]any)
	if wok && rok && wm["type"] == "record" && rm["type"] == "record" {
		return resolveRecord(wm, rm, path)
	}
	if wok && rok && wm["type"] == "array" && rm["type"] == "array" {
		sub, err := resolveNode(wm["items"], rm["items"], path+"[]")
		if err != nil || sub == nil {
			return nil, err
		}
		return &filler{items: map[string]*filler{"": sub}}, nil
	}
	if !reflect.DeepEqual(stripDocs(w), stripDocs(r)) {
		return nil, fmt.Errorf("%s: type changed (only appending fields with defaults is allowed)", orRoot(path))
	}
	return nil, nil
}

func resolveRecord(w, r map[string]any, path string) (*filler, error) {
	if w["name"] != r["name"] {
		return nil, fmt.Errorf("%s: record %v renamed to %v", orRoot(path), w["name"], r["name"])
	}
	wf, _ := w["fields"].([]any)
	rf, _ := r["fields"].([]any)
	if len(rf) < len(wf) {
		return nil, fmt.Errorf("%s: record %v lost fields", orRoot(path), r["name"])
	}
	f := &filler{}
	changed := false
	for i, x := range rf {
		rfield, _ := x.(map[string]any)
		name, _ := rfield["name"].(string)
		if i < len(wf) {
			wfield, _ := wf[i].(map[string]any)
			if wfield["name"] != name {
				return nil, fmt.Errorf("%s: field %d is %v in the writer and %s in the reader (fields are only appended)", orRoot(path), i, wfield["name"], name)
			}
			sub, err := resolveNode(wfield["type"], rfield["type"], path+"."+name)
			if err != nil {
				return nil, err
			}
			if sub != nil {
				changed = true
				if sub.items != nil && sub.add == nil && sub.records == nil {
					if f.items == nil {
						f.items = map[string]*filler{}
					}
					f.items[name] = sub.items[""]
				} else {
					if f.records == nil {
						f.records = map[string]*filler{}
					}
					f.records[name] = sub
				}
			}
			continue
		}
		def, ok := rfield["default"]
		if !ok {
			return nil, fmt.Errorf("%s.%s: an added field needs a default", orRoot(path), name)
		}
		value, err := nativeDefault(rfield["type"], def)
		if err != nil {
			return nil, fmt.Errorf("%s.%s: %w", orRoot(path), name, err)
		}
		f.add = append(f.add, fieldDefault{name: name, value: value})
		changed = true
	}
	if !changed {
		return nil, nil
	}
	return f, nil
}

// nativeDefault turns a JSON default of an Avro type into the goavro native
// value a decoder would have produced.
func nativeDefault(typ, def any) (func() any, error) {
	if u, ok := typ.([]any); ok { // a union's default is of its first branch
		if len(u) == 0 {
			return nil, fmt.Errorf("empty union")
		}
		if u[0] == "null" {
			if def != nil {
				return nil, fmt.Errorf("default %v for a union whose first branch is null", def)
			}
			return func() any { return nil }, nil
		}
		inner, err := nativeDefault(u[0], def)
		if err != nil {
			return nil, err
		}
		branch, ok := u[0].(string)
		if !ok {
			return nil, fmt.Errorf("a default for a union of a complex first branch is not supported")
		}
		return func() any { return map[string]any{branch: inner()} }, nil
	}
	if m, ok := typ.(map[string]any); ok {
		if m["type"] == "array" {
			if l, ok := def.([]any); ok && len(l) == 0 {
				return func() any { return []any{} }, nil
			}
			return nil, fmt.Errorf("only an empty array default is supported")
		}
		typ = m["type"]
	}
	switch typ {
	case "null":
		return func() any { return nil }, nil
	case "boolean":
		if b, ok := def.(bool); ok {
			return func() any { return b }, nil
		}
	case "int":
		if x, ok := def.(float64); ok {
			return func() any { return int32(x) }, nil
		}
	case "long":
		if x, ok := def.(float64); ok {
			return func() any { return int64(x) }, nil
		}
	case "float":
		if x, ok := def.(float64); ok {
			return func() any { return float32(x) }, nil
		}
	case "double":
		if x, ok := def.(float64); ok {
			return func() any { return x }, nil
		}
	case "string":
		if s, ok := def.(string); ok {
			return func() any { return s }, nil
		}
	case "bytes":
		if s, ok := def.(string); ok {
			return func() any { return []byte(s) }, nil
		}
	}
	return nil, fmt.Errorf("default %v of type %v is not supported", def, typ)
}

// stripDocs removes "doc" and "default" keys, which are not part of the
// wire format, from a parsed schema node.
func stripDocs(v any) any {
	switch t := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(t))
		for k, x := range t {
			if k != "doc" && k != "default" {
				out[k] = stripDocs(x)
			}
		}
		return out
	case []any:
		out := make([]any, len(t))
		for i, x := range t {
			out[i] = stripDocs(x)
		}
		return out
	}
	return v
}

func orRoot(path string) string {
	if path == "" {
		return "record"
	}
	return path[1:]
}
