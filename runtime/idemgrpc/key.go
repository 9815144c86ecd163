package idemgrpc

import (
	"context"
	"strings"

	"google.golang.org/grpc/metadata"

	"github.com/idemgen/idemgen/runtime/idemhttp"
)

// MetadataKey is the metadata key that carries the idempotency key. Its
// value follows the rules of the HTTP Idempotency-Key header
// (idemhttp.ParseKey): 1 to 255 printable ASCII characters, bare or as a
// structured-field string, one value only.
const MetadataKey = "idempotency-key"

// ReplayedKey is set to "true" in the header metadata of every response
// replayed from the store.
const ReplayedKey = "idempotent-replayed"

// ParseKey returns the key carried by one idempotency-key metadata value,
// by the rules of the HTTP header (see idemhttp.ParseKey).
func ParseKey(v string) (string, error) { return idemhttp.ParseKey(v) }

// keyFromIncoming reads the key of an incoming call. ok is false when there
// is none; a non-nil problem says why a present key is refused.
func keyFromIncoming(ctx context.Context) (key string, ok bool, problem string) {
	md, _ := metadata.FromIncomingContext(ctx)
	vals := md.Get(MetadataKey)
	switch len(vals) {
	case 0:
		return "", false, ""
	case 1:
	default:
		return "", true, "the call has more than one idempotency-key metadata value; send exactly one"
	}
	k, err := ParseKey(vals[0])
	if err != nil {
		return "", true, "an idempotency-key is 1 to 255 printable ASCII characters, bare or as a structured-field string: " +
			strings.Replace(strings.TrimPrefix(err.Error(), "idemhttp: "), "Idempotency-Key", "idempotency-key", 1)
	}
	return k, true, ""
}
