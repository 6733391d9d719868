package probes

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// TestTopAbs: planted massive entries come out first, largest |value|
// first, with their position and channel; ties go to the earlier position;
// the result equals a full sort of every entry.
func TestTopAbs(t *testing.T) {
	const T, D = 7, 5
	rng := rand.New(rand.NewPCG(5, 6))
	x := make([]float32, T*D)
	for i := range x {
		x[i] = float32(rng.NormFloat64())
	}
	x[0*D+3] = -400 // position 0, channel 3
	x[4*D+1] = 250
	x[6*D+1] = 250 // tie with (4, 1): the earlier position ranks first
	x[2*D+2] = float32(math.NaN())
	got := TopAbs(x, T, D, 3)
	want := []Activation{{0, 3, -400}, {4, 1, 250}, {6, 1, 250}}
	if !slices.Equal(got, want) {
		t.Errorf("top 3 = %v, want %v", got, want)
	}
	all := TopAbs(x, T, D, 100)
	if len(all) != T*D-1 {
		t.Fatalf("k beyond the count: %d entries, want %d (NaN skipped)", len(all), T*D-1)
	}
	for i := 1; i < len(all); i++ {
		if lessAct(all[i-1], all[i]) {
			t.Fatalf("entries %d, %d out of order: %v then %v", i-1, i, all[i-1], all[i])
		}
	}
	if TopAbs(x, T, D, 0) != nil {
		t.Error("k = 0 should give nothing")
	}
}

func TestMedianAbs(t *testing.T) {
	for _, c := range []struct {
		x    []float32
		want float64
	}{
		{[]float32{-3, 1, 2}, 2},
		{[]float32{-4, 1, 2, -3}, 2.5},
		{[]float32{float32(math.NaN()), -1}, 1},
	} {
		if got, _ := MedianAbs(c.x, nil); got != c.want {
			t.Errorf("MedianAbs(%v) = %v, want %v", c.x, got, c.want)
		}
	}
	if got, _ := MedianAbs(nil, nil); !math.IsNaN(got) {
		t.Errorf("empty: %v, want NaN", got)
	}
}

func TestReplaceEntries(t *testing.T) {
	// x [3, 2]: channel means 2 and 20
	x := []float32{1, 10, 2, 20, 3, 30}
	means := make([]float64, 2)
	ChannelMeans(means, x, 3, 2)
	if means[0] != 2 || means[1] != 20 {
		t.Fatalf("channel means %v, want [2 20]", means)
	}
	top := []Activation{{2, 1, 30}, {0, 0, 1}}
	y := slices.Clone(x)
	ReplaceEntries(y, 2, top, nil)
	if !slices.Equal(y, []float32{0, 10, 2, 20, 3, 0}) {
		t.Errorf("zero: %v", y)
	}
	y = slices.Clone(x)
	ReplaceEntries(y, 2, top, means)
	if !slices.Equal(y, []float32{2, 10, 2, 20, 3, 20}) {
		t.Errorf("mean: %v", y)
	}
}
