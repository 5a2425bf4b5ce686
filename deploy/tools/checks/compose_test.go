package checks

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"
)

func composeFile() string { return deployPath("compose", "compose.yaml") }

// composeConfig is the part of `docker-compose config`'s resolved output the
// checks read.
type composeConfig struct {
	Services map[string]struct {
		Image       string            `json:"image"`
		Command     []string          `json:"command"`
		Entrypoint  []string          `json:"entrypoint"`
		Environment map[string]string `json:"environment"`
		Ports       []composePort     `json:"ports"`
		Volumes     []composeVolume   `json:"volumes"`
	} `json:"services"`
}

// composePort is a published port as docker-compose 1.x's config prints it:
// {published, target} without a host address, else the short syntax
// [HOST_IP:]PUBLISHED:TARGET[/PROTOCOL].
type composePort struct {
	HostIP    string
	Published string
	Target    int
}

func (p *composePort) UnmarshalJSON(b []byte) error {
	var short string
	if err := json.Unmarshal(b, &short); err != nil {
		var long struct {
			Target    int `json:"target"`
			Published any `json:"published"`
		}
		if err := json.Unmarshal(b, &long); err != nil {
			return err
		}
		p.Target, p.Published = long.Target, fmt.Sprint(long.Published)
		return nil
	}
	spec, _, _ := strings.Cut(short, "/")
	parts := strings.Split(spec, ":")
	target, err := strconv.Atoi(parts[len(parts)-1])
	if err != nil || len(parts) < 2 || len(parts) > 3 {
		return fmt.Errorf("port %q: want [HOST_IP:]PUBLISHED:TARGET", short)
	}
	p.Target, p.Published = target, parts[len(parts)-2]
	if len(parts) == 3 {
		p.HostIP = parts[0]
	}
	return nil
}

// composeSecrets are the variables compose.yaml requires (${VAR:?...}), with
// values the binary accepts.
var composeSecrets = []string{
	"WAHOOK_APP_SECRET=" + liveSecret,
	"WAHOOK_VERIFY_TOKEN=deploy-checks-verify-token",
	"WAHOOK_API_TOKEN=" + liveToken,
	"WAHOOK_PHONE_HASH_KEY=deploy-checks-phone-hash-key",
	"GRAFANA_ADMIN_PASSWORD=deploy-checks-grafana",
}

// composeEnv is the environment docker-compose runs in: without any
// WAHOOK_ variable or those of composeSecrets, plus extra.
func composeEnv(extra []string) []string {
	var env []string
	for _, kv := range cleanEnv(nil) {
		if !strings.HasPrefix(kv, "GRAFANA_ADMIN_PASSWORD=") {
			env = append(env, kv)
		}
	}
	return append(env, extra...)
}

// composeVolume is a volume in docker-compose 1.x's short syntax,
// SOURCE:TARGET[:MODE], with a bind mount's source made absolute.
type composeVolume string

func (v composeVolume) bind() (source string, ok bool) {
	src, _, _ := strings.Cut(string(v), ":")
	return src, strings.HasPrefix(src, "/")
}

// composeResolved runs Debian's docker-compose on the file: `config -q`
// validates it, `config` prints it with anchors, variables and paths resolved.
func composeResolved(t *testing.T) composeConfig {
	t.Helper()
	dc := tool(t, "docker-compose")
	env := composeEnv(composeSecrets)
	dir := filepath.Dir(composeFile())
	if out, err := run(t, time.Minute, dir, env, dc, "-f", composeFile(), "config", "-q"); err != nil {
		t.Fatalf("docker-compose config -q: %v\n%s", err, out)
	}
	out, err := run(t, time.Minute, dir, env, dc, "-f", composeFile(), "config")
	if err != nil {
		t.Fatalf("docker-compose config: %v\n%s", err, out)
	}
	var c composeConfig
	if err := yaml.Unmarshal([]byte(out), &c); err != nil {
		t.Fatalf("docker-compose config output: %v", err)
	}
	if len(c.Services) == 0 {
		t.Fatal("docker-compose config: no services")
	}
	return c
}

func TestComposeFile(t *testing.T) {
	c := composeResolved(t)
	names := make([]string, 0, len(c.Services))
	for n := range c.Services {
		names = append(names, n)
	}
	sort.Strings(names)
	listen := map[string]string{} // service -> port wahook serves /metrics on
	count := map[string]int{}
	for _, name := range names {
		s := c.Services[name]
		for _, v := range s.Volumes {
			if src, ok := v.bind(); ok {
				if _, err := os.Stat(src); err != nil {
					t.Errorf("service %s mounts %s, which does not exist", name, src)
				}
			}
		}
		if !strings.HasPrefix(s.Image, "wahook") {
			continue
		}
		inv := invocation{where: "compose service " + name, args: s.Command, env: s.Environment}
		dump := checkInvocation(t, inv)
		if len(s.Command) == 0 || dump == nil {
			continue
		}
		sub := s.Command[0]
		count[sub]++
		lf, ok := listenFlag[sub]
		if !ok {
			continue
		}
		port := listenPort(dump[lf].value)
		listen[name] = metricsPort(sub, dump)
		for _, p := range s.Ports {
			if p.HostIP != "127.0.0.1" {
				t.Errorf("service %s publishes port %s on %q: want 127.0.0.1 only (a TLS proxy on the host faces Meta)", name, p.Published, p.HostIP)
			}
			if fmt.Sprint(p.Target) != port && fmt.Sprint(p.Target) != listen[name] {
				t.Errorf("service %s publishes container port %d, wahook %s listens on %s (metrics on %s)", name, p.Target, sub, port, listen[name])
			}
		}
	}
	for sub, want := range map[string]int{"ingest": 2, "process": 1, "api": 1, "migrate": 1} {
		if count[sub] != want {
			t.Errorf("compose runs wahook %s %d times, want %d", sub, count[sub], want)
		}
	}
	for _, n := range []string{"nats-1", "nats-2", "nats-3", "clickhouse-1", "clickhouse-keeper", "prometheus", "grafana"} {
		if _, ok := c.Services[n]; !ok {
			t.Errorf("compose has no service %s", n)
		}
	}
	for _, name := range names {
		if strings.HasPrefix(c.Services[name].Image, "wahook") {
			continue // checked above
		}
		for _, p := range c.Services[name].Ports {
			if p.HostIP != "127.0.0.1" {
				t.Errorf("service %s publishes port %s on %q: want 127.0.0.1 only", name, p.Published, p.HostIP)
			}
		}
	}
	checkPrometheusTargets(t, c, listen)
	checkClickHouseEnv(t, c)
}

// The compose file has no secrets of its own: without each variable of
// composeSecrets, docker-compose refuses it and names the variable.
func TestComposeRequiresSecrets(t *testing.T) {
	dc := tool(t, "docker-compose")
	dir := filepath.Dir(composeFile())
	for i, kv := range composeSecrets {
		name, _, _ := strings.Cut(kv, "=")
		others := append(append([]string{}, composeSecrets[:i]...), composeSecrets[i+1:]...)
		for _, env := range [][]string{others, append(others, name+"=")} {
			out, err := run(t, time.Minute, dir, composeEnv(env), dc, "-f", composeFile(), "config", "-q")
			if err == nil || !strings.Contains(out, "set "+name) {
				t.Errorf("docker-compose config -q with %s unset or empty: err %v, want a refusal naming it:\n%s", name, err, out)
			}
		}
	}
	if b, err := os.ReadFile(composeFile()); err != nil {
		t.Fatal(err)
	} else if strings.Contains(string(b), "CHANGE-ME") {
		t.Error("compose.yaml still holds a CHANGE-ME placeholder")
	}
}

// checkPrometheusTargets: Prometheus scrapes every wahook service of the
// compose file on the port it serves /metrics on, and nothing else.
func checkPrometheusTargets(t *testing.T, c composeConfig, listen map[string]string) {
	t.Helper()
	b, err := os.ReadFile(deployPath("prometheus", "prometheus.yml"))
	if err != nil {
		t.Fatal(err)
	}
	var cfg struct {
		ScrapeConfigs []struct {
			JobName       string `json:"job_name"`
			MetricsPath   string `json:"metrics_path"`
			StaticConfigs []struct {
				Targets []string `json:"targets"`
			} `json:"static_configs"`
		} `json:"scrape_configs"`
	}
	if err := yaml.Unmarshal(b, &cfg); err != nil {
		t.Fatalf("prometheus.yml: %v", err)
	}
	scraped := map[string]bool{}
	for _, sc := range cfg.ScrapeConfigs {
		if sc.MetricsPath != "" && sc.MetricsPath != "/metrics" {
			t.Errorf("prometheus.yml job %s: path %s, wahook serves /metrics", sc.JobName, sc.MetricsPath)
		}
		for _, st := range sc.StaticConfigs {
			for _, target := range st.Targets {
				host, port, err := net.SplitHostPort(target)
				if err != nil {
					t.Errorf("prometheus.yml job %s: target %q: %v", sc.JobName, target, err)
					continue
				}
				want, ok := listen[host]
				switch {
				case !ok:
					t.Errorf("prometheus.yml job %s: target %s is no wahook service of compose.yaml", sc.JobName, target)
				case port != want:
					t.Errorf("prometheus.yml job %s: target %s, the service serves /metrics on %s", sc.JobName, target, want)
				}
				scraped[host] = true
			}
		}
	}
	for host := range listen {
		if !scraped[host] {
			t.Errorf("prometheus.yml does not scrape compose service %s", host)
		}
	}
}

// checkClickHouseEnv: every from_env of the ClickHouse and Keeper configs is
// set in the compose services that mount them.
func checkClickHouseEnv(t *testing.T, c composeConfig) {
	t.Helper()
	for name, s := range c.Services {
		for _, v := range s.Volumes {
			src, ok := v.bind()
			if !ok || !strings.HasSuffix(src, ".xml") {
				continue
			}
			for _, env := range fromEnvNames(t, src) {
				if _, ok := s.Environment[env]; !ok {
					t.Errorf("service %s mounts %s, which reads %s, not set in its environment", name, filepath.Base(src), env)
				}
			}
		}
	}
}
