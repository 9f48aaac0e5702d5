package client

// A bearer token read from a file and read again when the file changes, so
// that a rotated secret (a Kubernetes secret volume updates its files in
// place) is picked up without a restart.

import (
	"fmt"
	"os"
	"strings"
	"sync"
	"time"
)

// tokenRecheck is how often the token file's size and modification time are
// looked at; its bytes are read again only when they changed.
const tokenRecheck = time.Second

type tokenFile struct {
	path string

	mu      sync.Mutex
	token   string
	mod     time.Time
	size    int64
	checked time.Time
}

func newTokenFile(path string) (*tokenFile, error) {
	f := &tokenFile{path: path}
	if err := f.read(); err != nil {
		return nil, err
	}
	return f, nil
}

func (f *tokenFile) read() error {
	st, err := os.Stat(f.path)
	if err != nil {
		return fmt.Errorf("bearer token file: %w", err)
	}
	b, err := os.ReadFile(f.path)
	if err != nil {
		return fmt.Errorf("bearer token file: %w", err)
	}
	tok := strings.TrimSpace(string(b))
	if tok == "" {
		return fmt.Errorf("bearer token file %s is empty", f.path)
	}
	f.token, f.mod, f.size, f.checked = tok, st.ModTime(), st.Size(), time.Now()
	return nil
}

// get returns the token, read again when the file changed. A file that
// cannot be read, or is empty, keeps the last good token (a secret volume
// swaps its files with a symlink, so a read can fall between two steps).
func (f *tokenFile) get() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	if time.Since(f.checked) < tokenRecheck {
		return f.token
	}
	f.checked = time.Now()
	if st, err := os.Stat(f.path); err == nil && (!st.ModTime().Equal(f.mod) || st.Size() != f.size) {
		_ = f.read()
	}
	return f.token
}
