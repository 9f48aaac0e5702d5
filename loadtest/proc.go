package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/creditflow/creditflow/loadtest/internal/cmdutil"
)

// proc is one child process (a processor or a scorer) that can be killed
// and started again with the same arguments.
type proc struct {
	name string
	bin  string
	args []string
	logf string

	mu         sync.Mutex
	cmd        *exec.Cmd
	done       chan struct{}
	starts     int
	exits      []string
	held       bool // stopped on purpose: not restarted by supervise
	unexpected int  // exits that no stop asked for
}

func newProc(name, bin, logDir string, args ...string) *proc {
	return &proc{name: name, bin: bin, args: args, logf: filepath.Join(logDir, name+".log")}
}

// start launches the process; its stderr and stdout go to its log file.
func (p *proc) start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil {
		return fmt.Errorf("%s is already running", p.name)
	}
	f, err := os.OpenFile(p.logf, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	p.starts++
	p.held = false
	fmt.Fprintf(f, "=== start %d at %s: %s %s\n", p.starts, time.Now().UTC().Format(time.RFC3339Nano), p.bin, strings.Join(p.args, " "))
	cmd := exec.Command(p.bin, p.args...)
	cmd.Stdout, cmd.Stderr = f, f
	// The child dies with the harness, so a failed run leaves nothing behind.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		f.Close()
		return fmt.Errorf("start %s: %w", p.name, err)
	}
	done := make(chan struct{})
	p.cmd, p.done = cmd, done
	go func() {
		err := cmd.Wait()
		p.mu.Lock()
		defer f.Close()
		st := "exit 0"
		if err != nil {
			st = err.Error()
		}
		p.exits = append(p.exits, st)
		if !p.held {
			p.unexpected++
			fmt.Fprintf(f, "=== unexpected exit: %s\n", st)
		}
		if p.cmd == cmd {
			p.cmd = nil
		}
		p.mu.Unlock()
		close(done)
	}()
	return nil
}

func (p *proc) running() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cmd != nil
}

// stop sends sig and waits up to wait for the process to exit, then kills it.
// It reports whether the process exited by itself within wait.
func (p *proc) stop(sig syscall.Signal, wait time.Duration) bool {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.held = true
	p.mu.Unlock()
	if cmd == nil {
		return true
	}
	_ = cmd.Process.Signal(sig)
	select {
	case <-done:
		return true
	case <-time.After(wait):
		_ = cmd.Process.Signal(syscall.SIGKILL)
		<-done
		return false
	}
}

// supervise restarts the process, as a process supervisor would, whenever
// it exited without being stopped, until ctx ends.
func (p *proc) supervise(ctx context.Context) {
	for cmdutil.SleepCtx(ctx, 500*time.Millisecond) {
		p.mu.Lock()
		restart := p.cmd == nil && !p.held && p.starts > 0
		p.mu.Unlock()
		if restart {
			_ = p.start()
		}
	}
}

// unexpectedExits counts the exits that no stop asked for.
func (p *proc) unexpectedExits() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.unexpected
}

// lastExit is how the last run of the process ended.
func (p *proc) lastExit() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.exits) == 0 {
		return ""
	}
	return p.exits[len(p.exits)-1]
}
