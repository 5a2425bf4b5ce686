// Package tools holds wahook's deployment tooling: the dashboard generator
// (cmd/dashgen) and the checks of deploy/ (package checks).
package tools

//go:generate go run ./cmd/dashgen -out ../grafana
