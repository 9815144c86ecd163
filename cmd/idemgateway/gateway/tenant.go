package gateway

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// tenantKey is the context key of the tenant a verified JWT names.
type tenantKey struct{}

// jwtVerifier verifies the bearer token of a request and names its
// tenant by a claim.
type jwtVerifier struct {
	key    any // []byte, *rsa.PublicKey, *ecdsa.PublicKey or ed25519.PublicKey
	parser *jwt.Parser
	claim  string
}

// newJWTVerifier loads the verification key named by the config: an HMAC
// secret, or a PEM public key (RSA, ECDSA or Ed25519, as PKIX "PUBLIC
// KEY", "RSA PUBLIC KEY" or a certificate). Only the algorithms of that
// key's family are accepted, so that a token cannot choose another (an
// HS256 token signed with the public key's bytes, or "none").
func newJWTVerifier(c *config, now func() time.Time) (*jwtVerifier, error) {
	v := &jwtVerifier{claim: c.jwtClaim}
	var methods []string
	if c.jwtHMACFile != "" {
		secret, err := readFile("jwt-hmac-secret-file", c.jwtHMACFile)
		if err != nil {
			return nil, err
		}
		secret = bytes.TrimRight(secret, "\r\n")
		if len(secret) < 32 {
			return nil, fmt.Errorf("-jwt-hmac-secret-file (%s): the secret is %d bytes; HMAC-SHA256 needs at least 32 (RFC 7518 section 3.2)",
				envName("jwt-hmac-secret-file"), len(secret))
		}
		v.key, methods = secret, []string{"HS256", "HS384", "HS512"}
	} else {
		b, err := readFile("jwt-public-key-file", c.jwtPublicFile)
		if err != nil {
			return nil, err
		}
		if v.key, methods, err = parsePublicKey(b); err != nil {
			return nil, fmt.Errorf("-jwt-public-key-file (%s): %w", envName("jwt-public-key-file"), err)
		}
	}
	opts := []jwt.ParserOption{jwt.WithValidMethods(methods), jwt.WithTimeFunc(now), jwt.WithLeeway(30 * time.Second), jwt.WithJSONNumber(),
		jwt.WithExpirationRequired()}
	if c.jwtIssuer != "" {
		opts = append(opts, jwt.WithIssuer(c.jwtIssuer))
	}
	if c.jwtAudience != "" {
		opts = append(opts, jwt.WithAudience(c.jwtAudience))
	}
	v.parser = jwt.NewParser(opts...)
	return v, nil
}

func parsePublicKey(b []byte) (any, []string, error) {
	block, _ := pem.Decode(b)
	if block == nil {
		return nil, nil, errors.New("no PEM block")
	}
	var key any
	var err error
	switch block.Type {
	case "PUBLIC KEY":
		key, err = x509.ParsePKIXPublicKey(block.Bytes)
	case "RSA PUBLIC KEY":
		key, err = x509.ParsePKCS1PublicKey(block.Bytes)
	case "CERTIFICATE":
		var cert *x509.Certificate
		if cert, err = x509.ParseCertificate(block.Bytes); err == nil {
			key = cert.PublicKey
		}
	default:
		return nil, nil, fmt.Errorf("a PEM block of type %q: want PUBLIC KEY, RSA PUBLIC KEY or CERTIFICATE (a public key, never a private one)", block.Type)
	}
	if err != nil {
		return nil, nil, err
	}
	switch key.(type) {
	case *rsa.PublicKey:
		return key, []string{"RS256", "RS384", "RS512", "PS256", "PS384", "PS512"}, nil
	case *ecdsa.PublicKey:
		return key, []string{"ES256", "ES384", "ES512"}, nil
	case ed25519.PublicKey:
		return key, []string{"EdDSA"}, nil
	}
	return nil, nil, fmt.Errorf("a %T key: want RSA, ECDSA or Ed25519", key)
}

// tenant verifies r's bearer token and returns the tenant its claim names.
func (v *jwtVerifier) tenant(r *http.Request) (string, error) {
	auth := r.Header.Get("Authorization")
	scheme, token, ok := strings.Cut(auth, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || strings.TrimSpace(token) == "" {
		return "", errors.New("no bearer token (Authorization: Bearer <JWT>)")
	}
	claims := jwt.MapClaims{}
	if _, err := v.parser.ParseWithClaims(strings.TrimSpace(token), claims, func(*jwt.Token) (any, error) { return v.key, nil }); err != nil {
		return "", err
	}
	switch t := claims[v.claim].(type) {
	case string:
		if t != "" {
			return t, nil
		}
	case json.Number:
		return t.String(), nil
	}
	return "", fmt.Errorf("the token has no claim %q that is a non-empty string or a number", v.claim)
}

// middleware answers 401 to a request whose token does not verify, and
// puts the tenant of one that does in its context (tenantFromContext).
func (v *jwtVerifier) middleware(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tenant, err := v.tenant(r)
		if err != nil {
			w.Header().Set("WWW-Authenticate", `Bearer error="invalid_token"`)
			writeProblem(w, http.StatusUnauthorized, "invalid-token", "Bearer token not accepted",
				"The gateway scopes Idempotency-Keys by the tenant of a verified JWT, and this request's token was not accepted: "+err.Error()+". Nothing was processed.")
			return
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), tenantKey{}, tenant)))
	})
}

func tenantFromContext(r *http.Request) string {
	t, _ := r.Context().Value(tenantKey{}).(string)
	return t
}

// writeProblem writes an RFC 9457 problem of the gateway's own.
func writeProblem(w http.ResponseWriter, status int, rule, title, detail string) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{
		"type": "https://github.com/idemgen/idemgen/blob/main/docs/GATEWAY.md#" + rule, "title": title, "status": status, "detail": detail,
	})
}
