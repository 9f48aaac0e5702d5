package monitor

// idWindow remembers the last len(ring) ids (as 64-bit hashes) in insertion
// order: a bounded set for duplicate detection. Memory is fixed; an id older
// than the window is forgotten.
type idWindow struct {
	set  map[uint64]struct{}
	ring []uint64
	pos  int
	full bool
}

func newIDWindow(n int) *idWindow {
	return &idWindow{set: make(map[uint64]struct{}, n), ring: make([]uint64, n)}
}

// add records h and reports whether it was new.
func (w *idWindow) add(h uint64) bool {
	if _, ok := w.set[h]; ok {
		return false
	}
	if w.full {
		delete(w.set, w.ring[w.pos])
	}
	w.ring[w.pos] = h
	w.set[h] = struct{}{}
	w.pos++
	if w.pos == len(w.ring) {
		w.pos, w.full = 0, true
	}
	return true
}

// hashID is FNV-1a, 64 bits.
func hashID(s string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= 1099511628211
	}
	return h
}
