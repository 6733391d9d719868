package main

import (
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/filterlens/probe/checkpoint"
	"github.com/filterlens/probe/hooks"
	"github.com/filterlens/probe/report"
	"github.com/filterlens/probe/report/papers"
	"github.com/filterlens/probe/report/reporttest"
)

// browserOrSkip returns chromium, or "" (with the reason logged) when it is
// not installed: every report a test writes is then checked without it.
func browserOrSkip(t *testing.T) string {
	t.Helper()
	return reporttest.Browser(t)
}

// staticOnly reports whether echarts.min.js is missing, so that commands
// must be tested with --static (CI installs it in .ci/setup.sh).
func staticOnly(t *testing.T) bool {
	t.Helper()
	if _, err := report.LocateECharts(); err != nil {
		t.Logf("interactive charts not tested: %v", err)
		return true
	}
	return false
}

// checkPage runs the browser check (package reporttest) on a report:
// offline, no errors, every chart drawn, and at 1024, 1280 and 1920 px no
// sideways scrolling, no overlapping or clipped text. wantCharts counts
// the interactive charts (one per panel); a static page has one per figure
// and is not counted.
func checkPage(t *testing.T, chromium, html string, wantCharts int) {
	t.Helper()
	if page, err := os.ReadFile(html); err == nil && strings.Contains(string(page), "(static SVG mode)") {
		wantCharts = -1
	}
	reporttest.Check(t, chromium, html, wantCharts)
}

func TestFiguresCommand(t *testing.T) {
	chromium := browserOrSkip(t)
	out := t.TempDir()
	args := []string{"figures", "--paper", "all", "--out", out, "--dpi", "40"}
	if staticOnly(t) {
		args = append(args, "--static")
	}
	code, stdout, stderr := probe(t, args...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	for _, p := range papers.Paper {
		r, err := papers.Build(p)
		if err != nil {
			t.Fatal(err)
		}
		charts := 0
		for _, f := range r.Figures {
			charts += len(f.Panels)
			for _, ext := range []string{".png", ".svg"} {
				if st, err := os.Stat(filepath.Join(out, p, f.ID+ext)); err != nil || st.Size() < 1000 {
					t.Errorf("%s%s missing or tiny", f.ID, ext)
				}
			}
		}
		html := filepath.Join(out, p, "index.html")
		if !strings.Contains(stdout, html) {
			t.Errorf("output does not name %s:\n%s", html, stdout)
		}
		checkPage(t, chromium, html, charts)
	}
	if code, _, stderr := probe(t, "figures", "--paper", "nope", "--out", out); code == 0 || !strings.Contains(stderr, "unknown paper") {
		t.Errorf("unknown paper: exit %d, %s", code, stderr)
	}
	// AFA's figures exist only from trained toy filters: --model is required.
	if code, _, stderr := probe(t, "figures", "--paper", "afa", "--out", out); code == 0 || !strings.Contains(stderr, "--model <afa_toy folder>") {
		t.Errorf("afa without --model: exit %d, %s", code, stderr)
	}
	afaOut := filepath.Join(out, "afa")
	afaArgs := []string{"figures", "--paper", "afa", "--model", "../../zoo/checkpoints/afa_toy", "--dpi", "40", "--out", afaOut}
	if staticOnly(t) {
		afaArgs = append(afaArgs, "--static")
	}
	if code, stdout, stderr := probe(t, afaArgs...); code != 0 || !strings.Contains(stdout, "afa: 3 figures") {
		t.Errorf("afa figures: exit %d, %s %s", code, stdout, stderr)
	}
	checkPage(t, chromium, filepath.Join(afaOut, "index.html"), -1)
}

// writeCapture writes a capture file with a causal softmax pattern for
// layer 1: batch 1, 2 heads, T query and key positions.
func writeCapture(t *testing.T, path string, T int) {
	t.Helper()
	rng := rand.New(rand.NewPCG(3, 4))
	data := make([]float32, 2*T*T)
	for h := 0; h < 2; h++ {
		for q := 0; q < T; q++ {
			row := data[(h*T+q)*T : (h*T+q+1)*T]
			var sum float64
			for k := 0; k <= q; k++ {
				logit := rng.NormFloat64() - 0.05*float64(q-k)
				if k == 0 && h == 1 {
					logit += 4 // a sink head
				}
				row[k] = float32(math.Exp(logit))
				sum += float64(row[k])
			}
			for k := 0; k <= q; k++ {
				row[k] /= float32(sum)
			}
		}
	}
	if err := checkpoint.WriteSafetensors(path, []checkpoint.Tensor{{Name: hooks.Name(hooks.AttnPattern, 1), Shape: []int{1, 2, T, T}, Data: data}}, nil); err != nil {
		t.Fatal(err)
	}
}

func TestReportAttention(t *testing.T) {
	chromium := browserOrSkip(t)
	dir := t.TempDir()
	capFile := filepath.Join(dir, "cap.safetensors")
	writeCapture(t, capFile, 300)
	out := filepath.Join(dir, "maps")
	args := []string{"report", "attention", "--capture", capFile, "--layer", "1", "--heads", "0,1", "--max-size", "64", "--out", out, "--dpi", "40"}
	if staticOnly(t) {
		args = append(args, "--static")
	}
	if code, _, stderr := probe(t, args...); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if _, err := os.Stat(filepath.Join(out, "attention-L1-b0.png")); err != nil {
		t.Error(err)
	}
	checkPage(t, chromium, filepath.Join(out, "index.html"), 2)
	if code, _, stderr := probe(t, "report", "attention", "--capture", capFile, "--layer", "0", "--out", out); code == 0 || !strings.Contains(stderr, "blocks.1.attn.hook_pattern") {
		t.Errorf("missing layer: exit %d, %s", code, stderr)
	}
}

// TestReportSweep runs a real (tiny) sweep on the golden gated checkpoint
// and draws its report.
func TestReportSweep(t *testing.T) {
	needGolden(t)
	chromium := browserOrSkip(t)
	dir := t.TempDir()
	rng := rand.New(rand.NewPCG(5, 6))
	ids := make([]int, 500)
	for i := range ids {
		ids[i] = 1 + rng.IntN(500)
	}
	idsFile := filepath.Join(dir, "ids.json")
	data, _ := json.Marshal(ids)
	os.WriteFile(idsFile, data, 0o644)
	sw := filepath.Join(dir, "sweep")
	code, _, stderr := probe(t, "sweep", "--model", filepath.Join(goldenDir, "qwen3_gate_headwise"), "--ids", idsFile,
		"--lengths", "32,64", "--samples", "2", "--out", sw, "--progress=false", "--bootstrap", "100")
	if code != 0 {
		t.Fatalf("sweep: exit %d: %s", code, stderr)
	}
	html := filepath.Join(dir, "out", "bft.html")
	args := []string{"report", sw, "--out", html, "--dpi", "40"}
	if staticOnly(t) {
		args = append(args, "--static")
	}
	code, stdout, stderr := probe(t, args...)
	if code != 0 {
		t.Fatalf("report: exit %d: %s", code, stderr)
	}
	if want := "explore it in the browser: probe explore " + shellQuote(sw) + "\n"; !strings.Contains(stdout, want) {
		t.Errorf("report: %q, want %q", stdout, want)
	}
	page, err := os.ReadFile(html)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"bft-fig2.png", "bft-fig3.png", "bft-fig4.png", "bft-fig4-gate.png", "32.5", "1.3e-07"} {
		if !strings.Contains(string(page), want) {
			t.Errorf("report lacks %q", want)
		}
	}
	checkPage(t, chromium, html, 3+2+1+1) // Figs. 2, 3, 4 and Fig. 4 with the gate (a gated model)
	if code, _, stderr := probe(t, "report", dir); code == 0 || !strings.Contains(stderr, "manifest.json") {
		t.Errorf("not a sweep folder: exit %d, %s", code, stderr)
	}
}

// TestReportFilterFolders runs probe gdn, probe sinks and probe massive on
// a generated Qwen3.5 model and draws each folder with probe report, which
// picks the figures from the folder's manifest.
func TestReportFilterFolders(t *testing.T) {
	chromium := browserOrSkip(t)
	dir := t.TempDir()
	ck := filepath.Join(dir, "qwen35")
	if code, _, stderr := probe(t, "generate", "--arch", "qwen3_5", "--layers", "4", "--d-model", "64", "--heads", "2", "--kv-heads", "1",
		"--vocab", "128", "--out", ck); code != 0 {
		t.Fatal(stderr)
	}
	rng := rand.New(rand.NewPCG(7, 8))
	ids := make([]int, 200)
	for i := range ids {
		ids[i] = rng.IntN(128)
	}
	idsFile := filepath.Join(dir, "ids.json")
	data, _ := json.Marshal(ids)
	os.WriteFile(idsFile, data, 0o644)
	for _, c := range []struct {
		cmd  string
		figs []string
	}{
		{"gdn", []string{"gdn-heads.png", "gdn-tokens.png", "gdn-gain.png"}},
		{"sinks", []string{"sinks-first-token.png", "sinks-rate.png", "sinks-length.png", "sinks-gates.png"}},
		{"massive", []string{"massive-top.png", "massive-ppl.png"}},
	} {
		out := filepath.Join(dir, c.cmd)
		if code, _, stderr := probe(t, c.cmd, "--model", ck, "--ids", idsFile, "--lengths", "32,64", "--out", out); code != 0 {
			t.Fatalf("probe %s: exit %d: %s", c.cmd, code, stderr)
		}
		args := []string{"report", out, "--dpi", "40"}
		if staticOnly(t) {
			args = append(args, "--static")
		}
		code, stdout, stderr := probe(t, args...)
		if code != 0 {
			t.Fatalf("report of %s: exit %d: %s", c.cmd, code, stderr)
		}
		if want := fmt.Sprintf("%d figures", len(c.figs)); !strings.Contains(stdout, want) {
			t.Errorf("report of %s: %q, want %q", c.cmd, stdout, want)
		}
		if want := "probe explore " + shellQuote(out) + "\n"; !strings.Contains(stdout, want) {
			t.Errorf("report of %s: %q, want the explore command %q", c.cmd, stdout, want)
		}
		for _, f := range c.figs {
			if _, err := os.Stat(filepath.Join(out, f)); err != nil {
				t.Errorf("report of %s: %v", c.cmd, err)
			}
		}
		checkPage(t, chromium, filepath.Join(out, "report.html"), -1)
	}
}
