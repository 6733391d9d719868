package papers

import (
	"math"
	"strconv"
	"strings"
	"testing"

	"github.com/filterlens/probe/report"
)

func TestBuildAll(t *testing.T) {
	ids := map[string][]string{
		"rfa":     {"rfa-fig1", "rfa-fig3", "rfa-fig4", "rfa-fig5"},
		"selrope": {"selrope-fig2", "selrope-fig3"},
		"rt":      {"rt-fig1"},
		"bft":     {"bft-eq6", "bft-fig2-paper"},
	}
	for _, p := range Paper {
		r, err := Build(p)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, f := range r.Figures {
			got = append(got, f.ID)
			if err := f.Validate(); err != nil {
				t.Error(err)
			}
			if f.Caption == "" || len(f.Options) == 0 {
				t.Errorf("%s: no caption or options", f.ID)
			}
			for _, o := range f.Options {
				if o.Source == "" {
					t.Errorf("%s: option %q has no source", f.ID, o.Name)
				}
			}
		}
		for _, pr := range report.CaptionProblems(r.Figures...) {
			t.Error(pr)
		}
		if strings.Join(got, " ") != strings.Join(ids[p], " ") {
			t.Errorf("%s figures %v, want %v", p, got, ids[p])
		}
	}
	if _, err := Build("afa"); err == nil {
		t.Error("unknown paper accepted")
	}
}

// The legends' α/β of RFA Fig. 3 (notes 000 §C: −0.50, −0.81, −0.99 and
// 4.2 … 319.2) come out of the figure's own table.
func TestRFAFig3Legends(t *testing.T) {
	f := rfaRegimes()
	want := []float64{0, -0.5, -0.21 / 0.26, -3.96 / 4.01, 4.2, 19.2, 79.2, 319.2}
	for i, row := range f.Tables[0].Rows {
		v, err := strconv.ParseFloat(row[5], 64)
		if err != nil || math.Abs(v-want[i]) > 1e-3*math.Max(1, math.Abs(want[i])) {
			t.Errorf("row %d α/β = %s, want %g", i, row[5], want[i])
		}
	}
	if !strings.Contains(f.Panels[2].Series[0].Name, "α/β=4.2") {
		t.Errorf("legend %q", f.Panels[2].Series[0].Name)
	}
}

// RFA Fig. 1: forward-only evidence (the last target) is tighter than
// mostly-backward evidence (the first target), the figure's message.
func TestRFAFig1Message(t *testing.T) {
	f, err := rfaFig1()
	if err != nil {
		t.Fatal(err)
	}
	rows := f.Tables[0].Rows
	first := strings.Split(rows[0][3], ", ")
	last := strings.Split(rows[len(rows)-1][3], ", ")
	a, _ := strconv.ParseFloat(first[0], 64)
	b, _ := strconv.ParseFloat(last[0], 64)
	if !(a > b) || rows[len(rows)-1][2] != "0" || rows[0][1] == "0" {
		t.Errorf("posterior std first %g, last %g; rows %v", a, b, rows)
	}
}
