package checks

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/wahook/wahook/deploy/tools/dashboards"
)

// The committed dashboards and alert rules are what package dashboards
// builds: regenerate them with `go generate ./...` in deploy/tools.
func TestDashboardsUpToDate(t *testing.T) {
	files, err := dashboards.Files()
	if err != nil {
		t.Fatal(err)
	}
	committed, _ := filepath.Glob(deployPath("grafana", "dashboards", "*.json"))
	alerts, _ := filepath.Glob(deployPath("grafana", "provisioning", "alerting", "*.json"))
	if len(committed)+len(alerts) != len(files) {
		t.Errorf("deploy/grafana holds %d generated files, the generator makes %d", len(committed)+len(alerts), len(files))
	}
	for name, want := range files {
		got, err := os.ReadFile(deployPath("grafana", filepath.FromSlash(name)))
		if err != nil {
			t.Errorf("%s: %v (run go generate ./... in deploy/tools)", name, err)
			continue
		}
		if !bytes.Equal(got, want) {
			t.Errorf("deploy/grafana/%s is not what the generator makes: run go generate ./... in deploy/tools", name)
		}
	}
}
