package gateway

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/idemgen/idemgen/runtime/idemhttp"
)

// jwtNow is the JWT clock of these tests: tokens are judged at this
// instant, whatever the wall clock says.
var jwtNow = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

func writeFile(t *testing.T, name string, b []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func publicPEM(t *testing.T, pub crypto.PublicKey) []byte {
	t.Helper()
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})
}

func sign(t *testing.T, method jwt.SigningMethod, key any, claims jwt.MapClaims) string {
	t.Helper()
	s, err := jwt.NewWithClaims(method, claims).SignedString(key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestJWTTenant: with a verification key, the tenant is a claim of the
// bearer token, verified by HMAC, RSA, ECDSA or Ed25519: two tenants with
// one key are two charges, and a token that does not verify (another key,
// expired, without an expiry, not yet valid, another issuer or audience,
// an algorithm of another family, "none", no claim) is answered 401 and charges nothing. Requests that
// need no key are not checked: the backend authenticates them.
func TestJWTTenant(t *testing.T) {
	rsaKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	ecKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	edPub, edKey, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	otherEC, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	secret := []byte("0123456789abcdef0123456789abcdef-gateway")
	rsaPEM := publicPEM(t, &rsaKey.PublicKey)

	for _, tc := range []struct {
		name   string
		flag   string
		file   []byte
		method jwt.SigningMethod
		key    any
	}{
		{"HMAC", "-jwt-hmac-secret-file", append(append([]byte{}, secret...), '\n'), jwt.SigningMethodHS256, secret},
		{"RSA", "-jwt-public-key-file", rsaPEM, jwt.SigningMethodRS256, rsaKey},
		{"RSA-PSS", "-jwt-public-key-file", rsaPEM, jwt.SigningMethodPS384, rsaKey},
		{"ECDSA", "-jwt-public-key-file", publicPEM(t, &ecKey.PublicKey), jwt.SigningMethodES256, ecKey},
		{"Ed25519", "-jwt-public-key-file", publicPEM(t, edPub), jwt.SigningMethodEdDSA, edKey},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := newChargeBackend(t)
			g := startGateway(t, deps{now: func() time.Time { return jwtNow }}, "-store", "memory", "-upstream", b.srv.URL,
				tc.flag, writeFile(t, "key", tc.file), "-jwt-claim", "acct", "-jwt-issuer", "https://auth.example", "-jwt-audience", "payments")
			claims := func(acct string, mod func(jwt.MapClaims)) jwt.MapClaims {
				c := jwt.MapClaims{"acct": acct, "iss": "https://auth.example", "aud": "payments", "exp": jwtNow.Add(time.Hour).Unix()}
				if mod != nil {
					mod(c)
				}
				return c
			}
			bearer := func(tok string) []string { return []string{"Authorization", "Bearer " + tok} }
			acme := sign(t, tc.method, tc.key, claims("acme", nil))
			globex := sign(t, tc.method, tc.key, claims("globex", nil))
			key := idemhttp.GenerateKey()
			mustPost(t, g.url(""), key, `{}`, bearer(acme)...)
			resp, _ := mustPost(t, g.url(""), key, `{}`, bearer(acme)...)
			if resp.Header.Get(idemhttp.ReplayedHeader) != "true" {
				t.Fatalf("the retry was not replayed: %d %v", resp.StatusCode, resp.Header)
			}
			mustPost(t, g.url(""), key, `{}`, bearer(globex)...)
			b.wantCharges(t, 2)

			refused := map[string]string{
				"no token":         "",
				"another key":      sign(t, jwt.SigningMethodES256, otherEC, claims("acme", nil)),
				"expired":          sign(t, tc.method, tc.key, claims("acme", func(c jwt.MapClaims) { c["exp"] = jwtNow.Add(-time.Hour).Unix() })),
				"another issuer":   sign(t, tc.method, tc.key, claims("acme", func(c jwt.MapClaims) { c["iss"] = "https://evil.example" })),
				"another audience": sign(t, tc.method, tc.key, claims("acme", func(c jwt.MapClaims) { c["aud"] = "orders" })),
				"no claim":         sign(t, tc.method, tc.key, claims("", nil)),
				"no expiry":        sign(t, tc.method, tc.key, claims("acme", func(c jwt.MapClaims) { delete(c, "exp") })),
				"not yet valid":    sign(t, tc.method, tc.key, claims("acme", func(c jwt.MapClaims) { c["nbf"] = jwtNow.Add(time.Hour).Unix() })),
				"alg none":         sign(t, jwt.SigningMethodNone, jwt.UnsafeAllowNoneSignatureType, claims("acme", nil)),
				// The public key's PEM as an HMAC secret: refused, the
				// key's family fixes the algorithms.
				"HS256 with the public key as secret": sign(t, jwt.SigningMethodHS256, tc.file, claims("acme", nil)),
			}
			if tc.name == "HMAC" {
				refused["HS256 with the public key as secret"] = sign(t, jwt.SigningMethodHS256, []byte("another secret of 32 bytes or more!!"), claims("acme", nil))
			}
			for what, tok := range refused {
				hdr := bearer(tok)
				if tok == "" {
					hdr = nil
				}
				resp, body := mustPost(t, g.url(""), idemhttp.GenerateKey(), `{}`, hdr...)
				if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(body, "invalid-token") ||
					resp.Header.Get("WWW-Authenticate") != `Bearer error="invalid_token"` {
					t.Errorf("%s: %d %s, want 401 invalid-token", what, resp.StatusCode, body)
				}
			}
			b.wantCharges(t, 2)
			// A GET needs no key, and is not checked here.
			if resp, err := http.Get(g.url("/charges")); err != nil || resp.StatusCode != 200 {
				t.Fatalf("GET: %v %v", resp, err)
			}
		})
	}
}

// TestJWTKeyFiles: key files the gateway cannot use are refused at start,
// naming the flag.
func TestJWTKeyFiles(t *testing.T) {
	rsaKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	private := pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(rsaKey)})
	pkcs1 := pem.EncodeToMemory(&pem.Block{Type: "RSA PUBLIC KEY", Bytes: x509.MarshalPKCS1PublicKey(&rsaKey.PublicKey)})
	for _, tc := range []struct {
		name, flag string
		file       []byte
		want       string // "" means accepted
	}{
		{"short secret", "-jwt-hmac-secret-file", []byte("short\n"), "the secret is 5 bytes; HMAC-SHA256 needs at least 32"},
		{"not PEM", "-jwt-public-key-file", []byte("hello"), "-jwt-public-key-file (IDEMGW_JWT_PUBLIC_KEY_FILE): no PEM block"},
		{"a private key", "-jwt-public-key-file", private, `a PEM block of type "RSA PRIVATE KEY"`},
		{"PKCS#1 public key", "-jwt-public-key-file", pkcs1, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := parseConfig([]string{"-upstream", "http://127.0.0.1:1", "-store", "memory", tc.flag, writeFile(t, "k", tc.file)},
				func(string) string { return "" }, nil)
			if err != nil {
				t.Fatal(err)
			}
			_, err = newJWTVerifier(c, time.Now)
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("%v, want an error containing %q", err, tc.want)
			}
		})
	}
}
