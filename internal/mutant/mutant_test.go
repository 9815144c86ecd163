package mutant

import (
	"context"
	"testing"
)

func TestWithOnFrom(t *testing.T) {
	ctx := context.Background()
	for _, f := range All() {
		if On(ctx, f) {
			t.Fatalf("On(background, %v) = true", f)
		}
	}
	if From(ctx) != 0 || On(ctx, 0) {
		t.Fatal("a context without mutations reports some")
	}
	ctx = With(ctx, ReleaseAfterFinal)
	ctx = With(ctx, TakeoverWithoutFingerprint)
	if !On(ctx, ReleaseAfterFinal) || !On(ctx, TakeoverWithoutFingerprint) {
		t.Fatal("a switched-on mutation is off")
	}
	if On(ctx, CompleteWithoutFencing) || On(ctx, ReleaseAfterFinal|CompleteWithoutFencing) {
		t.Fatal("a mutation that was not switched on is on")
	}
	if got, want := From(ctx).String(), "release-after-final+takeover-without-fingerprint"; got != want {
		t.Fatalf("String = %q, want %q", got, want)
	}
	if got := Flag(0).String(); got != "none" {
		t.Fatalf("String of no mutation = %q", got)
	}
	if got := (LostCompleteReplyAsLeaseLost | 1<<20).String(); got != "lost-complete-reply-as-lease-lost+unknown" {
		t.Fatalf("String = %q", got)
	}
}
