package stage

import (
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/creditflow/creditflow/state"
)

// A group whose samples went out in several writes settles (its offsets done,
// its close event acknowledged) on the last write's acknowledgement, not
// before; a failed write leaves it unsettled for the next owner.
func TestEmissionSettlesOnItsLastWrite(t *testing.T) {
	for _, failed := range []bool{false, true} {
		ledger, _ := state.NewLedger("scored", 0, 0, nil)
		p := &partition{a: &AdvantageStage{cfg: Config{Metrics: NewMetrics(prometheus.NewRegistry())}}, ledger: ledger}
		for o := int64(0); o < 3; o++ {
			ledger.Read(o, 0)
		}
		ev := ledger.Close(state.CloseEvent{Offset: 2, PromptID: "p", Finalized: true}, false)
		e := &emission{ev: ev, offsets: []int64{0, 1, 2}, started: time.Now(), writes: 3}
		for i := 0; i < 3; i++ {
			if got := ledger.Committable(); got != 0 {
				t.Fatalf("failed=%v: committable %d after %d of 3 writes acknowledged, want 0", failed, got, i)
			}
			var err error
			if failed && i == 1 {
				err = errors.New("partition released")
			}
			p.acked(ack{e: e, err: err})
		}
		want := int64(3)
		if failed {
			want = 0
		}
		if got := ledger.Committable(); got != want {
			t.Fatalf("failed=%v: committable %d after the last write, want %d", failed, got, want)
		}
	}
}
