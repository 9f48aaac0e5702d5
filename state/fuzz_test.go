package state

import (
	"bytes"
	"testing"
)

// FuzzUnmarshalSnapshot: a changelog record of any content never panics the
// decoder, and whatever decodes encodes back to a snapshot that decodes the same.
func FuzzUnmarshalSnapshot(f *testing.F) {
	l, _ := NewLedger("scored", 0, 0, nil)
	l.Read(0, 5)
	ev := l.Close(CloseEvent{Offset: 0, Phase: PhaseAfter, PromptID: "p", Members: []string{"a"}, Finalized: true,
		BatchMean: 0.5, EMAAfter: EMA{Value: 0.5, Count: 1}}, false)
	l.Ack(ev)
	good, _ := l.Snapshot([]ClosedGroup{{PromptID: "q", Members: []string{"x", "y"}}}).Marshal()
	f.Add(good)
	f.Add([]byte(`{"version":1,"next_offset":-5,"emitted":[{"offset":3,"phase":"before"}]}`))
	f.Add([]byte(`{"version":1,"closed":null,"emitted":null}`))
	f.Add([]byte(`{"version":2}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := UnmarshalSnapshot(b)
		if err != nil {
			return
		}
		again, err := s.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		s2, err := UnmarshalSnapshot(again)
		if err != nil {
			t.Fatalf("re-decoding %s: %v", again, err)
		}
		third, _ := s2.Marshal()
		if !bytes.Equal(again, third) {
			t.Fatalf("not stable:\n%s\n%s", again, third)
		}
		// A restored ledger must accept whatever decoded.
		NewLedger(s.Topic, s.Partition, 0, s)
	})
}
