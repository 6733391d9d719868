package analysis

import (
	"math"
	"testing"

	"github.com/filterlens/probe/analysis/results"
	"github.com/filterlens/probe/probes"
)

// TestGDNHeads: a head's row is the mean over tokens of each finite value
// (NaN counted, not averaged), with the median horizon (an +Inf horizon at
// g = 0 moves the median, not to infinity).
func TestGDNHeads(t *testing.T) {
	f, err := probes.NewGDNFilter(1, 4, 2, []int{1}, 2, 3, 3, probes.GDNOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range f.Beta {
		f.Beta[i], f.Decay[i], f.Horizon[i], f.Innovation[i], f.StateNorm[i] = 0.5, 0.5, 2, 1, 1
		f.NEffW[i], f.FirstShare[i], f.RowSum[i], f.NegShare[i] = 1, 0, 1, 0
		f.SMeanW[i], f.LambdaObsW[i], f.KW[i] = 0, 6, 6.0/7
	}
	// head 1: β 0.2, 0.4, 0.6, 0.8; horizons 1, 2, 4, +Inf (median 3); one NaN innovation
	for tt, b := range []float64{0.2, 0.4, 0.6, 0.8} {
		i := f.Index(0, 0, 1, tt)
		f.Beta[i] = b
		f.Horizon[i] = []float64{1, 2, 4, math.Inf(1)}[tt]
	}
	f.Innovation[f.Index(0, 0, 1, 2)] = math.NaN()
	f.Innovation[f.Index(0, 0, 1, 3)] = 4
	heads := appendGDNHeads(nil, appendGDNRows(nil, f, results.Chunk{T: 4, Sample: 3}, results.MixerGatedDeltaNet))
	if len(heads) != 2 {
		t.Fatalf("%d rows, want 2", len(heads))
	}
	h0, h1 := heads[0], heads[1]
	if h0.Layer != 1 || h0.Head != 0 || h0.Sample != 3 || h0.Mixer != results.MixerGatedDeltaNet || h0.Beta != 0.5 || h0.HorizonMedian != 2 || h0.Nonfinite != 0 || h0.KW != 6.0/7 {
		t.Errorf("head 0: %+v", h0)
	}
	if math.Abs(h1.Beta-0.5) > 1e-15 || h1.HorizonMedian != 3 || h1.Innovation != 2 || h1.Nonfinite != 1 {
		t.Errorf("head 1: β %v (want 0.5), median horizon %v (3), innovation %v (mean of 1, 1, 4 = 2), nonfinite %d (1)",
			h1.Beta, h1.HorizonMedian, h1.Innovation, h1.Nonfinite)
	}
}
