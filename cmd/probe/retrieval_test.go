package main

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/filterlens/probe/analysis/results"
)

// TestRetrievalCommand runs probe retrieval on the zoo's gated model with
// every copy query scored, reads its table back, and draws its report.
func TestRetrievalCommand(t *testing.T) {
	out := filepath.Join(t.TempDir(), "retrieval")
	code, stdout, stderr := probe(t, "retrieval", "--model", filepath.Join("..", "..", "zoo", "checkpoints", "gated_headwise"),
		"--segment", "20", "--gap", "10", "--samples", "2", "--steps", "all", "--out", out)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if !strings.Contains(stdout, "T = 50") || !strings.Contains(stdout, "copy steps") {
		t.Errorf("stdout: %s", stdout)
	}
	rows, err := results.ReadTable[results.RetrievalHeadRow](filepath.Join(out, "retrieval_heads.parquet"))
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rows {
		if r.Steps != 2*19 || r.Score < 0 || r.Score > 1 || float64(r.Hits) != r.Score*float64(r.Steps) {
			t.Errorf("layer %d head %d: steps %d hits %d score %g", r.Layer, r.Head, r.Steps, r.Hits, r.Score)
		}
	}
	if code, _, stderr := probe(t, "retrieval", "--model", filepath.Join("..", "..", "zoo", "checkpoints", "gated_headwise"), "--steps", "some", "--out", t.TempDir()); code == 0 || !strings.Contains(stderr, `steps "some"`) {
		t.Errorf("--steps some: exit %d: %s", code, stderr)
	}
	if code, _, stderr := probe(t, "report", out, "--out", filepath.Join(t.TempDir(), "report"), "--static"); code != 0 {
		t.Errorf("probe report: exit %d: %s", code, stderr)
	}
}
