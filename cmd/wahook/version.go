package main

import (
	"context"
	"fmt"
	"io"
	"runtime/debug"
)

// version is set at build time: -ldflags "-X main.version=v1.2.3".
var version = "dev"

func runVersion(_ context.Context, _ []string, stdout, _ io.Writer) error {
	v := version
	if info, ok := debug.ReadBuildInfo(); ok && v == "dev" && info.Main.Version != "" && info.Main.Version != "(devel)" {
		v = info.Main.Version
	}
	fmt.Fprintf(stdout, "wahook %s\n", v)
	return nil
}
