// Command dashgen writes wahook's Grafana dashboards and ClickHouse alert
// rules, built by package dashboards, under a directory (default:
// deploy/grafana, from the deploy/tools module). The tests fail when the
// committed files differ.
//
//	cd deploy/tools && go run ./cmd/dashgen
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"

	"github.com/wahook/wahook/deploy/tools/dashboards"
)

func main() {
	out := flag.String("out", "../grafana", "directory holding dashboards/ and provisioning/alerting/")
	flag.Parse()
	files, err := dashboards.Files()
	if err != nil {
		fmt.Fprintln(os.Stderr, "dashgen:", err)
		os.Exit(1)
	}
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		p := filepath.Join(*out, n)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			fmt.Fprintln(os.Stderr, "dashgen:", err)
			os.Exit(1)
		}
		if err := os.WriteFile(p, files[n], 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "dashgen:", err)
			os.Exit(1)
		}
		fmt.Println("wrote", p)
	}
}
