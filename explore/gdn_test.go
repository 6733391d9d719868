package explore

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/filterlens/probe/analysis"
	"github.com/filterlens/probe/analysis/results"
)

// TestGDNFolder: a probe gdn folder opens; its series are gdn.parquet's
// per-token values, its grid gdn_heads' means, and its rows the Gated
// DeltaNet layers' effective attention.
func TestGDNFolder(t *testing.T) {
	sw := hybridSweep(t)
	idsPath := filepath.Join(filepath.Dir(sw.dir), "stream.json")
	data, err := os.ReadFile(idsPath)
	if err != nil {
		t.Fatal(err)
	}
	src := results.SourceInfo{Kind: "ids", File: analysis.HashBytes(idsPath, data), Tokens: len(sw.stream), Digest: analysis.TokenDigest(sw.stream)}
	out := filepath.Join(t.TempDir(), "gdn")
	run := &analysis.GDNRun{RunSpec: analysis.RunSpec{Dir: sw.modelDir, Source: src, Stream: sw.stream, Out: out, Formats: []string{analysis.FormatParquet}, Threads: 2}, Options: results.GDNOptions{StreamPlan: results.StreamPlan{Lengths: []int{40}, Samples: 1}, WRows: true}}
	if _, _, err := run.Run(); err != nil {
		t.Fatal(err)
	}
	_, ts := newTestServer(t, out, Options{})
	var in Info
	get(t, ts, "/api/info", &in)
	if in.Kind != "gdn" || !in.Rows || !in.Tokens || len(in.Lengths) != 1 {
		t.Fatalf("info: %+v", in)
	}
	rows, err := results.ReadTable[results.GDNRow](filepath.Join(out, "gdn.parquet"))
	if err != nil {
		t.Fatal(err)
	}
	r0 := rows[len(rows)-1]
	var e Envelope
	path := fmt.Sprintf("/api/series?T=40&layer=%d&head=%d&metric=beta&buckets=40", r0.Layer, r0.Head)
	if code, body := get(t, ts, path, &e); code != 200 {
		t.Fatalf("%s: %d %s", path, code, body)
	}
	n := 0
	for _, r := range rows {
		if r.Layer == r0.Layer && r.Head == r0.Head {
			n++
			if float64(e.Mean[r.Token]) != r.Beta || e.Min[r.Token] != e.Max[r.Token] {
				t.Errorf("token %d: mean %v min %v max %v, gdn.parquet beta %v", r.Token, e.Mean[r.Token], e.Min[r.Token], e.Max[r.Token], r.Beta)
			}
		}
	}
	if n != 40 {
		t.Errorf("%d rows of layer %d head %d, want 40", n, r0.Layer, r0.Head)
	}
	heads, err := results.ReadTable[results.GDNHeadRow](filepath.Join(out, "gdn_heads.parquet"))
	if err != nil {
		t.Fatal(err)
	}
	var g struct{ Mean [][]*float64 }
	if code, body := get(t, ts, "/api/grid?metric=decay", &g); code != 200 {
		t.Fatalf("grid: %d %s", code, body)
	}
	for _, h := range heads {
		if got := g.Mean[h.Layer][h.Head]; got == nil || math.Abs(*got-h.Decay) > 1e-15*math.Abs(h.Decay) {
			t.Errorf("grid layer %d head %d: %v, gdn_heads %v", h.Layer, h.Head, got, h.Decay)
		}
	}
	var row Row
	path = fmt.Sprintf("/api/row?layer=%d&head=%d&query=20", r0.Layer, r0.Head)
	if code, body := get(t, ts, path, &row); code != 200 || row.Kind != "gated_deltanet" || len(row.Weights) != 21 {
		t.Fatalf("%s: %d %.300s", path, code, body)
	}
	path = fmt.Sprintf("/api/row?layer=%d&head=99&query=20", r0.Layer)
	if code, body := get(t, ts, path, nil); code != 400 || !strings.Contains(body, "head 99") {
		t.Errorf("%s: %d %s, want 400 naming the head", path, code, body)
	}
	if code, body := get(t, ts, "/api/grid?window=last", nil); code != 400 {
		t.Errorf("window last on gdn: %d %s", code, body)
	}
}
