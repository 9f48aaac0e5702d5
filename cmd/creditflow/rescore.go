package main

// The scorer a command builds from its flags.

import (
	"fmt"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/creditflow/creditflow/scorer"
	"github.com/creditflow/creditflow/scorer/client"
	"github.com/creditflow/creditflow/scorer/local"
)

// lapoStatisticHelp is the help of --lapo-statistic where it chooses what
// the scorer computes.
const lapoStatisticHelp = "what LAPO rows are scored with: logprob, entropy or kl (docs/method.md §2.4; entropy and kl need scorers with the \"statistics\" feature)"

// scorerFlags are the flags that name a scorer: remote endpoints, or the
// in-process model.
type scorerFlags struct {
	endpoints, model, token, ca *string
	budget                      *int
}

// addScorerFlags defines the scorer flags in the current group; required:
// --scorers has no default (the command asks for "local" to score
// in-process).
func addScorerFlags(fs *flagSet, required bool) scorerFlags {
	help := "scorer endpoints: comma-separated URLs, dns+http://HOST:PORT (every address of HOST, re-resolved: a headless service), or local for the in-process CPU scorer"
	if required {
		help += " (required)"
	} else {
		help += " (default: local)"
	}
	return scorerFlags{
		endpoints: fs.String("scorers", "", help),
		model:     fs.String("scorer-model", "tiny", "in-process scorer: "+modelFlagHelp),
		token:     fs.String("scorer-token-file", "", "file holding the bearer token for the scorer endpoints"),
		ca:        fs.String("scorer-ca", "", "PEM CA file for https scorer endpoints"),
		budget:    fs.Int("scorer-token-budget", client.DefaultTokenBudget, "scorer endpoints: tokens per coalesced request (rows' context+target; docs/scorer-protocol.md)"),
	}
}

// newScorer builds the scorer of f: a client of the endpoints, or the
// in-process scorer on the model (local.New with opts); close releases it.
func (f scorerFlags) newScorer(log zerolog.Logger, reg prometheus.Registerer, opts ...local.Option) (s scorer.Scorer, sc *local.Scorer, close func(), err error) {
	if *f.endpoints == "" || strings.TrimSpace(*f.endpoints) == "local" {
		m, err := loadModelFlag(*f.model, 0)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("--scorer-model: %w", err)
		}
		sc := local.New(m, append([]local.Option{local.WithInProcessRegisterer(reg)}, opts...)...)
		return sc, sc, func() {}, nil
	}
	copts := []client.Option{client.WithLogger(log), client.WithRegisterer(reg), client.WithTokenBudget(*f.budget)}
	if *f.token != "" {
		// Read again when the file changes: a rotated secret needs no restart.
		copts = append(copts, client.WithBearerTokenFile(*f.token))
	}
	if *f.ca != "" {
		copts = append(copts, client.WithCAFile(*f.ca))
	}
	c, err := client.New(splitList(*f.endpoints), copts...)
	if err != nil {
		return nil, nil, nil, err
	}
	return c, nil, func() { c.Close() }, nil
}
