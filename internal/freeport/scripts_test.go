package freeport_test

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemgen/idemgen/internal/freeport"
)

// takenLib is appended to a copy of scripts/lib.sh: the first free_ports
// call of a start hands out IDEM_TAKEN_PORT, a port a listener of the test
// holds, as if another server had taken it after the check.
const takenLib = `
eval "real_$(declare -f free_ports)"
free_ports() {
	if [ -n "${IDEM_TAKEN_PORT:-}" ] && mkdir "$IDEM_TAKEN_MARK" 2>/dev/null; then
		echo "$IDEM_TAKEN_PORT"
		if [ "$1" -gt 1 ]; then real_free_ports $(($1 - 1)) "${2:-0}" "${@:3}" "$IDEM_TAKEN_PORT"; fi
		return 0
	fi
	real_free_ports "$@"
}
`

// TestStartOnTakenPort: each server script, handed a port that another
// server took between the check and the bind, starts on another port
// instead of failing (CI failed scripts/redis-cluster.sh this way:
// "bind: Address already in use").
func TestStartOnTakenPort(t *testing.T) {
	src := scripts(t)
	shadow := t.TempDir()
	for _, name := range []string{"lib.sh", "pg.sh", "mariadb.sh", "redis.sh", "redis-cluster.sh"} {
		b, err := os.ReadFile(filepath.Join(src, name))
		require.NoError(t, err)
		if name == "lib.sh" {
			b = append(b, takenLib...)
		}
		require.NoError(t, os.WriteFile(filepath.Join(shadow, name), b, 0o755))
	}
	require.NoError(t, os.Chmod(shadow, 0o755))
	addr := regexp.MustCompile(`127\.0\.0\.1:(\d+)`)
	for _, tc := range []struct {
		script, bin string
		args        []string
	}{
		{"redis.sh", "redis-server", nil},
		{"redis-cluster.sh", "redis-cli", []string{"1", "1"}},
		{"pg.sh", "", nil},
		{"mariadb.sh", "", nil},
	} {
		t.Run(tc.script, func(t *testing.T) {
			t.Parallel()
			if !installed(tc.script) {
				msg := tc.script + ": its server is not installed (make test installs it)"
				if os.Getenv("CI") == "true" {
					t.Fatal(msg)
				}
				t.Skip(msg)
			}
			held, err := freeport.Pick(10000)
			require.NoError(t, err)
			l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(held))
			require.NoError(t, err)
			t.Cleanup(func() { _ = l.Close(); freeport.Release(held, held+10000) })

			// The postgres and mysql users must reach the directory.
			dir, err := os.MkdirTemp("", "idem-freeport-")
			require.NoError(t, err)
			require.NoError(t, os.Chmod(dir, 0o755))
			script := filepath.Join(shadow, tc.script)
			t.Cleanup(func() {
				_ = exec.Command(script, "stop", dir).Run()
				_ = os.RemoveAll(dir)
			})
			cmd := exec.Command(script, append([]string{"start", dir}, tc.args...)...)
			cmd.Env = append(os.Environ(), "IDEM_TAKEN_PORT="+strconv.Itoa(held), "IDEM_TAKEN_MARK="+filepath.Join(dir, "taken"))
			out, err := cmd.Output()
			var stderr []byte
			if ee, ok := err.(*exec.ExitError); ok {
				stderr = ee.Stderr
			}
			require.NoError(t, err, "%s start on a taken port:\n%s", tc.script, stderr)
			_, err = os.Stat(filepath.Join(dir, "taken"))
			require.NoError(t, err, "the script was not handed the taken port")
			ms := addr.FindAllStringSubmatch(string(out), -1)
			require.NotEmpty(t, ms, "%s printed %q", tc.script, out)
			for _, m := range ms {
				p, _ := strconv.Atoi(m[1])
				assert.NotEqual(t, held, p, "%s printed the taken port: %q", tc.script, out)
				c, err := net.Dial("tcp", m[0])
				if assert.NoError(t, err, "nothing listens on %s", m[0]) {
					_ = c.Close()
				}
			}
		})
	}
}

// installed reports whether the server a script starts is installed (the
// scripts install it themselves only as root).
func installed(script string) bool {
	look := func(names ...string) bool {
		for _, n := range names {
			if _, err := exec.LookPath(n); err == nil {
				return true
			}
		}
		return false
	}
	switch script {
	case "pg.sh":
		m, _ := filepath.Glob("/usr/lib/postgresql/*/bin/initdb")
		return len(m) > 0 || look("initdb")
	case "mariadb.sh":
		_, err := os.Stat("/usr/sbin/mariadbd")
		return err == nil || look("mariadbd", "mysqld")
	default:
		return look("redis-server") && look("redis-cli")
	}
}

// TestAptInstallConcurrent: three installs at once (with-services.sh starts
// its servers at once, and each script installs its server when it is
// missing) all succeed: without lib.sh's lock, two of three apt-gets fail
// on dpkg's lock. The package is one make test has installed already, so
// nothing changes on the machine (aptConfig: no network either).
func TestAptInstallConcurrent(t *testing.T) {
	conf := aptConfig(t)
	lib := filepath.Join(scripts(t), "lib.sh")
	errs := make(chan error, 3)
	for range 3 {
		go func() {
			cmd := exec.Command("bash", "-c", `die() { echo "$*" >&2; exit 1; }; . "$1"; apt_install redis-server`, "bash", lib)
			cmd.Env = append(os.Environ(), "APT_CONFIG="+conf)
			out, err := cmd.CombinedOutput()
			if err != nil {
				err = fmt.Errorf("%w\n%s", err, out)
			}
			errs <- err
		}()
	}
	for range 3 {
		assert.NoError(t, <-errs)
	}
}

// TestAptInstallWaitsForLock: apt_install waits for the install lock
// (/tmp/idemgen-apt.lock) before its apt-get update, whose lists lock
// apt-get does not wait for (DPkg::Lock::Timeout covers dpkg's lock only:
// three plain `apt-get update` at once fail two of three), and runs once
// the lock is free. apt is pointed at the test's own empty lists.
func TestAptInstallWaitsForLock(t *testing.T) {
	conf := aptConfig(t)
	f, err := os.OpenFile("/tmp/idemgen-apt.lock", os.O_CREATE|os.O_RDWR, 0o644)
	require.NoError(t, err)
	defer f.Close()
	require.NoError(t, syscall.Flock(int(f.Fd()), syscall.LOCK_EX))
	cmd := exec.Command("bash", "-c", `die() { echo "$*" >&2; exit 1; }; . "$1"; apt_install redis-server`, "bash", filepath.Join(scripts(t), "lib.sh"))
	cmd.Env = append(os.Environ(), "APT_CONFIG="+conf)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	require.NoError(t, cmd.Start())
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		t.Fatalf("apt_install ran while another install held the lock: %v\n%s", err, out.String())
	case <-time.After(time.Second): // a blocked install stays blocked, however loaded the machine
	}
	require.NoError(t, syscall.Flock(int(f.Fd()), syscall.LOCK_UN))
	require.NoError(t, <-done, "%s", out.String())
}

// aptConfig writes an APT_CONFIG that points apt at no sources and at
// package lists and a cache of the test's own: no network, and the
// machine's lists are left alone. dpkg's lock is still the machine's. It
// skips the test unless this is root, with apt-get and redis-server (the
// package the tests install again, which changes nothing).
func aptConfig(t *testing.T) string {
	t.Helper()
	if os.Getuid() != 0 {
		t.Skip("apt_install installs as root only")
	}
	if _, err := exec.LookPath("apt-get"); err != nil {
		t.Skip("no apt-get")
	}
	if !installed("redis.sh") {
		t.Skip("redis-server is not installed")
	}
	apt := t.TempDir()
	for _, d := range []string{"sources.list.d", "lists/partial", "cache/archives/partial"} {
		require.NoError(t, os.MkdirAll(filepath.Join(apt, d), 0o755))
	}
	require.NoError(t, os.WriteFile(filepath.Join(apt, "sources.list"), nil, 0o644))
	conf := filepath.Join(apt, "apt.conf")
	require.NoError(t, os.WriteFile(conf, fmt.Appendf(nil, `Dir::Etc::sourcelist "%[1]s/sources.list";
Dir::Etc::sourceparts "%[1]s/sources.list.d";
Dir::State::lists "%[1]s/lists/";
Dir::Cache "%[1]s/cache/";
`, apt), 0o644))
	return conf
}
