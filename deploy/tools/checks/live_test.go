package checks

import (
	"bufio"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/wahook/wahook/internal/testutil"
	"github.com/wahook/wahook/schema/schematest"
)

const (
	liveSecret = "deploy-checks-app-secret"
	liveToken  = "deploy-checks-api-token-0123456789"
)

// process is a server the test started, stopped when it ends.
type process struct {
	cmd *exec.Cmd
	log string
}

func startProcess(t *testing.T, name string, args []string, env []string) *process {
	t.Helper()
	logPath := filepath.Join(t.TempDir(), filepath.Base(name)+".log")
	lf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(name, args...)
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = lf, lf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	p := &process{cmd: cmd, log: logPath}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		lf.Close()
		if t.Failed() {
			t.Logf("%s log (tail):\n%s", filepath.Base(name), p.tail())
		}
	})
	return p
}

func (p *process) tail() string {
	b, _ := os.ReadFile(p.log)
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

func httpGet(ctx context.Context, u string, header map[string]string) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return 0, nil, err
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

func post(t *testing.T, u string, body []byte, sig string) int {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, u, strings.NewReader(string(body)))
	req.Header.Set("Content-Type", "application/json")
	if sig != "" {
		req.Header.Set("X-Hub-Signature-256", sig)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", u, err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

func sign(body []byte) string {
	m := hmac.New(sha256.New, []byte(liveSecret))
	m.Write(body)
	return "sha256=" + hex.EncodeToString(m.Sum(nil))
}

// livePhoneHashKey is the one key of serve and process: the database
// refuses a second.
const livePhoneHashKey = "deploy-checks-phone-hash-key"

// TestLive runs `wahook serve` on a real clickhouse-server with the
// migrated schema, sends it Meta-shaped traffic with `wahook loadtest` (plus a
// bad signature, an undecodable body and API requests over their limit),
// lets a real Prometheus scrape it with wahook's rules, and then checks that
// every metric the rules and dashboards name is exported, every recording
// rule evaluates to a non-empty series, every dashboard PromQL query is
// accepted, and every dashboard SQL query runs and returns rows.
func TestLive(t *testing.T) {
	promBin := tool(t, "prometheus")
	bin := wahookBinary(t)
	db := schematest.ClickHouse(t)
	listen := fmt.Sprintf("127.0.0.1:%d", schematest.FreePort(t))
	apiListen := fmt.Sprintf("127.0.0.1:%d", schematest.FreePort(t))
	natsListen := fmt.Sprintf("127.0.0.1:%d", schematest.FreePort(t))
	promListen := fmt.Sprintf("127.0.0.1:%d", schematest.FreePort(t))

	serve := startProcess(t, bin, []string{"serve",
		"--data-dir", t.TempDir(), "--listen", listen, "--api-listen", apiListen, "--nats-listen", natsListen,
		"--clickhouse-dsn", db.DSN, "--funnel-interval", "1s", "--api-limit-global", "20/1m", "--log-format", "console",
	}, cleanEnv([]string{"WAHOOK_APP_SECRET=" + liveSecret, "WAHOOK_API_TOKEN=" + liveToken, "WAHOOK_PHONE_HASH_KEY=" + livePhoneHashKey}))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	testutil.EventuallyErr(t, 90*time.Second, "wahook serve ready", func() error {
		code, body, err := httpGet(ctx, "http://"+listen+"/readyz", nil)
		if err != nil {
			return err
		}
		if code != 200 {
			return fmt.Errorf("/readyz %d %s", code, body)
		}
		return nil
	})

	for _, path := range []string{"/healthz", "/readyz", "/metrics"} {
		if code, _, err := httpGet(ctx, "http://"+listen+path, nil); err != nil || code != 200 {
			t.Errorf("GET %s on --listen: %d %v, the deploy files probe and scrape it", path, code, err)
		}
	}

	// process and api alone, as the chart and compose run them, against
	// serve's NATS and the same ClickHouse: their probes and /metrics answer
	// on their listen flags.
	processListen := fmt.Sprintf("127.0.0.1:%d", schematest.FreePort(t))
	apiAloneListen := fmt.Sprintf("127.0.0.1:%d", schematest.FreePort(t))
	startProcess(t, bin, []string{"process", "--listen", processListen, "--data-dir", t.TempDir(),
		"--nats-url", "nats://" + natsListen, "--clickhouse-dsn", db.DSN, "--funnel-interval", "0", "--no-pacing", "--log-format", "console",
	}, cleanEnv([]string{"WAHOOK_PHONE_HASH_KEY=" + livePhoneHashKey}))
	// api alone reads its token from a tokens file, as a deployment with
	// tenants does, so that the file's gauge is exported too.
	tokensFile := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(tokensFile, []byte("live:"+liveToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	startProcess(t, bin, []string{"api", "--api-listen", apiAloneListen, "--clickhouse-dsn", db.DSN, "--api-tokens-file", tokensFile, "--log-format", "console"},
		cleanEnv(nil))
	for name, addr := range map[string]string{"process": processListen, "api": apiAloneListen} {
		testutil.EventuallyErr(t, 90*time.Second, "wahook "+name+" ready", func() error {
			for _, path := range []string{"/readyz", "/healthz", "/metrics"} {
				code, body, err := httpGet(ctx, "http://"+addr+path, nil)
				if err != nil {
					return err
				}
				if code != 200 {
					return fmt.Errorf("%s %d %.200s", path, code, body)
				}
			}
			return nil
		})
	}

	promDir := t.TempDir()
	promCfg := fmt.Sprintf(`global: {scrape_interval: 1s, evaluation_interval: 1s}
rule_files: [%q]
scrape_configs:
  - job_name: wahook
    static_configs: [{targets: [%q]}]
`, rulesFile(), listen)
	if err := os.WriteFile(filepath.Join(promDir, "prometheus.yml"), []byte(promCfg), 0o644); err != nil {
		t.Fatal(err)
	}
	startProcess(t, promBin, []string{"--config.file=" + filepath.Join(promDir, "prometheus.yml"),
		"--storage.tsdb.path=" + filepath.Join(promDir, "data"), "--web.listen-address=" + promListen}, cleanEnv(nil))

	// Meta-shaped traffic: statuses, inbound, failures of the quality and
	// throughput classes, quality updates and throughput upgrades.
	out, err := run(t, 3*time.Minute, binDir, cleanEnv(nil), bin, "loadtest",
		"--url", "http://"+listen+"/webhook", "--app-secret", liveSecret, "--metrics-url", "-",
		"--numbers", "4", "--outbound-mps", "15", "--duration", "6s",
		"--quality-every", "1s", "--upgrade-every", "2s", "--failure-mix", "131048=3%,130429=3%,131026=2%")
	if err != nil {
		t.Fatalf("wahook loadtest: %v\n%s", err, out)
	}
	// A wrong signature, an undecodable body, and the API over its limit.
	if code := post(t, "http://"+listen+"/webhook", []byte(`{"object":"whatsapp_business_account"}`), "sha256="+strings.Repeat("0", 64)); code != 401 {
		t.Errorf("POST with a wrong signature: %d, want 401", code)
	}
	bad := []byte(`not json at all`)
	if code := post(t, "http://"+listen+"/webhook", bad, sign(bad)); code != 200 {
		t.Errorf("POST of a signed undecodable body: %d, want 200", code)
	}
	limited := 0
	// 45 requests: however a clock-aligned window splits them, one window gets over 20.
	for i := 0; i < 45; i++ {
		code, _, err := httpGet(ctx, "http://"+apiListen+"/api/v1/error-codes", map[string]string{"Authorization": "Bearer " + liveToken})
		if err != nil {
			t.Fatal(err)
		}
		if code == 429 {
			limited++
		}
	}
	if limited == 0 {
		t.Error("the API answered no 429 over --api-limit-global 20/1m")
	}

	t.Run("metrics exist", func(t *testing.T) { checkMetricNames(t, ctx, listen, processListen, apiAloneListen) })
	t.Run("recording rules", func(t *testing.T) { checkRecordingRules(t, ctx, promListen) })
	t.Run("dashboard promql", func(t *testing.T) { checkDashboardPromQL(t, ctx, promListen) })
	t.Run("dashboard sql", func(t *testing.T) { checkDashboardSQL(t, ctx, db.Conn) })
	if t.Failed() {
		t.Logf("serve log tail:\n%s", serve.tail())
	}
}

var metricToken = regexp.MustCompile(`\b(?:wahook|process|go)_[a-zA-Z0-9_]+\b`)

// exportedMetrics scrapes /metrics and returns every series name it can
// hold: a histogram's _bucket, _sum and _count, a summary's _sum and _count.
func exportedMetrics(t *testing.T, ctx context.Context, listen string) map[string]bool {
	t.Helper()
	code, body, err := httpGet(ctx, "http://"+listen+"/metrics", nil)
	if err != nil || code != 200 {
		t.Fatalf("GET /metrics: %d %v", code, err)
	}
	names := map[string]bool{}
	sc := bufio.NewScanner(strings.NewReader(string(body)))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 4 && f[0] == "#" && f[1] == "TYPE" {
			names[f[2]] = true
			switch f[3] {
			case "histogram":
				names[f[2]+"_bucket"], names[f[2]+"_sum"], names[f[2]+"_count"] = true, true, true
			case "summary":
				names[f[2]+"_sum"], names[f[2]+"_count"] = true, true
			}
		}
	}
	return names
}

// namedMetrics are the metric names of the rules and dashboards, with where
// each is named.
func namedMetrics(t *testing.T) map[string][]string {
	t.Helper()
	named := map[string][]string{}
	for _, g := range loadRules(t).Groups {
		for _, r := range g.Rules {
			for _, m := range metricToken.FindAllString(r.Expr, -1) {
				named[m] = append(named[m], "rule "+r.Record+r.Alert)
			}
		}
	}
	for _, q := range dashboardTargets(t) {
		for _, m := range metricToken.FindAllString(q.expr, -1) {
			named[m] = append(named[m], "dashboard "+q.where)
		}
	}
	return named
}

// checkMetricNames: every metric the rules and dashboards name is exported by
// serve, or by process or api alone (the services Kubernetes and compose
// scrape).
func checkMetricNames(t *testing.T, ctx context.Context, listens ...string) {
	exported := map[string]bool{}
	for _, l := range listens {
		for n := range exportedMetrics(t, ctx, l) {
			exported[n] = true
		}
	}
	named := namedMetrics(t)
	if len(named) < 10 {
		t.Fatalf("only %d metric names found in the rules and dashboards", len(named))
	}
	names := make([]string, 0, len(named))
	for n := range named {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		if exported[n] {
			continue
		}
		if lazyMetrics[n] && registeredInSource(t, n) {
			t.Logf("metric %s is registered in wahook's source but exported only after its first event", n)
			continue
		}
		t.Errorf("metric %s, named by %s, is exported by neither wahook serve, process nor api", n, strings.Join(uniq(named[n]), ", "))
	}
}

// lazyMetrics are labelled counters that wahook exports only once a first
// event gives them a label value (a KV write failure has no series before the
// first failure). A name here still has to be registered in wahook's source.
var lazyMetrics = map[string]bool{
	"wahook_stage2_write_failures_total": true,
}

// registeredInSource reports whether a non-test Go file of the repository
// registers a metric of that name.
func registeredInSource(t *testing.T, name string) bool {
	t.Helper()
	found := false
	needle := `Name: "` + name + `"`
	_ = filepath.WalkDir(repoRoot, func(path string, d os.DirEntry, err error) error {
		if err != nil || found {
			return err
		}
		if d.IsDir() && (d.Name() == "deploy" || strings.HasPrefix(d.Name(), ".") || d.Name() == "data") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err == nil && strings.Contains(string(b), needle) {
			found = true
		}
		return nil
	})
	return found
}

func uniq(s []string) []string {
	sort.Strings(s)
	out := s[:0]
	for i, v := range s {
		if i == 0 || v != s[i-1] {
			out = append(out, v)
		}
	}
	return out
}

// promQuery runs an instant query and returns the number of series.
func promQuery(ctx context.Context, promListen, expr string) (int, error) {
	code, body, err := httpGet(ctx, "http://"+promListen+"/api/v1/query?query="+url.QueryEscape(expr), nil)
	if err != nil {
		return 0, err
	}
	var r struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			Result []json.RawMessage `json:"result"`
		} `json:"data"`
	}
	if err := json.Unmarshal(body, &r); err != nil {
		return 0, fmt.Errorf("%d %s: %v", code, body, err)
	}
	if r.Status != "success" {
		return 0, fmt.Errorf("query %s: %s", expr, r.Error)
	}
	return len(r.Data.Result), nil
}

func checkRecordingRules(t *testing.T, ctx context.Context, promListen string) {
	var records []string
	for _, g := range loadRules(t).Groups {
		for _, r := range g.Rules {
			if r.Record != "" {
				records = append(records, r.Record)
			}
		}
	}
	if len(records) == 0 {
		t.Fatal("no recording rules")
	}
	testutil.EventuallyErr(t, 90*time.Second, "every recording rule has a series", func() error {
		var empty []string
		for _, r := range records {
			n, err := promQuery(ctx, promListen, r)
			if err != nil {
				return err
			}
			if n == 0 {
				empty = append(empty, r)
			}
		}
		if len(empty) > 0 {
			return fmt.Errorf("empty: %s", strings.Join(empty, ", "))
		}
		return nil
	})
	// The alerts evaluate without errors.
	code, body, err := httpGet(ctx, "http://"+promListen+"/api/v1/rules", nil)
	if err != nil || code != 200 {
		t.Fatalf("GET /api/v1/rules: %d %v", code, err)
	}
	var rr struct {
		Data struct {
			Groups []struct {
				Rules []struct {
					Name      string `json:"name"`
					Health    string `json:"health"`
					LastError string `json:"lastError"`
				} `json:"rules"`
			} `json:"groups"`
		} `json:"data"`
	}
	if err := json.Unmarshal(body, &rr); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, g := range rr.Data.Groups {
		for _, r := range g.Rules {
			n++
			if r.Health == "err" {
				t.Errorf("rule %s: %s", r.Name, r.LastError)
			}
		}
	}
	if n == 0 {
		t.Error("Prometheus loaded no rules")
	}
}

// dashboardTarget is one query of a committed dashboard.
type dashboardTarget struct {
	where string // dashboard and panel title
	expr  string // PromQL
	sql   string // ClickHouse SQL
}

func dashboardTargets(t *testing.T) []dashboardTarget {
	t.Helper()
	files, _ := filepath.Glob(deployPath("grafana", "dashboards", "*.json"))
	if len(files) == 0 {
		t.Fatal("no dashboards in deploy/grafana/dashboards")
	}
	var out []dashboardTarget
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var d struct {
			Panels []struct {
				Title   string `json:"title"`
				Targets []struct {
					Expr   string `json:"expr"`
					RawSQL string `json:"rawSql"`
				} `json:"targets"`
			} `json:"panels"`
		}
		if err := json.Unmarshal(b, &d); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		for _, p := range d.Panels {
			for _, tg := range p.Targets {
				out = append(out, dashboardTarget{where: filepath.Base(f) + ": " + p.Title, expr: tg.Expr, sql: tg.RawSQL})
			}
		}
	}
	return append(out, alertTargets(t)...)
}

// alertTargets are the ClickHouse queries of the Grafana alert rules, run
// over their own relative range (the live test's from and to cover it).
func alertTargets(t *testing.T) []dashboardTarget {
	t.Helper()
	files, _ := filepath.Glob(deployPath("grafana", "provisioning", "alerting", "*.json"))
	var out []dashboardTarget
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var p struct {
			Groups []struct {
				Rules []struct {
					Title string `json:"title"`
					Data  []struct {
						DatasourceUID string `json:"datasourceUid"`
						Model         struct {
							RawSQL string `json:"rawSql"`
						} `json:"model"`
					} `json:"data"`
				} `json:"rules"`
			} `json:"groups"`
		}
		if err := json.Unmarshal(b, &p); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		for _, g := range p.Groups {
			for _, r := range g.Rules {
				n := 0
				for _, d := range r.Data {
					if d.Model.RawSQL != "" {
						n++
						out = append(out, dashboardTarget{where: filepath.Base(f) + ": alert " + r.Title, sql: d.Model.RawSQL})
					}
				}
				if n == 0 {
					t.Errorf("%s: alert %s has no SQL", f, r.Title)
				}
			}
		}
	}
	if len(out) == 0 {
		t.Error("no Grafana alert rules in deploy/grafana/provisioning/alerting")
	}
	return out
}

func checkDashboardPromQL(t *testing.T, ctx context.Context, promListen string) {
	n := 0
	for _, q := range dashboardTargets(t) {
		if q.expr == "" {
			continue
		}
		n++
		expr := strings.ReplaceAll(q.expr, "$__rate_interval", "1m")
		series, err := promQuery(ctx, promListen, expr)
		if err != nil {
			t.Errorf("%s: %v", q.where, err)
		}
		// A process_* or go_* metric kept to wahook's targets by a join
		// must still find wahook's own process.
		if err == nil && series == 0 && strings.Contains(expr, "and on (job, instance)") {
			t.Errorf("%s: %s finds no series of wahook serve", q.where, expr)
		}
	}
	if n == 0 {
		t.Error("no PromQL in the dashboards")
	}
}

// expandMacros replaces the ClickHouse plugin's macros as the plugin does.
func expandMacros(sql string, from, to time.Time, interval time.Duration) string {
	r := strings.NewReplacer(
		"$__fromTime", fmt.Sprintf("toDateTime(%d)", from.Unix()),
		"$__toTime", fmt.Sprintf("toDateTime(%d)", to.Unix()),
		"$__interval_s", strconv.Itoa(int(interval.Seconds())),
	)
	return r.Replace(sql)
}

func checkDashboardSQL(t *testing.T, ctx context.Context, conn driver.Conn) {
	var queries []dashboardTarget
	for _, q := range dashboardTargets(t) {
		if q.sql != "" {
			queries = append(queries, q)
		}
	}
	if len(queries) == 0 {
		t.Fatal("no SQL in the dashboards")
	}
	from, to := time.Now().Add(-24*time.Hour), time.Now().Add(time.Hour)
	// Rows arrive in batches; the funnel and the aggregates follow.
	testutil.EventuallyErr(t, 90*time.Second, "every dashboard query returns rows", func() error {
		var empty []string
		for _, q := range queries {
			rows, err := conn.Query(ctx, expandMacros(q.sql, from, to, time.Minute))
			if err != nil {
				t.Fatalf("%s: %v\n%s", q.where, err, q.sql)
			}
			n := 0
			for rows.Next() {
				n++
			}
			if err := rows.Err(); err != nil {
				t.Fatalf("%s: %v", q.where, err)
			}
			rows.Close()
			if n == 0 {
				empty = append(empty, q.where)
			}
		}
		if len(empty) > 0 {
			return fmt.Errorf("no rows: %s", strings.Join(empty, "; "))
		}
		return nil
	})
}
