package generate

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/pmezard/go-difflib/difflib"
)

// This file is what idemgen and idemvet -fix do with Generate's files: compare
// them with the disk, print the diff, write them.

// ShortPath returns path relative to wd when that is shorter (the go
// command's base.ShortPath).
func ShortPath(wd, path string) string {
	if rel, err := filepath.Rel(wd, path); err == nil && len(rel) < len(path) {
		return rel
	}
	return path
}

// ModuleRelative returns path relative to the root of the module that
// holds it (the nearest directory above with a go.mod), the one form in
// which idemgen (under go generate, which runs it in the package's
// directory, as from the module root) and idemvet (under go vet from the
// module root) print a position's file; path itself outside a module.
func ModuleRelative(path string) string {
	if !filepath.IsAbs(path) {
		return path
	}
	for dir := filepath.Dir(path); ; {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			if rel, err := filepath.Rel(dir, path); err == nil {
				return rel
			}
			return path
		}
		up := filepath.Dir(dir)
		if up == dir {
			return path
		}
		dir = up
	}
}

// State is what a run of idemgen would do to a generated file.
type State int

const (
	Unchanged State = iota // the disk holds the file as generated
	Missing                // to be written, no file yet
	Outdated               // to be written over different bytes
	Extra                  // a generated file no annotated method needs any more
)

// String is how idemgen -check names s.
func (s State) String() string {
	return [...]string{"up to date", "missing", "stale", "extra (no annotated method needs it any more)"}[s]
}

// Done is how idemgen -v names s once written.
func (s State) Done() string {
	return [...]string{"unchanged", "written", "rewritten", "removed"}[s]
}

// Change is a generated file and what a run would do to it.
type Change struct {
	File  File
	State State
}

// Compare compares the generated files with the disk.
func Compare(files []File) ([]Change, error) {
	var changes []Change
	for _, f := range files {
		old, err := os.ReadFile(f.Path)
		switch {
		case errors.Is(err, os.ErrNotExist):
			if !f.Delete {
				changes = append(changes, Change{f, Missing})
			}
		case err != nil:
			return nil, err
		case f.Delete:
			changes = append(changes, Change{f, Extra})
		case bytes.Equal(old, f.Content):
			changes = append(changes, Change{f, Unchanged})
		default:
			changes = append(changes, Change{f, Outdated})
		}
	}
	return changes, nil
}

// WriteDiff prints the unified diff (git's a/ and b/ prefixes, paths
// relative to wd, /dev/null for a missing or an extra file) of what a run
// would do to c's file.
func (c Change) WriteDiff(w io.Writer, wd string) error {
	var old []byte
	if c.State != Missing {
		var err error
		if old, err = os.ReadFile(c.File.Path); err != nil {
			return err
		}
	}
	name := filepath.ToSlash(ShortPath(wd, c.File.Path))
	from, to := "a/"+name, "b/"+name
	if c.State == Missing {
		from = "/dev/null"
	}
	if c.State == Extra {
		to = "/dev/null"
	}
	text, err := difflib.GetUnifiedDiffString(difflib.UnifiedDiff{
		A: lines(old), B: lines(c.File.Content), FromFile: from, ToFile: to, Context: 3,
	})
	if err != nil {
		return err
	}
	_, err = io.WriteString(w, text)
	return err
}

// lines splits content into lines, each with its newline (one is added to
// a last line without).
func lines(content []byte) []string {
	var ls []string
	for l := range strings.Lines(string(content)) {
		if !strings.HasSuffix(l, "\n") {
			l += "\n"
		}
		ls = append(ls, l)
	}
	return ls
}

// Stale reports whether a run would change any file of changes.
func Stale(changes []Change) bool {
	for _, c := range changes {
		if c.State != Unchanged {
			return true
		}
	}
	return false
}

// Commit writes every changed file atomically: each goes to a temporary file
// in its directory first, and only when all are written are they renamed
// into place (then stale files removed). Unchanged files are not touched.
func Commit(changes []Change) (err error) {
	type pending struct{ tmp, path string }
	var renames []pending
	defer func() {
		if err != nil {
			for _, p := range renames {
				os.Remove(p.tmp)
			}
		}
	}()
	for _, c := range changes {
		if c.State != Missing && c.State != Outdated {
			continue
		}
		tmp, err := writeTemp(c.File.Path, c.File.Content)
		if err != nil {
			return err
		}
		renames = append(renames, pending{tmp, c.File.Path})
	}
	for i, p := range renames {
		if err := os.Rename(p.tmp, p.path); err != nil {
			renames = renames[i:]
			return err
		}
	}
	renames = nil
	for _, c := range changes {
		if c.State == Extra {
			if err := os.Remove(c.File.Path); err != nil {
				return err
			}
		}
	}
	return nil
}

func writeTemp(path string, content []byte) (string, error) {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*.tmp")
	if err != nil {
		return "", err
	}
	_, werr := f.Write(content)
	cerr := f.Close()
	if err := errors.Join(werr, cerr, os.Chmod(f.Name(), 0o644)); err != nil {
		os.Remove(f.Name())
		return "", err
	}
	return f.Name(), nil
}
