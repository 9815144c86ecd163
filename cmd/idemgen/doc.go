// Command idemgen writes idem_gen.go beside every package whose methods carry
// an //idem: annotation: a wrapper type whose annotated methods run at most
// once per key, through the idemgen runtime.
//
// Install it as a tool of your module (Go 1.24+):
//
//	go get -tool github.com/idemgen/idemgen/cmd/idemgen
//
// and run it with go generate, from one file of each package:
//
//	//go:generate go tool idemgen
//
// The tool directive in go.mod pins its version and keeps its dependencies in
// go.sum through go mod tidy.
//
// The go run form needs the command's package in the module (not only
// github.com/idemgen/idemgen, or go run fails with a missing go.sum entry for
// golang.org/x/tools/go/packages):
//
//	go get github.com/idemgen/idemgen/cmd/idemgen
//
//	//go:generate go run github.com/idemgen/idemgen/cmd/idemgen
//
// and, since go mod tidy drops what no package of the module imports, a
// tools.go file that imports it, in a directory of its own (tools/tools.go):
//
//	//go:build tools
//
//	package tools
//
//	import _ "github.com/idemgen/idemgen/cmd/idemgen"
//
// Annotated methods under a build constraint (//go:build linux, svc_linux.go,
// //go:build pro) go to idem_gen_<constraint>.go, which carries the
// constraint; idemgen finds them in every build configuration, without -tags.
//
// idemgen -check writes nothing and exits 1 when a generated file is stale,
// missing or extra; idemgen -check -diff also prints a unified diff of what a
// run would change. Run idemgen -h for the flags.
package main
