// Package gclplugin registers the idemvet analyzer as a golangci-lint v2
// module plugin named "idemvet" (github.com/golangci/plugin-module-register).
// List this package in .custom-gcl.yml, build the binary with
// golangci-lint custom, and enable the linter with type: module; see
// docs/IDEMVET.md in the idemgen repository. It takes no settings.
package gclplugin

import (
	"fmt"

	"github.com/golangci/plugin-module-register/register"
	"golang.org/x/tools/go/analysis"

	"github.com/idemgen/idemgen/analysis/idemvet"
)

// Name is the linter's name in .golangci.yml.
const Name = "idemvet"

func init() { register.Plugin(Name, New) }

// New returns the plugin; settings must be empty.
func New(settings any) (register.LinterPlugin, error) {
	if m, ok := settings.(map[string]any); settings != nil && (!ok || len(m) > 0) {
		return nil, fmt.Errorf("%s: takes no settings, got %v", Name, settings)
	}
	return plugin{}, nil
}

type plugin struct{}

// BuildAnalyzers returns the idemvet analyzer.
func (plugin) BuildAnalyzers() ([]*analysis.Analyzer, error) {
	return []*analysis.Analyzer{idemvet.Analyzer}, nil
}

// GetLoadMode says the analyzer needs types.
func (plugin) GetLoadMode() string { return register.LoadModeTypesInfo }
