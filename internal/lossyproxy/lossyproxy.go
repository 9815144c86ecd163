// Package lossyproxy is a TCP proxy for tests that loses replies: it
// forwards a request to the real server, lets the server apply it, and
// closes the client's connection instead of delivering the reply. A client
// (go-redis, pgx) then sees a network error for an operation that was
// applied, and its retry, or its caller's, meets the applied operation: the
// "lost reply" that every idempotency store must survive.
//
// It suits request/response protocols where a client sends a request and
// waits for its reply before sending the next one on the same connection
// (Redis without pipelining, PostgreSQL's simple and extended query flows).
//
//	p := lossyproxy.New(t, redisAddr)
//	client := redis.NewClient(&redis.Options{Addr: p.Addr()})
//	p.DropNextReply() // the next request's reply is lost
package lossyproxy

import (
	"errors"
	"io"
	"net"
	"sync"
	"testing"
	"time"
)

// drainTimeout bounds how long a connection whose reply was dropped waits
// for the server to finish and close its side.
const drainTimeout = 30 * time.Second

// Proxy forwards connections from Addr to an upstream address, dropping the
// replies it is told to drop. It is safe for concurrent use.
type Proxy struct {
	t        testing.TB
	upstream string
	ln       net.Listener

	mu      sync.Mutex
	pending []func(request []byte) bool // armed drops, oldest first; nil matches any request
	dropped int
	conns   map[net.Conn]struct{}
	closed  bool

	wg sync.WaitGroup
}

// New starts a proxy on a free port of 127.0.0.1 in front of upstream
// (host:port). It stops, closing every connection, when t ends.
func New(t testing.TB, upstream string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("lossyproxy: listen: %v", err)
	}
	p := &Proxy{t: t, upstream: upstream, ln: ln, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.close)
	return p
}

// Addr returns the proxy's address (host:port), to give the client instead
// of the upstream's.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// DropNextReply arms one drop: the reply to the next request any client
// sends through the proxy is read from the server and discarded, and that
// client's connection is closed instead. Calling it n times drops the
// replies of the next n requests.
func (p *Proxy) DropNextReply() { p.DropNextReplyTo(nil) }

// DropNextReplyTo arms one drop for the next request for which match
// returns true (nil matches any request). match sees the bytes of one read
// from the client, which holds a whole request when the request is small
// (a Redis command, a PostgreSQL query); requests that do not match pass
// untouched.
func (p *Proxy) DropNextReplyTo(match func(request []byte) bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.pending = append(p.pending, match)
}

// Dropped returns how many replies the proxy has dropped so far.
func (p *Proxy) Dropped() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.dropped
}

// Pending returns how many armed drops have not happened yet.
func (p *Proxy) Pending() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.pending)
}

// take reports whether the reply to request must be dropped, disarming the
// drop that matched.
func (p *Proxy) take(request []byte) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, m := range p.pending {
		if m == nil || m(request) {
			p.pending = append(p.pending[:i], p.pending[i+1:]...)
			return true
		}
	}
	return false
}

func (p *Proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *Proxy) untrack(c net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.conns, c)
}

func (p *Proxy) close() {
	p.mu.Lock()
	p.closed = true
	_ = p.ln.Close()
	for c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		server, err := net.Dial("tcp", p.upstream)
		if err != nil {
			p.t.Logf("lossyproxy: dial %s: %v", p.upstream, err)
			_ = client.Close()
			continue
		}
		if !p.track(client) || !p.track(server) {
			_ = client.Close()
			_ = server.Close()
			return
		}
		p.wg.Add(1)
		go p.serve(client, server)
	}
}

// serve forwards one connection pair until either side ends.
func (p *Proxy) serve(client, server net.Conn) {
	defer p.wg.Done()
	defer p.untrack(client)
	defer p.untrack(server)
	defer client.Close()
	defer server.Close()

	drop := make(chan struct{}) // closed when the pending reply must be dropped
	var dropOnce sync.Once
	upDone := make(chan struct{})
	go func() {
		defer close(upDone)
		buf := make([]byte, 64<<10)
		for {
			n, err := client.Read(buf)
			if n > 0 {
				if p.take(buf[:n]) {
					dropOnce.Do(func() { close(drop) })
				}
				if _, werr := server.Write(buf[:n]); werr != nil {
					return
				}
			}
			if err != nil {
				// The client is gone: let the server finish what it
				// received, then see the end of the stream.
				if tc, ok := server.(*net.TCPConn); ok {
					_ = tc.CloseWrite()
				}
				return
			}
		}
	}()

	buf := make([]byte, 64<<10)
	for {
		n, err := server.Read(buf)
		if n > 0 {
			select {
			case <-drop:
				p.mu.Lock()
				p.dropped++
				p.mu.Unlock()
				_ = client.Close()
				<-upDone
				drain(server)
				return
			default:
			}
			if _, werr := client.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
				p.t.Logf("lossyproxy: read from %s: %v", p.upstream, err)
			}
			return
		}
	}
}

// drain reads and discards what the server still sends until it closes the
// connection (it has seen the end of the client's stream), so that every
// request it received is applied before the proxy hangs up.
func drain(server net.Conn) {
	_ = server.SetReadDeadline(time.Now().Add(drainTimeout))
	_, _ = io.Copy(io.Discard, server)
}
