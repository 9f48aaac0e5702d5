package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestDocCitationsResolve: the project cites its own docs, never an
// outside specification: every "docs/<page>.md §N" in code, help and docs
// names a page of the repository with a heading carrying §N, and no file
// cites "SPEC".
func TestDocCitationsResolve(t *testing.T) {
	root := repoRoot(t)
	cite := regexp.MustCompile(`docs/([a-z-]+)\.md(?:'s)? §([0-9]+(?:\.[0-9]+)?)`)
	page := regexp.MustCompile(`docs/([a-z-]+)\.md`)
	spec := regexp.MustCompile(`\bSPEC\b`)
	headings := map[string]string{}
	walkRepo(t, func(rel string) bool {
		switch filepath.Ext(rel) {
		case ".go", ".md", ".py", ".sh", ".yaml", ".txt", ".tpl":
			return rel != "cmd/creditflow/docs_test.go" && rel != "cmd/creditflow/help_test.go"
		}
		return false
	}, func(rel, text string) {
		if loc := spec.FindStringIndex(text); loc != nil {
			line := strings.Count(text[:loc[0]], "\n") + 1
			t.Errorf("%s:%d cites SPEC; cite the project's docs (docs/method.md, docs/stream.md, docs/offline.md …)", rel, line)
		}
		for _, m := range page.FindAllStringSubmatch(text, -1) {
			if _, err := os.Stat(filepath.Join(root, "docs", m[1]+".md")); err != nil {
				t.Errorf("%s cites docs/%s.md, which does not exist", rel, m[1])
			}
		}
		for _, m := range cite.FindAllStringSubmatch(text, -1) {
			h, ok := headings[m[1]]
			if !ok {
				db, err := os.ReadFile(filepath.Join(root, "docs", m[1]+".md"))
				if err != nil {
					continue // reported above
				}
				for _, l := range strings.Split(string(db), "\n") {
					if strings.HasPrefix(l, "#") {
						h += l + "\n"
					}
				}
				headings[m[1]] = h
			}
			if !regexp.MustCompile(`§` + regexp.QuoteMeta(m[2]) + `\b`).MatchString(h) {
				t.Errorf("%s cites docs/%s.md §%s, which has no heading with §%s", rel, m[1], m[2], m[2])
			}
		}
	})
}
