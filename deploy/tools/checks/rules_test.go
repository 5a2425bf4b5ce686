package checks

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"
)

func rulesFile() string { return deployPath("prometheus", "rules", "wahook.rules.yml") }

type ruleFile struct {
	Groups []struct {
		Name  string `json:"name"`
		Rules []struct {
			Record string `json:"record"`
			Alert  string `json:"alert"`
			Expr   string `json:"expr"`
		} `json:"rules"`
	} `json:"groups"`
}

func loadRules(t *testing.T) ruleFile {
	t.Helper()
	b, err := os.ReadFile(rulesFile())
	if err != nil {
		t.Fatal(err)
	}
	var rf ruleFile
	if err := yaml.Unmarshal(b, &rf); err != nil {
		t.Fatalf("%s: %v", rulesFile(), err)
	}
	return rf
}

func TestPromtoolRules(t *testing.T) {
	promtool := tool(t, "promtool")
	mustRun(t, time.Minute, repoRoot, promtool, "check", "rules", rulesFile())
	tests, _ := filepath.Glob(deployPath("prometheus", "tests", "*.yml"))
	if len(tests) == 0 {
		t.Fatal("no rule tests in deploy/prometheus/tests")
	}
	mustRun(t, 2*time.Minute, deployPath("prometheus", "tests"), promtool, append([]string{"test", "rules"}, tests...)...)
	mustRun(t, time.Minute, repoRoot, promtool, "check", "config", deployPath("prometheus", "prometheus.yml"))
}

// Every rule has a unit test: each recording rule is evaluated by name, and
// each alert is expected to fire at least once.
func TestEveryRuleTested(t *testing.T) {
	rf := loadRules(t)
	tests, _ := filepath.Glob(deployPath("prometheus", "tests", "*.yml"))
	var all strings.Builder
	for _, f := range tests {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		all.Write(b)
	}
	text := all.String()
	n := 0
	for _, g := range rf.Groups {
		for _, r := range g.Rules {
			n++
			switch {
			case r.Record != "":
				if !regexp.MustCompile(`expr: ` + regexp.QuoteMeta(r.Record) + `\b`).MatchString(text) {
					t.Errorf("recording rule %s has no promql_expr_test", r.Record)
				}
			case r.Alert != "":
				fires := regexp.MustCompile(`alertname: ` + regexp.QuoteMeta(r.Alert) + `\s*\n\s*eval_time: \S+\s*\n\s*exp_alerts:\s*\n\s*- exp_labels`)
				if !fires.MatchString(text) {
					t.Errorf("alert %s has no test in which it fires", r.Alert)
				}
			}
		}
	}
	if n == 0 {
		t.Fatal("no rules")
	}
}
