package stress

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/idemgen/idemgen/internal/freeport"
)

// ErrMissingServer is wrapped by the error of a scenario that needs a server
// binary (redis-server, PostgreSQL's pg_ctl) that is not installed. Tests skip
// on it, except under CI=true, where it is a failure.
var ErrMissingServer = errors.New("server binary not found")

// The servers below are the harness's own: it starts them, so it may kill
// and restart them. It never signals a process it did not start.

// RedisServer is a redis-server process the harness started, on a free port
// of 127.0.0.1, without persistence (so a restart loses every record, as a
// failover to a replica that had not received them would).
type RedisServer struct {
	bin, dir string
	port     int

	mu      sync.Mutex
	cmd     *exec.Cmd
	done    chan struct{}
	stopped bool // Stop was called: a restart still in flight must not leave a server behind
}

// StartRedis starts a redis-server of the harness's own.
func StartRedis(ctx context.Context) (*RedisServer, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, fmt.Errorf("redis-server: %w (install redis-server, or run under scripts/with-services.sh, which installs it)", ErrMissingServer)
	}
	dir, err := os.MkdirTemp("", "idem-stress-redis-")
	if err != nil {
		return nil, err
	}
	s := &RedisServer{bin: bin, dir: dir}
	for range 3 {
		if s.port, err = freePort(); err != nil {
			break
		}
		if err = s.start(ctx); err == nil {
			return s, nil
		}
		freeport.Release(s.port)
	}
	_ = os.RemoveAll(dir)
	return nil, err
}

// Addr is host:port.
func (s *RedisServer) Addr() string { return "127.0.0.1:" + strconv.Itoa(s.port) }

func (s *RedisServer) start(ctx context.Context) error {
	log, err := os.OpenFile(filepath.Join(s.dir, "redis.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer log.Close()
	// Not exec.CommandContext: the server must outlive the context of the
	// call that (re)starts it; Stop ends it.
	cmd := exec.Command(s.bin, "--port", strconv.Itoa(s.port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", s.dir, "--daemonize", "no")
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("redis-server: %w", err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	s.mu.Lock()
	if s.stopped {
		s.mu.Unlock()
		_ = cmd.Process.Signal(syscall.SIGKILL)
		<-done
		return errors.New("redis-server: stopped")
	}
	s.cmd, s.done = cmd, done
	s.mu.Unlock()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-done:
			return fmt.Errorf("redis-server on port %d exited at start (see %s/redis.log)", s.port, s.dir)
		case <-ctx.Done():
			s.Kill()
			return ctx.Err()
		default:
		}
		if redisPing(s.Addr()) {
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	s.Kill()
	return fmt.Errorf("redis-server on port %d did not answer PING", s.port)
}

// Kill SIGKILLs the server (its records are lost: there is no persistence)
// and waits until it is gone.
func (s *RedisServer) Kill() {
	s.mu.Lock()
	cmd, done := s.cmd, s.done
	s.cmd = nil
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGKILL)
	<-done
}

// Restart starts the server again on the same port, after Kill.
func (s *RedisServer) Restart(ctx context.Context) error {
	s.mu.Lock()
	running := s.cmd != nil
	s.mu.Unlock()
	if running { // never start a second server on the port of a live one
		return nil
	}
	var err error
	for range 50 { // the port may linger a moment after the kill
		if err = s.start(ctx); err == nil || ctx.Err() != nil || s.isStopped() {
			return err
		}
		time.Sleep(50 * time.Millisecond)
	}
	return err
}

// Stop ends the server and removes its directory. A Restart that races
// with it (a fault injector still running) cannot leave a server behind.
func (s *RedisServer) Stop() {
	s.mu.Lock()
	s.stopped = true
	s.mu.Unlock()
	s.Kill()
	_ = os.RemoveAll(s.dir)
	freeport.Release(s.port)
}

func redisPing(addr string) bool {
	c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
	if err != nil {
		return false
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return false
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	return err == nil && strings.HasPrefix(line, "+PONG")
}

// freePort is a port below the kernel's ephemeral range (freeport.Pick),
// so that no outgoing connection takes it while Restart has the server
// down.
func freePort() (int, error) { return freeport.Pick(0) }

// PGServer is a PostgreSQL server the harness started with scripts/pg.sh in
// a directory of its own (DIR/pgdata, socket and log in DIR, the
// postmaster's PID in DIR/pg.pid), so that it may restart it.
type PGServer struct {
	DSN       string
	dir, bin  string
	script    string
	port      string
	asPostgre bool

	// mu is held through a Restart, so that Stop waits for a restart in
	// flight instead of racing it (and leaving a server behind).
	mu sync.Mutex
}

// StartPG starts a PostgreSQL server of the harness's own (scripts/pg.sh
// start, into a fresh directory under the system's temporary directory, which
// the postgres user can reach).
func StartPG(ctx context.Context) (*PGServer, error) {
	bin, err := pgBin()
	if err != nil {
		return nil, err
	}
	script, err := repoFile("scripts/pg.sh")
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "idem-stress-pg-")
	if err != nil {
		return nil, err
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		return nil, err
	}
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, script, "start", dir)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		s := &PGServer{dir: dir, script: script}
		s.Stop()
		return nil, fmt.Errorf("scripts/pg.sh start: %w\n%s", err, stderr.String())
	}
	line := strings.TrimSpace(string(out))
	dsn, ok := strings.CutPrefix(line, "IDEM_PG_DSN=")
	if !ok {
		return nil, fmt.Errorf("scripts/pg.sh start printed %q", line)
	}
	s := &PGServer{DSN: dsn, dir: dir, bin: bin, script: script, asPostgre: os.Getuid() == 0}
	host, _, _ := strings.Cut(strings.SplitN(dsn, "@", 2)[1], "/")
	_, s.port, _ = net.SplitHostPort(host)
	return s, nil
}

// Restart stops the server with a fast shutdown (sessions are terminated,
// open transactions rolled back), waits outage, and starts it again on the
// same data directory and port. It waits until the server accepts
// connections again.
func (s *PGServer) Restart(ctx context.Context, outage time.Duration) error {
	return s.RestartCalling(ctx, outage, nil)
}

// RestartCalling is Restart, calling down (when not nil) once the server
// has stopped.
func (s *PGServer) RestartCalling(ctx context.Context, outage time.Duration, down func()) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.pgCtl(ctx, "-D", s.data(), "-m", "fast", "-w", "-t", "30", "stop"); err != nil {
		return fmt.Errorf("pg_ctl stop: %w", err)
	}
	if down != nil {
		down()
	}
	time.Sleep(outage)
	return s.start(ctx)
}

func (s *PGServer) start(ctx context.Context) error {
	opts := "-c listen_addresses=127.0.0.1 -p " + s.port + " -k " + s.dir + " -c fsync=off -c synchronous_commit=off" +
		" -c full_page_writes=off -c max_connections=200 -c shared_buffers=128MB"
	if err := s.pgCtl(ctx, "-D", s.data(), "-l", filepath.Join(s.dir, "postgres.log"), "-w", "-t", "60", "-o", opts, "start"); err != nil {
		return fmt.Errorf("pg_ctl start: %w", err)
	}
	// Keep DIR/pg.pid current for scripts/pg.sh stop's fallback.
	if b, err := os.ReadFile(filepath.Join(s.data(), "postmaster.pid")); err == nil {
		pid, _, _ := strings.Cut(string(b), "\n")
		_ = os.WriteFile(filepath.Join(s.dir, "pg.pid"), []byte(pid+"\n"), 0o644)
	}
	return nil
}

func (s *PGServer) data() string { return filepath.Join(s.dir, "pgdata") }

func (s *PGServer) pgCtl(ctx context.Context, args ...string) error {
	name := filepath.Join(s.bin, "pg_ctl")
	if s.asPostgre { // pg_ctl refuses root; pg.sh ran the server as postgres
		args = append([]string{"-u", "postgres", "--", name}, args...)
		name = "runuser"
	}
	// The restart must finish even if the storm's context ends meanwhile.
	cmd := exec.CommandContext(context.WithoutCancel(ctx), name, args...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("%w: %s", err, strings.TrimSpace(string(out)))
	}
	return nil
}

// Stop stops the server (scripts/pg.sh stop) and removes its directory.
func (s *PGServer) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	cmd := exec.Command(s.script, "stop", s.dir)
	_ = cmd.Run()
	_ = os.RemoveAll(s.dir)
	releasePort(s.port)
}

// releasePort ends this process's reservation of a port scripts/*.sh
// picked for it (lib.sh's free_ports reserves for the script's parent).
func releasePort(port string) {
	if p, err := strconv.Atoi(port); err == nil {
		freeport.Release(p)
	}
}

// pgBin finds the directory of pg_ctl the way scripts/pg.sh does: $PG_BIN,
// the newest /usr/lib/postgresql/*/bin, then $PATH.
func pgBin() (string, error) {
	if d := os.Getenv("PG_BIN"); d != "" {
		if _, err := os.Stat(filepath.Join(d, "pg_ctl")); err == nil {
			return d, nil
		}
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	slices.SortFunc(dirs, func(a, b string) int {
		va, _ := strconv.Atoi(filepath.Base(filepath.Dir(a)))
		vb, _ := strconv.Atoi(filepath.Base(filepath.Dir(b)))
		return vb - va
	})
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "initdb")); err == nil {
			if _, err := os.Stat(filepath.Join(d, "pg_ctl")); err == nil {
				return d, nil
			}
		}
	}
	if p, err := exec.LookPath("pg_ctl"); err == nil {
		return filepath.Dir(p), nil
	}
	return "", fmt.Errorf("PostgreSQL (pg_ctl, initdb): %w (install postgresql, or run `make test` once, which installs it)", ErrMissingServer)
}

// repoFile finds rel in the module's root, walking up from the working
// directory (go test runs in the package's directory, go run where it was
// started).
func repoFile(rel string) (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		p := filepath.Join(dir, rel)
		if _, err := os.Stat(p); err == nil {
			if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
				return p, nil
			}
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("%s not found above the working directory: run from the idemgen repository", rel)
		}
		dir = parent
	}
}

func (s *RedisServer) isStopped() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stopped
}
