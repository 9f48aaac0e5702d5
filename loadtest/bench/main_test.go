package bench

import (
	"os"
	"testing"
)

// TestMain lets the test binary act as the bench's instant scorer and as its
// embedded broker (startChild runs os.Executable with ScorerCmd or BrokerCmd).
func TestMain(m *testing.M) {
	for cmd, serve := range map[string]func([]string) (int, error){ScorerCmd: ServeScorer, BrokerCmd: ServeBroker} {
		if len(os.Args) > 1 && os.Args[1] == cmd {
			code, err := serve(os.Args[2:])
			if err != nil {
				os.Stderr.WriteString(err.Error() + "\n")
			}
			os.Exit(code)
		}
	}
	os.Exit(m.Run())
}
