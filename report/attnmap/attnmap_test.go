package attnmap

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/filterlens/probe/analysis/attngrid"
	"github.com/filterlens/probe/checkpoint"
	"github.com/filterlens/probe/hooks"
	"github.com/filterlens/probe/report"
	"github.com/filterlens/probe/report/reporttest"
)

// causal4 is a 4×4 causal attention matrix with rows summing to 1.
var causal4 = [][]float32{
	{1, 0, 0, 0},
	{0.5, 0.5, 0, 0},
	{0.2, 0.3, 0.5, 0},
	{0.1, 0.2, 0.3, 0.4},
}

func TestFigureGamma(t *testing.T) {
	g, _ := attngrid.NewGrid(4, 4, 0, attngrid.PoolMax)
	for q, row := range causal4 {
		g.AddRow(q, row)
	}
	f := Figure([]*attngrid.Grid{g}, []int{0}, Options{Gamma: 0.5})
	z := f.Panels[0].Heatmap.Z
	if math.Abs(z[1*4+0]-math.Sqrt(0.5)) > 1e-7 || z[0] != 1 {
		t.Errorf("Â^0.5 = %v", z[:8])
	}
	if f.Panels[0].Heatmap.Scale.Map.Max() != 1 {
		t.Error("scale should end at the panel maximum")
	}
	if err := f.Validate(); err != nil {
		t.Fatal(err)
	}
}

func TestFromCapture(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cap.safetensors")
	// batch 2, 2 heads, T = 4; head 1 of sequence 1 is causal4.
	data := make([]float32, 2*2*4*4)
	for q, row := range causal4 {
		copy(data[((1*2+1)*4+q)*4:], row)
	}
	err := checkpoint.WriteSafetensors(path, []checkpoint.Tensor{{Name: hooks.Name(hooks.AttnPattern, 3), Shape: []int{2, 2, 4, 4}, Data: data}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	f, err := FromCapture(path, Options{Layer: 3, Heads: []int{1}, Batch: 1, Gamma: 1, MaxSize: 2, Pool: attngrid.PoolMean})
	if err != nil {
		t.Fatal(err)
	}
	if got := f.Panels[0].Heatmap.Z; math.Abs(got[0]-0.5) > 1e-7 || math.Abs(got[3]-0.3) > 1e-7 {
		t.Errorf("pooled map %v", got)
	}
	if _, err := FromCapture(path, Options{Layer: 0}); err == nil || !strings.Contains(err.Error(), "blocks.3.attn.hook_pattern") {
		t.Errorf("missing layer: %v", err)
	}
	if _, err := FromCapture(path, Options{Layer: 3, Heads: []int{5}}); err == nil {
		t.Error("head out of range accepted")
	}
}

// TestFigureTokens: with token strings, a short map is labelled by token
// on both axes and a long, downsampled one by round positions with each
// block's text on hover; both reports pass the browser check (no
// overlapping or clipped labels at 1024–1920 px).
func TestFigureTokens(t *testing.T) {
	causal := func(T, maxSize int) *attngrid.Grid {
		g, _ := attngrid.NewGrid(T, T, maxSize, attngrid.PoolMax)
		for q := 0; q < T; q++ {
			row := make([]float32, T)
			for k := 0; k <= q; k++ {
				row[k] = 1 / float32(q+1)
			}
			g.AddRow(q, row)
		}
		return g
	}
	words := strings.Fields("The quick brown fox jumps over the lazy dog , and \" quotes \\ or </script> survive in a tooltip")
	short := Figure([]*attngrid.Grid{causal(len(words), 0)}, []int{0}, Options{Tokens: words})
	hm := short.Panels[0].Heatmap
	if len(hm.XTokens) != len(words) || hm.XTokens[3] != "fox" || hm.YTokens[15] != "</script>" {
		t.Fatalf("short map tokens %q / %q", hm.XTokens, hm.YTokens)
	}
	if !strings.Contains(short.Caption, "by token") {
		t.Errorf("caption does not say the axes show tokens: %s", short.Caption)
	}
	long := make([]string, 300)
	for i := range long {
		long[i] = words[i%len(words)] + " "
	}
	blocked := Figure([]*attngrid.Grid{causal(300, 64), causal(300, 64)}, []int{0, 1}, Options{Tokens: long})
	blocked.ID = "attention-blocks"
	if bt := blocked.Panels[0].Heatmap.XTokens[0]; !strings.HasPrefix(bt, "The quick brown fox") {
		t.Errorf("block 0 text %q", bt)
	}
	for _, f := range []*report.Figure{short, blocked} {
		for _, p := range report.CaptionProblems(f) {
			t.Error(p)
		}
	}
	_, err := report.LocateECharts()
	r := &report.Report{Title: "tokens", Figures: []*report.Figure{short, blocked}}
	w, werr := r.Write(t.TempDir(), report.WriteOptions{Static: err != nil, DPI: 40})
	if werr != nil {
		t.Fatal(werr)
	}
	page, _ := os.ReadFile(w.HTML)
	if err == nil && !strings.Contains(string(page), "%3C%2Fscript%3E") {
		t.Error("tokens are not percent-encoded in the tooltip")
	}
	reporttest.Check(t, reporttest.Browser(t), w.HTML, -1)
	dir := t.TempDir()
	if d := os.Getenv("PROBE_KEEP_REPORT"); d != "" {
		dir = d
	}
	sw, err := r.Write(dir, report.WriteOptions{Static: true, DPI: 60})
	if err != nil {
		t.Fatal(err)
	}
	reporttest.Check(t, reporttest.Browser(t), sw.HTML, 2)
}
