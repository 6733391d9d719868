package analysis

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/filterlens/probe/model"
)

// TestDiagnose: the diag pass a notebook calls measures every (sample,
// softmax layer, head, query) of a batch and writes them as probe diag's
// CSV (header, one line per row); a model without softmax layers and an
// unknown kernel are refused, naming them.
func TestDiagnose(t *testing.T) {
	m, err := model.Load(genModel(t, model.ArchGated, 2, 32, 4, 2, 64, 128, nil), model.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ids := [][]int{randomStream(20, 0, 64, 1), randomStream(20, 0, 64, 2)}
	d, err := Diagnose(m, ids, DiagOptions{Threads: 2})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "d.csv")
	if err := d.WriteCSV(path, nil, false); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
	if lines[0] != strings.Join(DiagColumns, ",") || len(lines) != 1+2*2*4*20 {
		t.Errorf("header %q, %d lines; want %q and 1 + 2·2·4·20", lines[0], len(lines), strings.Join(DiagColumns, ","))
	}
	if _, err := Diagnose(m, ids, DiagOptions{Kernel: "x"}); err == nil || !strings.Contains(err.Error(), "--kernel") {
		t.Errorf("kernel x: %v", err)
	}
	ssm, err := model.Load(genModel(t, model.ArchMamba2, 2, 32, 4, 2, 64, 128, nil), model.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Diagnose(ssm, ids, DiagOptions{}); err == nil || !strings.Contains(err.Error(), "no softmax attention layers") {
		t.Errorf("mamba2: %v", err)
	}
}
