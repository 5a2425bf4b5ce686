// Command cpucost prints the CPU seconds a CPU profile of wahook serve gives
// each part of the system (package cpucost), as JSON:
//
//	cpucost profile.pb.gz
//	{"duration_s": 18.0, "total_s": 20.1, "parts": [{"part": "ingest ...", "cpu_s": 4.2}, ...]}
//
// scripts/bench.sh builds and runs it for its cost breakdown.
package main

import (
	"encoding/json"
	"fmt"
	"os"

	"github.com/wahook/wahook/loadtest/cpucost"
)

type part struct {
	Part string  `json:"part"`
	CPU  float64 `json:"cpu_s"`
}

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: cpucost PROFILE")
		os.Exit(2)
	}
	if err := run(os.Args[1]); err != nil {
		fmt.Fprintln(os.Stderr, "cpucost:", err)
		os.Exit(1)
	}
}

func run(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	p, err := cpucost.Read(f)
	if err != nil {
		return err
	}
	c, err := cpucost.Classify(p, cpucost.Parts)
	if err != nil {
		return err
	}
	out := struct {
		Duration float64 `json:"duration_s"`
		Total    float64 `json:"total_s"`
		Parts    []part  `json:"parts"`
	}{Duration: c.Duration.Seconds(), Total: c.Total.Seconds()}
	for _, n := range cpucost.Names(cpucost.Parts) {
		out.Parts = append(out.Parts, part{n, c.Parts[n].Seconds()})
	}
	return json.NewEncoder(os.Stdout).Encode(out)
}
