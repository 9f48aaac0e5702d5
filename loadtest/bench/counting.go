package bench

import (
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// countingRegistry is the registry a benchmarked stage registers its
// metrics with; it also keeps the collectors of a few counter families, so
// that the bench's 5 ms polls read those alone. A full Gather of a stage's
// registry (histograms, the consumer group's metrics) costs a few percent
// of the process's CPU in the stage phases (docs/performance.md, Method),
// which the passthrough (plain atomic counters) does not pay.
type countingRegistry struct {
	*prometheus.Registry
	names []string
	mu    sync.Mutex
	kept  []prometheus.Collector
	// fqNames holds each kept metric's family name by its Desc.
	fqNames sync.Map
}

func newCountingRegistry(reg *prometheus.Registry, names ...string) *countingRegistry {
	return &countingRegistry{Registry: reg, names: names}
}

// Register registers c and keeps it when it describes a counted family.
func (r *countingRegistry) Register(c prometheus.Collector) error {
	if err := r.Registry.Register(c); err != nil {
		return err
	}
	descs := make(chan *prometheus.Desc, 16)
	go func() { c.Describe(descs); close(descs) }()
	keep := false
	for d := range descs {
		for _, n := range r.names {
			if strings.Contains(d.String(), `fqName: "`+n+`"`) {
				keep = true
			}
		}
	}
	if keep {
		r.mu.Lock()
		r.kept = append(r.kept, c)
		r.mu.Unlock()
	}
	return nil
}

// MustRegister is Register that panics, as prometheus.Registerer's does.
func (r *countingRegistry) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := r.Register(c); err != nil {
			panic(err)
		}
	}
}

// familyName is d's fully-qualified name, found once per Desc: Desc's
// String formats every field and its labels, and the polls ask hundreds of
// times a second.
func (r *countingRegistry) familyName(d *prometheus.Desc) string {
	if n, ok := r.fqNames.Load(d); ok {
		return n.(string)
	}
	name := d.String()
	if i := strings.Index(name, `fqName: "`); i >= 0 {
		name = name[i+len(`fqName: "`):]
		name = name[:strings.IndexByte(name, '"')]
	}
	r.fqNames.Store(d, name)
	return name
}

// gather collects the counted families only.
func (r *countingRegistry) gather() []*dto.MetricFamily {
	r.mu.Lock()
	kept := append([]prometheus.Collector(nil), r.kept...)
	r.mu.Unlock()
	fams := map[string]*dto.MetricFamily{}
	var out []*dto.MetricFamily
	for _, c := range kept {
		ch := make(chan prometheus.Metric, 64)
		go func() { c.Collect(ch); close(ch) }()
		for m := range ch {
			var pb dto.Metric
			if m.Write(&pb) != nil {
				continue
			}
			name := r.familyName(m.Desc())
			f := fams[name]
			if f == nil {
				f = &dto.MetricFamily{Name: &name}
				fams[name] = f
				out = append(out, f)
			}
			f.Metric = append(f.Metric, &pb)
		}
	}
	return out
}
