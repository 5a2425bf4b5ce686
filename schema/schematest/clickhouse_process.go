package schematest

import (
	"context"
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
	"time"
)

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

// chProcess is one clickhouse-server process with its directory and port. It
// keeps no goroutine: the process is reaped with wait4 when it is stopped, so
// a test binary that checks for goroutine leaks is not disturbed by it.
type chProcess struct {
	argv []string
	dir  string
	port int
	zone string // the server's time zone, UTC when ""

	mu  sync.Mutex
	pid int // 0 while stopped
}

func (p *chProcess) addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(p.port)) }

// startClickHouseProcess writes a config under dir and starts a server on a
// free port, trying another port if the first was taken meanwhile.
func startClickHouseProcess(argv []string, dir, zone string) (*chProcess, time.Duration, error) {
	start := time.Now()
	var err error
	for attempt := 0; attempt < 3; attempt++ {
		var port int
		if port, err = freeTCPPort(); err != nil {
			return nil, 0, err
		}
		p := &chProcess{argv: argv, dir: dir, port: port, zone: zone}
		if err = p.writeConfig(); err != nil {
			return nil, 0, err
		}
		if err = p.start(); err == nil {
			return p, time.Since(start), nil
		}
	}
	return nil, 0, err
}

// writeConfig writes config.xml and users.xml in the form 18.16 reads (root
// element <yandex>, which current releases still accept; 18.16 refuses to
// start without mark_cache_size). Only the native port is opened: no HTTP, no
// interserver port. poll_interval=1 lets idle connections notice a shutdown
// within a second: with the default 10 s, a SIGTERM took 10 s while a client
// held an idle connection.
func (p *chProcess) writeConfig() error {
	zone := p.zone
	if zone == "" {
		zone = "UTC"
	}
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
    <timezone>%[3]s</timezone>
    <shutdown_wait_unfinished>3</shutdown_wait_unfinished>
    <mark_cache_size>67108864</mark_cache_size>
    <uncompressed_cache_size>67108864</uncompressed_cache_size>
</yandex>
`, p.dir, p.port, zone)
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
