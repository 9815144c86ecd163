package idemfiber

import (
	"math/rand/v2"
	"net"
	"net/url"
	"reflect"
	"strings"
	"testing"
)

// TestParseRequestURI: wherever parseRequestURI answers, it answers what
// url.ParseRequestURI does (the URL it builds is the same, field for
// field), for every byte in a path and in a query, and for random URIs
// over an alphabet of the bytes URLs treat specially; it answers for the
// plain paths and queries requests mostly have.
func TestParseRequestURI(t *testing.T) {
	var uris []string
	for b := range 256 {
		c := string([]byte{byte(b)})
		uris = append(uris, "/a"+c+"b", "/"+c, "/x?"+c, "/x?a="+c+"&b", c, c+"/", "/x"+c+"?q")
	}
	uris = append(uris, "", "/", "*", "/?", "/a?", "/a??", "/a?b?", "/a?b?c", "//host/p", "///p", "/a#f", "/a%2Fb", "/a%zz",
		"http://h/p?q", "/orders", "/orders/o-1?x=1&y=2", "/a/../b", "/a b", "/é")
	rng := rand.New(rand.NewPCG(3, 4))
	const alphabet = "/?#%:@!$&'()*+,;=aZ09-._~ \x00\x7f\xc3\xa9[]"
	for range 20000 {
		var b strings.Builder
		if rng.IntN(8) > 0 {
			b.WriteByte('/')
		}
		for range rng.IntN(12) {
			b.WriteByte(alphabet[rng.IntN(len(alphabet))])
		}
		uris = append(uris, b.String())
	}
	answered := 0
	for _, uri := range uris {
		var got url.URL
		if !parseRequestURI(uri, &got) {
			continue
		}
		answered++
		want, err := url.ParseRequestURI(uri)
		if err != nil {
			t.Fatalf("%q: parsed as %#v; url.ParseRequestURI refuses it: %v", uri, got, err)
		}
		if !reflect.DeepEqual(&got, want) {
			t.Fatalf("%q: parsed as %#v; url.ParseRequestURI: %#v", uri, got, *want)
		}
	}
	for _, uri := range []string{"/orders", "/orders/o-1", "/v1/orders/o_1.json?expand=items&x=a%20b", "/a?"} {
		var u url.URL
		if !parseRequestURI(uri, &u) {
			t.Errorf("%q: not parsed", uri)
		}
	}
	t.Logf("%d of %d URIs parsed here", answered, len(uris))
}

// TestAppendAddr: appendAddr writes what the address's String method
// returns, for IPv4, IPv4-mapped IPv6, IPv6, zoned, empty and malformed
// IPs and ports, and for an address that is not TCP.
func TestAppendAddr(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	ips := []net.IP{nil, {}, {1, 2, 3}, net.IPv4(127, 0, 0, 1), net.IPv4(127, 0, 0, 1).To4(), net.IPv6loopback, net.IPv6zero,
		net.ParseIP("2001:db8::1"), net.ParseIP("::ffff:10.0.0.1"), net.ParseIP("fe80::1:2:3:4")}
	for range 2000 {
		ip := make(net.IP, []int{4, 16}[rng.IntN(2)])
		for i := range ip {
			if rng.IntN(3) > 0 {
				ip[i] = byte(rng.IntN(256))
			}
		}
		ips = append(ips, ip)
	}
	for _, ip := range ips {
		for _, port := range []int{0, 1, 80, 65535, -1, 123456} {
			for _, zone := range []string{"", "eth0"} {
				a := &net.TCPAddr{IP: ip, Port: port, Zone: zone}
				if got, want := string(appendAddr(nil, a)), a.String(); got != want {
					t.Fatalf("%#v: %q, String %q", a, got, want)
				}
			}
		}
	}
	u := &net.UnixAddr{Name: "/tmp/s", Net: "unix"}
	if got := string(appendAddr([]byte("x"), u)); got != "x/tmp/s" {
		t.Errorf("unix: %q", got)
	}
}
