package stress

import (
	"bytes"
	"context"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
)

// PGReplica is a PostgreSQL primary with one streaming standby, started by
// scripts/pg-replica.sh in a directory of the harness's own, so that it may
// kill the primary and promote the standby.
type PGReplica struct {
	// DSN names both servers, primary first, with
	// target_session_attrs=read-write: pgx keeps the first that accepts
	// writes, so a pool on it follows the promotion.
	DSN string
	// PrimaryDSN and StandbyDSN name one server each.
	PrimaryDSN, StandbyDSN string
	// Mode is the primary's replication: async, sync or remote_apply.
	Mode string

	dir, script string
	ports       []string

	mu sync.Mutex
}

// StartPGReplica starts a primary and its standby in mode (async, sync or
// remote_apply; scripts/pg-replica.sh start).
func StartPGReplica(ctx context.Context, mode string) (*PGReplica, error) {
	if _, err := pgBin(); err != nil {
		return nil, err
	}
	script, err := repoFile("scripts/pg-replica.sh")
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "idem-failover-pg-")
	if err != nil {
		return nil, err
	}
	if err := os.Chmod(dir, 0o755); err != nil { // the postgres user runs the servers when we are root
		return nil, err
	}
	s := &PGReplica{Mode: mode, dir: dir, script: script}
	out, err := s.run(ctx, "start", mode)
	if err != nil {
		s.Stop()
		return nil, err
	}
	for _, line := range strings.Split(out, "\n") {
		k, v, _ := strings.Cut(strings.TrimSpace(line), "=")
		switch k {
		case "IDEM_PG_DSN":
			s.DSN = v
		case "IDEM_PG_PRIMARY_DSN":
			s.PrimaryDSN = v
		case "IDEM_PG_STANDBY_DSN":
			s.StandbyDSN = v
		}
	}
	for _, d := range []string{s.PrimaryDSN, s.StandbyDSN} {
		if u, err := url.Parse(d); err == nil {
			s.ports = append(s.ports, u.Port())
		}
	}
	if b, err := os.ReadFile(filepath.Join(dir, "proxy.port")); err == nil {
		s.ports = append(s.ports, strings.TrimSpace(string(b)))
	}
	if s.DSN == "" || s.PrimaryDSN == "" || s.StandbyDSN == "" {
		s.Stop()
		return nil, fmt.Errorf("scripts/pg-replica.sh start printed %q", out)
	}
	return s, nil
}

func (s *PGReplica) run(ctx context.Context, args ...string) (string, error) {
	args = append([]string{args[0], s.dir}, args[1:]...)
	// A failover must finish even if the storm's context ends meanwhile.
	cmd := exec.CommandContext(context.WithoutCancel(ctx), s.script, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("scripts/pg-replica.sh %s: %w\n%s", args[0], err, stderr.String())
	}
	return strings.TrimSpace(stdout.String()), nil
}

// CatchUp returns once the standby has received (and flushed) every WAL
// record the primary had written when it was called.
func (s *PGReplica) CatchUp(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, err := s.run(ctx, "catchup")
	return err
}

// Lag stops the proxy the standby streams through (SIGSTOP): nothing the
// primary commits from now on reaches the standby. An asynchronous primary goes on
// acknowledging commits (the unreplicated window); a synchronous one makes
// them wait.
func (s *PGReplica) Lag(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, err := s.run(ctx, "lag")
	return err
}

// Kill SIGKILLs the primary's process group: the postmaster and every
// backend at once.
func (s *PGReplica) Kill(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, err := s.run(ctx, "kill")
	return err
}

// Promote promotes the standby (killing the primary first if it lives) and
// returns once it accepts writes.
func (s *PGReplica) Promote(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, err := s.run(ctx, "promote")
	return err
}

// Stop kills both servers (scripts/pg-replica.sh stop) and removes the
// directory.
func (s *PGReplica) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, _ = s.run(context.Background(), "stop")
	_ = os.RemoveAll(s.dir)
	for _, p := range s.ports {
		releasePort(p)
	}
}

// Log returns the tail of both servers' logs (for a failed run's report).
func (s *PGReplica) Log() string {
	var b strings.Builder
	for _, n := range []string{"primary", "standby"} {
		data, _ := os.ReadFile(filepath.Join(s.dir, n, "postgres.log"))
		lines := strings.Split(strings.TrimSpace(string(data)), "\n")
		fmt.Fprintf(&b, "== %s\n%s\n", n, strings.Join(lines[max(0, len(lines)-20):], "\n"))
	}
	return b.String()
}
