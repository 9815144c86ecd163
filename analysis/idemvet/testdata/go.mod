// The analyzer's test module: services annotated for idemgen, their
// generated files (go run github.com/idemgen/idemgen/cmd/idemgen ./...),
// and packages that use them, with the diagnostics expected as // want
// comments (golang.org/x/tools/go/analysis/analysistest).
module example.com/vet

go 1.26.0

require github.com/idemgen/idemgen v0.0.0

replace github.com/idemgen/idemgen => ../../..

require example.com/othermod v0.0.0

replace example.com/othermod => ./othermod
