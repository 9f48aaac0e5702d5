package main

import (
	"flag"
	"os"

	"github.com/rs/zerolog"

	"github.com/creditflow/creditflow/loadtest/internal/cmdutil"
	"github.com/creditflow/creditflow/scorer/cpumodel"
	"github.com/creditflow/creditflow/scorer/local"
	"github.com/creditflow/creditflow/scorer/server"
)

// scorerServeCmd is the harness's own scorer process: the CPU reference
// scorer with the built-in tiny model over the scorer protocol, used for
// --scorer-process when the creditflow binary has no scorer command.
const scorerServeCmd = "scorer-serve"

func scorerServe(args []string) (int, error) {
	fs := flag.NewFlagSet(scorerServeCmd, flag.ContinueOnError)
	addr := fs.String("addr", "127.0.0.1:0", "listen address")
	if err := fs.Parse(args); err != nil {
		return 2, err
	}
	ctx, stop := cmdutil.SignalContext()
	defer stop()
	log := zerolog.New(os.Stderr).Level(zerolog.InfoLevel).With().Timestamp().Logger()
	srv := server.New(local.New(cpumodel.Tiny()), server.WithLogger(log))
	if err := srv.ListenAndServe(ctx, *addr); err != nil {
		return 1, err
	}
	return 0, nil
}
