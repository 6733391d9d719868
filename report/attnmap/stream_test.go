package attnmap

import (
	"testing"

	"github.com/filterlens/probe/hooks"
	"github.com/filterlens/probe/model"
)

// TestFromModelMatchesCapture: the maps streamed by FromModel pool exactly
// what the captured pattern (softmax layer) or |effective attention|
// (Gated DeltaNet layer) pools, for max and mean pooling.
func TestFromModelMatchesCapture(t *testing.T) {
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
		for _, pool := range []string{PoolMax, PoolMean} {
			o := Options{Layer: c.layer, Pool: pool, MaxSize: 16, Gamma: 1}
			fig, err := FromModel(m, ids, o)
			if err != nil {
				t.Fatal(err)
			}
			if len(fig.Panels) != H {
				t.Fatalf("%s layer %d: %d panels, want %d heads", c.arch, c.layer, len(fig.Panels), H)
			}
			for h := 0; h < H; h++ {
				g, _ := NewGrid(T, T, 16, pool)
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
				got := fig.Panels[h].Heatmap.Z
				for i := range want {
					if got[i] != want[i] {
						t.Fatalf("%s layer %d head %d %s: block %d = %v, captured %v", c.arch, c.layer, h, pool, i, got[i], want[i])
					}
				}
			}
		}
	}
}
