package idemvet_test

import (
	"fmt"

	"github.com/idemgen/idemgen/analysis/idemvet"
)

// A vet tool of your own can run idemvet beside other analyzers:
//
//	func main() { multichecker.Main(idemvet.Analyzer, printf.Analyzer) }
//
// and cmd/idemvet is singlechecker.Main(idemvet.Analyzer).
func Example() {
	fmt.Println(idemvet.Analyzer.Name, len(idemvet.Analyzer.FactTypes))
	// Output: idemvet 2
}
