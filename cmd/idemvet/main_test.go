package main

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestFixArgs(t *testing.T) {
	for _, tc := range []struct {
		args      []string
		fix, diff bool
		patterns  []string
	}{
		{nil, false, false, []string{"."}},
		{[]string{"./..."}, false, false, []string{"./..."}},
		{[]string{"-fix", "./..."}, true, false, []string{"./..."}},
		{[]string{"--fix=true", "-diff", "./a", "./b"}, true, true, []string{"./a", "./b"}},
		{[]string{"-fix=false", "./..."}, false, false, []string{"./..."}},
		{[]string{"-c", "3", "-fix", "./x"}, true, false, []string{"./x"}},
		{[]string{"-c=3", "-fix", "--", "-odd"}, true, false, []string{"-odd"}},
		{[]string{"/tmp/vet.cfg"}, false, false, []string{"/tmp/vet.cfg"}}, // go vet's protocol
	} {
		fix, diff, patterns := fixArgs(tc.args)
		assert.Equal(t, tc.fix, fix, "%q", tc.args)
		assert.Equal(t, tc.diff, diff, "%q", tc.args)
		assert.Equal(t, tc.patterns, patterns, "%q", tc.args)
	}
}
