package report

import (
	"bytes"
	"context"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/filterlens/probe/report/browser"
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
	for _, want := range []string{"Content-Security-Policy", `class="chart"`, "<svg", "paper vs ours", "demo-1.png"} {
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
}

func TestLocateEChartsEnv(t *testing.T) {
	t.Setenv(EChartsEnv, filepath.Join(t.TempDir(), "missing.js"))
	if _, err := LocateECharts(); err == nil || !strings.Contains(err.Error(), "setup.sh") {
		t.Errorf("missing file: %v", err)
	}
	r := &Report{Title: "x", Figures: []*Figure{demoFigure()}}
	if _, err := r.Write(t.TempDir(), WriteOptions{}); err == nil || !strings.Contains(err.Error(), EChartsEnv) {
		t.Errorf("Write without echarts: %v", err)
	}
}

// needBrowser returns chromium, or skips with the reason.
func needBrowser(t *testing.T) string {
	t.Helper()
	chromium, err := browser.Find()
	if err != nil {
		t.Skipf("skipping the browser check: %v", err)
	}
	if _, err := LocateECharts(); err != nil {
		t.Skipf("skipping the browser check: %v", err)
	}
	return chromium
}

// CheckInBrowser opens a written report in headless Chromium and fails the
// test on any problem the offline check finds.
func CheckInBrowser(t *testing.T, chromium, html string, wantCharts int) *browser.Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	res, err := browser.Check(ctx, chromium, html)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range res.Problems(0.02) {
		t.Error(p)
	}
	if len(res.Charts) != wantCharts {
		t.Errorf("%d chart containers, want %d", len(res.Charts), wantCharts)
	}
	var files []string
	for _, u := range res.Requests {
		if !strings.HasPrefix(u, "data:") { // inline images of the static SVG
			files = append(files, u)
		}
	}
	if len(files) != 1 || !strings.HasPrefix(files[0], "file://") {
		t.Errorf("requests %v, want only the page itself", files)
	}
	return res
}

func TestReportInBrowser(t *testing.T) {
	chromium := needBrowser(t)
	dir := t.TempDir()
	if d := os.Getenv("PROBE_KEEP_REPORT"); d != "" {
		dir = d
	}
	r := &Report{Title: "Demo", Figures: []*Figure{demoFigure()}}
	w, err := r.Write(dir, WriteOptions{DPI: 50})
	if err != nil {
		t.Fatal(err)
	}
	res := CheckInBrowser(t, chromium, w.HTML, 3)
	if os.Getenv("PROBE_KEEP_REPORT") != "" {
		os.WriteFile(filepath.Join(dir, "page.png"), res.Page, 0o644)
	}
	sw, err := r.Write(filepath.Join(dir, "static"), WriteOptions{Static: true, DPI: 50})
	if err != nil {
		t.Fatal(err)
	}
	CheckInBrowser(t, chromium, sw.HTML, 1)
}
