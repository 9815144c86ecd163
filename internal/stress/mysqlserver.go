package stress

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// MySQLServer is a MariaDB server the harness started with
// scripts/mariadb.sh in a directory of its own (DIR/data, socket and log in
// DIR, the server's PID in DIR/mariadb.pid), so that it may kill and
// restart it.
type MySQLServer struct {
	// DSN is the go-sql-driver/mysql DSN of the server.
	DSN    string
	dir    string
	script string
	port   string

	mu sync.Mutex
}

// StartMySQL starts a MariaDB server of the harness's own
// (scripts/mariadb.sh start, which installs MariaDB when it is absent and
// this is root).
func StartMySQL(ctx context.Context) (*MySQLServer, error) {
	if _, err := exec.LookPath("mariadb-install-db"); err != nil && os.Getuid() != 0 {
		return nil, fmt.Errorf("MariaDB (mariadb-install-db): %w (install mariadb-server, or run `make test` once as root, which installs it)", ErrMissingServer)
	}
	script, err := repoFile("scripts/mariadb.sh")
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "idem-stress-mysql-")
	if err != nil {
		return nil, err
	}
	_ = os.Chmod(dir, 0o755) // the mysql user runs the server when we are root
	s := &MySQLServer{dir: dir, script: script}
	line, err := s.run(ctx, "start", nil)
	if err != nil {
		s.Stop()
		return nil, err
	}
	dsn, ok := strings.CutPrefix(line, "IDEM_MYSQL_DSN=")
	if !ok {
		s.Stop()
		return nil, fmt.Errorf("scripts/mariadb.sh start printed %q", line)
	}
	s.DSN = dsn
	_, rest, _ := strings.Cut(dsn, "tcp(127.0.0.1:")
	s.port, _, _ = strings.Cut(rest, ")")
	return s, nil
}

func (s *MySQLServer) run(ctx context.Context, verb string, env []string) (string, error) {
	// The restart must finish even if the storm's context ends meanwhile.
	cmd := exec.CommandContext(context.WithoutCancel(ctx), s.script, verb, filepath.Join(s.dir, "db"))
	cmd.Env = append(os.Environ(), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("scripts/mariadb.sh %s: %w\n%s", verb, err, stderr.String())
	}
	return strings.TrimSpace(stdout.String()), nil
}

// KillCalling kills the server (SIGKILL: a crash; InnoDB recovers its
// committed transactions on the next start), calls down (when not nil)
// once it is gone, waits outage, and starts it again on the same data
// directory and port. It waits until the server accepts connections again.
func (s *MySQLServer) KillCalling(ctx context.Context, outage time.Duration, down func()) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	b, err := os.ReadFile(filepath.Join(s.dir, "db", "mariadb.pid"))
	if err != nil {
		return fmt.Errorf("mariadb pid: %w", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return fmt.Errorf("mariadb pid %q", b)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		return fmt.Errorf("kill mariadbd %d: %w", pid, err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for syscall.Kill(pid, 0) == nil {
		if time.Now().After(deadline) {
			return errors.New("mariadbd did not die")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if down != nil {
		down()
	}
	time.Sleep(outage)
	if _, err := s.run(ctx, "start", []string{"MARIADB_PORT=" + s.port}); err != nil {
		return err
	}
	return nil
}

// Stop stops the server (scripts/mariadb.sh stop) and removes its directory.
func (s *MySQLServer) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, _ = s.run(context.Background(), "stop", nil)
	_ = os.RemoveAll(s.dir)
	releasePort(s.port)
}
