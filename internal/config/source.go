package config

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"hash"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/fairgate/fairgate/internal/rlsconfig"
)

// Source is a directory of envoyproxy/ratelimit config files, as that
// service's runtime directory holds them (RUNTIME_ROOT/
// RUNTIME_SUBDIRECTORY/config): every regular file under it, in
// subdirectories too, is one domain's file, and so is every symbolic link
// to a regular file, wherever it points (envoyproxy/ratelimit reads
// through links too; the directory is trusted as the config file is).
//
// A Kubernetes ConfigMap or Secret volume is read as a whole generation:
// when the directory holds a ..data link (kubelet's atomic writer:
// name.yaml -> ..data/name.yaml, ..data -> ..2026_12_04_10_00_00.123),
// the files are those of the one directory ..data names when the read
// starts, and the read starts again if ..data was swapped meanwhile, so
// that a load is never half of one generation and half of the next. The
// volume's own entries (..data, ..data_tmp and the timestamped
// directories) are never loaded themselves, whatever IgnoreDot says.
type Source struct {
	// Dir is the directory. A symbolic link is followed afresh each time,
	// so that the atomic swap of a link to a new directory is seen.
	Dir string
	// IgnoreDot skips files and directories whose name starts with a dot
	// (RUNTIME_IGNOREDOTFILES).
	IgnoreDot bool
	// Skipped are the entries the last load left out, with why; filled in
	// by the config's decoding.
	Skipped []Skipped
	// Generation is the directory ..data named at the last load ("" when
	// the directory has no ..data link).
	Generation string
	// Domains is how many domains the last load found.
	Domains int
}

// Skipped is an entry of a runtime directory that was not loaded.
type Skipped struct {
	// Path is the entry as a user sees it (under Dir).
	Path string
	// Reason is why, one of the Skip* codes (the metric's reason label).
	Reason string
	// Detail, if not empty, is the error that made it unreadable.
	Detail string
}

// String is "path: why".
func (k Skipped) String() string {
	s := k.Path + ": " + skipText[k.Reason]
	if k.Detail != "" {
		s += ": " + k.Detail
	}
	return s
}

// The reasons an entry is skipped.
const (
	SkipDotFile    = "dot_file"
	SkipDirLink    = "link_to_directory"
	SkipDangling   = "dangling_link"
	SkipNotRegular = "not_regular"
	SkipUnreadable = "unreadable"
)

var skipText = map[string]string{
	SkipDotFile:    "its name starts with a dot and RUNTIME_IGNOREDOTFILES (ignore_dot_files) is true",
	SkipDirLink:    "a symbolic link to a directory, not followed (envoyproxy/ratelimit does not follow it either): link the files, or mount the directory itself",
	SkipDangling:   "a symbolic link to nothing",
	SkipNotRegular: "neither a regular file nor a link to one",
	SkipUnreadable: "cannot be listed",
}

const (
	kubeData        = "..data"
	maxGenerationRe = 10
)

// MaxSourceFiles bounds the files one directory may hold.
const MaxSourceFiles = 10_000

// srcFile is one file of a load: the name a user sees, and where it was
// read from (inside the generation for a Kubernetes volume).
type srcFile struct{ name, path string }

// listing is what one look at the directory found.
type listing struct {
	files   []srcFile
	skipped []Skipped
	gen     string
}

// dataLink is where root/..data points, "" when it is not a link.
func dataLink(root string) string {
	t, err := os.Readlink(filepath.Join(root, kubeData))
	if err != nil {
		return ""
	}
	return t
}

// isVolumeInternal reports the entries kubelet's atomic writer keeps for
// itself at the top of a volume: ..data, ..data_tmp and the timestamped
// directories, all named "..something".
func isVolumeInternal(name string) bool { return strings.HasPrefix(name, "..") }

// list finds the files of the directory: of one generation, for a
// Kubernetes volume.
func (s Source) list(root, gen string) (listing, error) {
	l := listing{gen: gen}
	if gen == "" {
		err := s.walk(root, root, &l)
		return l, err
	}
	genDir := gen
	if !filepath.IsAbs(genDir) {
		genDir = filepath.Join(root, gen)
	}
	if err := s.walk(genDir, root, &l); err != nil {
		return l, err
	}
	// Entries beside the volume's own: links into ..data are the files
	// just read; anything else is read as in any directory.
	top, err := os.ReadDir(root)
	if err != nil {
		return l, err
	}
	for _, e := range top {
		if isVolumeInternal(e.Name()) {
			continue
		}
		p := filepath.Join(root, e.Name())
		t, err := os.Readlink(p)
		if errors.Is(err, fs.ErrNotExist) {
			continue // an old link, removed after the swap
		}
		if err == nil && (t == kubeData || strings.HasPrefix(t, kubeData+string(filepath.Separator))) {
			continue
		}
		if s.IgnoreDot && strings.HasPrefix(e.Name(), ".") {
			l.skipped = append(l.skipped, Skipped{Path: p, Reason: SkipDotFile})
			continue
		}
		if err := s.walk(p, p, &l); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return l, err
		}
	}
	return l, nil
}

// walk adds the files under dir (a directory, or one entry), each named
// as the same path under as: the user-visible name of a file read from a
// Kubernetes volume's generation directory.
func (s Source) walk(dir, as string, l *listing) error {
	return filepath.WalkDir(dir, func(p string, e fs.DirEntry, err error) error {
		rel, _ := filepath.Rel(dir, p)
		name := filepath.Join(as, rel)
		if err != nil {
			if p == dir {
				return err
			}
			l.skipped = append(l.skipped, Skipped{Path: name, Reason: SkipUnreadable, Detail: err.Error()})
			return nil
		}
		if p == dir && e.IsDir() {
			return nil
		}
		if p != dir && s.IgnoreDot && strings.HasPrefix(e.Name(), ".") {
			l.skipped = append(l.skipped, Skipped{Path: name, Reason: SkipDotFile})
			if e.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		switch t := e.Type(); {
		case t.IsDir():
			return nil
		case t.IsRegular():
		case t&fs.ModeSymlink != 0:
			fi, err := os.Stat(p)
			switch {
			case err != nil:
				l.skipped = append(l.skipped, Skipped{Path: name, Reason: SkipDangling})
				return nil
			case fi.IsDir():
				l.skipped = append(l.skipped, Skipped{Path: name, Reason: SkipDirLink})
				return nil
			case !fi.Mode().IsRegular():
				l.skipped = append(l.skipped, Skipped{Path: name, Reason: SkipNotRegular})
				return nil
			}
		default:
			l.skipped = append(l.skipped, Skipped{Path: name, Reason: SkipNotRegular})
			return nil
		}
		if len(l.files) == MaxSourceFiles {
			return fmt.Errorf("more than %d files", MaxSourceFiles)
		}
		l.files = append(l.files, srcFile{name: name, path: p})
		return nil
	})
}

// generation is one consistent read of the directory: every file's
// content, read through the same ..data target, which was the target
// before and after the read.
type generation struct {
	listing
	data [][]byte
	errs []error // per file: the read's error, if any
}

// read reads the directory, again if a Kubernetes volume's ..data was
// swapped while it was read.
func (s Source) read() (generation, error) {
	root, err := filepath.EvalSymlinks(s.Dir)
	if err != nil {
		return generation{}, fmt.Errorf("runtime directory %s: %w", s.Dir, err)
	}
	for range maxGenerationRe {
		gen := dataLink(root)
		l, err := s.list(root, gen)
		g := generation{listing: l}
		if err == nil {
			for _, f := range l.files {
				b, err := ReadFile(f.path)
				if err != nil {
					err = fmt.Errorf("%s: %w", f.name, err)
				}
				g.data, g.errs = append(g.data, b), append(g.errs, err)
			}
		}
		if dataLink(root) != gen {
			continue // swapped meanwhile: the next generation, whole
		}
		if err != nil {
			return g, fmt.Errorf("runtime directory %s: %w", s.Dir, err)
		}
		return g, nil
	}
	return generation{}, fmt.Errorf("runtime directory %s: its ..data link changed %d times while it was read; is something swapping it in a loop?", s.Dir, maxGenerationRe)
}

// domains reads every file of the directory, filling in s.Skipped and
// s.Generation.
func (s *Source) domains(d *digest) ([]rlsconfig.Domain, error) {
	g, err := s.read()
	d.dir(s.Dir, g, err)
	s.Skipped, s.Generation = g.skipped, g.gen
	if err != nil {
		return nil, err
	}
	var out []rlsconfig.Domain
	var errs []string
	for i, f := range g.files {
		if g.errs[i] != nil {
			errs = append(errs, "rls "+g.errs[i].Error())
			continue
		}
		ds, err := ParseRLS(f.name, g.data[i])
		if err != nil {
			errs = append(errs, err.Error())
			continue
		}
		out = append(out, ds...)
	}
	s.Domains = len(out)
	if len(errs) > 0 {
		return out, fmt.Errorf("%s", strings.Join(errs, "; "))
	}
	return out, nil
}

// Fingerprint sums what the rls section of c reads besides its own file,
// as it is now: the names and contents of the files its globs and
// directories hold. A change of any (a file added, changed or removed, a
// directory's link or a Kubernetes volume's ..data swapped) changes it.
// It equals c's LoadedFingerprint while nothing changed since c was read.
func Fingerprint(c *Config) [sha256.Size]byte {
	if c == nil {
		return [sha256.Size]byte{}
	}
	d := newDigest()
	for _, g := range c.RLSFiles {
		matches, _ := filepath.Glob(g)
		d.glob(g, len(matches))
		for _, f := range matches {
			b, err := ReadFile(f)
			d.file(f, b, err)
		}
	}
	for _, s := range c.RLSSources {
		g, err := s.read()
		d.dir(s.Dir, g, err)
	}
	return d.sum()
}

// LoadedFingerprint is Fingerprint of what c was built from: taken from
// the very bytes its decoding read, so that a change landing between that
// read and a later look is seen as a change.
func (c *Config) LoadedFingerprint() [sha256.Size]byte {
	if c == nil {
		return [sha256.Size]byte{}
	}
	return c.loaded
}

// digest sums, in Fingerprint's form, the globs, files and directories
// the rls section reads.
type digest struct{ h hash.Hash }

func newDigest() *digest { return &digest{h: sha256.New()} }

func (d *digest) glob(pattern string, n int) { fmt.Fprintf(d.h, "glob %s %d\n", pattern, n) }

func (d *digest) file(name string, b []byte, err error) {
	fmt.Fprintf(d.h, "%d:%s\n", len(name), name)
	if err == nil {
		fmt.Fprintf(d.h, "%d:", len(b))
		d.h.Write(b)
	} else {
		fmt.Fprintf(d.h, "error:%v", err)
	}
}

func (d *digest) dir(dir string, g generation, err error) {
	fmt.Fprintf(d.h, "dir %s %d %v %q %q\n", dir, len(g.files), err, g.gen, g.skipped)
	for i, f := range g.files {
		d.file(f.name, g.data[i], g.errs[i])
	}
}

func (d *digest) sum() [sha256.Size]byte {
	var sum [sha256.Size]byte
	d.h.Sum(sum[:0])
	return sum
}
