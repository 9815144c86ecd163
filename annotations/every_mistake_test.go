package annotations

import "testing"

// TestEveryMistakeOfALine is the class of issue 20.4: a line (or a type's
// //idem:defaults) with several mistakes, some that the option parser
// finds and some that only the resolver can, reports every one of them in
// one run, each at its line and column, and nothing that only follows from
// another (no "missing ttl" for a ttl that is written but malformed).
func TestEveryMistakeOfALine(t *testing.T) {
	tests := []struct {
		name string
		body string
		want []string
	}{
		{"the issue's line", `//idem:key=orderId inflight=wiat:3s ttl=24hh
func (S) M(ctx context.Context, orderID string) error { return nil }
`, []string{
			`11:12: key: orderId is not a parameter of S.M; did you mean "orderID"?`,
			`11:29: malformed inflight=wiat:3s: want reject or wait:<duration>`,
			`11:41: malformed duration ttl=24hh: want a Go duration like 500ms, 2m30s or 72h, optionally with leading days like 7d or 1d12h`,
		}},
		{"key field, hash and final", `//idem:key=r.Id ttl=1s hash=rr,,r final=ErrNope|ErrNope
func (S) M(ctx context.Context, r R) error { return nil }
`, []string{
			`11:14: key: R has no field or method Id; did you mean ID?`,
			`11:29: hash: rr is not a parameter of S.M; did you mean "r"?`,
			`11:32: empty name in hash=rr,,r`,
			`11:41: final: ErrNope is not declared in package svc; final lists sentinel error variables`,
			`11:49: final lists "ErrNope" twice`,
		}},
		{"a bad operand and a typo in another", `//idem:key=idd+x.Key(1) ttl=1s
func (S) M(ctx context.Context, id string, x R) error { return nil }
`, []string{
			`11:12: key: idd is not a parameter of S.M; did you mean "id"?`,
			`11:21: method Key in a key is called with arguments: only methods without arguments are allowed`,
		}},
		{"an unknown option next to resolver mistakes", `//idem:key=idd tll=1s lease=0s
func (S) M(ctx context.Context, id string) (chan int, error) { return nil, nil }
`, []string{
			`11:12: key: idd is not a parameter of S.M; did you mean "id"?`,
			`11:16: unknown option "tll"; did you mean "ttl"?`,
			`11:29: lease must be positive, not 0s`,
			`12:10: method S.M: result type chan int cannot round-trip through the JSON codec: chan int is a channel: JSON cannot encode it; if the executor has a codec that carries it (idem.WithCodec), say so with codec=custom`,
		}},
		{"a malformed budget and a bad key", `//idem:key=nope retries=x timeout=2s
func (S) M(ctx context.Context, id string) error { return nil }
`, []string{
			`11:12: key: nope is not a parameter of S.M (parameters: ctx, id)`,
			`11:25: malformed retries=x: want a whole number like 3`,
		}},
		{"a malformed codec keeps the result unchecked", `//idem:key=idd ttl=1s codec=custon
func (S) M(ctx context.Context, id string) (chan int, error) { return nil, nil }
`, []string{
			`11:12: key: idd is not a parameter of S.M; did you mean "id"?`,
			`11:29: malformed codec=custon: want json (the default, checked by idemgen) or custom (a codec set with idem.WithCodec)`,
		}},
		{"two lines of one method", `//idem:key=idd
//idem:ttl=1x lease=2s inflight=wait
func (S) M(ctx context.Context, id string) error { return nil }
`, []string{
			`11:12: key: idd is not a parameter of S.M; did you mean "id"?`,
			`12:12: malformed duration ttl=1x: want a Go duration like 500ms, 2m30s or 72h, optionally with leading days like 7d or 1d12h`,
			`12:33: inflight=wait needs a duration: inflight=wait:3s`,
		}},
		{"defaults with a mistake, and the method's own", `//idem:defaults ttl=1q
type D struct{}

//idem:key=idd
func (D) M(ctx context.Context, id string) error { return nil }
`, []string{
			`11:21: malformed duration ttl=1q: want a Go duration like 500ms, 2m30s or 72h, optionally with leading days like 7d or 1d12h`,
			`14:12: key: idd is not a parameter of D.M; did you mean "id"?`,
		}},
		{"an unterminated literal cuts the line, not the key before it", `//idem:key=idd ttl=1s final="x
func (S) M(ctx context.Context, id string) error { return nil }
`, []string{
			`11:12: key: idd is not a parameter of S.M; did you mean "id"?`,
			`11:29: string literal not terminated`,
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { wantErrors(t, tt.body, tt.want) })
	}
}
