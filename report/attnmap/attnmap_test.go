package attnmap

import (
	"math"
	"path/filepath"
	"strings"
	"testing"

	"github.com/filterlens/probe/checkpoint"
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

func TestFigureGamma(t *testing.T) {
	g, _ := NewGrid(4, 4, 0, PoolMax)
	for q, row := range causal4 {
		g.AddRow(q, row)
	}
	f := Figure([]*Grid{g}, []int{0}, Options{Gamma: 0.5})
	z := f.Panels[0].Heatmap.Z
	if math.Abs(z[1*4+0]-math.Sqrt(0.5)) > 1e-7 || z[0] != 1 {
		t.Errorf("Â^0.5 = %v", z[:8])
	}
	if f.Panels[0].Heatmap.Scale.Map.Max() != 1 {
		t.Error("scale should end at the panel maximum")
	}
	if err := f.Validate(); err != nil {
		t.Fatal(err)
	}
}

func TestFromCapture(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cap.safetensors")
	// batch 2, 2 heads, T = 4; head 1 of sequence 1 is causal4.
	data := make([]float32, 2*2*4*4)
	for q, row := range causal4 {
		copy(data[((1*2+1)*4+q)*4:], row)
	}
	err := checkpoint.WriteSafetensors(path, []checkpoint.Tensor{{Name: HookName(3), Shape: []int{2, 2, 4, 4}, Data: data}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	f, err := FromCapture(path, Options{Layer: 3, Heads: []int{1}, Batch: 1, Gamma: 1, MaxSize: 2, Pool: PoolMean})
	if err != nil {
		t.Fatal(err)
	}
	if got := f.Panels[0].Heatmap.Z; math.Abs(got[0]-0.5) > 1e-7 || math.Abs(got[3]-0.3) > 1e-7 {
		t.Errorf("pooled map %v", got)
	}
	if _, err := FromCapture(path, Options{Layer: 0}); err == nil || !strings.Contains(err.Error(), "blocks.3.attn.hook_pattern") {
		t.Errorf("missing layer: %v", err)
	}
	if _, err := FromCapture(path, Options{Layer: 3, Heads: []int{5}}); err == nil {
		t.Error("head out of range accepted")
	}
}
