package main

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// uid and gid of the image's user, nonroot as in distroless.
const uid, gid = 65532, 65532

type config struct {
	out, binary, src, version, commit, arch, caBundle, tag string
}

// epoch is every file's and the image's time: the digest depends on the
// inputs only.
var epoch = time.Unix(0, 0).UTC()

// buildBinary builds ./cmd/creditflow of src as a static linux binary.
func buildBinary(src, out, arch, version, commit string) error {
	ld := "-s -w"
	if version != "" {
		ld += " -X main.buildVersion=" + version
	}
	if commit != "" {
		ld += " -X main.buildCommit=" + commit
	}
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags", ld, "-o", out, "./cmd/creditflow")
	cmd.Dir = src
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+arch)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go build ./cmd/creditflow: %w", err)
	}
	return nil
}

// rootfs is the image's one layer as a tar stream.
func rootfs(c config) ([]byte, error) {
	bin, err := os.ReadFile(c.binary)
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	dir := func(name string, mode int64, owner int) error {
		return tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: name, Mode: mode, Uid: owner, Gid: owner, ModTime: epoch, Format: tar.FormatPAX})
	}
	file := func(name string, mode int64, data []byte) error {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: mode, Size: int64(len(data)), ModTime: epoch, Format: tar.FormatPAX}); err != nil {
			return err
		}
		_, err := tw.Write(data)
		return err
	}
	steps := []func() error{
		func() error { return dir("etc/", 0o755, 0) },
		func() error {
			return file("etc/passwd", 0o644, []byte("root:x:0:0:root:/root:/sbin/nologin\nnobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n"))
		},
		func() error {
			return file("etc/group", 0o644, []byte("root:x:0:\nnobody:x:65534:\nnonroot:x:65532:\n"))
		},
		func() error { return dir("home/", 0o755, 0) },
		func() error { return dir("home/nonroot/", 0o700, uid) },
		func() error { return dir("tmp/", 0o1777, 0) },
		func() error { return file("creditflow", 0o755, bin) },
	}
	if ca, err := os.ReadFile(c.caBundle); err == nil && c.caBundle != "" {
		steps = append(steps,
			func() error { return dir("etc/ssl/", 0o755, 0) },
			func() error { return dir("etc/ssl/certs/", 0o755, 0) },
			func() error { return file("etc/ssl/certs/ca-certificates.crt", 0o644, ca) })
	}
	for _, s := range steps {
		if err := s(); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// image is the processor image: one layer, run as 65532 with /creditflow as
// the entrypoint.
func image(c config) (v1.Image, error) {
	layerTar, err := rootfs(c)
	if err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar)), nil
	}, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, err
	}
	img, err := mutate.AppendLayers(mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON), layer)
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture, cf.Created = "linux", c.arch, v1.Time{Time: epoch}
	cf.Config.User = fmt.Sprintf("%d:%d", uid, gid)
	cf.Config.Entrypoint = []string{"/creditflow"}
	cf.Config.Cmd = []string{"--help"}
	cf.Config.WorkingDir = "/home/nonroot"
	cf.Config.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin", "SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt"}
	cf.Config.Labels = map[string]string{
		"org.opencontainers.image.title":  "creditflow",
		"org.opencontainers.image.source": "https://github.com/creditflow/creditflow",
	}
	if c.version != "" {
		cf.Config.Labels["org.opencontainers.image.version"] = c.version
	}
	if c.commit != "" {
		cf.Config.Labels["org.opencontainers.image.revision"] = c.commit
	}
	cf.History = []v1.History{{Created: v1.Time{Time: epoch}, CreatedBy: "deploy/image: creditflow binary, passwd, group, CA bundle"}}
	return mutate.ConfigFile(img, cf)
}

// build writes the image as an OCI layout at c.out and returns its digest.
func build(c config) (v1.Hash, error) {
	img, err := image(c)
	if err != nil {
		return v1.Hash{}, err
	}
	if err := os.RemoveAll(c.out); err != nil {
		return v1.Hash{}, err
	}
	p, err := layout.Write(c.out, empty.Index)
	if err != nil {
		return v1.Hash{}, err
	}
	if err := p.AppendImage(img, layout.WithPlatform(v1.Platform{OS: "linux", Architecture: c.arch}),
		layout.WithAnnotations(map[string]string{"org.opencontainers.image.ref.name": c.tag})); err != nil {
		return v1.Hash{}, err
	}
	return img.Digest()
}
