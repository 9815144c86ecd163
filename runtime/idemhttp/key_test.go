package idemhttp_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/idemgen/idemgen/runtime/idemhttp"
)

func TestParseKey(t *testing.T) {
	for _, c := range []struct {
		in, want string
		err      error
	}{
		{`abc`, "abc", nil},
		{`"abc"`, "abc", nil},
		{`  "abc"	`, "abc", nil},
		{`8e03978e-40d5-43e8-bc93-6894a57f9324`, "8e03978e-40d5-43e8-bc93-6894a57f9324", nil},
		{`"a\"b\\c"`, `a"b\c`, nil},
		{`a"b`, `a"b`, nil}, // bare: taken as it is
		{`a b`, "a b", nil},
		{`" "`, " ", nil},
		{`~!@#$%^&*()`, `~!@#$%^&*()`, nil},
		{strings.Repeat("k", 255), strings.Repeat("k", 255), nil},
		{`"` + strings.Repeat("k", 255) + `"`, strings.Repeat("k", 255), nil},
		{``, "", idemhttp.ErrKeyEmpty},
		{`   `, "", idemhttp.ErrKeyEmpty},
		{`""`, "", idemhttp.ErrKeyEmpty},
		{strings.Repeat("k", 256), "", idemhttp.ErrKeyTooLong},
		{`"` + strings.Repeat("k", 256) + `"`, "", idemhttp.ErrKeyTooLong},
		{`"abc`, "", idemhttp.ErrKeySyntax},
		{`"abc"d`, "", idemhttp.ErrKeySyntax},
		{`"a\b"`, "", idemhttp.ErrKeySyntax},
		{`"abc\`, "", idemhttp.ErrKeySyntax},
		{`"`, "", idemhttp.ErrKeySyntax},
		{"ключ", "", idemhttp.ErrKeyCharset},
		{"a\x7fb", "", idemhttp.ErrKeyCharset},
		{"\"a\x00\"", "", idemhttp.ErrKeyCharset},
		{"a\tb", "", idemhttp.ErrKeyCharset},
	} {
		got, err := idemhttp.ParseKey(c.in)
		if got != c.want || !errors.Is(err, c.err) {
			t.Errorf("ParseKey(%q) = %q, %v; want %q, %v", c.in, got, err, c.want, c.err)
		}
	}
}

func FuzzParseKey(f *testing.F) {
	for _, s := range []string{`abc`, `"abc"`, `"a\"b"`, `""`, `"`, `"\`, `a"b`, " x ", "\x00", strings.Repeat("k", 256)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		k, err := idemhttp.ParseKey(v)
		if err != nil {
			if k != "" {
				t.Fatalf("ParseKey(%q) returned %q with error %v", v, k, err)
			}
			return
		}
		if len(k) < 1 || len(k) > idemhttp.MaxKeyLen {
			t.Fatalf("ParseKey(%q) = %q: length %d", v, k, len(k))
		}
		for i := 0; i < len(k); i++ {
			if k[i] < 0x20 || k[i] > 0x7e {
				t.Fatalf("ParseKey(%q) = %q: byte %#x", v, k, k[i])
			}
		}
		// Both forms of an accepted key parse back to it.
		if k2, err := idemhttp.ParseKey(idemhttp.FormatKey(k)); err != nil || k2 != k {
			t.Fatalf("ParseKey(FormatKey(%q)) = %q, %v", k, k2, err)
		}
		if k[0] != '"' && k[0] != ' ' && k[len(k)-1] != ' ' {
			if k2, err := idemhttp.ParseKey(k); err != nil || k2 != k {
				t.Fatalf("bare ParseKey(%q) = %q, %v", k, k2, err)
			}
		}
	})
}
