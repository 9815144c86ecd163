package annotations

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestSentinels: the exported error variables of the package that final=
// does not list, in name order; not those of constrained or test files,
// not unexported ones, not other values.
func TestSentinels(t *testing.T) {
	_, p, err := load(t, map[string]string{
		"a.go": `package svc

import (
	"context"
	"errors"
)

var (
	ErrB     = errors.New("b")
	ErrA     = errors.New("a")
	ErrFinal = errors.New("final")
	errLow   = errors.New("low")
	NotErr   = "x"
	ErrPtr   = &MyErr{}
)

type MyErr struct{}

func (*MyErr) Error() string { return "my" }

var _ = errLow

type S struct{}

//idem:key=id ttl=1s final=ErrFinal
func (S) M(ctx context.Context, id string) error { return nil }
`,
		"b_linux.go": `package svc

import "errors"

var ErrLinux = errors.New("linux")
`,
		"c.go": `//go:build pro

package svc

import "errors"

var ErrPro = errors.New("pro")
`,
		"d_test.go": `package svc

import "errors"

var ErrTest = errors.New("test")
`,
	})
	require.NoError(t, err)
	m := p.Types[0].Methods[0]
	var names []string
	for _, s := range m.Sentinels {
		names = append(names, s.Name)
	}
	assert.Equal(t, []string{"ErrA", "ErrB", "ErrPtr"}, names)
	assert.Equal(t, "ErrFinal", m.Final[0].Name)
}

func TestConstrainedName(t *testing.T) {
	for name, want := range map[string]bool{
		"a.go": false, "linux.go": false, "a_linux.go": true, "a_linux_amd64.go": true, "a_amd64.go": true,
		"a_linux_test.go": true, "a_foo.go": false, "a_test.go": false, "x_windows_arm64_test.go": true,
	} {
		assert.Equal(t, want, constrainedName(name), name)
	}
}
