package analysis

import (
	"math"
	"testing"

	"github.com/filterlens/probe/analysis/results"
	"github.com/filterlens/probe/hooks"
	"github.com/filterlens/probe/model"
	"github.com/filterlens/probe/probes"
)

// TestGDNFilterRWKV7: on a generated RWKV-7 model the gdn filter measures
// every time-mix layer: beta is Σκ̂²a and decay the geometric mean of w at
// the layer's own hooks, horizon 1/(1 − decay), the state norm at the last
// token is ‖hook_state‖_F of the head, the innovation is defined, and
// n_eff^W is that of the captured effective attention's row; the rows say
// mixer rwkv7. (The golden checks are probes.TestRWKVFilterGolden and
// TestGDNCommandGoldenRWKV7; this one needs no golden data.)
func TestGDNFilterRWKV7(t *testing.T) {
	cfg, err := model.SmallConfig(model.ArchRWKV7, model.Size{Layers: 2, DModel: 32, Heads: 2, KVHeads: 2, Vocab: 40, MaxPos: 64})
	if err != nil {
		t.Fatal(err)
	}
	m, _, err := model.Generate(cfg, 5)
	if err != nil {
		t.Fatal(err)
	}
	const T = 17
	hs := &hooks.Set{}
	f, fa, err := gdnFilters(hs, &m.Config, T, results.GDNOptions{WRows: true}, 1, false)
	if err != nil {
		t.Fatal(err)
	}
	if fa != nil {
		t.Fatal("an attention filter for a model without softmax layers")
	}
	cap := hs.Capture("blocks.*.rwkv.hook_state", "blocks.*.rwkv.hook_eff_attn", "blocks.*.rwkv.hook_w", "blocks.*.rwkv.hook_a", "blocks.*.rwkv.hook_kk")
	ids := make([]int, T)
	for i := range ids {
		ids[i] = (5*i + 2) % m.Vocab
	}
	if _, err := m.Forward([][]int{ids}, model.Options{Hooks: hs, TileRows: 4}); err != nil {
		t.Fatal(err)
	}
	H, N := m.Heads, m.DHead
	if len(f.Layers) != len(m.Layers) || f.Hv != H || f.Dk != N || f.Dv != N {
		t.Fatalf("measured layers %v with %d heads of %d×%d, want all %d layers, %d heads of %d", f.Layers, f.Hv, f.Dk, f.Dv, len(m.Layers), H, N)
	}
	for s, l := range f.Layers {
		get := func(k string) []float32 {
			return cap.Get(hooks.Name("blocks.{l}.rwkv.hook_"+k, l)).Data().([]float32)
		}
		st, M, w, a, kk := get("state"), get("eff_attn"), get("w"), get("a"), get("kk")
		for h := 0; h < H; h++ {
			var norm float64
			for _, v := range st[h*N*N : (h+1)*N*N] {
				norm += float64(v) * float64(v)
			}
			if got, want := f.StateNorm[f.Index(0, s, h, T-1)], math.Sqrt(norm); math.Abs(got-want) > 1e-5*want {
				t.Errorf("layer %d head %d: state norm %v, ‖hook_state‖ %v", l, h, got, want)
			}
			for tt := 0; tt < T; tt++ {
				i, o := f.Index(0, s, h, tt), (tt*H+h)*N
				g, d := probes.GainRemoval.Of(a[o:o+N], kk[o:o+N]), probes.DecayGeoMean.Of(w[o:o+N])
				if f.Beta[i] != g || f.Decay[i] != d || f.Horizon[i] != 1/(1-d) || !(f.Innovation[i] >= 0) {
					t.Fatalf("layer %d head %d token %d: beta %v decay %v horizon %v innovation %v, want %v, %v, %v, ≥ 0",
						l, h, tt, f.Beta[i], f.Decay[i], f.Horizon[i], f.Innovation[i], g, d, 1/(1-d))
				}
				row := M[(h*T+tt)*T : (h*T+tt)*T+tt+1]
				if want := probes.EffAttnRow(row).NEff; math.Abs(f.NEffW[i]-want) > 1e-9*want {
					t.Errorf("layer %d head %d token %d: n_eff^W %v, want %v", l, h, tt, f.NEffW[i], want)
				}
			}
		}
	}
	rows := appendGDNRows(nil, f, results.Chunk{T: T}, results.MixerRWKV7)
	if len(rows) != len(m.Layers)*H*T || rows[0].Mixer != results.MixerRWKV7 {
		t.Errorf("%d rows (want %d), mixer %q", len(rows), len(m.Layers)*H*T, rows[0].Mixer)
	}
	if ls, kind := recurrentLayers(&m.Config); len(ls) != len(m.Layers) || kind != results.MixerRWKV7 {
		t.Errorf("recurrent layers %v of kind %q", ls, kind)
	}
}
