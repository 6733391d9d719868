package attngrid

import (
	"math"
	"testing"
)

// causal4 is a 4×4 causal attention matrix with rows summing to 1.
var causal4 = [][]float32{
	{1, 0, 0, 0},
	{0.5, 0.5, 0, 0},
	{0.2, 0.3, 0.5, 0},
	{0.1, 0.2, 0.3, 0.4},
}

func TestGridPooling(t *testing.T) {
	for _, tc := range []struct {
		pool string
		want []float64
	}{
		// 2×2 blocks: top-left {1, 0, .5, .5}, top-right zeros,
		// bottom-left {.2, .3, .1, .2}, bottom-right {.5, 0, .3, .4}.
		{PoolMax, []float64{1, 0, 0.3, 0.5}},
		{PoolMean, []float64{0.5, 0, 0.2, 0.3}},
	} {
		g, err := NewGrid(4, 4, 2, tc.pool)
		if err != nil {
			t.Fatal(err)
		}
		for q, row := range causal4 {
			if err := g.AddRow(q, row); err != nil {
				t.Fatal(err)
			}
		}
		got := g.Values()
		for i := range tc.want {
			if math.Abs(got[i]-tc.want[i]) > 1e-7 {
				t.Errorf("%s pooling: block %d = %g, want %g", tc.pool, i, got[i], tc.want[i])
			}
		}
	}
	// Mean pooling keeps mass: block means × block sizes sum to the row count.
	g, _ := NewGrid(4, 4, 3, PoolMean)
	for q, row := range causal4 {
		g.AddRow(q, row)
	}
	if g.Rows != 3 || g.Cols != 3 {
		t.Fatalf("grid %d×%d", g.Rows, g.Cols)
	}
	// Uneven split of 4 into 3 blocks: sizes 1, 1, 2.
	if got := blocks(4, 3); got[0] != 0 || got[1] != 1 || got[2] != 2 || got[3] != 2 {
		t.Errorf("blocks(4, 3) = %v", got)
	}
	if _, err := NewGrid(4, 4, 2, "median"); err == nil {
		t.Error("unknown pooling accepted")
	}
	if err := g.AddRow(4, causal4[0]); err == nil {
		t.Error("row out of range accepted")
	}
}
