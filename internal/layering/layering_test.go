package layering

import (
	"bytes"
	"encoding/json"
	"io"
	"os/exec"
	"testing"
)

// TestLayers checks the non-test imports of every package of the module.
func TestLayers(t *testing.T) {
	cmd := exec.Command("go", "list", "-json=ImportPath,Imports", Module+"/...")
	cmd.Dir = "../.."
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		t.Fatalf("go list: %v\n%s", err, errOut.String())
	}
	imports := map[string][]string{}
	dec := json.NewDecoder(&out)
	for {
		var p struct {
			ImportPath string
			Imports    []string
		}
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		imports[p.ImportPath] = p.Imports
	}
	for _, p := range []string{"schema", "ingest", "processor", "api", "loadtest", "pacer"} {
		if _, ok := imports[Module+"/"+p]; !ok {
			t.Fatalf("package %s not listed: the check would see nothing", p)
		}
	}
	for _, line := range Check(imports) {
		t.Error(line)
	}
}

// TestCheckFindsForbiddenImports: the check fails on each kind of
// forbidden import, and passes the allowed ones.
func TestCheckFindsForbiddenImports(t *testing.T) {
	m := func(p string) string { return Module + "/" + p }
	imports := map[string][]string{
		m("schema/meta"):        {"fmt", m("schema")},
		m("schema"):             {m("processor/funnel")},
		m("ingest"):             {m("schema"), m("processor")},
		m("processor/stage2"):   {m("processor/pacing"), m("ingest")},
		m("api"):                {m("schema"), m("processor/funnel")},
		m("loadtest/simulate"):  {m("schema"), m("api")},
		m("pacer"):              {m("schema"), m("loadtest")},
		m("cmd/wahook"):         {m("ingest"), m("processor"), m("api"), m("loadtest")},
		m("ingest/dedupe"):      {m("internal/testutil")},
		m("internal/testutil"):  {"testing"},
		"example.com/elsewhere": {m("ingest")},
	}
	want := []string{
		"api imports processor/funnel",
		"ingest imports processor",
		"ingest/dedupe imports internal/testutil",
		"loadtest/simulate imports api",
		"pacer imports loadtest",
		"processor/stage2 imports ingest",
		"schema imports processor/funnel",
	}
	got := Check(imports)
	if len(got) != len(want) {
		t.Fatalf("got %d findings, want %d:\n%v", len(got), len(want), got)
	}
	for i, w := range want {
		if !bytes.HasPrefix([]byte(got[i]), []byte(w+":")) {
			t.Errorf("finding %d: %q, want %q", i, got[i], w)
		}
	}
}
