package schematest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
)

// EnvClickHouseAddr names the environment variable that points ClickHouse at a
// running server (host:port of its native protocol) instead of starting one.
const EnvClickHouseAddr = "WAHOOK_TEST_CLICKHOUSE_ADDR"

const chInstallHint = "install it with `scripts/clickhouse.sh install` " +
	"(apt-get install clickhouse-server clickhouse-client), or set " + EnvClickHouseAddr +
	"=host:port; with CI=true this fails instead of skipping"

// ClickHouseDB is a fresh database on a real clickhouse-server, made for one
// test and dropped when it ends.
type ClickHouseDB struct {
	Addr     string      // host:port of the native protocol
	Database string      // the database's name, unique to the test
	DSN      string      // clickhouse://127.0.0.1:PORT/DATABASE
	Conn     driver.Conn // an open native connection whose default database is Database
}

// ClickHouse gives the test a fresh, uniquely named database on the
// clickhouse-server shared by the test binary. That server is started on first
// use, in a temporary directory on a free loopback port, and dies with the
// test binary; with WAHOOK_TEST_CLICKHOUSE_ADDR set, that server is used
// instead. Without a clickhouse-server binary the test is skipped, or fails
// when CI=true. A test that stops and starts the server uses StartClickHouse.
func ClickHouse(t testing.TB) *ClickHouseDB {
	t.Helper()
	addr, err := sharedClickHouse(t)
	if err != nil {
		t.Fatalf("clickhouse: %v", err)
	}
	return newClickHouseDB(t, addr, nil)
}

// ClickHouseServer is a clickhouse-server process of its own for one test. It
// can be stopped and started again on the same port and data directory, to
// test what clients do during an outage.
type ClickHouseServer struct {
	t    testing.TB
	proc *chProcess
}

// StartClickHouse starts a clickhouse-server for this test alone, on a free
// loopback port, storing under a temporary directory, and kills it when the
// test ends. It skips or fails like ClickHouse when the binary is missing.
func StartClickHouse(t testing.TB) *ClickHouseServer {
	t.Helper()
	return StartClickHouseInZone(t, "UTC")
}

// StartClickHouseInZone is StartClickHouse with the server's time zone set
// to zone (an IANA name): what toStartOfMonth and the other calendar
// functions follow, for queries that must not assume a server on UTC.
func StartClickHouseInZone(t testing.TB, zone string) *ClickHouseServer {
	t.Helper()
	argv := clickHouseBinary(t)
	dir, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatalf("clickhouse: temp dir: %v", err)
	}
	p, elapsed, err := startClickHouseProcess(argv, dir, zone)
	if err != nil {
		t.Fatalf("clickhouse: %v", err)
	}
	t.Logf("clickhouse-server started on %s in %v", p.addr(), elapsed.Round(time.Millisecond))
	s := &ClickHouseServer{t: t, proc: p}
	t.Cleanup(func() {
		if err := p.stop(syscall.SIGKILL, 10*time.Second); err != nil {
			t.Errorf("clickhouse: %v", err)
		}
	})
	return s
}

// Addr is host:port of the native protocol; it stays the same across restarts.
func (s *ClickHouseServer) Addr() string { return s.proc.addr() }

// Dir is the directory holding the server's config, data and logs.
func (s *ClickHouseServer) Dir() string { return s.proc.dir }

// DSN is the data source name of database on this server.
func (s *ClickHouseServer) DSN(database string) string { return chDSN(s.proc.addr(), database) }

// Running reports whether the server process runs.
func (s *ClickHouseServer) Running() bool { return s.proc.running() }

// Database gives the test a fresh database on this server, dropped at the end
// of the test if the server runs then.
func (s *ClickHouseServer) Database(t testing.TB) *ClickHouseDB {
	t.Helper()
	return newClickHouseDB(t, s.proc.addr(), s.proc)
}

// Start starts the server if it is stopped, on the same port and data
// directory, and waits until it answers. Call it from the test's goroutine.
func (s *ClickHouseServer) Start() {
	s.t.Helper()
	if s.proc.running() {
		return
	}
	start := time.Now()
	if err := s.proc.start(); err != nil {
		s.t.Fatalf("clickhouse: restart: %v", err)
	}
	s.t.Logf("clickhouse-server restarted on %s in %v", s.proc.addr(), time.Since(start).Round(time.Millisecond))
}

// Stop shuts the server down gracefully (SIGTERM; it takes two to three seconds)
// and waits until the process is gone. Call it from the test's goroutine.
func (s *ClickHouseServer) Stop() {
	s.t.Helper()
	if err := s.proc.stop(syscall.SIGTERM, 30*time.Second); err != nil {
		s.t.Fatalf("clickhouse: stop: %v", err)
	}
}

// Kill kills the server at once (SIGKILL), like a crash, and waits until the
// process is gone. Call it from the test's goroutine.
func (s *ClickHouseServer) Kill() {
	s.t.Helper()
	if err := s.proc.stop(syscall.SIGKILL, 10*time.Second); err != nil {
		s.t.Fatalf("clickhouse: kill: %v", err)
	}
}

// Freeze stops the server's process (SIGSTOP) without ending it, like a
// server that hangs: connections stay open and queries wait. Thaw resumes
// it; a test that freezes should thaw in a cleanup too. Call both from the
// test's goroutine.
func (s *ClickHouseServer) Freeze() { s.t.Helper(); s.signal(syscall.SIGSTOP) }

// Thaw resumes a server stopped by Freeze (SIGCONT).
func (s *ClickHouseServer) Thaw() { s.t.Helper(); s.signal(syscall.SIGCONT) }

func (s *ClickHouseServer) signal(sig syscall.Signal) {
	s.t.Helper()
	s.proc.mu.Lock()
	pid := s.proc.pid
	s.proc.mu.Unlock()
	if pid == 0 {
		s.t.Fatalf("clickhouse: %v: the server is not running", sig)
	}
	if err := syscall.Kill(pid, sig); err != nil {
		s.t.Fatalf("clickhouse: %v: %v", sig, err)
	}
}

// newClickHouseDB creates a uniquely named database on the server at addr and
// drops it when the test ends. proc, when not nil, is the server's process: a
// stopped server's database is left to its temporary directory.
func newClickHouseDB(t testing.TB, addr string, proc *chProcess) *ClickHouseDB {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	name := chDatabaseName(t.Name())
	admin, err := chOpen(addr, "default")
	if err != nil {
		t.Fatalf("clickhouse: %v", err)
	}
	if err := admin.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		admin.Close()
		t.Fatalf("clickhouse: create database %s on %s: %v", name, addr, err)
	}
	conn, err := chOpen(addr, name)
	if err != nil {
		admin.Close()
		t.Fatalf("clickhouse: %v", err)
	}
	t.Cleanup(func() {
		defer admin.Close()
		if err := conn.Close(); err != nil {
			t.Errorf("clickhouse: close: %v", err)
		}
		if proc != nil && !proc.running() {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := admin.Exec(ctx, "DROP DATABASE IF EXISTS "+name); err != nil {
			t.Errorf("clickhouse: drop database %s: %v", name, err)
		}
	})
	return &ClickHouseDB{Addr: addr, Database: name, DSN: chDSN(addr, name), Conn: conn}
}

// chDatabaseName makes a database name from a test name: letters, digits and
// underscores, with a random suffix so that reruns and -count=N never meet.
func chDatabaseName(testName string) string {
	var b strings.Builder
	b.WriteString("t_")
	for _, r := range strings.ToLower(testName) {
		if b.Len() >= 40 {
			break
		}
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
	}
	var suffix [4]byte
	_, _ = rand.Read(suffix[:])
	return b.String() + "_" + hex.EncodeToString(suffix[:])
}

func chDSN(addr, database string) string { return "clickhouse://" + addr + "/" + database }

// chOpen opens a native connection; the driver dials lazily.
func chOpen(addr, database string) (driver.Conn, error) {
	conn, err := clickhouse.Open(&clickhouse.Options{
		Protocol:    clickhouse.Native,
		Addr:        []string{addr},
		Auth:        clickhouse.Auth{Database: database, Username: "default"},
		DialTimeout: 5 * time.Second,
	})
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", addr, err)
	}
	return conn, nil
}

// The server shared by a test binary: started once, never stopped by us. It
// dies with the binary (Pdeathsig), and its directory is removed by the next
// binary that starts one (see removeStaleClickHouseDirs).
var shared struct {
	once sync.Once
	addr string
	err  error
	skip string // why there is no server, when the binary is missing
}

func sharedClickHouse(t testing.TB) (string, error) {
	t.Helper()
	shared.once.Do(func() {
		if addr := os.Getenv(EnvClickHouseAddr); addr != "" {
			shared.addr, shared.err = addr, pingClickHouse(addr)
			if shared.err != nil {
				shared.err = fmt.Errorf("%s=%s: %w", EnvClickHouseAddr, addr, shared.err)
			}
			return
		}
		argv, err := findClickHouse()
		if err != nil {
			shared.skip = err.Error()
			return
		}
		removeStaleClickHouseDirs()
		dir, err := os.MkdirTemp("", "wahook-clickhouse-")
		if err == nil {
			dir, err = filepath.EvalSymlinks(dir)
		}
		if err == nil {
			err = os.WriteFile(filepath.Join(dir, "owner.pid"), []byte(strconv.Itoa(os.Getpid())), 0o644)
		}
		if err != nil {
			shared.err = fmt.Errorf("temp dir: %w", err)
			return
		}
		p, elapsed, err := startClickHouseProcess(argv, dir, "")
		if err != nil {
			shared.err = err
			return
		}
		shared.addr = p.addr()
		t.Logf("clickhouse-server for this test binary started on %s in %v (dir %s)",
			shared.addr, elapsed.Round(time.Millisecond), dir)
	})
	if shared.skip != "" {
		skipOrFail(t, shared.skip)
	}
	return shared.addr, shared.err
}

// clickHouseBinary returns the command that runs clickhouse-server, or skips
// the test (fails it with CI=true) when there is none.
func clickHouseBinary(t testing.TB) []string {
	t.Helper()
	argv, err := findClickHouse()
	if err != nil {
		skipOrFail(t, err.Error())
	}
	return argv
}

func skipOrFail(t testing.TB, why string) {
	t.Helper()
	if ci, _ := strconv.ParseBool(os.Getenv("CI")); ci {
		t.Fatalf("clickhouse: %s (CI=true: a skipped test would be a lie)", why)
		return
	}
	t.Skipf("clickhouse: %s", why)
}

// Where findClickHouse looks: clickhouse-server on PATH and in /usr/sbin,
// where Debian puts it, then the single `clickhouse` binary of upstream
// builds, which runs the server as `clickhouse server`.
var (
	chServerNames = []string{"clickhouse-server", "/usr/sbin/clickhouse-server", "/usr/bin/clickhouse-server"}
	chMultiNames  = []string{"clickhouse", "/usr/bin/clickhouse"}
)

func findClickHouse() ([]string, error) {
	for _, name := range chServerNames {
		if p, err := exec.LookPath(name); err == nil {
			return []string{p}, nil
		}
	}
	for _, name := range chMultiNames {
		if p, err := exec.LookPath(name); err == nil {
			return []string{p, "server"}, nil
		}
	}
	return nil, errors.New("clickhouse-server not found on PATH or in /usr/sbin; " + chInstallHint)
}

func pingClickHouse(addr string) error {
	conn, err := chOpen(addr, "default")
	if err != nil {
		return err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := conn.Ping(ctx); err != nil {
		return fmt.Errorf("ping %s: %w", addr, err)
	}
	return nil
}
