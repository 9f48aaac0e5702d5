package bench

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"
)

// startChild runs this executable again with args (a child command of the
// bench: the embedded broker, the instant scorer) and returns it with the
// first line it prints, its address. what names it in errors.
func startChild(what string, args ...string) (*exec.Cmd, string, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, "", err
	}
	cmd := exec.Command(exe, args...)
	cmd.Stderr = os.Stderr
	// The child dies with the bench, even a SIGKILLed one, so nothing is left behind.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, "", err
	}
	if err := cmd.Start(); err != nil {
		return nil, "", fmt.Errorf("start the %s: %w", what, err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		stopChild(cmd)
		return nil, "", fmt.Errorf("the %s did not say its address: %w", what, err)
	}
	return cmd, strings.TrimSpace(line), nil
}

// stopChild ends a child with SIGTERM and waits for it (and for its CPU
// profile, if it writes one), killing it after 10 s.
func stopChild(cmd *exec.Cmd) {
	_ = cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = cmd.Process.Kill()
		<-done
	}
}
