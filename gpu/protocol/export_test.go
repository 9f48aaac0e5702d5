package protocol

// The binary bodies' magic numbers, for the external tests.
const (
	MagicRows   = magicRows
	MagicGraphs = magicGraphs
)
