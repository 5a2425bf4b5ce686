package schematest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
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
	argv := clickHouseBinary(t)
	dir, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatalf("clickhouse: temp dir: %v", err)
	}
	p, elapsed, err := startClickHouseProcess(argv, dir)
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
		p, elapsed, err := startClickHouseProcess(argv, dir)
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

// removeStaleClickHouseDirs removes the directories of shared servers whose
// test binary is gone and whose server no longer runs.
func removeStaleClickHouseDirs() {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), "wahook-clickhouse-*"))
	for _, dir := range dirs {
		if pidAlive(filepath.Join(dir, "owner.pid")) || pidAlive(filepath.Join(dir, "server.pid")) {
			continue
		}
		if _, err := os.Stat(filepath.Join(dir, "owner.pid")); err != nil {
			continue // not one of ours, or still being set up
		}
		_ = os.RemoveAll(dir)
	}
}

func pidAlive(pidFile string) bool {
	b, err := os.ReadFile(pidFile)
	if err != nil {
		return false
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return false
	}
	return syscall.Kill(pid, 0) == nil
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

// chProcess is one clickhouse-server process with its directory and port. It
// keeps no goroutine: the process is reaped with wait4 when it is stopped, so
// a test binary that checks for goroutine leaks is not disturbed by it.
type chProcess struct {
	argv []string
	dir  string
	port int

	mu  sync.Mutex
	pid int // 0 while stopped
}

func (p *chProcess) addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(p.port)) }

// startClickHouseProcess writes a config under dir and starts a server on a
// free port, trying another port if the first was taken meanwhile.
func startClickHouseProcess(argv []string, dir string) (*chProcess, time.Duration, error) {
	start := time.Now()
	var err error
	for attempt := 0; attempt < 3; attempt++ {
		var port int
		if port, err = freeTCPPort(); err != nil {
			return nil, 0, err
		}
		p := &chProcess{argv: argv, dir: dir, port: port}
		if err = p.writeConfig(); err != nil {
			return nil, 0, err
		}
		if err = p.start(); err == nil {
			return p, time.Since(start), nil
		}
	}
	return nil, 0, err
}

func freeTCPPort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// writeConfig writes config.xml and users.xml in the form 18.16 reads (root
// element <yandex>, which current releases still accept; 18.16 refuses to
// start without mark_cache_size). Only the native port is opened: no HTTP, no
// interserver port. poll_interval=1 lets idle connections notice a shutdown
// within a second: with the default 10 s, a SIGTERM took 10 s while a client
// held an idle connection.
func (p *chProcess) writeConfig() error {
	for _, sub := range []string{"data", "tmp", "user_files", "format_schemas", "log"} {
		if err := os.MkdirAll(filepath.Join(p.dir, sub), 0o755); err != nil {
			return fmt.Errorf("config dir: %w", err)
		}
	}
	config := fmt.Sprintf(`<?xml version="1.0"?>
<yandex>
    <logger>
        <level>warning</level>
        <log>%[1]s/log/clickhouse-server.log</log>
        <errorlog>%[1]s/log/clickhouse-server.err.log</errorlog>
        <size>100M</size>
        <count>1</count>
    </logger>
    <listen_host>127.0.0.1</listen_host>
    <tcp_port>%[2]d</tcp_port>
    <path>%[1]s/data/</path>
    <tmp_path>%[1]s/tmp/</tmp_path>
    <user_files_path>%[1]s/user_files/</user_files_path>
    <format_schema_path>%[1]s/format_schemas/</format_schema_path>
    <users_config>%[1]s/users.xml</users_config>
    <default_profile>default</default_profile>
    <default_database>default</default_database>
    <timezone>UTC</timezone>
    <shutdown_wait_unfinished>3</shutdown_wait_unfinished>
    <mark_cache_size>67108864</mark_cache_size>
    <uncompressed_cache_size>67108864</uncompressed_cache_size>
</yandex>
`, p.dir, p.port)
	users := `<?xml version="1.0"?>
<yandex>
    <profiles><default><poll_interval>1</poll_interval></default></profiles>
    <users>
        <default>
            <password></password>
            <networks><ip>127.0.0.1</ip><ip>::1</ip></networks>
            <profile>default</profile>
            <quota>default</quota>
        </default>
    </users>
    <quotas><default></default></quotas>
</yandex>
`
	if err := os.WriteFile(filepath.Join(p.dir, "config.xml"), []byte(config), 0o644); err != nil {
		return fmt.Errorf("write config: %w", err)
	}
	if err := os.WriteFile(filepath.Join(p.dir, "users.xml"), []byte(users), 0o644); err != nil {
		return fmt.Errorf("write users: %w", err)
	}
	return nil
}

func (p *chProcess) running() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.pid != 0 && !p.reapLocked()
}

// start runs the server and waits until it answers as itself on its port.
func (p *chProcess) start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.pid != 0 && !p.reapLocked() {
		return nil
	}
	out, err := os.OpenFile(filepath.Join(p.dir, "log", "stdout.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("server output: %w", err)
	}
	defer out.Close()
	args := append(append([]string{}, p.argv[1:]...), "--config-file="+filepath.Join(p.dir, "config.xml"))
	cmd := exec.Command(p.argv[0], args...)
	cmd.Dir = p.dir
	cmd.Stdout, cmd.Stderr = out, out // files: exec starts no copying goroutine
	// Own process group: a ^C to `go test` does not reach it directly.
	// Pdeathsig: the kernel kills it when the test binary dies, however it
	// dies (tested with kill -9). Strictly, it fires when the forking thread
	// ends; Go ends a thread only when a goroutine exits while locked to it,
	// which nothing here does.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", p.argv[0], err)
	}
	p.pid = cmd.Process.Pid
	_ = os.WriteFile(filepath.Join(p.dir, "server.pid"), []byte(strconv.Itoa(p.pid)), 0o644)
	if err := p.waitReadyLocked(60 * time.Second); err != nil {
		p.killLocked(syscall.SIGKILL, 5*time.Second)
		return err
	}
	return nil
}

// waitReadyLocked polls until the server answers a ping and shows that it
// serves our data directory, so that a server that happened to take the port
// is not mistaken for ours.
func (p *chProcess) waitReadyLocked(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	conn, err := chOpen(p.addr(), "default")
	if err != nil {
		return err
	}
	defer conn.Close()
	for {
		if p.reapLocked() {
			return fmt.Errorf("clickhouse-server exited during start on port %d: %s", p.port, p.logTail())
		}
		c, err := net.DialTimeout("tcp", p.addr(), 200*time.Millisecond)
		if err == nil {
			c.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			var path string
			err = conn.QueryRow(ctx, "SELECT data_path FROM system.databases WHERE name = 'default'").Scan(&path)
			cancel()
			if err == nil {
				if !strings.HasPrefix(path, p.dir) {
					return fmt.Errorf("port %d answers for another server (data in %s)", p.port, path)
				}
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("clickhouse-server on port %d not ready within %v: %v; %s", p.port, timeout, err, p.logTail())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// stop sends sig and waits up to timeout for the process to exit, then kills it.
func (p *chProcess) stop(sig syscall.Signal, timeout time.Duration) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.pid == 0 || p.reapLocked() {
		return nil
	}
	if !p.killLocked(sig, timeout) {
		return fmt.Errorf("clickhouse-server (pid %d) did not exit", p.pid)
	}
	return nil
}

// killLocked signals the process and reaps it; after timeout it escalates to
// SIGKILL. It reports whether the process is gone.
func (p *chProcess) killLocked(sig syscall.Signal, timeout time.Duration) bool {
	_ = syscall.Kill(p.pid, sig)
	deadline := time.Now().Add(timeout)
	for !p.reapLocked() {
		if time.Now().After(deadline) {
			if sig == syscall.SIGKILL {
				return false
			}
			sig = syscall.SIGKILL
			_ = syscall.Kill(p.pid, sig)
			deadline = time.Now().Add(10 * time.Second)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return true
}

// reapLocked reports whether the process has exited, reaping it if so.
func (p *chProcess) reapLocked() bool {
	if p.pid == 0 {
		return true
	}
	var ws syscall.WaitStatus
	got, err := syscall.Wait4(p.pid, &ws, syscall.WNOHANG, nil)
	if got == p.pid || errors.Is(err, syscall.ECHILD) {
		p.pid = 0
		_ = os.Remove(filepath.Join(p.dir, "server.pid"))
		return true
	}
	return false
}

// logTail returns the end of the server's error log and output, for errors.
func (p *chProcess) logTail() string {
	var parts []string
	for _, name := range []string{"clickhouse-server.err.log", "stdout.log"} {
		b, err := os.ReadFile(filepath.Join(p.dir, "log", name))
		if err != nil || len(b) == 0 {
			continue
		}
		if len(b) > 1500 {
			b = b[len(b)-1500:]
		}
		parts = append(parts, name+": "+strings.TrimSpace(string(b)))
	}
	if len(parts) == 0 {
		return "no log output in " + filepath.Join(p.dir, "log")
	}
	return strings.Join(parts, "\n")
}
