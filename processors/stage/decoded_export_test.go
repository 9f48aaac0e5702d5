package stage

import (
	"fmt"

	"github.com/creditflow/creditflow/schemas"
)

// SetDecodedBudget sets the decoded window of the advantage stage for a test;
// call the returned function to restore it.
func SetDecodedBudget(n int) (restore func()) {
	old, oldFloor := decodedBudget, decodedFloor
	decodedBudget, decodedFloor = n, min(n, decodedFloor)
	return func() { decodedBudget, decodedFloor = old, oldFloor }
}

// FailEncodingOf makes the advantage stage's sample encoder fail for the
// samples of the named trajectories, for a test; call the returned function to
// restore it.
func FailEncodingOf(ids ...string) (restore func()) {
	old := encodeSample
	encodeSample = func(dst []byte, s *schemas.Sample) ([]byte, error) {
		for _, id := range ids {
			if s.TrajectoryID == id {
				return nil, fmt.Errorf("encode %s: injected fault", s.TrajectoryID)
			}
		}
		return old(dst, s)
	}
	return func() { encodeSample = old }
}
