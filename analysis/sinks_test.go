package analysis

import (
	"math"
	"testing"

	"github.com/filterlens/probe/analysis/results"
)

// TestSinkRatesPooling: a head's ā_0 is pooled over samples by their
// applicable queries (not averaged per sample), NaN heads are not counted,
// the global/local split appears only when both kinds exist, and every
// group's rate falls with ε.
func TestSinkRatesPooling(t *testing.T) {
	nan := math.NaN()
	heads := []results.SinkHeadRow{
		// layer 0 head 0, global: samples 0.5 over 10 queries and 0.1 over 30 → 0.2 pooled (0.3 if averaged)
		{T: 40, Sample: 0, SoftmaxHead: results.SoftmaxHead{Layer: 0, Head: 0, Kind: "global"}, Rows: 40, BOSN: 10, BOSMass: 0.5},
		{T: 40, Sample: 1, SoftmaxHead: results.SoftmaxHead{Layer: 0, Head: 0, Kind: "global"}, Rows: 40, BOSN: 30, BOSMass: 0.1},
		// layer 1 head 0, local: 0.9, with left-out rows
		{T: 40, Sample: 0, SoftmaxHead: results.SoftmaxHead{Layer: 1, Head: 0, Kind: "local"}, Rows: 40, BOSN: 8, LeftOut: 32, BOSMass: 0.9},
		{T: 40, Sample: 1, SoftmaxHead: results.SoftmaxHead{Layer: 1, Head: 0, Kind: "local"}, Rows: 40, BOSN: 8, LeftOut: 32, BOSMass: 0.9},
		// layer 1 head 1: no applicable query (NaN), not counted
		{T: 40, Sample: 0, SoftmaxHead: results.SoftmaxHead{Layer: 1, Head: 1, Kind: "local"}, Rows: 40, BOSN: 0, LeftOut: 40, BOSMass: nan},
	}
	rates := results.SinkRates(heads, []int{40}, []float64{0.15, 0.25}, true)
	want := []results.SinkRateRow{
		{T: 40, Eps: 0.15, Layers: "all", Heads: 2, HeadsAbove: 2, Rate: 100, Rows: 200, RowsLeftOut: 104},
		{T: 40, Eps: 0.25, Layers: "all", Heads: 2, HeadsAbove: 1, Rate: 50, Rows: 200, RowsLeftOut: 104},
		{T: 40, Eps: 0.15, Layers: "global", Heads: 1, HeadsAbove: 1, Rate: 100, Rows: 80},
		{T: 40, Eps: 0.25, Layers: "global", Heads: 1, HeadsAbove: 0, Rate: 0, Rows: 80},
		{T: 40, Eps: 0.15, Layers: "local", Heads: 1, HeadsAbove: 1, Rate: 100, Rows: 120, RowsLeftOut: 104},
		{T: 40, Eps: 0.25, Layers: "local", Heads: 1, HeadsAbove: 1, Rate: 100, Rows: 120, RowsLeftOut: 104},
	}
	if len(rates) != len(want) {
		t.Fatalf("%d rows, want %d: %+v", len(rates), len(want), rates)
	}
	for i := range want {
		if rates[i] != want[i] {
			t.Errorf("row %d: %+v, want %+v", i, rates[i], want[i])
		}
	}
	if r := results.SinkRates(heads, []int{40}, []float64{0.3}, false); len(r) != 1 || r[0].Layers != "all" {
		t.Errorf("without the split: %+v, want one row for all layers", r)
	}
}
