package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/creditflow/creditflow/policy"
	"github.com/creditflow/creditflow/producers"
	"github.com/creditflow/creditflow/schemas"
)

func init() {
	register("announce", "announce a new policy version (and its checkpoint) on the policy topic", runAnnounce)
}

func runAnnounce(args []string) error {
	fs := newFlagSet("announce", "usage: creditflow announce --version N [--checkpoint DIR] [flags]\n\n"+
		"Writes one PolicyAnnouncement to the compacted policy topic (key \"policy\"). The advantage stage\n"+
		"measures staleness against the newest announced version; scorers started with --follow-policy\n"+
		"load the checkpoint folder. Trainers announce after each weight update (docs/stream.md). The topic\n"+
		"must exist: --create-topic creates it; without it a missing topic is an error at once.")
	var topic, checkpoint *string
	var version *int64
	var create *bool
	var timeout, startup *time.Duration
	fs.inGroup(groupGeneral, func() {
		fs.String("config", "", "JSON config file: an object of flag names to values (also CREDITFLOW_CONFIG)")
		timeout = fs.Duration("timeout", 30*time.Second, "give up after this long")
	})
	kf := addKafkaFlags(fs)
	fs.inGroup(groupKafka, func() {
		startup = fs.Duration("startup-timeout", 10*time.Second, "wait at most this long for a broker to answer, then exit non-zero")
	})
	fs.inGroup(groupPolicy, func() {
		topic = fs.String("topic-policy", policy.DefaultTopic, "compacted topic of policy announcements")
		version = fs.Int64("version", -1, "policy version now being trained (>= 0, monotone)")
		checkpoint = fs.String("checkpoint", "", "where the weights are: a folder a scorer can load, or a URI (empty: not published)")
		create = fs.Bool("create-topic", false, "create the policy topic (one partition, compacted) when it does not exist")
	})
	if err := fs.parse(args, true); err != nil {
		return err
	}
	if *version < 0 {
		return usagef("--version is required (a policy version >= 0)")
	}
	sec, err := kf.security()
	if err != nil {
		return err
	}
	brokers := splitList(*kf.brokers)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := sec.WaitReachable(ctx, brokers, *startup); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	if *create {
		if err := producers.EnsureTopics(ctx, brokers, sec, policy.TopicSpec(*topic)); err != nil {
			return err
		}
	} else if missing, err := producers.MissingTopics(ctx, brokers, sec, *topic); err != nil {
		return err
	} else if len(missing) > 0 { // a produce would wait out --timeout for it
		return fmt.Errorf("policy topic %s does not exist on %s: add --create-topic to create it (one partition, compacted), or check --topic-policy",
			*topic, strings.Join(brokers, ","))
	}
	prod, err := producers.New(producers.Config{Brokers: brokers, Security: sec})
	if err != nil {
		return err
	}
	defer prod.Close()
	a := schemas.PolicyAnnouncement{Version: *version, Checkpoint: *checkpoint}
	if err := policy.Announce(ctx, prod, *topic, a); err != nil {
		return err
	}
	fmt.Printf("announced policy version %d on %s\n", *version, *topic)
	return nil
}
