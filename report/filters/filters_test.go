package filters

import (
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/filterlens/probe/analysis"
	"github.com/filterlens/probe/analysis/results"
	"github.com/filterlens/probe/model"
	"github.com/filterlens/probe/report"
	"github.com/filterlens/probe/report/reporttest"
)

// genModel writes a small random checkpoint of arch and returns its folder.
func genModel(t *testing.T, arch model.Arch, s model.Size) string {
	t.Helper()
	cfg, err := model.SmallConfig(arch, s)
	if err != nil {
		t.Fatal(err)
	}
	_, tensors, err := model.Generate(cfg, 5)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), string(arch))
	if err := model.WriteHF(dir, cfg, tensors); err != nil {
		t.Fatal(err)
	}
	return dir
}

func stream(n, vocab int) ([]int, results.SourceInfo) {
	rng := rand.New(rand.NewPCG(3, 4))
	ids := make([]int, n)
	for i := range ids {
		ids[i] = rng.IntN(vocab)
	}
	return ids, results.SourceInfo{Kind: "ids", File: results.FileHash{Path: "stream.json"}, Tokens: n, Digest: analysis.TokenDigest(ids)}
}

// charts is the number of chart containers a report's HTML holds: one per
// panel, and one per figure for its static fallback when echarts is absent
// (as report.Write draws them).
func charts(r *report.Report) int {
	n := 0
	for _, f := range r.Figures {
		n += len(f.Panels)
	}
	return n
}

// writeAndCheck validates the figures and their captions, writes the
// report and runs the browser check on it.
func writeAndCheck(t *testing.T, r *report.Report, dir string) {
	t.Helper()
	for _, f := range r.Figures {
		if err := f.Validate(); err != nil {
			t.Error(err)
		}
	}
	for _, p := range report.CaptionProblems(r.Figures...) {
		t.Error(p)
	}
	_, err := report.LocateECharts()
	w, werr := r.Write(dir, report.WriteOptions{HTML: "report.html", Static: err != nil, DPI: 40})
	if werr != nil {
		t.Fatal(werr)
	}
	for _, f := range r.Figures {
		for _, ext := range []string{".png", ".svg"} {
			if _, err := os.Stat(filepath.Join(dir, f.ID+ext)); err != nil {
				t.Errorf("figure %s: %v", f.ID, err)
			}
		}
	}
	want := charts(r)
	if err != nil {
		want = len(r.Figures)
	}
	reporttest.Check(t, reporttest.Browser(t), w.HTML, want)
}

// figure returns the figure of r with id, failing t when there is none.
func figure(t *testing.T, r *report.Report, id string) *report.Figure {
	t.Helper()
	for _, f := range r.Figures {
		if f.ID == id {
			return f
		}
	}
	t.Fatalf("no figure %s in %q", id, r.Title)
	return nil
}

// TestGDNReport runs probe gdn's analysis on a small random Qwen3.5 model
// (3 Gated DeltaNet layers and 1 softmax layer) at two lengths and two
// samples, reads the folder back through Read and checks that the heat
// maps hold the gdn_heads means and the token curves the gdn rows.
func TestGDNReport(t *testing.T) {
	dir := genModel(t, model.ArchQwen35, model.Size{Layers: 4, DModel: 64, Heads: 2, KVHeads: 1, Vocab: 128, MaxPos: 512})
	ids, src := stream(400, 128)
	out := filepath.Join(t.TempDir(), "gdn")
	run := &analysis.GDNRun{RunSpec: analysis.RunSpec{Dir: dir, Source: src, Stream: ids, Out: out, Formats: []string{analysis.FormatParquet}, Threads: 1},
		Options: results.GDNOptions{StreamPlan: results.StreamPlan{Lengths: []int{48, 96}, Samples: 2}, WRows: true}}
	man, _, err := run.Run()
	if err != nil {
		t.Fatal(err)
	}
	rows, err := results.ReadTable[results.GDNRow](filepath.Join(out, "gdn.parquet"))
	if err != nil {
		t.Fatal(err)
	}
	r, err := Read(out)
	if err != nil {
		t.Fatal(err)
	}
	heads, err := results.ReadTable[results.GDNHeadRow](filepath.Join(out, "gdn_heads.parquet"))
	if err != nil {
		t.Fatal(err)
	}
	// Heat map cell (row 1, head 2) of β: the mean over both samples of
	// that head's mean β at T = 96.
	hm := figure(t, r, "gdn-heads").Panels[0].Heatmap
	nh := hm.Cols
	if hm.Rows != len(man.Layers) || nh != 4 {
		t.Fatalf("β map %d×%d, want %d layers × 4 value heads", hm.Rows, hm.Cols, len(man.Layers))
	}
	var want float64
	for _, h := range heads {
		if h.T == 96 && h.Layer == man.Layers[1] && h.Head == 2 {
			want += h.Beta / 2
		}
	}
	if got := hm.Z[1*nh+2]; math.Abs(got-want) > 1e-12 {
		t.Errorf("β cell (layer %d, head 2) = %g, want %g", man.Layers[1], got, want)
	}
	// The token curve of e^g, layer man.Layers[0], first bin: the mean
	// over heads and samples of the rows at T = 96 whose token falls in it.
	tok := figure(t, r, "gdn-tokens")
	s := tok.Panels[1].Series[0]
	width := 96.0 / 96 // T = 96 < tokenBins: one position per bin
	var sum, n float64
	for _, row := range rows {
		if row.T == 96 && row.Layer == man.Layers[0] && float64(row.Token) < width {
			sum += row.Decay
			n++
		}
	}
	if s.Name != "layer 0" || math.Abs(s.Y[0]-sum/n) > 1e-12 || s.X[0] != 0 {
		t.Errorf("e^g curve %q starts at (%g, %g), want (0, %g)", s.Name, s.X[0], s.Y[0], sum/n)
	}
	if g := figure(t, r, "gdn-gain"); len(g.Panels) != 2 || len(g.Panels[0].Series[1].X) != 2*len(man.Layers)*nh {
		t.Errorf("gain figure: %d panels, %d points; want 2 panels and one point per (layer, head, sample)", len(g.Panels), len(g.Panels[0].Series[1].X))
	}
	writeAndCheck(t, r, filepath.Join(t.TempDir(), "report"))
}

// TestGDNReportFalconH1: on a small random Falcon-H1 (attention and
// Mamba-2 in every layer) the recurrent figures hold the SSM heads only,
// and the side-by-side figure the softmax heads' n_eff and the SSM heads'
// n_eff^W of the same layers (log10 of the gdn_heads means).
func TestGDNReportFalconH1(t *testing.T) {
	dir := genModel(t, model.ArchFalconH1, model.Size{Layers: 2, DModel: 32, Heads: 4, KVHeads: 2, Vocab: 128, MaxPos: 512})
	ids, src := stream(200, 128)
	out := filepath.Join(t.TempDir(), "gdn")
	run := &analysis.GDNRun{RunSpec: analysis.RunSpec{Dir: dir, Source: src, Stream: ids, Out: out, Formats: []string{analysis.FormatParquet}, Threads: 1},
		Options: results.GDNOptions{StreamPlan: results.StreamPlan{Lengths: []int{40}, Samples: 1}, WRows: true}}
	if _, _, err := run.Run(); err != nil {
		t.Fatal(err)
	}
	r, err := Read(out)
	if err != nil {
		t.Fatal(err)
	}
	heads, err := results.ReadTable[results.GDNHeadRow](filepath.Join(out, "gdn_heads.parquet"))
	if err != nil {
		t.Fatal(err)
	}
	const ssmHeads = 2 * 32 / 16
	if hm := figure(t, r, "gdn-heads").Panels[0].Heatmap; hm.Cols != ssmHeads {
		t.Errorf("β map has %d columns, want the %d SSM heads", hm.Cols, ssmHeads)
	}
	f := figure(t, r, "gdn-side-by-side")
	if len(f.Panels) != 2 || f.Panels[0].Heatmap.Cols != 4 || f.Panels[1].Heatmap.Cols != ssmHeads {
		t.Fatalf("side-by-side figure: %d panels", len(f.Panels))
	}
	for _, h := range heads {
		if h.Layer != 1 || h.Head != 3 {
			continue
		}
		p := f.Panels[1]
		if h.Mixer == results.MixerAttention {
			p = f.Panels[0]
		}
		if got, want := p.Heatmap.Z[1*p.Heatmap.Cols+3], math.Log10(h.NEffW); math.Abs(got-want) > 1e-12 {
			t.Errorf("%s cell (layer 1, head 3) = %g, want %g", h.Mixer, got, want)
		}
	}
	writeAndCheck(t, r, filepath.Join(t.TempDir(), "report"))
}

// TestSinksReport runs probe sinks' analysis on a small Gemma 2 model
// (sliding window 64 on alternate layers) at T = 64 and 128, so the local
// layers leave queries out at 128, and on a small Qwen3.5 model (gated
// softmax layer), and checks the heat map, the sink-rate markers and the
// gate figure against the tables.
func TestSinksReport(t *testing.T) {
	for _, c := range []struct {
		arch  model.Arch
		size  model.Size
		gated bool
	}{
		{model.ArchGemma2, model.Size{Layers: 2, DModel: 64, Heads: 4, KVHeads: 2, Vocab: 128, MaxPos: 512}, false},
		{model.ArchQwen35, model.Size{Layers: 4, DModel: 64, Heads: 4, KVHeads: 2, Vocab: 128, MaxPos: 512}, true},
	} {
		t.Run(string(c.arch), func(t *testing.T) {
			dir := genModel(t, c.arch, c.size)
			ids, src := stream(500, 128)
			out := filepath.Join(t.TempDir(), "sinks")
			o := analysis.DefaultSinksOptions()
			o.Lengths, o.Samples, o.Eps = []int{64, 128}, 2, []float64{0.1, 0.3}
			man, heads, rates, err := (&analysis.SinksRun{RunSpec: analysis.RunSpec{Dir: dir, Source: src, Stream: ids, Out: out, Formats: []string{analysis.FormatParquet}, Threads: 1}, Options: o}).Run()
			if err != nil {
				t.Fatal(err)
			}
			if c.arch == model.ArchGemma2 && man.LeftOut == 0 {
				t.Fatal("no query left out at T = 128 > window 64")
			}
			r, err := Read(out)
			if err != nil {
				t.Fatal(err)
			}
			// ā_0 of (row 0, head 1) at T = 128: the samples pooled by
			// their applicable queries.
			hm := figure(t, r, "sinks-first-token").Panels[0].Heatmap
			var num, den float64
			for _, h := range heads {
				if h.T == 128 && h.Layer == man.Layers[0] && h.Head == 1 {
					num += h.BOSMass * float64(h.BOSN)
					den += float64(h.BOSN)
				}
			}
			if got := hm.Z[1]; math.Abs(got-num/den) > 1e-12 {
				t.Errorf("ā_0 cell (layer %d, head 1) = %g, want %g", man.Layers[0], got, num/den)
			}
			// The rate curves pass through the table's rows at the run's ε,
			// and never rise with ε.
			rate := figure(t, r, "sinks-rate")
			for _, p := range rate.Panels {
				for _, s := range p.Series {
					if s.Kind != report.Line {
						continue
					}
					for i := 1; i < len(s.Y); i++ {
						if s.Y[i] > s.Y[i-1] {
							t.Errorf("%s %s: Sink rate rises from %g to %g at ε = %g", p.Title, s.Name, s.Y[i-1], s.Y[i], s.X[i])
						}
					}
				}
			}
			line, marks := rate.Panels[0].Series[2], rate.Panels[0].Series[3] // T = 128: line, diamonds
			for i, e := range marks.X {
				j := int(math.Round(e*100)) - 1
				if math.Abs(line.X[j]-e) > 1e-12 || line.Y[j] != marks.Y[i] {
					t.Errorf("ε = %g: curve %g, table %g", e, line.Y[j], marks.Y[i])
				}
			}
			if n := len(rates); n == 0 {
				t.Error("no sinks_rate rows")
			}
			wantPanels := 1
			if c.arch == model.ArchGemma2 {
				wantPanels = 3 // all, global, local
			}
			if len(rate.Panels) != wantPanels {
				t.Errorf("%d sink-rate panels, want %d", len(rate.Panels), wantPanels)
			}
			var hasGates bool
			for _, f := range r.Figures {
				hasGates = hasGates || f.ID == "sinks-gates"
			}
			if hasGates != c.gated {
				t.Errorf("gate figure drawn: %v, want %v", hasGates, c.gated)
			}
			if c.gated {
				g := figure(t, r, "sinks-gates").Panels[0].Heatmap
				var want float64
				for _, h := range heads {
					if h.T == 128 && h.Layer == man.Layers[0] && h.Head == 3 {
						want += h.GateMean / 2
					}
				}
				if math.Abs(g.Z[3]-want) > 1e-12 {
					t.Errorf("mean gate cell (head 3) = %g, want %g", g.Z[3], want)
				}
			}
			writeAndCheck(t, r, filepath.Join(t.TempDir(), "report"))
		})
	}
}

// TestMassiveReport runs probe massive's analysis on a small Gemma 2
// model and checks the drawn top values and ΔNLL against the tables.
func TestMassiveReport(t *testing.T) {
	dir := genModel(t, model.ArchGemma2, model.Size{Layers: 3, DModel: 64, Heads: 4, KVHeads: 2, Vocab: 128, MaxPos: 512})
	ids, src := stream(400, 128)
	out := filepath.Join(t.TempDir(), "massive")
	o := analysis.DefaultMassiveOptions()
	o.Lengths, o.Samples, o.TopK = []int{32, 64}, 2, 4
	man, top, ppl, err := (&analysis.MassiveRun{RunSpec: analysis.RunSpec{Dir: dir, Source: src, Stream: ids, Out: out, Formats: []string{analysis.FormatParquet}, Threads: 1}, Options: o}).Run()
	if err != nil {
		t.Fatal(err)
	}
	r, err := Read(out)
	if err != nil {
		t.Fatal(err)
	}
	pts := figure(t, r, "massive-top").Panels[0].Series[0]
	var n int
	for _, row := range top {
		if row.T == 64 {
			n++
		}
	}
	if len(pts.Y) != n || n != 2*man.Model.Layers*4 {
		t.Errorf("%d top points, %d rows at T = 64, want %d", len(pts.Y), n, 2*man.Model.Layers*4)
	}
	fp := figure(t, r, "massive-ppl")
	zero := fp.Panels[0].Series[0]
	var want []float64
	for _, row := range ppl {
		if row.Intervention == results.MassiveZero {
			want = append(want, row.DNLL)
		}
	}
	if len(zero.Y) != len(want) || !strings.HasPrefix(zero.Name, "zero") {
		t.Fatalf("zero series %q has %d points, want %d", zero.Name, len(zero.Y), len(want))
	}
	for i := range want {
		if zero.Y[i] != want[i] {
			t.Errorf("ΔNLL point %d = %g, want %g", i, zero.Y[i], want[i])
		}
	}
	if rows := fp.Tables[0].Rows; len(rows) != 2*3 {
		t.Errorf("%d table rows, want 2 lengths × (none, zero, mean)", len(rows))
	}
	writeAndCheck(t, r, filepath.Join(t.TempDir(), "report"))
}

// TestReadRefuses checks the errors of Read on folders it cannot draw.
func TestReadRefuses(t *testing.T) {
	dir := t.TempDir()
	if _, err := Read(dir); err == nil || !strings.Contains(err.Error(), "not a probe gdn, sinks, massive, retrieval or experts folder") {
		t.Errorf("empty folder: %v", err)
	}
	os.WriteFile(filepath.Join(dir, results.SinksManifestName), []byte(`{"kind": "gdn"}`), 0o644)
	if _, err := Read(dir); err == nil || !strings.Contains(err.Error(), `kind "gdn", want "sinks"`) {
		t.Errorf("wrong kind: %v", err)
	}
	os.WriteFile(filepath.Join(dir, results.SinksManifestName), []byte(`{"kind": "sinks", "error": "boom"}`), 0o644)
	if _, err := Read(dir); err == nil || !strings.Contains(err.Error(), "the run failed (boom)") {
		t.Errorf("failed run: %v", err)
	}
	os.WriteFile(filepath.Join(dir, results.SinksManifestName), []byte(`{"kind": "sinks", "tables": ["sinks_heads.csv"]}`), 0o644)
	if _, err := Read(dir); err == nil || !strings.Contains(err.Error(), "--format parquet") {
		t.Errorf("CSV only: %v", err)
	}
}

// TestBins checks the position bins of the token curves: equal widths over
// [0, T), centres in positions, means of the finite values only.
func TestBins(t *testing.T) {
	for _, c := range []struct {
		T, n        int
		add         map[int]float64
		wantX, want []float64
	}{
		{T: 4, n: 256, add: map[int]float64{0: 1, 3: 5}, wantX: []float64{0, 3}, want: []float64{1, 5}},
		{T: 8, n: 2, add: map[int]float64{0: 1, 3: 3, 4: 10, 7: math.NaN()}, wantX: []float64{1.5, 5.5}, want: []float64{2, 10}},
		{T: 9, n: 3, add: map[int]float64{2: 4, 8: math.Inf(1)}, wantX: []float64{1}, want: []float64{4}},
	} {
		b := newBins(c.T, c.n)
		for x, y := range c.add {
			b.add(x, y)
		}
		x, y := b.xy()
		if len(x) != len(c.wantX) {
			t.Errorf("T = %d, %d bins: centres %v, want %v", c.T, c.n, x, c.wantX)
			continue
		}
		for i := range x {
			if x[i] != c.wantX[i] || y[i] != c.want[i] {
				t.Errorf("T = %d, %d bins: bin %d at %g mean %g, want %g and %g", c.T, c.n, i, x[i], y[i], c.wantX[i], c.want[i])
			}
		}
	}
}
