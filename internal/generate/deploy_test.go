package generate

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestReadCommitted: every golden generated file (testdata/*/want) yields,
// for each of its idem.Method descriptors, the wrapped method's Func, its
// op and its key expression, so that no deploy event goes unseen for want
// of parsing the committed file.
func TestReadCommitted(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(moduleRoot(t), "testdata", "*", "want", "idem_gen*.go"))
	require.NoError(t, err)
	require.NotEmpty(t, files)
	for _, path := range files {
		src, err := os.ReadFile(path)
		require.NoError(t, err)
		got := readCommitted(src)
		descriptors := strings.Count(string(src), " = idem.Method{") + strings.Count(string(src), " = idemrt.Method{")
		assert.Len(t, got, descriptors, path)
		for fn, c := range got {
			assert.NotEmpty(t, c.op, "%s: %s", path, fn)
			assert.NotEmpty(t, c.key, "%s: %s", path, fn)
		}
	}
	src, err := os.ReadFile(filepath.Join(moduleRoot(t), "examples", "orders", "billing", "idem_gen.go"))
	require.NoError(t, err)
	pay := readCommitted(src)["github.com/idemgen/idemgen/examples/orders/billing.(*Service).Pay"]
	assert.Equal(t, "order.ID+op", pay.key)
	assert.Contains(t, pay.names, "ErrInsufficientFunds")
	assert.Contains(t, pay.names, "ErrOrderClosed")
}
