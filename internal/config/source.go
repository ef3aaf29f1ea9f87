package config

import (
	"crypto/sha256"
	"fmt"
	"io/fs"
	"path/filepath"
	"strings"

	"github.com/fairgate/fairgate/internal/rls"
)

// Source is a directory of envoyproxy/ratelimit config files, as that
// service's runtime directory holds them (RUNTIME_ROOT/
// RUNTIME_SUBDIRECTORY/config): every regular file under it, in
// subdirectories too, is one domain's file.
type Source struct {
	// Dir is the directory. A symbolic link is followed afresh each time,
	// so that the atomic swap of a link to a new directory is seen.
	Dir string
	// IgnoreDot skips files and directories whose name starts with a dot
	// (RUNTIME_IGNOREDOTFILES; Kubernetes ConfigMap mounts need it).
	IgnoreDot bool
}

// MaxSourceFiles bounds the files one directory may hold.
const MaxSourceFiles = 10_000

// files lists the directory's files, sorted.
func (s Source) files() ([]string, error) {
	root, err := filepath.EvalSymlinks(s.Dir)
	if err != nil {
		return nil, fmt.Errorf("runtime directory %s: %w", s.Dir, err)
	}
	var out []string
	err = filepath.WalkDir(root, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p != root && s.IgnoreDot && strings.HasPrefix(e.Name(), ".") {
			if e.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if e.Type().IsRegular() {
			if len(out) == MaxSourceFiles {
				return fmt.Errorf("more than %d files", MaxSourceFiles)
			}
			out = append(out, p)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("runtime directory %s: %w", s.Dir, err)
	}
	return out, nil
}

// domains reads every file of the directory.
func (s Source) domains() ([]rls.Domain, error) {
	files, err := s.files()
	if err != nil {
		return nil, err
	}
	var out []rls.Domain
	var errs []string
	for _, f := range files {
		ds, err := ParseRLSFile(f)
		if err != nil {
			errs = append(errs, err.Error())
			continue
		}
		out = append(out, ds...)
	}
	if len(errs) > 0 {
		return out, fmt.Errorf("%s", strings.Join(errs, "; "))
	}
	return out, nil
}

// Fingerprint sums what the rls section of c read besides its own file:
// the names and contents of the files its globs and directories hold now.
// A change of any (a file added, changed or removed, a directory's link
// swapped) changes it.
func Fingerprint(c *Config) [sha256.Size]byte {
	h := sha256.New()
	add := func(f string) {
		fmt.Fprintf(h, "%d:%s\n", len(f), f)
		if b, err := ReadFile(f); err == nil {
			fmt.Fprintf(h, "%d:", len(b))
			h.Write(b)
		} else {
			fmt.Fprintf(h, "error:%v", err)
		}
	}
	if c == nil {
		return [sha256.Size]byte{}
	}
	for _, g := range c.RLSFiles {
		matches, _ := filepath.Glob(g)
		fmt.Fprintf(h, "glob %s %d\n", g, len(matches))
		for _, f := range matches {
			add(f)
		}
	}
	for _, s := range c.RLSSources {
		files, err := s.files()
		fmt.Fprintf(h, "dir %s %d %v\n", s.Dir, len(files), err)
		for _, f := range files {
			add(f)
		}
	}
	var sum [sha256.Size]byte
	h.Sum(sum[:0])
	return sum
}
