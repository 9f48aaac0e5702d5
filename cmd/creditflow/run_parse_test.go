package main

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/creditflow/creditflow/processors/credit"
)

// TestParseRunRefuses: command lines `creditflow run` refuses are
// usageErrors (exit status 2, one line) that name what is wrong, found
// before anything starts (no broker is needed to find them).
func TestParseRunRefuses(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--bogus"}, "unknown flag --bogus"},
		{[]string{"--stage", "scorer", "--scorers", "local"}, `--stage "scorer": use score, advantage or both`},
		{nil, "no scorer chosen: set --scorers"},
		{[]string{"--stage", "score"}, "no scorer chosen"},
		{[]string{"--scorers", "local", "--layers", "1,x"}, `--layers: "x" is not a layer index`},
		{[]string{"--scorers", "local", "--layers", "2,2"}, "--layers: layer 2 is listed twice"},
		{[]string{"--scorers", "local", "--log-level", "loud"}, `--log-level "loud"`},
		{[]string{"--scorers", "local", "--direction", "sideways"}, `direction "sideways"`},
		{[]string{"--scorers", "local", "--brokers", ""}, "no brokers"},
		{[]string{"--scorers", "local", "--replication-factor", "-1"}, "--replication-factor -1"},
		{[]string{"--scorers", "local", "--retention", "500us"}, "--retention 500µs: Kafka keeps records for whole milliseconds"},
		{[]string{"--scorers", "local", "--max-policy-lag", "2", "--topic-policy", ""}, "--max-policy-lag needs the policy topic"},
		{[]string{"--scorers", "local", "--compression", "brotli"}, "brotli"},
		{[]string{"--scorers", "local", "--ema-delta", "2"}, "ema_delta = 2 must lie in [0, 1]"},
	} {
		rc, err := parseRun(c.args)
		var ue usageError
		if err == nil || !errors.As(err, &ue) {
			t.Errorf("%q: got %v, %v; want a usage error", c.args, rc, err)
			continue
		}
		if !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: error %q does not say %q", c.args, err, c.want)
		}
		if strings.Contains(err.Error(), "\n") {
			t.Errorf("%q: error %q is more than one line", c.args, err)
		}
	}
}

// TestParseRunConfig: a command line accepted becomes the config the run
// starts from.
func TestParseRunConfig(t *testing.T) {
	rc, err := parseRun([]string{"--stage", "advantage", "--brokers", "a:1, b:2", "--method", string(credit.MethodAttnSR),
		"--layers", "3,1", "--create-topics", "4", "--shutdown-timeout", "7s", "--metrics-addr", "", "--window-timeout", "2s"})
	if err != nil {
		t.Fatal(err)
	}
	if rc.score || !rc.advantage || rc.stageName != "advantage" {
		t.Errorf("stages: score %v advantage %v (%q)", rc.score, rc.advantage, rc.stageName)
	}
	if want := []string{"a:1", "b:2"}; !reflect.DeepEqual(rc.stage.Brokers, want) {
		t.Errorf("brokers %q, want %q", rc.stage.Brokers, want)
	}
	if want := []int{3, 1}; !reflect.DeepEqual(rc.stage.Layers, want) {
		t.Errorf("layers %v, want %v", rc.stage.Layers, want)
	}
	if rc.stage.Credit.Method != credit.MethodAttnSR || rc.stage.Window.TimeoutMs != 2000 {
		t.Errorf("method %q, window %d ms", rc.stage.Credit.Method, rc.stage.Window.TimeoutMs)
	}
	if rc.createTopics != 4 || rc.shutdown != 7*time.Second || rc.metricsAddr != "" {
		t.Errorf("create %d, shutdown %v, metrics %q", rc.createTopics, rc.shutdown, rc.metricsAddr)
	}
	if rc.stage.Retention != 7*24*time.Hour || rc.stage.DeadLetterRetention != 30*24*time.Hour {
		t.Errorf("retention %v, dead letters %v; want the chart's 7 and 30 days", rc.stage.Retention, rc.stage.DeadLetterRetention)
	}
	if rc.stage.Logger.GetLevel().String() != "info" {
		t.Errorf("log level %v", rc.stage.Logger.GetLevel())
	}
}
