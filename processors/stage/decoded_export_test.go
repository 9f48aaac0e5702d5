package stage

// SetDecodedBudget sets the decoded window of the advantage stage for a test;
// call the returned function to restore it.
func SetDecodedBudget(n int) (restore func()) {
	old, oldFloor := decodedBudget, decodedFloor
	decodedBudget, decodedFloor = n, min(n, decodedFloor)
	return func() { decodedBudget, decodedFloor = old, oldFloor }
}
