package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// walkRepo calls fn with the path (relative to the repository root) and the
// text of every file that want accepts, skipping hidden folders and
// node_modules. want sees every file's path, read or not.
func walkRepo(t *testing.T, want func(rel string) bool, fn func(rel, text string)) {
	t.Helper()
	root := repoRoot(t)
	err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if p != root && (strings.HasPrefix(d.Name(), ".") || d.Name() == "node_modules") {
				return filepath.SkipDir
			}
			return nil
		}
		rel, err := filepath.Rel(root, p)
		if err != nil || !want(rel) {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		fn(rel, string(b))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
