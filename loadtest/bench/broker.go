package bench

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/creditflow/creditflow/internal/broker"
	"github.com/creditflow/creditflow/loadtest/internal/cmdutil"
)

// BrokerCmd is the command (of this executable: its main dispatches it to
// ServeBroker) that runs the embedded broker in a child process of the bench.
//
// A deployed stage never shares its process with a broker, and sharing
// distorts what the bench measures: the embedded broker keeps every record
// it stores in its Go heap, which then serves the stage as GC ballast (the
// stage collects less often than it would alone), while the broker's long
// copies as its in-memory segments grow cannot be preempted and stall the
// stage's collections. In its own process the broker still runs on the same
// machine and cores, so every phase is measured against the same broker; the
// phases' CPU figures add the broker's CPU to the bench process's.
const BrokerCmd = "bench-broker"

// ServeBroker runs the embedded broker until SIGINT or SIGTERM, printing its
// address first.
func ServeBroker(args []string) (int, error) {
	fs := flag.NewFlagSet(BrokerCmd, flag.ContinueOnError)
	partitions := fs.Int("partitions", 2, "default partitions of a topic")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the broker here")
	if err := fs.Parse(args); err != nil {
		return 2, err
	}
	ctx, stop := cmdutil.SignalContext()
	defer stop()
	if *cpuProfile != "" {
		stopProfile, err := startCPUProfile(*cpuProfile)
		if err != nil {
			return 1, err
		}
		defer stopProfile()
	}
	b, err := broker.Start(broker.WithDefaultPartitions(*partitions))
	if err != nil {
		return 1, err
	}
	defer b.Close()
	fmt.Println(strings.Join(b.Addrs(), ","))
	<-ctx.Done()
	return 0, nil
}

// childBroker is the embedded broker running in a child process.
type childBroker struct {
	cmd   *exec.Cmd
	addrs []string
}

// startChildBroker starts the embedded broker in a child process and waits
// for its address. With a non-empty cpuProfile the child writes its CPU
// profile there.
func startChildBroker(partitions int, cpuProfile string) (*childBroker, error) {
	args := []string{BrokerCmd, "--partitions", strconv.Itoa(partitions)}
	if cpuProfile != "" {
		args = append(args, "--cpuprofile", cpuProfile)
	}
	cmd, addrs, err := startChild("embedded broker", args...)
	if err != nil {
		return nil, err
	}
	return &childBroker{cmd: cmd, addrs: strings.Split(addrs, ",")}, nil
}

// stop ends the child and waits for it (and for its profile, if any).
func (c *childBroker) stop() { stopChild(c.cmd) }

// cpu is the child's user plus system CPU time so far, read from
// /proc/<pid>/stat (in clock ticks of 10 ms).
func (c *childBroker) cpu() (time.Duration, error) {
	return procCPU(c.cmd.Process.Pid)
}

// rss is the child's resident set size.
func (c *childBroker) rss() uint64 {
	return procRSS(strconv.Itoa(c.cmd.Process.Pid))
}

// procCPU reads utime + stime of a process (all its threads) from
// /proc/<pid>/stat. The kernel counts them in USER_HZ ticks, 100 per second
// on Linux.
func procCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	// The command name (field 2) is in parentheses and may hold spaces:
	// fields are counted after its closing parenthesis.
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return 0, errors.New("unreadable /proc stat line")
	}
	f := strings.Fields(string(b[i+1:]))
	// f[0] is field 3 (state); utime and stime are fields 14 and 15.
	if len(f) < 13 {
		return 0, errors.New("short /proc stat line")
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, err
	}
	const userHZ = 100
	return time.Duration(utime+stime) * time.Second / userHZ, nil
}

// useBroker points env at the brokers of o.brokers, or at a fresh embedded
// broker in a child process; the returned function lets it go.
func (e *benchEnv) useBroker(o benchOptions, profile string) (func(), error) {
	e.child = nil
	if o.brokers != "" {
		e.brokers = strings.Split(o.brokers, ",")
		return func() {}, nil
	}
	c, err := startChildBroker(o.partitions, profile)
	if err != nil {
		return nil, err
	}
	e.brokers, e.child = c.addrs, c
	return c.stop, nil
}
