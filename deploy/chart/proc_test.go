package chart

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/creditflow/creditflow/consumers"
	"github.com/creditflow/creditflow/internal/kafkasec"
)

// proc is a started process: its log file and exit.
type proc struct {
	name, log string
	cmd       *exec.Cmd
	done      chan struct{}
	err       error
	ready     string        // readiness URL
	live      string        // liveness URL ("": not checked)
	base      string        // the probe port's URL, without a path
	port      int           // the first container port's local port
	uid       int           // the uid it must run as (-1: not checked)
	client    *http.Client  // for HTTPS probes (nil: http.DefaultClient)
	grace     time.Duration // terminationGracePeriodSeconds
	stdout    *bufio.Scanner
}

func (p *proc) httpClient() *http.Client {
	if p.client != nil {
		return p.client
	}
	return http.DefaultClient
}

// start runs cmd with env (and PATH) as cred (nil: this process's user);
// stderr, and stdout unless pipe, go to the process's log file.
func start(t *testing.T, work, name string, cmd *exec.Cmd, env []string, cred *syscall.Credential, pipe bool) *proc {
	t.Helper()
	p := &proc{name: name, log: filepath.Join(work, "logs", name+".log"), cmd: cmd, done: make(chan struct{})}
	if err := os.MkdirAll(filepath.Dir(p.log), 0o755); err != nil {
		t.Fatal(err)
	}
	lf, err := os.Create(p.log)
	if err != nil {
		t.Fatal(err)
	}
	cmd.Env = append([]string{"PATH=/usr/bin:/bin"}, env...)
	cmd.Stdout, cmd.Stderr = lf, lf
	if pipe {
		cmd.Stdout = nil
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		p.stdout = bufio.NewScanner(out)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: cred}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	go func() { p.err = cmd.Wait(); lf.Close(); close(p.done) }()
	t.Cleanup(func() {
		if !p.exited() {
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-p.done
		}
		if t.Failed() {
			t.Logf("%s log:\n%s", name, p.logTail())
		}
	})
	return p
}

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

func (p *proc) logTail() string {
	b, _ := os.ReadFile(p.log)
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

// firstLine is the process's first line on stdout (the broker's bootstrap list).
func (p *proc) firstLine(t *testing.T, d time.Duration) string {
	t.Helper()
	line := make(chan string, 1)
	go func() {
		if p.stdout.Scan() {
			line <- p.stdout.Text()
		}
		close(line)
		for p.stdout.Scan() { // keep the pipe drained
		}
	}()
	select {
	case l, ok := <-line:
		if !ok || l == "" {
			t.Fatalf("%s printed nothing:\n%s", p.name, p.logTail())
		}
		return strings.Split(l, ",")[0]
	case <-time.After(d):
		t.Fatalf("%s: no output within %v:\n%s", p.name, d, p.logTail())
	}
	return ""
}

func (p *proc) waitReady(t *testing.T, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	last := ""
	for time.Now().Before(deadline) {
		if p.exited() {
			t.Fatalf("%s exited before it was ready (%v):\n%s", p.name, p.err, p.logTail())
		}
		resp, err := p.httpClient().Get(p.ready)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
			if resp.StatusCode == http.StatusNotFound {
				t.Fatalf("%s: %s answers 404: the binary does not serve the rendered probe path (%s=/healthz probes an older binary's path instead)", p.name, p.ready, readyPathEnv)
			}
			last = resp.Status
		} else {
			last = err.Error()
		}
		time.Sleep(250 * time.Millisecond)
	}
	t.Fatalf("%s: %s not 200 within %v (last: %s):\n%s", p.name, p.ready, d, last, p.logTail())
}

// waitLive waits for the liveness probe's URL to answer 200.
func (p *proc) waitLive(t *testing.T, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	last := ""
	for time.Now().Before(deadline) {
		resp, err := p.httpClient().Get(p.live)
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
			last = resp.Status + " " + string(b)
		} else {
			last = err.Error()
		}
		time.Sleep(250 * time.Millisecond)
	}
	t.Fatalf("%s: %s not 200 within %v (last: %s):\n%s", p.name, p.live, d, last, p.logTail())
}

// get is the body of path on the probe port; it fails the test unless 200.
func (p *proc) get(t *testing.T, path string) string {
	t.Helper()
	resp, err := p.httpClient().Get(p.base + path)
	if err != nil {
		t.Fatalf("%s: GET %s: %v", p.name, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("%s: GET %s: %s %v", p.name, path, resp.Status, err)
	}
	return string(b)
}

func (p *proc) stop(t *testing.T) {
	t.Helper()
	began := time.Now()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatalf("%s: SIGTERM: %v", p.name, err)
	}
	select {
	case <-p.done:
		if p.err != nil {
			t.Errorf("%s: exit after SIGTERM: %v:\n%s", p.name, p.err, p.logTail())
		}
		t.Logf("%s stopped %.1fs after SIGTERM (grace %v)", p.name, time.Since(began).Seconds(), p.grace)
	case <-time.After(p.grace):
		t.Errorf("%s still running %v after SIGTERM (its terminationGracePeriodSeconds)", p.name, p.grace)
	}
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func endTotal(ctx context.Context, t *testing.T, brokers []string, sec kafkasec.Config, topic string) int64 {
	t.Helper()
	ends, err := consumers.EndOffsets(ctx, brokers, sec, topic)
	if err != nil {
		if ctx.Err() != nil {
			return 0
		}
		t.Fatal(err)
	}
	var n int64
	for _, e := range ends {
		n += e
	}
	return n
}

func writeFile(t *testing.T, p, s string, mode os.FileMode) {
	t.Helper()
	if err := os.WriteFile(p, []byte(s), mode); err != nil {
		t.Fatal(err)
	}
}

func readFile(t *testing.T, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
