// Command image builds the creditflow processor image without a Docker
// daemon, as an OCI image layout: the static creditflow binary (CGO off) as
// /creditflow, /etc/passwd and /etc/group naming the user nonroot (65532),
// its home, /tmp and the build host's CA bundle, on an empty base — the
// layout of gcr.io/distroless/static:nonroot, which the repository's
// Dockerfile uses. Same sources and flags, same digest: file times and the
// creation time are fixed.
//
//	go -C deploy run ./image -o out/creditflow-oci [-version v0.1.0] [-arch amd64]
//
// prints the image digest. Push the layout with any OCI tool, e.g.
// `crane push out/creditflow-oci registry/creditflow:tag`. See docs/operations.md.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
)

func main() {
	var c config
	flag.StringVar(&c.out, "o", "", "output directory of the OCI image layout (replaced)")
	flag.StringVar(&c.binary, "binary", "", "a creditflow binary built for linux with CGO_ENABLED=0 (default: build ./cmd/creditflow)")
	flag.StringVar(&c.src, "src", "..", "repository root to build ./cmd/creditflow from")
	flag.StringVar(&c.version, "version", "", "version stamped into the binary and the image labels (default: the build information's)")
	flag.StringVar(&c.commit, "commit", "", "commit stamped into the binary and the image labels")
	flag.StringVar(&c.arch, "arch", runtime.GOARCH, "target architecture (GOARCH)")
	flag.StringVar(&c.caBundle, "ca-certificates", "/etc/ssl/certs/ca-certificates.crt", "CA bundle copied to /etc/ssl/certs (skipped when missing)")
	flag.StringVar(&c.tag, "tag", "latest", "tag recorded in the layout's index (org.opencontainers.image.ref.name)")
	flag.Usage = func() {
		fmt.Fprintln(os.Stderr, "usage: image -o DIR [-binary FILE] [-version V] [-commit C] [-arch A]")
		flag.PrintDefaults()
	}
	flag.Parse()
	if c.out == "" || flag.NArg() > 0 {
		fmt.Fprintln(os.Stderr, "usage: image -o DIR [-binary FILE] [-version V] [-commit C] [-arch A]")
		os.Exit(2)
	}
	if c.binary == "" {
		dir, err := os.MkdirTemp("", "creditflow-image")
		if err != nil {
			fail(err)
		}
		defer os.RemoveAll(dir)
		c.binary = filepath.Join(dir, "creditflow")
		if err := buildBinary(c.src, c.binary, c.arch, c.version, c.commit); err != nil {
			fail(err)
		}
	}
	d, err := build(c)
	if err != nil {
		fail(err)
	}
	fmt.Println(d)
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "image:", err)
	os.Exit(1)
}
