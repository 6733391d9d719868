package papers

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/filterlens/probe/analysis"
	"github.com/filterlens/probe/analysis/afatab"
	"github.com/filterlens/probe/report"
	"github.com/filterlens/probe/report/reporttest"
)

var afaToyDir = filepath.Join("..", "..", "zoo", "checkpoints", "afa_toy")

func afaToyCheckpoints(t *testing.T) string {
	t.Helper()
	if _, err := os.Stat(filepath.Join(afaToyDir, "zoo.json")); err != nil {
		t.Skipf("AFA toy checkpoints not found at %s (zoo/train/afa_toy.py --all makes them)", afaToyDir)
	}
	return afaToyDir
}

// firstNumber parses the number before the first comma of a table cell.
func firstNumber(t *testing.T, cell string) float64 {
	t.Helper()
	v, err := strconv.ParseFloat(strings.TrimSpace(strings.Split(cell, ",")[0]), 64)
	if err != nil {
		t.Fatalf("cell %q: %v", cell, err)
	}
	return v
}

func TestAFAToyFigures(t *testing.T) {
	dir := afaToyCheckpoints(t)
	toy, err := analysis.AFAToy(dir, afatab.Options{})
	if err != nil {
		t.Fatal(err)
	}
	figs, err := AFAToyFigures(toy)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, f := range figs {
		ids = append(ids, f.ID)
		if err := f.Validate(); err != nil {
			t.Error(err)
		}
		if f.Caption == "" || len(f.Options) == 0 || len(f.Tables) == 0 {
			t.Errorf("%s: no caption, options or table", f.ID)
		}
		for _, o := range f.Options {
			if o.Source == "" || o.Value == "" {
				t.Errorf("%s: option %q has no value or source", f.ID, o.Name)
			}
		}
		for _, p := range f.Panels {
			if len(p.Series) == 0 && p.Heatmap == nil {
				t.Errorf("%s: empty panel %q", f.ID, p.Title)
			}
		}
	}
	if strings.Join(ids, " ") != "afa-fig1 afa-fig2 afa-fig3" {
		t.Fatalf("figures %v", ids)
	}

	// Fig. 1: in every setting the filter's one-step prediction is closer to
	// the true next state than the measurement of it is (notes §C.4.2).
	f1 := figs[0]
	if len(f1.Panels) != 3 || len(f1.Tables[0].Rows) != 3 {
		t.Fatalf("Fig. 1: %d panels, %d table rows", len(f1.Panels), len(f1.Tables[0].Rows))
	}
	for _, row := range f1.Tables[0].Rows {
		pred, meas, last := firstNumber(t, row[3]), firstNumber(t, row[4]), firstNumber(t, row[5])
		t.Logf("%s: MSE prediction %g, measurement %g, repeat-last %g; a = %s", row[0], pred, meas, last, row[7])
		if !(pred > 0 && pred < meas && pred < last) {
			t.Errorf("%s: prediction MSE %g is not below the measurement's %g and repeat-last %g", row[0], pred, meas, last)
		}
		if a := firstNumber(t, row[7]); !(a > 0.02 && a < 0.3) {
			t.Errorf("%s: learned decay a = %g, far from the system's 0.1", row[0], a)
		}
	}
	// Fig. 2: the pulled-forward cloud of the last target contracts by more
	// than 2× from the early stage to the trained filter (notes §C.4.3).
	rows := figs[1].Tables[0].Rows
	last := len(figs[1].Tables[0].Header) - 2
	early, final := firstNumber(t, rows[0][last]), firstNumber(t, rows[len(rows)-1][last])
	t.Logf("Fig. 2 cloud RMS at the last target: early %g, final %g", early, final)
	if !(final < early/2) {
		t.Errorf("Fig. 2: cloud RMS %g after training, %g early: not contracted 2×", final, early)
	}
	// Fig. 3: three T×T maps and the lag profiles.
	f3 := figs[2]
	if len(f3.Panels) != 4 {
		t.Fatalf("Fig. 3: %d panels", len(f3.Panels))
	}
	for _, p := range f3.Panels[:3] {
		if h := p.Heatmap; h == nil || h.Rows != h.Cols || h.Rows < 2 {
			t.Errorf("Fig. 3 panel %q: heatmap %+v", p.Title, h)
		}
	}

	r, err := AFAToyReport(toy)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range report.CaptionProblems(r.Figures...) {
		t.Error(p)
	}
	w, err := r.Write(t.TempDir(), report.WriteOptions{Static: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(w.Files) != 6 {
		t.Errorf("wrote %v", w.Files)
	}
	reporttest.Check(t, reporttest.Browser(t), w.HTML, 3)
}
