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

		// Lists: one field with more than one key (or repeated lines a
		// proxy combined) is refused, never taken as one key.
		{`key-1, key-2`, "", idemhttp.ErrKeyList},
		{`key-1,key-2`, "", idemhttp.ErrKeyList},
		{`"key-1", "key-2"`, "", idemhttp.ErrKeyList},
		{`"key-1" ,"key-2"`, "", idemhttp.ErrKeyList},
		{`"key-1";a=1, "key-2"`, "", idemhttp.ErrKeyList},
		{`"key-1",`, "", idemhttp.ErrKeyList},
		{`,`, "", idemhttp.ErrKeyList},
		{`key-1,`, "", idemhttp.ErrKeyList},
		{`"a,b"`, "a,b", nil}, // a comma inside the string is part of the key
		{`"a, b"`, "a, b", nil},

		// Structured-field parameters after the string: checked, ignored.
		{`"abc";v=1`, "abc", nil},
		{`"abc";v`, "abc", nil},
		{`"abc";v=-1.5;w="x;y";t=tok/en:1;b=?1;d=@1700000000;s=:aGk=:;ds=%"caf%c3%a9"`, "abc", nil},
		{`"abc";  v=1 `, "abc", nil},
		{`"abc";*k.-_9=1`, "abc", nil},
		{`"abc";V=1`, "", idemhttp.ErrKeySyntax},                // keys are lower case
		{`"abc";`, "", idemhttp.ErrKeySyntax},                   // no key
		{`"abc";9=1`, "", idemhttp.ErrKeySyntax},                // keys start with a letter or *
		{`"abc";v=`, "", idemhttp.ErrKeySyntax},                 // no value
		{`"abc";v=1234567890123456`, "", idemhttp.ErrKeySyntax}, // 16-digit integer
		{`"abc";v=1.2345`, "", idemhttp.ErrKeySyntax},           // 4 decimal digits
		{`"abc";v=1.`, "", idemhttp.ErrKeySyntax},
		{`"abc";v=?2`, "", idemhttp.ErrKeySyntax},
		{`"abc";v=:a!:`, "", idemhttp.ErrKeySyntax},
		{`"abc";v=:abc`, "", idemhttp.ErrKeySyntax},
		{`"abc";v="x`, "", idemhttp.ErrKeySyntax},
		{`"abc";v=%"%C3"`, "", idemhttp.ErrKeySyntax}, // upper-case hex
		{`"abc";v=%x`, "", idemhttp.ErrKeySyntax},
		{`"abc";v=(1)`, "", idemhttp.ErrKeySyntax}, // inner lists are not bare items
		{`"abc" ;v=1`, "", idemhttp.ErrKeySyntax},  // no space before ';'
		{`"abc" x`, "", idemhttp.ErrKeySyntax},
		{`"";v=1`, "", idemhttp.ErrKeyEmpty},

		// The bare form is taken verbatim, parameters and all.
		{`abc;v=1`, "abc;v=1", nil},
		{`tok/en:1`, "tok/en:1", nil},
		{`a "b"`, `a "b"`, nil},
		{"ключ,x", "", idemhttp.ErrKeyList},
	} {
		got, err := idemhttp.ParseKey(c.in)
		if got != c.want || !errors.Is(err, c.err) {
			t.Errorf("ParseKey(%q) = %q, %v; want %q, %v", c.in, got, err, c.want, c.err)
		}
	}
}

func FuzzParseKey(f *testing.F) {
	for _, s := range []string{`abc`, `"abc"`, `"a\"b"`, `""`, `"`, `"\`, `a"b`, " x ", "\x00", strings.Repeat("k", 256),
		`a,b`, `"a,b"`, `"a";b=1`, `"a";b="c,d", "e"`, `"a";b=%"%c3"`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		k, err := idemhttp.ParseKey(v)
		if tv := strings.Trim(v, " \t"); tv != "" && tv[0] != '"' && strings.Contains(tv, ",") && !errors.Is(err, idemhttp.ErrKeyList) {
			t.Fatalf("ParseKey(%q) = %q, %v: a bare list must be ErrKeyList", v, k, err)
		}
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
		if k[0] != '"' && k[0] != ' ' && k[len(k)-1] != ' ' && !strings.Contains(k, ",") {
			if k2, err := idemhttp.ParseKey(k); err != nil || k2 != k {
				t.Fatalf("bare ParseKey(%q) = %q, %v", k, k2, err)
			}
		}
	})
}
