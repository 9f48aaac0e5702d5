package protocol

// The binary bodies' magic numbers, for the external tests.
const (
	MagicRows   = magicRows
	MagicGraphs = magicGraphs
)

// MagicLowerGraphs is the lower-graphs answer's magic number.
const MagicLowerGraphs = magicLowerGraphs
