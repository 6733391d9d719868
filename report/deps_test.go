package report

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// drawOnly are the module packages that no report package may depend on,
// even indirectly: report draws tables and structs, it does not run models
// (model and its internal packages), diagnostics (probes) or the AFA toy
// (afatoy). analysis does all three, so it is out too; its model-free
// subpackages (analysis/results, attngrid, rfatab, afatab) carry the data
// across.
var drawOnly = []string{"model", "probes", "afatoy", "analysis"}

// TestReportDrawsOnly runs `go list -deps` on every package under report/
// and fails when one depends on a package of drawOnly.
func TestReportDrawsOnly(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command on PATH")
	}
	const mod = "github.com/filterlens/probe/"
	out, err := exec.Command("go", "list", "-f", "{{.ImportPath}}{{range .Deps}} {{.}}{{end}}", mod+"report/...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	seen := 0
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		pkg, deps := strings.TrimPrefix(f[0], mod), f[1:]
		seen++
		var bad []string
		for _, d := range deps {
			rel, ok := strings.CutPrefix(d, mod)
			if !ok {
				continue
			}
			root, _, _ := strings.Cut(rel, "/")
			if slices.Contains(drawOnly, root) && !strings.HasPrefix(rel, "analysis/") {
				bad = append(bad, rel)
			}
		}
		if len(bad) > 0 {
			t.Errorf("%s depends on %s: report packages draw tables and structs; move the computation to analysis", pkg, strings.Join(bad, ", "))
		}
	}
	if seen < 8 {
		t.Errorf("go list found %d report packages, want at least 8", seen)
	}
}
