package analysis

import (
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/filterlens/probe/analysis/attngrid"
	"github.com/filterlens/probe/hooks"
	"github.com/filterlens/probe/model"
)

// TestStreamAttentionMapsMatchesCapture: the maps StreamAttentionMaps streams pool exactly
// what the captured pattern (softmax layer) or |effective attention|
// (Gated DeltaNet layer) pools, for max and mean pooling.
func TestStreamAttentionMapsMatchesCapture(t *testing.T) {
	for _, c := range []struct {
		arch  model.Arch
		layer int
		hook  string
	}{
		{model.ArchQwen3, 1, "blocks.1.attn.hook_pattern"},
		{model.ArchQwen35, 0, "blocks.0.gdn.hook_eff_attn"},
		{model.ArchQwen35, 3, "blocks.3.attn.hook_pattern"},
	} {
		cfg, err := model.SmallConfig(c.arch, model.Size{Layers: 4, DModel: 32, Heads: 4, KVHeads: 2, Vocab: 50, MaxPos: 512})
		if err != nil {
			t.Fatal(err)
		}
		m, _, err := model.Generate(cfg, 5)
		if err != nil {
			t.Fatal(err)
		}
		const T = 75
		ids := make([]int, T)
		for i := range ids {
			ids[i] = (i*7 + 3) % cfg.Vocab
		}
		hs := &hooks.Set{}
		capt := hs.Capture(c.hook)
		if _, err := m.Forward([][]int{ids}, model.Options{Hooks: hs}); err != nil {
			t.Fatal(err)
		}
		pat := capt.Get(c.hook)
		H := pat.Shape()[1]
		alpha := pat.Data().([]float32)
		for _, pool := range []string{attngrid.PoolMax, attngrid.PoolMean} {
			maps, err := StreamAttentionMaps(m, ids, AttnMapSpec{Layer: c.layer, Pool: pool, MaxSize: 16}, model.Options{AllowExtrapolation: true})
			if err != nil {
				t.Fatal(err)
			}
			if len(maps.Hat) != H {
				t.Fatalf("%s layer %d: %d maps, want %d heads", c.arch, c.layer, len(maps.Hat), H)
			}
			for h := 0; h < H; h++ {
				g, _ := attngrid.NewGrid(T, T, 16, pool)
				for q := 0; q < T; q++ {
					row := append([]float32(nil), alpha[(h*T+q)*T:(h*T+q+1)*T]...)
					for j, x := range row {
						if x < 0 {
							row[j] = -x
						}
					}
					g.AddRow(q, row)
				}
				want := g.Values()
				got := maps.Hat[h].Values()
				for i := range want {
					if got[i] != want[i] {
						t.Fatalf("%s layer %d head %d %s: block %d = %v, captured %v", c.arch, c.layer, h, pool, i, got[i], want[i])
					}
				}
			}
		}
	}
}

// Streaming the rows of a forward pass into the grids gives exactly the
// materialized hook_pattern and hook_pattern_decayed of the same pass, with
// and without downsampling.
func TestStreamAttentionMapsMatchesPattern(t *testing.T) {
	m, err := model.Load(rfaGolden(t, "rfa_m1"), model.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	const T, layer = 70, 1
	ids := make([]int, T)
	for i := range ids {
		ids[i] = (i*37 + 11) % m.Config.Vocab
	}
	hs := &hooks.Set{}
	cp := hs.Capture("blocks.1.attn.hook_pattern", "blocks.1.attn.hook_pattern_decayed")
	heads := []int{3, 1}
	full, err := StreamAttentionMaps(m, ids, AttnMapSpec{Layer: layer, Heads: heads, MaxSize: 0, Pool: attngrid.PoolMax, Decayed: true}, model.Options{Hooks: hs, TileRows: 16})
	if err != nil {
		t.Fatal(err)
	}
	for _, pool := range []string{attngrid.PoolMax, attngrid.PoolMean} {
		small, err := StreamAttentionMaps(m, ids, AttnMapSpec{Layer: layer, Heads: heads, MaxSize: 16, Pool: pool, Decayed: true}, model.Options{})
		if err != nil {
			t.Fatal(err)
		}
		for name, grids := range map[string][2][]*attngrid.Grid{
			"blocks.1.attn.hook_pattern":         {full.Hat, small.Hat},
			"blocks.1.attn.hook_pattern_decayed": {full.Decayed, small.Decayed},
		} {
			data := cp.Get(name).Data().([]float32)
			for i, h := range heads {
				ref, _ := attngrid.NewGrid(T, T, 16, pool)
				for q := 0; q < T; q++ {
					row := data[(h*T+q)*T : (h*T+q+1)*T]
					for j, v := range grids[0][i].Values()[q*T : (q+1)*T] {
						if !approx(v, float64(row[j]), 1e-6) {
							t.Fatalf("%s head %d [%d, %d]: streamed %g, materialized %g", name, h, q, j, v, row[j])
						}
					}
					ref.AddRow(q, row)
				}
				got, want := grids[1][i].Values(), ref.Values()
				for k := range want {
					if !approx(got[k], want[k], 1e-6) {
						t.Fatalf("%s %s head %d block %d: %g, want %g", name, pool, h, k, got[k], want[k])
					}
				}
			}
		}
	}
	if _, err := StreamAttentionMaps(m, ids, AttnMapSpec{Layer: 2, MaxSize: 16, Pool: attngrid.PoolMax}, model.Options{}); err == nil {
		t.Error("layer out of range accepted")
	}
	if _, err := StreamAttentionMaps(m, ids, AttnMapSpec{Layer: 1, Heads: []int{4}, MaxSize: 16, Pool: attngrid.PoolMax}, model.Options{}); err == nil {
		t.Error("head out of range accepted")
	}
}

// rfaGolden returns a golden case's directory, or skips.
func rfaGolden(t *testing.T, name string) string {
	t.Helper()
	dir := filepath.Join(goldenDir, name)
	if _, err := os.Stat(filepath.Join(dir, "model.safetensors")); err != nil {
		t.Skipf("golden case %s not found at %s (it comes with ../shared in CI)", name, dir)
	}
	return dir
}

func approx(a, b, rel float64) bool {
	return math.Abs(a-b) <= rel*math.Max(1, math.Max(math.Abs(a), math.Abs(b)))
}
