package papers

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/filterlens/probe/analysis"
	"github.com/filterlens/probe/analysis/attngrid"
	"github.com/filterlens/probe/model"
	"github.com/filterlens/probe/report"
)

var goldenDir = filepath.Join("..", "..", "..", "shared", "golden")

// golden returns a golden RFA case's directory, or skips.
func golden(t *testing.T, name string) string {
	t.Helper()
	dir := filepath.Join(goldenDir, name)
	if _, err := os.Stat(filepath.Join(dir, "model.safetensors")); err != nil {
		t.Skipf("golden case %s not found at %s (it comes with ../shared in CI)", name, dir)
	}
	return dir
}

func approx(a, b, rel float64) bool {
	return math.Abs(a-b) <= rel*math.Max(1, math.Max(math.Abs(a), math.Abs(b)))
}

func TestRFALagGrid(t *testing.T) {
	lin, err := RFALagGrid(100, 5, false)
	if err != nil || !slices.Equal(lin, []float64{0, 25, 50, 75, 100}) {
		t.Errorf("linear grid %v, %v", lin, err)
	}
	lg, err := RFALagGrid(1000, 4, true)
	if err != nil || lg[0] != 1 || lg[3] != 1000 || !approx(lg[1], 10, 1e-12) || !approx(lg[2], 100, 1e-12) {
		t.Errorf("log grid %v, %v", lg, err)
	}
	for _, bad := range []struct {
		max float64
		n   int
		log bool
	}{{1, 10, true}, {0, 10, false}, {10, 1, false}, {math.Inf(1), 10, false}} {
		if _, err := RFALagGrid(bad.max, bad.n, bad.log); err == nil {
			t.Errorf("RFALagGrid(%v) accepted", bad)
		}
	}
}

func TestRFACheckpointReport(t *testing.T) {
	dir := golden(t, "rfa_m1")
	m, err := model.Load(dir, model.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	all, _ := m.RFAParams()
	ps, _ := analysis.LayerParams(all, 1)
	ids := make([]int, 96)
	for i := range ids {
		ids[i] = (i * 7) % m.Config.Vocab
	}
	maps, err := analysis.StreamAttentionMaps(m, ids, analysis.AttnMapSpec{Layer: 1, MaxSize: 32, Pool: attngrid.PoolMax, Decayed: true}, model.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ax := RFALagAxis{Max: 4096, Log: true, Source: "test"}
	lags, err := ax.Grid()
	if err != nil {
		t.Fatal(err)
	}
	pr, err := analysis.RFAPriors(ps, lags)
	if err != nil {
		t.Fatal(err)
	}
	r, err := RFACheckpointReport(RFACheckpointInput{Model: dir, Ablation: "M1", RFA: true, Layers: 2, Layer: 1, Priors: pr,
		Lags: ax, Maps: maps, MapsHeads: pr.Heads, MapsTokens: "96 test ids"})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, f := range r.Figures {
		got = append(got, f.ID)
		if err := f.Validate(); err != nil {
			t.Error(err)
		}
		for _, o := range f.Options {
			if o.Source == "" {
				t.Errorf("%s: option %q has no source", f.ID, o.Name)
			}
		}
	}
	for _, p := range report.CaptionProblems(r.Figures...) {
		t.Error(p)
	}
	want := "rfa-ckpt-fig3-L1 rfa-ckpt-fig4-L1 rfa-ckpt-attn-L1 rfa-ckpt-attn-linear-L1 rfa-ckpt-attn-decayed-L1"
	if strings.Join(got, " ") != want {
		t.Fatalf("figures %v, want %s", got, want)
	}
	// Fig. 3: layer 1 of rfa_m1 has heads 0 Brownian, 1 and 3 integrative,
	// 2 diffusive: closing gates (0, 2) on top, opening gates (1, 3) below;
	// each legend carries the head's values.
	f3 := r.Figures[0]
	if len(f3.Panels) != 4 {
		t.Fatalf("Fig. 3 has %d panels", len(f3.Panels))
	}
	heads := func(pn report.Panel) (hs []string) {
		for _, s := range pn.Series {
			hs = append(hs, s.Name[:2])
		}
		return hs
	}
	if h := heads(f3.Panels[0]); !slices.Equal(h, []string{"h0", "h2"}) {
		t.Errorf("closing-gate heads %v", h)
	}
	if h := heads(f3.Panels[2]); !slices.Equal(h, []string{"h1", "h3"}) {
		t.Errorf("opening-gate heads %v", h)
	}
	p2 := &ps[2]
	reg := p2.Regime()
	wantL := fmt.Sprintf("h2: μ=%s, α/β=%s, diffusive", g3(p2.Mu), g3(reg.Alpha/reg.Beta))
	wantR := fmt.Sprintf("h2: σ²=%s, η²=%s, γ²=%s", g3(p2.Sigma2), g3(p2.Eta2), g3(p2.Gamma2))
	if f3.Panels[0].Series[1].Name != wantL || f3.Panels[1].Series[1].Name != wantR {
		t.Errorf("legends %q, %q; want %q, %q", f3.Panels[0].Series[1].Name, f3.Panels[1].Series[1].Name, wantL, wantR)
	}
	// Fig. 4: one floor line per μ > 0 head, at −log(β + c).
	f4 := r.Figures[1]
	floors := 0
	for _, s := range f4.Panels[1].Series {
		if s.Name == "" {
			floors++
			if want := -math.Log(ps[2].Regime().Beta + ps[2].CovEps); s.Color == f3.Panels[0].Series[1].Color && !approx(s.Y[0], want, 1e-12) {
				t.Errorf("head 2 floor %g, want %g", s.Y[0], want)
			}
		}
	}
	if floors != 3 {
		t.Errorf("%d floor lines, want 3", floors)
	}
	if !strings.Contains(r.Figures[2].Title, "Fig. 13") || !strings.Contains(r.Figures[2].Panels[1].Title, "μ = ") {
		t.Errorf("map title %q, panel %q", r.Figures[2].Title, r.Figures[2].Panels[1].Title)
	}
	if lbl := r.Figures[4].Panels[0].Heatmap.Scale.Label; lbl != "A^0.25" {
		t.Errorf("decayed map label %q", lbl)
	}
	if _, err := RFACheckpointReport(RFACheckpointInput{}); err == nil {
		t.Error("empty input accepted")
	}
}

func TestHelpers(t *testing.T) {
	for v, want := range map[float64]string{3.968e-5: "3.97e-5", 0.5: "0.5", 1234: "1.23e3", -6.122: "-6.12", math.NaN(): "—", 1e21: "1e21"} {
		if got := g3(v); got != want && !(math.IsNaN(v) && got == "—") {
			t.Errorf("g3(%g) = %q, want %q", v, got, want)
		}
	}
	if got := ThinIndices(10, 4); !slices.Equal(got, []int{0, 3, 6, 9}) {
		t.Errorf("ThinIndices(10, 4) = %v", got)
	}
	if got := ThinIndices(11, 4); got[len(got)-1] != 10 || len(got) > 5 {
		t.Errorf("ThinIndices(11, 4) = %v", got)
	}
	if got := ThinIndices(3, 10); !slices.Equal(got, []int{0, 1, 2}) {
		t.Errorf("ThinIndices(3, 10) = %v", got)
	}
	if !LogAxisFits(30, []float64{1e-4, math.NaN()}, []float64{0.1}) || LogAxisFits(30, []float64{0.1, 1}) || LogAxisFits(30, []float64{-1, 100}) {
		t.Error("LogAxisFits")
	}
	for h := 0; h < 8; h++ {
		c, dash := headStyle(h)
		if dash {
			t.Errorf("head %d dashed", h)
		}
		for k := 0; k < h; k++ {
			if o, _ := headStyle(k); o == c {
				t.Errorf("heads %d and %d share a colour", k, h)
			}
		}
	}
	if _, dash := headStyle(8); !dash {
		t.Error("head 8 not dashed")
	}
	z := []float64{0, 0, 0.5, 0.1, 0.2, 0.3, 0, 0.4, 1, 0.05, 0.15, 0.25}
	// 9 positive values 0.05 … 0.5, 1: the 0.8-quantile is rank ⌈7.2⌉ = 8, 0.5.
	if q := PositiveQuantile(z, 0.8); q != 0.5 {
		t.Errorf("PositiveQuantile(0.8) = %g", q)
	}
	if q := PositiveQuantile(z, 1); q != 1 {
		t.Errorf("PositiveQuantile(1) = %g", q)
	}
	if q := PositiveQuantile([]float64{0, 0}, 0.5); q != 0 {
		t.Errorf("PositiveQuantile of no positive value = %g", q)
	}
	if rfaMapFigure(true, "M2.7") != "Fig. 14" || rfaMapFigure(false, "") != "Figs. 11–12 (baseline)" {
		t.Error("rfaMapFigure")
	}
}

// TestRFAHistoryFigures draws Figs. 8–10 from a history of a golden
// checkpoint whose head 0 is a μ = 0 head.
func TestRFAHistoryFigures(t *testing.T) {
	m, err := model.Load(golden(t, "rfa_m2_sc"), model.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	all, err := m.RFAParams()
	if err != nil {
		t.Fatal(err)
	}
	h, err := analysis.RFAHistoryFromParams(1, []float64{50, 200, 1000}, []string{"a", "b", "c"}, [][]model.RFAHeadParams{all, all, all})
	if err != nil {
		t.Fatal(err)
	}
	if !h.Brownian(0) {
		t.Fatal("head 0 of rfa_m2_sc is not a μ = 0 head")
	}
	figs, err := RFAHistoryFigures(h)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, f := range figs {
		ids = append(ids, f.ID)
		if err := f.Validate(); err != nil {
			t.Error(err)
		}
	}
	if strings.Join(ids, " ") != "rfa-ckpt-fig8-L1 rfa-ckpt-fig9-L1 rfa-ckpt-fig10-L1" {
		t.Errorf("figures %v", ids)
	}
	// The μ = 0 head is left out of σ²/2μ, α and β, as in the paper.
	for _, f := range figs {
		for _, pn := range f.Panels {
			for _, s := range pn.Series {
				if s.Name == "head 0" && (strings.Contains(pn.Title, "σ²/2μ") || strings.Contains(pn.Title, "α") || strings.Contains(pn.Title, "β")) {
					t.Errorf("%s: the μ = 0 head is drawn in %q", f.ID, pn.Title)
				}
			}
		}
	}
	if !strings.Contains(strings.Join(figs[2].Notes, " "), "heads [0] omitted") {
		t.Errorf("Fig. 10 notes %v", figs[2].Notes)
	}
}
