package idemhttp

import "testing"

// TestCanonicalJSON: equal JSON values spelled otherwise canonicalize to
// the same bytes; what is not one valid JSON value, or names a member
// twice, is not canonicalized (it is fingerprinted byte for byte).
func TestCanonicalJSON(t *testing.T) {
	for _, tc := range []struct {
		in, want string
		ok       bool
	}{
		{`{"b":1,"a":[true,null,"x"]}`, `{"a":[true,null,"x"],"b":1}`, true},
		{" {\n\"a\" : { \"d\":1e3, \"c\":-0.5 } }\t", `{"a":{"c":-0.5,"d":1e3}}`, true},
		{`"\u00e9\/"`, `"é/"`, true},
		{`"<&>"`, `"\u003c\u0026\u003e"`, true},
		{`[]`, `[]`, true},
		{`{}`, `{}`, true},
		{`12`, `12`, true},
		{`{"a":1,"a":1}`, "", false},
		{`{"a":{"b":1,"b":2}}`, "", false},
		{`{"a":1} {"a":1}`, "", false},
		{`{"a":1`, "", false},
		{"\"\xff\"", "", false},
		{``, "", false},
		{`[]]`, "", false},
	} {
		got, ok := canonicalJSON([]byte(tc.in))
		if ok != tc.ok || string(got) != tc.want {
			t.Errorf("canonicalJSON(%q) = %q, %v; want %q, %v", tc.in, got, ok, tc.want, tc.ok)
		}
	}
	deep := make([]byte, 0, 2*(maxJSONDepth+2))
	for range maxJSONDepth + 2 {
		deep = append(deep, '[')
	}
	for range maxJSONDepth + 2 {
		deep = append(deep, ']')
	}
	if _, ok := canonicalJSON(deep); ok {
		t.Errorf("a body nested deeper than %d levels was canonicalized", maxJSONDepth)
	}
}
