package annotations

import (
	"errors"
	"fmt"
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"sort"
	"strings"
	"testing"
)

// stubs are small stand-ins for the packages test sources import, so
// type-checking a test package takes microseconds.
var stubs = map[string]string{
	"context": `package context
type Context interface{ Done() <-chan struct{}; Err() error }`,
	"errors": `package errors
func New(s string) error { return nil }`,
	"time": `package time
type Duration int64
type Time struct{ wall uint64 }
func (t Time) MarshalJSON() ([]byte, error) { return nil, nil }
func (t *Time) UnmarshalJSON(b []byte) error { return nil }`,
	"example.com/pay": `package pay
import "errors"
var ErrClosed = errors.New("closed")
var errHidden = errors.New("hidden")
const NotVar = 1
type NotErr struct{}
var ErrNotErr NotErr`,
	"example.com/uuid": `package uuid
type UUID [16]byte
func (u UUID) String() string { return "" }`,
}

type stubImporter struct {
	fset *token.FileSet
	pkgs map[string]*types.Package
}

func (im *stubImporter) Import(path string) (*types.Package, error) {
	if p := im.pkgs[path]; p != nil {
		return p, nil
	}
	src, ok := stubs[path]
	if !ok {
		return importer.Default().Import(path)
	}
	f, err := parser.ParseFile(im.fset, path+"/stub.go", src, parser.ParseComments)
	if err != nil {
		return nil, err
	}
	conf := types.Config{Importer: im}
	p, err := conf.Check(path, im.fset, []*ast.File{f}, nil)
	if err != nil {
		return nil, err
	}
	im.pkgs[path] = p
	return p, nil
}

// load type-checks the given files ("name.go" → source) as package
// example.com/svc and resolves it.
func load(t testing.TB, files map[string]string) (*token.FileSet, *Package, error) {
	t.Helper()
	fset := token.NewFileSet()
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	var asts []*ast.File
	for _, n := range names {
		f, err := parser.ParseFile(fset, n, files[n], parser.ParseComments)
		if err != nil {
			t.Fatalf("parse %s: %v", n, err)
		}
		asts = append(asts, f)
	}
	info := &types.Info{
		Defs:      map[*ast.Ident]types.Object{},
		Uses:      map[*ast.Ident]types.Object{},
		Types:     map[ast.Expr]types.TypeAndValue{},
		Implicits: map[ast.Node]types.Object{},
	}
	conf := types.Config{Importer: &stubImporter{fset: fset, pkgs: map[string]*types.Package{}}}
	pkg, err := conf.Check("example.com/svc", fset, asts, info)
	if err != nil {
		t.Fatalf("type-check: %v", err)
	}
	p, err := ResolvePackage(fset, asts, pkg, info)
	return fset, p, err
}

// src builds a file of package svc with the usual imports and the body.
func src(body string) map[string]string {
	return map[string]string{"svc.go": "package svc\n\nimport \"context\"\n\nvar _ context.Context\n\n" + body}
}

// errLines returns the errors of err as "line:col: message" lines (file
// name dropped when there is one file).
func errLines(err error) []string {
	if err == nil {
		return nil
	}
	var l ErrorList
	if !errors.As(err, &l) {
		return []string{"not an ErrorList: " + err.Error()}
	}
	var out []string
	for _, e := range l {
		out = append(out, fmt.Sprintf("%s:%d:%d: %s", e.Pos.Filename, e.Pos.Line, e.Pos.Column, e.Msg))
	}
	return out
}

func stripFile(lines []string, file string) []string {
	var out []string
	for _, l := range lines {
		out = append(out, strings.TrimPrefix(l, file+":"))
	}
	return out
}
