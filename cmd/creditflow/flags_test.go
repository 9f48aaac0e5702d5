package main

import (
	"flag"
	"io"
	"testing"
)

func TestOptionalAddrFlag(t *testing.T) {
	for _, c := range []struct {
		args   []string
		set    bool
		addr   string
		groups int
		bad    bool
	}{
		{args: nil},
		{args: []string{"--monitor"}, set: true, addr: "127.0.0.1:8090"},
		{args: []string{"--monitor", "--groups", "3"}, set: true, addr: "127.0.0.1:8090", groups: 3},
		{args: []string{"--monitor=0.0.0.0:9000"}, set: true, addr: "0.0.0.0:9000"},
		{args: []string{"--monitor", "127.0.0.1:9001", "--groups", "2"}, set: true, addr: "127.0.0.1:9001", groups: 2},
		{args: []string{"--groups", "2", "--monitor", ":9002"}, set: true, addr: ":9002", groups: 2},
		{args: []string{"--monitor", "127.0.0.1:9001", "extra:1"}, bad: true},
		{args: []string{"stray"}, bad: true},
	} {
		fs := flag.NewFlagSet("demo", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		groups := fs.Int("groups", 0, "")
		o := &optionalAddr{def: "127.0.0.1:8090"}
		fs.Var(o, "monitor", "")
		err := o.parse(fs, c.args)
		if c.bad {
			if err == nil {
				t.Errorf("%v: no error", c.args)
			}
			continue
		}
		if err != nil || o.set != c.set || o.addr != c.addr || *groups != c.groups {
			t.Errorf("%v: set %v addr %q groups %d err %v", c.args, o.set, o.addr, *groups, err)
		}
	}
}
