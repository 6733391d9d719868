package nb

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"image/png"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/filterlens/probe/analysis"
	"github.com/filterlens/probe/analysis/results"
	"github.com/filterlens/probe/model"
	"github.com/filterlens/probe/report"
)

func lineFigure() *report.Figure {
	return &report.Figure{
		ID: "t-line", Title: "a <title>", Caption: "caption & protocol",
		Options: []report.Option{{Name: "T", Value: "64", Source: "choice"}},
		Tables:  []report.Table{{Caption: "paper vs ours", Header: []string{"x", "y"}, Rows: [][]string{{"1", "2"}}}},
		Panels: []report.Panel{{XLabel: "t", YLabel: "n_eff", Series: []report.Series{
			{Name: "head 0", Kind: report.Line, X: []float64{0, 1, 2, 3}, Y: []float64{1, 2, 1.5, 3}, Color: report.Category(0)},
		}}},
	}
}

func TestRenderDisplays(t *testing.T) {
	f, err := Render(lineFigure(), 60)
	if err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(bytes.NewReader(f.PNG()))
	if err != nil {
		t.Fatalf("PNG() does not decode: %v", err)
	}
	if b := img.Bounds(); b.Dx() < 200 || b.Dy() < 100 {
		t.Errorf("PNG is %v, want a full-size figure", b)
	}
	if !strings.Contains(f.SVG(), "<svg") {
		t.Errorf("SVG() has no <svg element: %.80q", f.SVG())
	}
	h := f.HTML()
	m := regexp.MustCompile(`src="data:image/png;base64,([A-Za-z0-9+/=]+)"`).FindStringSubmatch(h)
	if m == nil {
		t.Fatalf("HTML() inlines no PNG: %.200q", h)
	}
	raw, err := base64.StdEncoding.DecodeString(m[1])
	if err != nil || !bytes.Equal(raw, f.PNG()) {
		t.Errorf("HTML() inlines another image than PNG() (err %v)", err)
	}
	for _, want := range []string{"a &lt;title&gt;", "caption &amp; protocol", "paper vs ours", "<summary>1 options</summary>"} {
		if !strings.Contains(h, want) {
			t.Errorf("HTML() lacks %q", want)
		}
	}
}

func TestRenderRejectsBrokenFigure(t *testing.T) {
	f := lineFigure()
	f.Panels[0].Series[0].Y = f.Panels[0].Series[0].Y[:2] // X and Y lengths differ
	if _, err := Render(f, 0); err == nil {
		t.Fatal("Render accepted a series with len(X) != len(Y)")
	}
	if _, err := Render(nil, 0); err == nil {
		t.Fatal("Render accepted a nil figure")
	}
}

func TestTableEscapes(t *testing.T) {
	h := (&Table{Header: []string{"<h>"}, Rows: [][]string{{"a&b"}}}).HTML()
	if !strings.Contains(h, "&lt;h&gt;") || !strings.Contains(h, "a&amp;b") || strings.Contains(h, "<h>") {
		t.Errorf("cells not escaped: %s", h)
	}
}

func TestRepoRootAndWorkdir(t *testing.T) {
	t.Setenv("GONB_DIR", "")
	root, err := RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	if mod, err := modulePath(filepath.Join(root, "go.mod")); err != nil || mod != ModulePath {
		t.Fatalf("RepoRoot %s: module %q, %v", root, mod, err)
	}
	// From GONB_DIR, as GoNB sets it to the notebook's directory.
	t.Setenv("GONB_DIR", filepath.Join(root, "notebooks"))
	if r2, err := RepoRoot(); err != nil || r2 != root {
		t.Errorf("RepoRoot from GONB_DIR = %q, %v; want %q", r2, err, root)
	}
	t.Setenv("GONB_DIR", t.TempDir())
	if r, err := RepoRoot(); err == nil {
		t.Errorf("RepoRoot outside any repository = %q, want an error", r)
	}

	base := t.TempDir()
	t.Setenv(WorkEnv, base)
	dir, err := Workdir("getting-started")
	if err != nil || dir != filepath.Join(base, "getting-started") {
		t.Fatalf("Workdir = %q, %v", dir, err)
	}
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		t.Errorf("Workdir did not create %s", dir)
	}
	for _, bad := range []string{"", "a/b", ".."} {
		if _, err := Workdir(bad); err == nil {
			t.Errorf("Workdir(%q) accepted", bad)
		}
	}
}

func TestCheckpointGeneratesOnceAndRefusesAnother(t *testing.T) {
	cfg, err := model.SmallConfig(model.ArchGated, model.Size{Layers: 1, DModel: 32, Heads: 2, KVHeads: 1, Vocab: 64, MaxPos: 128})
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "ck")
	if _, err := Checkpoint(dir, cfg, 7); err != nil {
		t.Fatal(err)
	}
	m, err := model.Load(dir, model.LoadOptions{})
	if err != nil {
		t.Fatalf("generated checkpoint does not load: %v", err)
	}
	if m.Layers == nil || len(m.Layers) != 1 || m.Config.Gate != model.GateHeadwise {
		t.Errorf("loaded %d layers, gate %q; want 1 layer, headwise gate", len(m.Layers), m.Config.Gate)
	}
	st1, _ := os.Stat(filepath.Join(dir, "model.safetensors"))
	if _, err := Checkpoint(dir, cfg, 7); err != nil {
		t.Fatalf("second call: %v", err)
	}
	st2, _ := os.Stat(filepath.Join(dir, "model.safetensors"))
	if !st1.ModTime().Equal(st2.ModTime()) {
		t.Error("second call rewrote the checkpoint instead of reusing it")
	}
	other, _ := model.SmallConfig(model.ArchGated, model.Size{Layers: 2, DModel: 32, Heads: 2, KVHeads: 1, Vocab: 64, MaxPos: 128})
	if _, err := Checkpoint(dir, other, 7); err == nil {
		t.Error("Checkpoint reused a directory that holds another configuration")
	}
	if _, err := Checkpoint(dir, cfg, 8); err == nil {
		t.Error("Checkpoint reused a directory generated with another seed")
	}
	// A checkpoint it did not generate is never taken over.
	foreign := filepath.Join(t.TempDir(), "foreign")
	_, tensors, err := model.Generate(cfg, 7)
	if err != nil {
		t.Fatal(err)
	}
	if err := model.WriteHF(foreign, cfg, tensors); err != nil {
		t.Fatal(err)
	}
	if _, err := Checkpoint(foreign, cfg, 7); err == nil {
		t.Error("Checkpoint took over a folder it did not generate")
	}
}

func TestCheckpointFilterMechanism(t *testing.T) {
	cfg, err := model.SmallConfig(model.ArchRT, model.Size{Layers: 1, DModel: 32, Heads: 2, KVHeads: 2, Vocab: 64, MaxPos: 128})
	if err != nil {
		t.Fatal(err)
	}
	dir, err := Checkpoint(filepath.Join(t.TempDir(), "rt"), cfg, 3)
	if err != nil {
		t.Fatal(err)
	}
	m, err := model.Load(dir, model.LoadOptions{})
	if err != nil {
		t.Fatalf("generated RT checkpoint does not load: %v", err)
	}
	if m.Config.RT == nil {
		t.Errorf("loaded %q without RT options", m.Config.Arch)
	}
}

func TestCached(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.json")
	calls := 0
	var a []float64
	compute := func() error { calls++; a = []float64{1.5, 2}; return nil }
	if err := Cached(path, &a, compute); err != nil {
		t.Fatal(err)
	}
	var b []float64
	if err := Cached(path, &b, func() error { calls++; return nil }); err != nil {
		t.Fatal(err)
	}
	if calls != 1 || len(b) != 2 || b[0] != 1.5 {
		t.Errorf("calls %d, second read %v; want 1 call and [1.5 2]", calls, b)
	}
	boom := errors.New("boom")
	if err := Cached(filepath.Join(t.TempDir(), "x.json"), &b, func() error { return boom }); !errors.Is(err, boom) {
		t.Errorf("compute error not returned: %v", err)
	}
	if err := os.WriteFile(path, []byte("{"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := Cached(path, &b, compute); err == nil {
		t.Error("a corrupt cache file was accepted")
	}
}

// TestExplore: Explore starts probe explore on a probe sinks folder (run
// on the zoo's gpt-oss checkpoint) as a process of its own, answers its
// API, shows it in an iframe, finds the same server again (as a later
// cell would), and Stop ends it.
func TestExplore(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the probe binary")
	}
	t.Setenv(WorkEnv, t.TempDir())
	stream := make([]int, 300)
	for i := range stream {
		stream[i] = (i * 37) % 2048
	}
	data, _ := json.Marshal(stream)
	root := t.TempDir()
	idsPath := filepath.Join(root, "ids.json")
	os.WriteFile(idsPath, data, 0o644)
	src := results.SourceInfo{Kind: "ids", File: analysis.HashBytes(idsPath, data), Tokens: len(stream), Digest: analysis.TokenDigest(stream)}
	o := analysis.DefaultSinksOptions()
	o.Lengths = []int{128}
	out := filepath.Join(root, "sinks")
	if _, _, _, err := (&analysis.SinksRun{RunSpec: analysis.RunSpec{Dir: "../../zoo/checkpoints/gpt_oss_tiny", Source: src, Stream: stream, Out: out, Formats: []string{analysis.FormatParquet}, Threads: 2}, Options: o}).Run(); err != nil {
		t.Fatal(err)
	}
	e, err := Explore(out, ExploreOptions{Height: 700})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Stop()
	var in struct {
		Kind    string
		Columns string
	}
	if err := e.Get("api/info", &in); err != nil || in.Kind != "sinks" || in.Columns != "head" {
		t.Fatalf("info: %+v, %v", in, err)
	}
	if h := e.HTML(); !strings.Contains(h, `<iframe src="`+e.URL+`"`) || !strings.Contains(h, "height:700px") {
		t.Errorf("HTML: %s", h)
	}
	resp, err := http.Get(e.URL)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if csp := resp.Header.Get("Content-Security-Policy"); !strings.HasSuffix(csp, "frame-ancestors "+NotebookFrames) {
		t.Errorf("CSP %q: a notebook on loopback cannot frame it", csp)
	}
	again, err := Explore(out, ExploreOptions{})
	if err != nil || again.URL != e.URL || again.PID != e.PID {
		t.Errorf("second Explore: %+v, %v; want the first server %+v", again, err, e)
	}
	if err := e.Stop(); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 50; i++ {
		if err = e.Get("api/info", &in); err != nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err == nil {
		t.Errorf("the explorer still answers after Stop")
	}
}
