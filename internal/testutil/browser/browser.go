// Package browser starts the Chromium that wahook's dashboard tests drive
// (chromedp), the same way for each of them.
package browser

import (
	"os"
	"os/exec"
	"testing"

	"github.com/chromedp/chromedp"
)

// Path finds Chromium (Debian's chromium, or chromium-browser or
// google-chrome). Without it the test is skipped, or fails when CI is set
// or required is true (a test asked for by name: scripts/test.sh and
// scripts/install-browser.sh install it).
func Path(t testing.TB, required bool) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if required || os.Getenv("CI") != "" {
		t.Fatal("no chromium on this machine: scripts/install-browser.sh installs it")
	}
	t.Skip("no chromium on this machine: scripts/install-browser.sh installs it")
	return ""
}

// Options are the allocator options of a headless Chromium at path with
// its profile in dir, a window of 1400x1000 and nothing it would fetch on
// its own (updates, sync), followed by extra.
func Options(path, dir string, extra ...chromedp.ExecAllocatorOption) []chromedp.ExecAllocatorOption {
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path), chromedp.NoSandbox, chromedp.DisableGPU, chromedp.UserDataDir(dir),
		chromedp.Flag("disable-background-networking", true), chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true), chromedp.NoFirstRun, chromedp.WindowSize(1400, 1000))
	return append(opts, extra...)
}
