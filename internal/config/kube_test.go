package config

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fairgate/fairgate/internal/kubetest"
)

// domainFile is an envoyproxy/ratelimit file: domain name, one
// descriptor with limit n per second.
func domainFile(name string, n int) string {
	return fmt.Sprintf("domain: %s\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: %d}\n", name, n)
}

// loadRuntime parses a config whose rls section reads dir as
// RUNTIME_IGNOREDOTFILES=true does, and returns its domains as
// name=limit.
func loadRuntime(dir string, ignoreDot bool) (map[string]uint32, *Config, error) {
	c, err := Parse(filepath.Join(filepath.Dir(dir), "fairgate.yaml"), fmt.Appendf(nil, "rls:\n  runtime_dir: %s\n  ignore_dot_files: %v\n", dir, ignoreDot))
	if err != nil {
		return nil, nil, err
	}
	got := map[string]uint32{}
	for _, d := range c.RLS.Domains {
		got[d.Name] = d.Descriptors[0].Limit.RequestsPerUnit
	}
	return got, c, nil
}

// TestKubernetesConfigMapLayout: a ConfigMap volume mounted as the
// runtime directory (RUNTIME_ROOT=/srv, RUNTIME_SUBDIRECTORY=ratelimit,
// RUNTIME_APPDIRECTORY=config) loads every file of the ConfigMap, as
// envoyproxy/ratelimit does; the volume's own entries are neither loaded
// nor reported; with dot files kept, they are still not loaded twice.
func TestKubernetesConfigMapLayout(t *testing.T) {
	for _, ignoreDot := range []bool{true, false} {
		t.Run(fmt.Sprintf("ignore_dot_files=%v", ignoreDot), func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "srv", "ratelimit", "config")
			kubetest.NewVolume(t, dir, map[string]string{"a.yaml": domainFile("a", 10), "b.yaml": domainFile("b", 11)})
			got, c, err := loadRuntime(dir, ignoreDot)
			if err != nil {
				t.Fatal(err)
			}
			if want := map[string]uint32{"a": 10, "b": 11}; !maps.Equal(got, want) {
				t.Fatalf("domains %v, want %v", got, want)
			}
			s := c.RLSSources[0]
			if len(s.Skipped) != 0 || !strings.HasPrefix(s.Generation, "..20") {
				t.Fatalf("skipped %v generation %q, want nothing skipped and the timestamped directory", s.Skipped, s.Generation)
			}
		})
	}
}

// TestKubernetesNestedItem: a ConfigMap item whose path has a directory
// (items: [{key: api, path: team/api.yaml}]) is loaded from the
// generation's directory, though the volume reaches it through a link to
// a directory (which envoyproxy/ratelimit does not follow).
func TestKubernetesNestedItem(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "config")
	kubetest.NewVolume(t, dir, map[string]string{"a.yaml": domainFile("a", 1), "team/b.yaml": domainFile("b", 2)})
	got, c, err := loadRuntime(dir, true)
	if err != nil {
		t.Fatal(err)
	}
	if want := map[string]uint32{"a": 1, "b": 2}; !maps.Equal(got, want) || len(c.RLSSources[0].Skipped) != 0 {
		t.Fatalf("domains %v, skipped %v; want %v and nothing skipped", got, c.RLSSources[0].Skipped, want)
	}
}

// TestRuntimeDirSkipped: what a runtime directory leaves out is reported
// entry by entry with why, and a symbolic link to a file outside the
// directory is followed, as envoyproxy/ratelimit follows it.
func TestRuntimeDirSkipped(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "config")
	os.MkdirAll(filepath.Join(dir, "sub"), 0o755)
	os.MkdirAll(filepath.Join(root, "elsewhere"), 0o755)
	os.WriteFile(filepath.Join(dir, "a.yaml"), []byte(domainFile("a", 1)), 0o644)
	os.WriteFile(filepath.Join(dir, "sub", "b.yaml"), []byte(domainFile("b", 2)), 0o644)
	os.WriteFile(filepath.Join(root, "elsewhere", "c.yaml"), []byte(domainFile("c", 3)), 0o644)
	os.Symlink(filepath.Join(root, "elsewhere", "c.yaml"), filepath.Join(dir, "c.yaml"))
	os.WriteFile(filepath.Join(dir, ".hidden.yaml"), []byte(domainFile("h", 4)), 0o644)
	os.Symlink(filepath.Join(root, "elsewhere"), filepath.Join(dir, "linkdir"))
	os.Symlink(filepath.Join(root, "missing.yaml"), filepath.Join(dir, "gone.yaml"))
	got, c, err := loadRuntime(dir, true)
	if err != nil {
		t.Fatal(err)
	}
	if want := map[string]uint32{"a": 1, "b": 2, "c": 3}; !maps.Equal(got, want) {
		t.Fatalf("domains %v, want %v", got, want)
	}
	var skipped []string
	for _, k := range c.RLSSources[0].Skipped {
		skipped = append(skipped, k.String())
	}
	slices.Sort(skipped)
	want := []string{
		Skipped{filepath.Join(dir, ".hidden.yaml"), SkipDotFile, ""}.String(),
		Skipped{filepath.Join(dir, "gone.yaml"), SkipDangling, ""}.String(),
		Skipped{filepath.Join(dir, "linkdir"), SkipDirLink, ""}.String(),
	}
	if !slices.Equal(skipped, want) {
		t.Fatalf("skipped\n%s\nwant\n%s", strings.Join(skipped, "\n"), strings.Join(want, "\n"))
	}
}

// TestKubernetesSwapUnderLoad: while kubelet swaps ..data between two
// generations (a file changed, one removed, one added), every load made
// meanwhile, as the watcher makes them, is exactly one generation: never
// a mix, never empty, never an error.
func TestKubernetesSwapUnderLoad(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "config")
	genA := map[string]string{"a.yaml": domainFile("a", 10), "b.yaml": domainFile("b", 10)}
	genB := map[string]string{"a.yaml": domainFile("a", 20), "c.yaml": domainFile("c", 20)}
	wantA, wantB := map[string]uint32{"a": 10, "b": 10}, map[string]uint32{"a": 20, "c": 20}
	v := kubetest.NewVolume(t, dir, genA)
	var stop atomic.Bool
	var wg sync.WaitGroup
	var mu sync.Mutex
	var bad []string
	loads := map[string]int{}
	for range 2 {
		wg.Go(func() {
			for !stop.Load() {
				got, _, err := loadRuntime(dir, true)
				mu.Lock()
				switch {
				case err != nil && strings.Contains(err.Error(), "link changed"):
					// Swapped in a tight loop, a reader can lose the race
					// every time: it gives up, and the watcher keeps the
					// config in force. No mix, no empty config.
					loads["gave up"]++
				case err != nil:
					bad = append(bad, "error: "+err.Error())
				case maps.Equal(got, wantA):
					loads["A"]++
				case maps.Equal(got, wantB):
					loads["B"]++
				default:
					bad = append(bad, fmt.Sprint(got))
				}
				mu.Unlock()
			}
		})
	}
	for i := range 200 {
		if i%2 == 0 {
			v.Write(genB)
		} else {
			v.Write(genA)
		}
	}
	stop.Store(true)
	wg.Wait()
	if len(bad) > 0 {
		t.Fatalf("%d of %d loads were not one generation, e.g. %q", len(bad), len(bad)+loads["A"]+loads["B"]+loads["gave up"], bad[:min(3, len(bad))])
	}
	if loads["A"] == 0 && loads["B"] == 0 {
		t.Fatal("no load made")
	}
	t.Logf("loads: %v", loads)
}

// volumeWatcher is a watcher, tracking the config in force, of a file
// whose rls runtime directory is a ConfigMap volume holding domain a (1 a
// second), with apply called for each reload.
func volumeWatcher(t *testing.T, apply func(*Config) error) (*Watcher, *kubetest.Volume) {
	t.Helper()
	root := t.TempDir()
	dir := filepath.Join(root, "config")
	v := kubetest.NewVolume(t, dir, map[string]string{"a.yaml": domainFile("a", 1)})
	file := filepath.Join(root, "fairgate.yaml")
	data := fmt.Appendf(nil, "rls:\n  runtime_dir: %s\n  ignore_dot_files: true\n", dir)
	os.WriteFile(file, data, 0o600)
	c, err := Parse(file, data)
	if err != nil {
		t.Fatal(err)
	}
	w := NewWatcher(file, time.Second, data, apply, nil)
	w.Track(c)
	return w, v
}

// TestWatcherSeesDataSwap: the config watcher reloads when ..data is
// swapped, and the reloaded config is the new generation.
func TestWatcherSeesDataSwap(t *testing.T) {
	var applied *Config
	w, v := volumeWatcher(t, func(c *Config) error { applied = c; return nil })
	v.Write(map[string]string{"a.yaml": domainFile("a", 2), "b.yaml": domainFile("b", 2)})
	if err := w.check(false); err != nil {
		t.Fatal(err)
	}
	if applied == nil || len(applied.RLS.Domains) != 2 {
		t.Fatalf("after the swap the watcher applied %v, want the two domains of the new generation", applied)
	}
}

// TestWatcherSeesSwapDuringReload: a ..data swap that lands while a reload
// is being applied (after the new generation was read) is applied at the
// next look, not taken for the generation already in force.
func TestWatcherSeesSwapDuringReload(t *testing.T) {
	var applied []uint32
	swapped := false
	var v *kubetest.Volume
	w, v := volumeWatcher(t, func(c *Config) error {
		applied = append(applied, c.RLS.Domains[0].Descriptors[0].Limit.RequestsPerUnit)
		if !swapped { // the next generation lands while this one is applied
			swapped = true
			v.Write(map[string]string{"a.yaml": domainFile("a", 9)})
		}
		return nil
	})
	v.Write(map[string]string{"a.yaml": domainFile("a", 7)})
	for range 3 {
		if err := w.check(false); err != nil {
			t.Fatal(err)
		}
	}
	if len(applied) != 2 || applied[0] != 7 || applied[1] != 9 {
		t.Fatalf("applied %v, want 7 then 9 (the generation swapped in during the first reload)", applied)
	}
}
