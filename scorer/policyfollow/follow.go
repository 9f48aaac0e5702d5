// Package policyfollow makes the in-process CPU scorer (scorer/local) follow the
// policy topic: each newer announced checkpoint is loaded and swapped in
// while requests go on (docs/stream.md, "Policy versions"). `creditflow
// scorer --follow-policy` and `creditflow run --scorer-follow-policy` use it.
package policyfollow

import (
	"context"
	"time"

	"github.com/rs/zerolog"

	"github.com/creditflow/creditflow/internal/kafkasec"
	"github.com/creditflow/creditflow/policy"
	"github.com/creditflow/creditflow/schemas"
	"github.com/creditflow/creditflow/scorer/cpumodel"
	"github.com/creditflow/creditflow/scorer/local"
)

// catchUp is how long Start waits for the policy topic to be
// read to its end before the scorer answers its first request.
const catchUp = 30 * time.Second

// Start makes sc follow the policy topic: each newer announced
// version whose checkpoint is a folder is loaded in the background and
// swapped in atomically (requests in flight finish on the weights they
// started with; later ones answer with the new version). Loads run one at
// a time; when several versions are announced during a load, only the
// newest is loaded next. An announcement without a checkpoint, or whose
// checkpoint does not load, keeps the current weights and version (logged
// once; that version is not tried again).
// Before it returns, it waits (at most catchUp) until the topic has
// been read to its end and loads the newest version announced by then, so
// that the first request is answered with the announced weights. It
// returns the follower, already running until ctx ends.
func Start(ctx context.Context, sc *local.Scorer, brokers []string, sec kafkasec.Config, topic string, log zerolog.Logger, opts ...policy.Option) *policy.Follower {
	wake := make(chan struct{}, 1)
	opts = append(opts, policy.WithLogger(log), policy.WithOnNewest(func(schemas.PolicyAnnouncement) {
		select {
		case wake <- struct{}{}:
		default:
		}
	}))
	f := policy.NewFollower(brokers, sec, topic, opts...)
	go func() { _ = f.Run(ctx) }()
	loaded := int64(-1)
	if info, err := sc.Info(ctx); err == nil {
		loaded = info.PolicyVersion
	}
	tried := loaded // the newest version tried: one that did not load is not tried (nor logged) again
	load := func() {
		a, ok := f.Latest()
		if !ok || a.Version <= loaded || a.Version <= tried {
			return
		}
		tried = a.Version
		if a.Checkpoint == "" {
			log.Warn().Int64("version", a.Version).Msg("announced policy version has no checkpoint; keeping the current weights")
			return
		}
		// The served model's context (its own, or --max-context) caps the
		// checkpoint's, so that a capped scorer stays capped.
		var cap int
		if info, err := sc.Info(ctx); err == nil {
			cap = info.MaxContext
		}
		m, err := cpumodel.LoadWith(a.Checkpoint, cpumodel.WithMaxContext(cap))
		if err == nil {
			err = sc.Swap(m, a.Version)
		}
		if err != nil {
			log.Error().Err(err).Int64("version", a.Version).Str("checkpoint", a.Checkpoint).
				Msg("announced checkpoint not loaded; keeping the current weights")
			return
		}
		loaded = a.Version
		log.Info().Int64("version", a.Version).Str("checkpoint", a.Checkpoint).Msg("policy checkpoint loaded; new requests use it")
	}
	// Before the first request: the version announced when we start (a
	// restarted processor must not score with the start weights while the
	// trainer is versions ahead).
	if f.WaitReady(ctx, catchUp) {
		load()
	} else if ctx.Err() == nil {
		log.Warn().Str("topic", f.Topic()).Dur("waited", catchUp).
			Msg("policy topic not read to its end yet; scoring with the current weights until it is")
	}
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-wake:
			}
			load()
		}
	}()
	return f
}
