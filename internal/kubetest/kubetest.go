// Package kubetest lays out directories as Kubernetes mounts them, for
// tests: a ConfigMap or Secret volume as kubelet's atomic writer
// (k8s.io/kubernetes/pkg/volume/util/atomic_writer.go) writes and swaps
// it. No cluster is needed.
package kubetest

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Volume is a ConfigMap volume: each file a user sees is a symbolic link
// name -> ..data/name, ..data is a link to a timestamped directory
// (..2026_12_04_10_00_00.123456789) holding the real files, and an update
// is a new timestamped directory swapped in by renaming a ..data_tmp link
// over ..data.
type Volume struct {
	t   testing.TB
	Dir string
}

// NewVolume makes dir (and its parents) a volume holding files (path to
// content; a path with a slash, as a ConfigMap item's path: makes, is
// reached through a link of its first element, to a directory).
func NewVolume(t testing.TB, dir string, files map[string]string) *Volume {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	v := &Volume{t: t, Dir: dir}
	v.Write(files)
	return v
}

// Write replaces the volume's files by files, in the atomic writer's
// order: (5) a new timestamped directory, (6) the payload written into it,
// (7) a ..data_tmp link to it, (8) renamed over ..data, (9) links for new
// names, (10) links of removed names removed, (11) the old timestamped
// directory removed. It calls t.Fatal on failure, so it belongs to the
// test's goroutine.
func (v *Volume) Write(files map[string]string) {
	t := v.t
	t.Helper()
	old, _ := os.Readlink(filepath.Join(v.Dir, "..data"))
	ts, err := os.MkdirTemp(v.Dir, time.Now().UTC().Format("..2006_01_02_15_04_05."))
	if err != nil {
		t.Fatal(err)
	}
	top := map[string]bool{}
	for name, body := range files {
		p := filepath.Join(ts, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		top[strings.Split(filepath.ToSlash(name), "/")[0]] = true
	}
	tmp := filepath.Join(v.Dir, "..data_tmp")
	if err := os.Symlink(filepath.Base(ts), tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(v.Dir, "..data")); err != nil {
		t.Fatal(err)
	}
	for name := range top {
		p := filepath.Join(v.Dir, name)
		if _, err := os.Lstat(p); err != nil {
			if err := os.Symlink(filepath.Join("..data", name), p); err != nil {
				t.Fatal(err)
			}
		}
	}
	entries, err := os.ReadDir(v.Dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if !top[e.Name()] && !strings.HasPrefix(e.Name(), "..") {
			if err := os.Remove(filepath.Join(v.Dir, e.Name())); err != nil {
				t.Fatal(err)
			}
		}
	}
	if old != "" {
		if err := os.RemoveAll(filepath.Join(v.Dir, old)); err != nil {
			t.Fatal(err)
		}
	}
}
