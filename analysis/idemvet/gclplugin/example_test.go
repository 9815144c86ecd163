package gclplugin_test

import (
	"fmt"

	"github.com/idemgen/idemgen/analysis/idemvet/gclplugin"
)

// golangci-lint calls New with the linter's settings (none) and runs the
// analyzers it builds on packages loaded with types.
func ExampleNew() {
	p, err := gclplugin.New(nil)
	if err != nil {
		panic(err)
	}
	analyzers, _ := p.BuildAnalyzers()
	fmt.Println(analyzers[0].Name, p.GetLoadMode())
	_, err = gclplugin.New(map[string]any{"strict": true})
	fmt.Println(err != nil)
	// Output:
	// idemvet typesinfo
	// true
}
