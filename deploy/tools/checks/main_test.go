package checks

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"
)

// repoRoot is the repository's root, two levels above this module.
var repoRoot = func() string {
	wd, err := os.Getwd()
	if err != nil {
		panic(err)
	}
	return filepath.Clean(filepath.Join(wd, "..", "..", ".."))
}()

func deployPath(parts ...string) string {
	return filepath.Join(append([]string{repoRoot, "deploy"}, parts...)...)
}

var binDir string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "wahook-deploy-checks-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binDir = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

var (
	buildOnce sync.Once
	buildErr  error
)

// wahookBinary builds the wahook binary from the repository once per test
// binary and returns its path.
func wahookBinary(t testing.TB) string {
	t.Helper()
	bin := filepath.Join(binDir, "wahook")
	buildOnce.Do(func() {
		cmd := exec.Command(goTool(), "build", "-o", bin, "./cmd/wahook")
		cmd.Dir = repoRoot
		out, err := cmd.CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build ./cmd/wahook: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return bin
}

func goTool() string {
	if p := filepath.Join(os.Getenv("GOROOT"), "bin", "go"); os.Getenv("GOROOT") != "" {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	return "/usr/local/go/bin/go"
}

// tool finds an external tool: helm in .cache/bin, the others on PATH. A
// missing tool skips the test, or fails it when CI=true.
func tool(t testing.TB, name string) string {
	t.Helper()
	if name == "helm" {
		p := filepath.Join(repoRoot, ".cache", "bin", "helm")
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	p, err := exec.LookPath(name)
	if err == nil {
		return p
	}
	msg := fmt.Sprintf("%s not found: run scripts/install-deploy-tools.sh", name)
	if os.Getenv("CI") == "true" {
		t.Fatal(msg + " (CI=true: a missing tool fails)")
	}
	t.Skip(msg)
	return ""
}

// run runs a command with a deadline and returns its combined output.
func run(t testing.TB, timeout time.Duration, dir string, env []string, name string, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	if env != nil {
		cmd.Env = env
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

// mustRun is run that fails the test on a non-zero exit.
func mustRun(t testing.TB, timeout time.Duration, dir string, name string, args ...string) string {
	t.Helper()
	out, err := run(t, timeout, dir, nil, name, args...)
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", filepath.Base(name), strings.Join(args, " "), err, out)
	}
	return out
}

// flagInfo is what the binary says about one flag of a subcommand.
type flagInfo struct {
	value  string // its default, as --config-dump prints it
	secret bool   // redacted in dumps, readable from WAHOOK_<NAME>_FILE
}

var (
	flagsMu    sync.Mutex
	flagsCache = map[string]map[string]flagInfo{}
)

// wahookFlags asks the binary for a subcommand's flags: `wahook SUB
// --config-dump` prints every flag with its effective value, secrets as
// (unset) or (redacted).
func wahookFlags(t testing.TB, sub string) map[string]flagInfo {
	t.Helper()
	flagsMu.Lock()
	defer flagsMu.Unlock()
	if f, ok := flagsCache[sub]; ok {
		return f
	}
	out, err := run(t, time.Minute, binDir, cleanEnv(nil), wahookBinary(t), sub, "--config-dump")
	if err != nil {
		t.Fatalf("wahook %s --config-dump: %v\n%s", sub, err, out)
	}
	flags := parseDump(out)
	if len(flags) == 0 {
		t.Fatalf("wahook %s --config-dump printed no flags:\n%s", sub, out)
	}
	flags["check"] = flagInfo{}
	flags["config-dump"] = flagInfo{}
	flagsCache[sub] = flags
	return flags
}

func parseDump(out string) map[string]flagInfo {
	flags := map[string]flagInfo{}
	for _, line := range strings.Split(out, "\n") {
		name, value, ok := strings.Cut(line, "=")
		if !ok || name == "" || strings.ContainsAny(name, " \t{") {
			continue
		}
		flags[name] = flagInfo{value: value, secret: value == "(unset)" || strings.Contains(value, "(redacted)")}
	}
	return flags
}

// cleanEnv is the environment without any WAHOOK_ variable, plus extra.
func cleanEnv(extra []string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "WAHOOK_") {
			env = append(env, kv)
		}
	}
	return append(env, extra...)
}

// invocation is one way a deploy file runs wahook.
type invocation struct {
	where string            // the file and object, for messages
	args  []string          // subcommand first
	env   map[string]string // WAHOOK_ variables; values from secrets are placeholders
}

var flagArg = regexp.MustCompile(`^--?([a-z0-9][a-z0-9-]*)(=.*)?$`)

// checkInvocation fails the test when inv passes a flag or an environment
// variable that its subcommand does not have, or a value the binary refuses;
// it returns the effective configuration (--config-dump with inv's flags and
// environment).
func checkInvocation(t *testing.T, inv invocation) map[string]flagInfo {
	t.Helper()
	if len(inv.args) == 0 {
		t.Errorf("%s: runs wahook without a subcommand", inv.where)
		return nil
	}
	sub := inv.args[0]
	flags := wahookFlags(t, sub)
	for _, a := range inv.args[1:] {
		m := flagArg.FindStringSubmatch(a)
		if m == nil {
			continue // a flag's separate value
		}
		if _, ok := flags[m[1]]; !ok {
			t.Errorf("%s: wahook %s has no flag --%s (%s --help lists its flags)", inv.where, sub, m[1], sub)
		}
	}
	byEnv := map[string]string{}
	for name, fi := range flags {
		byEnv[envName(name)] = name
		if fi.secret {
			byEnv[envName(name)+"_FILE"] = name
		}
	}
	var extra []string
	names := make([]string, 0, len(inv.env))
	for k := range inv.env {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		if !strings.HasPrefix(k, "WAHOOK_") {
			continue
		}
		if _, ok := byEnv[k]; !ok {
			t.Errorf("%s: environment variable %s is no flag's of wahook %s", inv.where, k, sub)
			continue
		}
		extra = append(extra, k+"="+inv.env[k])
	}
	out, err := run(t, time.Minute, binDir, cleanEnv(extra), wahookBinary(t), append(append([]string{}, inv.args...), "--config-dump")...)
	if err != nil {
		first, _, _ := strings.Cut(out, "\n")
		t.Errorf("%s: wahook %s refuses its configuration: %v: %s", inv.where, strings.Join(inv.args, " "), err, first)
		return nil
	}
	return parseDump(out)
}

func envName(flag string) string {
	return "WAHOOK_" + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
}

// listenPort is the port of a listen address such as ":8080" or "0.0.0.0:8081".
func listenPort(addr string) string {
	i := strings.LastIndex(addr, ":")
	if i < 0 {
		return ""
	}
	return addr[i+1:]
}

// listenFlag is the flag holding the address a subcommand serves its
// health, readiness and (unless metricsPort says otherwise) metrics on.
var listenFlag = map[string]string{"ingest": "listen", "process": "listen", "api": "api-listen", "serve": "listen"}

// metricsPort is the port a subcommand serves /metrics on, from its
// effective configuration: --metrics-listen where it has one and it is set,
// else its listen flag's.
func metricsPort(sub string, dump map[string]flagInfo) string {
	if m, ok := dump["metrics-listen"]; ok && m.value != "" {
		return listenPort(m.value)
	}
	return listenPort(dump[listenFlag[sub]].value)
}
