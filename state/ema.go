package state

// EMA is the AttnSR outcome baseline R̄_t and t, the number of batches seen
// (docs/method.md §3.3). The zero value is "no batch yet". The partition core
// owns it (Partition.EMA), the ledger records it after every finalized group,
// and the snapshot persists it as it is; processors/credit names it credit.EMA.
type EMA struct {
	Value float64 `json:"value"`
	Count int64   `json:"count"`
}

// Update folds in the mean outcome M_t of the next batch and returns the
// new R̄_t (docs/method.md §3.3): R̄_1 = M_1; R̄_t = δ · R̄_{t−1} + (1 − δ) · M_t.
func (e *EMA) Update(batchMean, delta float64) float64 {
	if e.Count == 0 {
		e.Value = batchMean
	} else {
		e.Value = delta*e.Value + (1-delta)*batchMean
	}
	e.Count++
	return e.Value
}
