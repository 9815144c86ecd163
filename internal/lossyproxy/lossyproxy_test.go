package lossyproxy_test

import (
	"bufio"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/idemgen/idemgen/internal/lossyproxy"
)

// counter is a request/response server: each line it reads is applied (the
// count goes up by one) and answered with the new count.
type counter struct {
	ln      net.Listener
	applied atomic.Int64
	wg      sync.WaitGroup
}

func startCounter(t *testing.T) *counter {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c := &counter{ln: ln}
	c.wg.Go(func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			c.wg.Go(func() {
				defer conn.Close()
				r := bufio.NewReader(conn)
				for {
					if _, err := r.ReadString('\n'); err != nil {
						return
					}
					n := c.applied.Add(1)
					if _, err := conn.Write([]byte(strings.Repeat("+", int(n)) + "\n")); err != nil {
						return
					}
				}
			})
		}
	})
	t.Cleanup(func() { _ = ln.Close(); c.wg.Wait() })
	return c
}

// call sends one request on a new connection and returns the reply, or the
// error that replaced it.
func call(t *testing.T, addr, req string) (string, error) {
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.Write([]byte(req + "\n")); err != nil {
		return "", err
	}
	return bufio.NewReader(conn).ReadString('\n')
}

func TestDropNextReply(t *testing.T) {
	srv := startCounter(t)
	p := lossyproxy.New(t, srv.ln.Addr().String())

	if got, err := call(t, p.Addr(), "inc"); err != nil || got != "+\n" {
		t.Fatalf("unarmed proxy: got %q, %v; want the reply", got, err)
	}
	p.DropNextReply()
	if got, err := call(t, p.Addr(), "inc"); err == nil {
		t.Fatalf("armed proxy delivered %q; want the connection closed", got)
	}
	if n := srv.applied.Load(); n != 2 {
		t.Fatalf("server applied %d requests, want 2: a dropped reply's request is applied", n)
	}
	if p.Dropped() != 1 || p.Pending() != 0 {
		t.Fatalf("Dropped %d Pending %d, want 1 and 0", p.Dropped(), p.Pending())
	}
	if got, err := call(t, p.Addr(), "inc"); err != nil || got != "+++\n" {
		t.Fatalf("after the drop: got %q, %v; want the next reply", got, err)
	}
}

func TestDropNextReplyTo(t *testing.T) {
	srv := startCounter(t)
	p := lossyproxy.New(t, srv.ln.Addr().String())
	p.DropNextReplyTo(func(req []byte) bool { return strings.HasPrefix(string(req), "complete") })

	conn, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	r := bufio.NewReader(conn)
	for _, req := range []string{"claim", "renew"} {
		if _, err := conn.Write([]byte(req + "\n")); err != nil {
			t.Fatal(err)
		}
		if _, err := r.ReadString('\n'); err != nil {
			t.Fatalf("%s: a request that does not match passes: %v", req, err)
		}
	}
	if _, err := conn.Write([]byte("complete\n")); err != nil {
		t.Fatal(err)
	}
	if got, err := r.ReadString('\n'); err == nil {
		t.Fatalf("matching request: got %q, want the reply dropped", got)
	}
	if n := srv.applied.Load(); n != 3 {
		t.Fatalf("server applied %d requests, want 3", n)
	}
	if p.Dropped() != 1 {
		t.Fatalf("Dropped %d, want 1", p.Dropped())
	}
}
