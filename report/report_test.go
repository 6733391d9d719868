package report

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/filterlens/probe/report/reporttest"
)

// demoFigure uses every series kind, a log axis, a colour scale and a
// heatmap, so one report exercises both renderers fully.
func demoFigure() *Figure {
	var x, y, lo, hi []float64
	for i := 0; i <= 40; i++ {
		t := float64(i) / 4
		x = append(x, t)
		y = append(y, math.Sin(t))
		lo = append(lo, math.Sin(t)-0.3)
		hi = append(hi, math.Sin(t)+0.3)
	}
	gap := append([]float64(nil), y...)
	gap[20] = math.NaN()
	var sx, sy, sv []float64
	for i := 0; i < 30; i++ {
		sx = append(sx, float64(i))
		sy = append(sy, math.Exp(float64(i)/10))
		sv = append(sv, float64(i%7))
	}
	z := make([]float64, 12*12)
	for r := 0; r < 12; r++ {
		for c := 0; c <= r; c++ {
			z[r*12+c] = 1 / float64(r-c+1)
		}
	}
	return &Figure{
		ID: "demo-1", Title: "Demo figure", Caption: "Every series kind.",
		Options: []Option{{Name: "seed", Value: "1", Source: "choice"}},
		Tables:  []Table{{Caption: "paper vs ours", Header: []string{"T", "paper", "ours"}, Rows: [][]string{{"1k", "32.5", "31.9"}}}},
		Panels: []Panel{
			{Title: "lines and band", XLabel: "Δt", YLabel: "P_Δt", Series: []Series{
				{Name: "±0.3", Kind: Band, X: x, Lo: lo, Hi: hi, Color: Blue},
				{Name: "sin (gap)", Kind: Line, X: x, Y: gap, Color: Blue},
				{Name: "dashed", Kind: Line, X: x, Y: hi, Color: Vermillion, Dash: true},
				{Name: "bars", Kind: ErrorBars, X: x[:5], Y: y[:5], Lo: lo[:5], Hi: hi[:5], Color: Black, Shape: Square},
			}},
			{Title: "log scatter", XLabel: "layer ℓ", YLabel: "n_eff", YLog: true, Legend: LegendOutside,
				Colors: &ColorScale{Label: "layer", Map: Viridis(0, 6)},
				Series: []Series{{Name: "cells", Kind: Scatter, X: sx, Y: sy, Values: sv, Shape: Diamond}}},
			{Title: "heatmap", XLabel: "key j", YLabel: "query i", YDown: true,
				Heatmap: &Heatmap{Rows: 12, Cols: 12, Z: z, DX: 1, DY: 1, Scale: ColorScale{Label: "Â", Map: Magma(0, 1)}}},
		},
	}
}

func TestValidate(t *testing.T) {
	if err := demoFigure().Validate(); err != nil {
		t.Fatal(err)
	}
	bad := demoFigure()
	bad.Panels[0].Series[1].Y = bad.Panels[0].Series[1].Y[:3]
	if err := bad.Validate(); err == nil {
		t.Error("length mismatch not caught")
	}
	bad = demoFigure()
	bad.Panels[1].Series[0].Y[0] = -1
	if err := bad.Validate(); err == nil || !strings.Contains(err.Error(), "y[0]") {
		t.Errorf("non-positive value on a log axis: %v", err)
	}
	bad = demoFigure()
	bad.ID = "a b"
	if err := bad.Validate(); err == nil {
		t.Error("bad id not caught")
	}
}

func TestColormap(t *testing.T) {
	v := Viridis(0, 1)
	if Hex(v.Value(0)) != "#440154" || Hex(v.Value(1)) != "#fde725" {
		t.Errorf("viridis ends %s %s", Hex(v.Value(0)), Hex(v.Value(1)))
	}
	// Midway between stop 4 (#26828e) and stop 5 (#1f9e89) is fraction 4.5/9.
	if got := v.Frac(4.5 / 9); got.R != (0x26+0x1f+1)/2 || got.G != (0x82+0x9e)/2 {
		t.Errorf("viridis(0.5) = %s", Hex(got))
	}
	if Hex(Magma(0, 2).Value(5)) != "#fcfdbf" {
		t.Error("magma clamps above max")
	}
}

func TestStaticRender(t *testing.T) {
	f := demoFigure()
	data, err := f.PNG(60)
	if err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	// Two columns of 5.4 in, two rows of 4 in plus the title band, at 60 dpi.
	if b := img.Bounds(); b.Dx() != 648 || b.Dy() != int(math.Round((8+titleBand)*60)) {
		t.Errorf("PNG is %v", b)
	}
	svg, err := f.SVG()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(svg, []byte("<svg")) || !bytes.Contains(svg, []byte("Demo figure")) {
		t.Error("SVG lacks the title")
	}
}

func TestWriteStatic(t *testing.T) {
	dir := t.TempDir()
	r := &Report{Title: "Demo", Figures: []*Figure{demoFigure()}}
	w, err := r.Write(dir, WriteOptions{Static: true, DPI: 50})
	if err != nil {
		t.Fatal(err)
	}
	html, _ := os.ReadFile(w.HTML)
	for _, want := range []string{"Content-Security-Policy", `class="chart static"`, "<svg", "paper vs ours", "demo-1.png"} {
		if !bytes.Contains(html, []byte(want)) {
			t.Errorf("static page lacks %q", want)
		}
	}
	if bytes.Contains(html, []byte("<script")) {
		t.Error("static page has a script")
	}
	if len(w.Files) != 2 {
		t.Errorf("files %v", w.Files)
	}
	reporttest.Check(t, reporttest.Browser(t), w.HTML, 1)
}

// npmTarball writes an npm-style tarball holding js as
// package/dist/echarts.min.js.
func npmTarball(t *testing.T, js []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "echarts-"+EChartsVersion+".tgz")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	zw := gzip.NewWriter(f)
	tw := tar.NewWriter(zw)
	for _, e := range []struct {
		name string
		data []byte
	}{{"package/package.json", []byte(`{"name":"echarts"}`)}, {"package/dist/echarts.min.js", js}} {
		tw.WriteHeader(&tar.Header{Name: e.name, Mode: 0o644, Size: int64(len(e.data))})
		tw.Write(e.data)
	}
	tw.Close()
	zw.Close()
	f.Close()
	return p
}

// TestLocateECharts follows the search order outside the repository: the
// environment variable, the repository's third_party/ (absent here), then
// the user cache that InstallECharts fills; with none, ChooseCharts falls
// back to static SVG with exactly one line.
func TestLocateECharts(t *testing.T) {
	repoCopy, repoErr := LocateECharts() // the checkout's copy, when installed
	t.Chdir(t.TempDir())
	cache := t.TempDir()
	t.Setenv("XDG_CACHE_HOME", cache)
	t.Setenv("HOME", cache)
	t.Setenv(EChartsEnv, filepath.Join(t.TempDir(), "missing.js"))
	if _, err := LocateECharts(); err == nil || !strings.Contains(err.Error(), "probe setup") || !strings.Contains(err.Error(), EChartsEnv) {
		t.Errorf("env var pointing to nothing: %v", err)
	}
	r := &Report{Title: "x", Figures: []*Figure{demoFigure()}}
	if _, err := r.Write(t.TempDir(), WriteOptions{ECharts: filepath.Join(cache, "nope.js")}); err == nil || !strings.Contains(err.Error(), "nope.js") {
		t.Errorf("Write with an explicit missing echarts: %v", err)
	}
	var note bytes.Buffer
	o := ChooseCharts(WriteOptions{DPI: 40}, &note)
	if !o.Static || strings.Count(note.String(), "\n") != 1 || !strings.Contains(note.String(), "static SVG") || !strings.Contains(note.String(), "probe setup") {
		t.Errorf("fallback: static %v, note %q", o.Static, note.String())
	}
	if w, err := r.Write(t.TempDir(), o); err != nil {
		t.Errorf("static fallback report: %v", err)
	} else {
		reporttest.Check(t, reporttest.Browser(t), w.HTML, 1)
	}
	note.Reset()
	if o := ChooseCharts(WriteOptions{Static: true}, &note); !o.Static || note.Len() != 0 {
		t.Errorf("--static: %+v, note %q", o, note.String())
	}
	t.Setenv(EChartsEnv, "")
	if _, err := LocateECharts(); err == nil || !strings.Contains(err.Error(), filepath.Join(cache, "probe", "echarts", EChartsVersion)) {
		t.Errorf("no copy anywhere: %v", err)
	}
	if _, err := InstallECharts(npmTarball(t, bytes.Repeat([]byte("echarts "), 20000))); err == nil || !strings.Contains(err.Error(), "SHA-256") {
		t.Errorf("a tarball with another echarts.min.js: %v", err)
	}
	if repoErr != nil {
		t.Skipf("the rest needs the real echarts.min.js: %v", repoErr)
	}
	js, err := os.ReadFile(repoCopy)
	if err != nil {
		t.Fatal(err)
	}
	dst, err := InstallECharts(npmTarball(t, js))
	if err != nil {
		t.Fatal(err)
	}
	if got, err := LocateECharts(); err != nil || got != dst {
		t.Errorf("after InstallECharts: %q, %v; want %s", got, err, dst)
	}
	note.Reset()
	if o := ChooseCharts(WriteOptions{}, &note); o.Static || o.ECharts != dst || note.Len() != 0 {
		t.Errorf("with the cache: %+v, note %q", o, note.String())
	}
	t.Setenv(EChartsEnv, repoCopy)
	if got, _ := LocateECharts(); got != repoCopy {
		t.Errorf("the environment variable does not come first: %s", got)
	}
}

// needBrowser returns chromium, or skips with the reason.
func needBrowser(t *testing.T) string {
	t.Helper()
	chromium := reporttest.Browser(t)
	if chromium == "" {
		t.Skip("skipping the browser check: no chromium")
	}
	if _, err := LocateECharts(); err != nil {
		t.Skipf("skipping the browser check: %v", err)
	}
	return chromium
}

func TestReportInBrowser(t *testing.T) {
	chromium := needBrowser(t)
	dir := t.TempDir()
	r := &Report{Title: "Demo", Figures: []*Figure{demoFigure()}}
	w, err := r.Write(dir, WriteOptions{DPI: 50})
	if err != nil {
		t.Fatal(err)
	}
	reporttest.Check(t, chromium, w.HTML, 3)
	sw, err := r.Write(filepath.Join(dir, "static"), WriteOptions{Static: true, DPI: 50})
	if err != nil {
		t.Fatal(err)
	}
	reporttest.Check(t, chromium, sw.HTML, 1)
}
