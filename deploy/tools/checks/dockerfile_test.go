package checks

import (
	"encoding/json"
	"os"
	"strings"
	"testing"
)

// No container engine runs here, so the Dockerfile is read: its final stage
// is distroless or scratch, non-root, with a static binary; its CMD runs
// flags the binary has, and it exposes the ports the services listen on by
// default.
func TestDockerfile(t *testing.T) {
	b, err := os.ReadFile(deployPath("Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	var from, user, cmd []string
	var expose []string
	static := false
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 || strings.HasPrefix(f[0], "#") {
			continue
		}
		switch strings.ToUpper(f[0]) {
		case "FROM":
			from = append(from, f[1])
		case "USER":
			user = append(user, f[1])
		case "EXPOSE":
			expose = append(expose, f[1:]...)
		case "CMD":
			if err := json.Unmarshal([]byte(strings.TrimSpace(line[len(f[0]):])), &cmd); err != nil {
				t.Errorf("CMD is not an exec-form JSON array: %v", err)
			}
		case "RUN":
			static = static || strings.Contains(line, "CGO_ENABLED=0")
		}
	}
	if len(from) < 2 {
		t.Errorf("want a multi-stage build, got FROM %v", from)
	} else if last := from[len(from)-1]; !strings.Contains(last, "distroless") && last != "scratch" {
		t.Errorf("final stage %s is neither distroless nor scratch", last)
	}
	if len(user) == 0 || strings.HasPrefix(user[len(user)-1], "0") || strings.HasPrefix(user[len(user)-1], "root") {
		t.Errorf("the image runs as %v, want a non-root user", user)
	}
	if !static {
		t.Error("the binary is not built with CGO_ENABLED=0 (static)")
	}
	checkInvocation(t, invocation{where: "Dockerfile CMD", args: cmd})
	for sub, fl := range listenFlag {
		port := listenPort(wahookFlags(t, sub)[fl].value)
		found := false
		for _, e := range expose {
			found = found || e == port
		}
		if !found {
			t.Errorf("wahook %s listens on %s by default; the Dockerfile exposes %v", sub, port, expose)
		}
	}
}
