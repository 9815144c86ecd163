package annotations

import (
	"errors"
	"go/ast"
	"go/token"
	"testing"
)

// parseText parses one comment line text (starting with //idem:).
func parseText(text string) (*Spec, error) {
	fset := token.NewFileSet()
	f := fset.AddFile("fuzz.go", -1, len(text)+1)
	c := &ast.Comment{Slash: token.Pos(f.Base()), Text: text}
	return Parse(fset, &ast.CommentGroup{List: []*ast.Comment{c}})
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{
		"key=order.ID+op ttl=155s",
		`key=req.CustomerID+"refund"+req.RefundNo`,
		"retries=2 timeout=2s backoff=500ms downstream=120s margin=30s   // ttl derived: 155s",
		"final=ErrInsufficientFunds|ErrOrderClosed inflight=wait:3s",
		"defaults ttl=7d lease=1d12h",
		"key=msg.Key() ttl=72h inflight=reject hash=msg",
		"key=tenant+op+req.ID hash=none op=orders.Pay/v2",
		"key=a.B.C()+`raw lit`+\"x = y\" ttl=2m30s final=pay.ErrClosed|ErrA",
		"key=id tll=1s",
		"key=order.ID + op",
		`key="unterminated`,
		"key=a.Key(1) ttl=0s retries=-1 inflight=wait:",
		"defaults",
		"key=a ttl=1s ttl=2s hash=a,,a",
		"key=a ttl=1s codec=custom",
		"defaults codec=json",
		"key=a ttl=1s renew=true",
		"defaults renew=false",
		"key=a ttl=1s codec=gob",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		spec, err := parseText(directive + s)
		if err != nil {
			if l := ErrorList(nil); !errors.As(err, &l) {
				t.Fatalf("error is %T, not ErrorList", err)
			}
			return
		}
		if spec == nil {
			t.Fatal("nil Spec without error")
		}
		out := spec.String()
		again, err := parseText(out)
		if err != nil {
			t.Fatalf("%q parsed, but its String() %q does not: %v", s, out, err)
		}
		if !spec.Equal(again) {
			t.Fatalf("round trip of %q through %q changed the Spec", s, out)
		}
		if again.String() != out {
			t.Fatalf("String() is not stable: %q then %q", out, again.String())
		}
	})
}
