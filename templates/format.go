package templates

import (
	"bytes"
	"go/format"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/dave/jennifer/jen"
)

// declMark is the line renderSplit puts before each declaration in
// jennifer's output, to cut the file there: a line comment holding NUL
// bytes, which no Go source (and so no name, key or op the generator copies
// from one) contains. A file where it is found more often than it was put
// is formatted whole.
const declMark = "//\x00idemgen:decl\x00"

// pieceHeader turns one declaration into a file that go/format accepts;
// its formatted form starts with the same bytes, which are cut off.
const pieceHeader = "package p\n\n"

// renderSplit returns the bytes renderWhole returns for codes, formatting
// the head of the file (header comment, build constraint, package clause
// and imports) on its own and the declarations in runs of about pieceBytes
// of source (at least one declaration each), across GOMAXPROCS goroutines: go/format's pass is most of the generator's own time at
// 1,000 methods (bench/README.md).
//
// The result equals one pass over the whole file because gofmt lays out
// each top-level declaration by itself and separates two of them by one
// blank line whenever the source has at least one: renderSplit checks that
// jennifer wrote at least one between every two declarations (two
// newlines), and that each declaration rendered some text. When a check
// fails, a piece does not format, or the mark turns up elsewhere, it
// returns false and render takes the whole-file pass, which also reports
// the error (TestRenderSplitIsRenderWhole compares both on every model of
// the tests).
func (g *gen) renderSplit(codes []jen.Code, pieceBytes int) ([]byte, bool) {
	if len(codes) == 0 {
		return nil, false
	}
	f := g.newFile()
	for _, code := range codes {
		f.Comment(declMark)
		f.Add(code)
		f.Line()
	}
	var buf bytes.Buffer
	if err := f.Render(&buf); err != nil {
		return nil, false
	}
	src, err := groupImports(buf.Bytes())
	if err != nil {
		return nil, false
	}
	parts := bytes.Split(src, []byte(declMark))
	if len(parts) != len(codes)+1 {
		return nil, false
	}
	for i, p := range parts {
		text := bytes.TrimRight(p, " \t\n")
		if i > 0 && len(bytes.TrimLeft(text, " \t\n")) == 0 {
			return nil, false // an empty declaration: no blank line of its own
		}
		if i < len(parts)-1 && bytes.Count(p[len(text):], []byte("\n")) < 2 {
			return nil, false // no blank line before the next declaration
		}
	}

	// Pieces: the head, then runs of whole declarations (one go/format
	// call has a fixed cost; runs still leave work for every goroutine).
	// Within a run the marks are dropped, and the blank lines around
	// them stay: gofmt makes one of two or more.
	pieces := [][]byte{parts[0]}
	for i := 1; i < len(parts); {
		j, n := i, 0
		for j < len(parts) && (j == i || n+len(parts[j]) <= pieceBytes) {
			n += len(parts[j])
			j++
		}
		if j == i+1 {
			pieces = append(pieces, parts[i])
		} else {
			pieces = append(pieces, bytes.Join(parts[i:j], nil))
		}
		i = j
	}
	outs := make([][]byte, len(pieces))
	if !parallel(len(pieces), func(i int) bool {
		var ok bool
		outs[i], ok = formatPiece(i == 0, pieces[i])
		return ok
	}) {
		return nil, false
	}
	size := len(pieces)
	for _, o := range outs {
		size += len(o)
	}
	out := make([]byte, 0, size)
	for i, o := range outs {
		if i > 0 {
			out = append(out, '\n') // the blank line between declarations
		}
		out = append(out, o...)
	}
	return out, true
}

// pieceBytes is about the most of jennifer's source render formats in one
// go/format call: 16 KiB cut the CPU time at 1,000 methods by a tenth
// against one call per declaration (BenchmarkRender).
const pieceBytes = 16 << 10

// formatPiece formats the head of the file (a file of its own) or one
// declaration (in a file of pieceHeader and it, whose header it cuts off).
func formatPiece(head bool, piece []byte) ([]byte, bool) {
	if head {
		out, err := format.Source(piece)
		return out, err == nil
	}
	src := make([]byte, 0, len(pieceHeader)+len(piece))
	src = append(append(src, pieceHeader...), bytes.TrimLeft(piece, " \t\n")...)
	out, err := format.Source(src)
	if err != nil || !bytes.HasPrefix(out, []byte(pieceHeader)) {
		return nil, false
	}
	return out[len(pieceHeader):], true
}

// parallel calls fn(i) for every i in [0, n) across GOMAXPROCS goroutines
// and reports whether every call returned true; after the first false it
// starts no more calls.
func parallel(n int, fn func(i int) bool) bool {
	var next atomic.Int64
	var failed atomic.Bool
	var wg sync.WaitGroup
	for range min(runtime.GOMAXPROCS(0), n) {
		wg.Go(func() {
			for !failed.Load() {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				if !fn(i) {
					failed.Store(true)
					return
				}
			}
		})
	}
	wg.Wait()
	return !failed.Load()
}
