package main

import (
	"archive/tar"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
)

// TestImageRunsAsItsUser builds the image layout without a daemon, reads it
// back as any OCI tool would (index, manifest, config, layer), unpacks the
// layer and runs the entrypoint with `version` as the image's user (uid
// 65532, inside the unpacked filesystem) — the way a container runtime
// would, minus the namespaces.
func TestImageRunsAsItsUser(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "creditflow")
	const version = "v0.0.0-imagetest"
	if err := buildBinary(filepath.Join("..", ".."), bin, runtime.GOARCH, version, "0123abc"); err != nil {
		t.Fatal(err)
	}
	c := config{out: filepath.Join(dir, "oci"), binary: bin, arch: runtime.GOARCH, version: version, commit: "0123abc", tag: "test"}
	d1, err := build(c)
	if err != nil {
		t.Fatal(err)
	}
	// Same inputs, same digest.
	c2 := c
	c2.out = filepath.Join(dir, "oci2")
	if d2, err := build(c2); err != nil || d2 != d1 {
		t.Fatalf("second build: %v %v, first %v", d2, err, d1)
	}

	idx, err := layout.ImageIndexFromPath(c.out)
	if err != nil {
		t.Fatal(err)
	}
	im, err := idx.IndexManifest()
	if err != nil || len(im.Manifests) != 1 || im.Manifests[0].Digest != d1 {
		t.Fatalf("index: %+v %v", im, err)
	}
	img, err := idx.Image(d1)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cf.OS != "linux" || cf.Architecture != runtime.GOARCH || len(cf.Config.Entrypoint) != 1 {
		t.Fatalf("config: %s/%s entrypoint %v", cf.OS, cf.Architecture, cf.Config.Entrypoint)
	}
	uidS, gidS, _ := strings.Cut(cf.Config.User, ":")
	uid, err1 := strconv.Atoi(uidS)
	gid, err2 := strconv.Atoi(gidS)
	if err1 != nil || err2 != nil || uid == 0 || uid != 65532 || gid != 65532 {
		t.Fatalf("image user %q: want the numeric non-root 65532:65532 (runAsNonRoot needs a number)", cf.Config.User)
	}

	root := filepath.Join(dir, "rootfs")
	if err := extract(mutate.Extract(img), root); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(root, "etc", "passwd")); err != nil || !strings.Contains(string(b), "nonroot:x:65532:65532:") {
		t.Errorf("/etc/passwd: %q %v", b, err)
	}
	entry := cf.Config.Entrypoint[0]
	cmd := exec.Command(entry, "version")
	cmd.Dir = "/"
	cmd.Env = cf.Config.Env
	if os.Geteuid() == 0 {
		// As the image's user, with the image's filesystem as /.
		cmd.SysProcAttr = &syscall.SysProcAttr{Chroot: root, Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}}
	} else {
		t.Logf("not root: running %s as uid %d without the switch to the image's user", entry, os.Geteuid())
		cmd.Path = filepath.Join(root, entry)
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s version: %v\n%s", entry, err, out)
	}
	if !strings.Contains(string(out), version) || !strings.Contains(string(out), "0123abc") {
		t.Errorf("version output %q lacks %s and the commit", out, version)
	}
}

// extract writes a layer's tar stream under root, keeping modes and owners.
func extract(r io.ReadCloser, root string) error {
	defer r.Close()
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		p := filepath.Join(root, filepath.Clean("/"+h.Name))
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(p, 0o755); err != nil {
				return err
			}
		case tar.TypeReg:
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				return err
			}
			f, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
			if err != nil {
				return err
			}
			if _, err := io.Copy(f, tr); err != nil {
				f.Close()
				return err
			}
			if err := f.Close(); err != nil {
				return err
			}
		default:
			continue
		}
		if err := os.Chmod(p, os.FileMode(h.Mode)&os.ModePerm|modeBits(h.Mode)); err != nil {
			return err
		}
		if os.Geteuid() == 0 {
			if err := os.Lchown(p, h.Uid, h.Gid); err != nil {
				return err
			}
		}
	}
}

func modeBits(m int64) os.FileMode {
	var f os.FileMode
	if m&0o1000 != 0 {
		f |= os.ModeSticky
	}
	return f
}

// TestDockerfileMatchesTheLayout: the Dockerfile (for users with Docker)
// builds what this command builds: a static binary (CGO off) at /creditflow
// on a distroless nonroot base, run as 65532:65532.
func TestDockerfileMatchesTheLayout(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	df := string(b)
	for _, want := range []string{
		"CGO_ENABLED=0",
		"./cmd/creditflow",
		"FROM gcr.io/distroless/static-debian12:nonroot",
		"COPY --from=build /out/creditflow /creditflow",
		"USER 65532:65532",
		`ENTRYPOINT ["/creditflow"]`,
	} {
		if !strings.Contains(df, want) {
			t.Errorf("Dockerfile lacks %q", want)
		}
	}
}
