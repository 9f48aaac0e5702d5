package client

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestTokenFileFollowsRotation: a rotated token file (rewritten in place, or
// swapped as a secret volume swaps its files) is read again; an emptied or
// missing file keeps the last good token.
func TestTokenFileFollowsRotation(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "token")
	if err := os.WriteFile(path, []byte("first\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := newTokenFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := f.get(); got != "first" {
		t.Fatalf("token %q, want first", got)
	}
	expire := func() { f.mu.Lock(); f.checked = time.Time{}; f.mu.Unlock() }

	// Rewritten (a new size and time).
	if err := os.WriteFile(path, []byte("second-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got := f.get(); got != "first" {
		t.Fatalf("token %q within the recheck interval, want the cached first", got)
	}
	expire()
	if got := f.get(); got != "second-token" {
		t.Fatalf("token %q after the rewrite, want second-token", got)
	}

	// Swapped through a symlink, as Kubernetes updates a secret volume.
	if err := os.WriteFile(filepath.Join(dir, "next"), []byte("third-token-x\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(dir, "next"), path); err != nil {
		t.Fatal(err)
	}
	expire()
	if got := f.get(); got != "third-token-x" {
		t.Fatalf("token %q after the swap, want third-token-x", got)
	}

	// Emptied, then gone: the last good token stays.
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	expire()
	if got := f.get(); got != "third-token-x" {
		t.Fatalf("token %q from an empty file, want the last good one", got)
	}
	os.Remove(path)
	expire()
	if got := f.get(); got != "third-token-x" {
		t.Fatalf("token %q with the file gone, want the last good one", got)
	}
	if _, err := newTokenFile(path); err == nil {
		t.Fatal("a missing token file at start is not an error")
	}
}
