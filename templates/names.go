package templates

import (
	"go/types"
	"strconv"
	"strings"
)

// namer hands out identifiers that differ from every name it was seeded with
// and from every name it handed out before (goverter's namer/namer.go). The
// same seeds and the same requests give the same names.
//
// Namers nest: a child (made by child) sees every name of its parents without
// copying them, and hands out and reserves names in its own layer only. The
// package-level namer of a file is built once; each wrapper method gets a
// child of it for its locals, so naming the locals of n methods costs O(n),
// not O(n × package-level names). A parent must not hand out names while its
// children are in use.
type namer struct {
	taken  map[string]bool // this layer's names; written by reserve and name
	parent *namer          // read-only from here
}

// newNamer returns a root namer seeded with the union of seeds (copied).
func newNamer(seeds ...map[string]bool) *namer {
	n := &namer{taken: map[string]bool{}}
	for _, s := range seeds {
		for name := range s {
			n.taken[name] = true
		}
	}
	return n
}

// child returns a child of n whose own layer is names: the child owns names
// from then on and adds to it the names it reserves or hands out. A nil
// names is an empty layer.
func (n *namer) child(names map[string]bool) *namer {
	if names == nil {
		names = map[string]bool{}
	}
	return &namer{taken: names, parent: n}
}

// isTaken reports whether name is in any layer of n.
func (n *namer) isTaken(name string) bool {
	for l := n; l != nil; l = l.parent {
		if l.taken[name] {
			return true
		}
	}
	return false
}

// reserve marks names as used without handing them out.
func (n *namer) reserve(names ...string) {
	for _, name := range names {
		n.taken[name] = true
	}
}

// name returns the first free name among candidates, or else the last
// candidate followed by the smallest number ≥ 2 that makes it free.
func (n *namer) name(candidates ...string) string {
	for _, c := range candidates {
		if !n.isTaken(c) {
			n.taken[c] = true
			return c
		}
	}
	base := candidates[len(candidates)-1]
	for i := 2; ; i++ {
		c := base + strconv.Itoa(i)
		if !n.isTaken(c) {
			n.taken[c] = true
			return c
		}
	}
}

// predeclared are the names generated code must never shadow or be
// shadowed by: every name of the universe scope (types, constants,
// builtins such as len or min, not only those generated code uses: a type
// of the signature may use any of them) and the keywords.
var predeclared = func() map[string]bool {
	m := map[string]bool{}
	for _, name := range types.Universe.Names() {
		m[name] = true
	}
	for _, kw := range strings.Fields(`break case chan const continue default defer else fallthrough for func go goto if import interface map package range return select struct switch type var`) {
		m[kw] = true
	}
	return m
}()

// universe is the read-only root scope of predeclared names.
var universe = &namer{taken: predeclared}
