package main

import (
	"fmt"
	"runtime/debug"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
)

func init() {
	register("version", "print the version, commit and Go version of this binary", runVersion)
}

// Set with -ldflags "-X main.buildVersion=v1.2.3 -X main.buildCommit=$(git rev-parse HEAD)"
// where the build information has no VCS data (GOFLAGS=-buildvcs=false,
// builds outside a checkout); they win over the build information.
var buildVersion, buildCommit string

// versionInfo reads the version from the build information Go embeds in
// every binary: the module version (a tag with `go install …@v1.2.3`,
// "(devel)" for a build in a checkout), the VCS commit and time, and
// whether the checkout had uncommitted changes.
func versionInfo() (version, commit, goVersion string) {
	version, commit, goVersion = "(unknown)", "(unknown)", "(unknown)"
	defer func() {
		if buildVersion != "" {
			version = buildVersion
		}
		if buildCommit != "" {
			commit = buildCommit
		}
	}()
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return
	}
	goVersion = bi.GoVersion
	if v := bi.Main.Version; v != "" {
		version = v
	}
	var rev, at string
	dirty := false
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.time":
			at = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if rev == "" {
		commit = "(not recorded: built with -buildvcs=false or outside a git checkout)"
	} else {
		commit = rev
		if at != "" {
			commit += " (" + at + ")"
		}
		if dirty {
			commit += " with uncommitted changes"
		}
	}
	return
}

func runVersion(args []string) error {
	fs := newFlagSet("version", `usage: creditflow version

Prints the version, the commit and the Go version of this binary, from the build information Go
embeds (the commit is known for binaries built with go build or go install in a checkout).`)
	if err := fs.parse(args, false); err != nil {
		return err
	}
	v, c, g := versionInfo()
	fmt.Printf("creditflow %s\ncommit     %s\ngo         %s\n", v, c, g)
	return nil
}

// registerBuildInfo exports creditflow_build_info{version,commit,go_version}
// = 1 (the commit is the revision alone, "" when the build did not record it).
func registerBuildInfo(reg prometheus.Registerer) {
	version, commit, goVersion := versionInfo()
	if strings.HasPrefix(commit, "(") {
		commit = "" // not recorded
	} else {
		commit, _, _ = strings.Cut(commit, " ") // the revision, without its time
	}
	g := prometheus.NewGauge(prometheus.GaugeOpts{Name: "creditflow_build_info",
		Help:        "1, labelled with the version, commit and Go version of the binary (as `creditflow version` prints them).",
		ConstLabels: prometheus.Labels{"version": version, "commit": commit, "go_version": goVersion}})
	g.Set(1)
	_ = reg.Register(g) // already registered: the same binary, the same labels
}
