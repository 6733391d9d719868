package analysis

import (
	"math"
	"testing"

	"github.com/filterlens/probe/analysis/results"
	"github.com/filterlens/probe/hooks"
	"github.com/filterlens/probe/model"
	"github.com/filterlens/probe/probes"
)

// TestGDNFilterMamba2: on generated Mamba-2 and Falcon-H1 models, the gdn
// filter measures every layer's SSM: beta is dt, decay is exp(dt·A), the
// state norm at the last token is ‖hook_final_state‖_F of the head,
// innovation is NaN, and n_eff^W is that of the captured effective
// attention's row; Falcon-H1's softmax rows in the same layers fill a
// second filter with their Kish n_eff and first-token mass.
func TestGDNFilterMamba2(t *testing.T) {
	for _, arch := range []model.Arch{model.ArchMamba2, model.ArchFalconH1} {
		t.Run(string(arch), func(t *testing.T) {
			cfg, err := model.SmallConfig(arch, model.Size{Layers: 2, DModel: 32, Heads: 4, KVHeads: 2, Vocab: 40, MaxPos: 64})
			if err != nil {
				t.Fatal(err)
			}
			m, _, err := model.Generate(cfg, 9)
			if err != nil {
				t.Fatal(err)
			}
			const T = 19
			hs := &hooks.Set{}
			f, fa, err := gdnFilters(hs, &m.Config, T, results.GDNOptions{WRows: true}, 1, false)
			if err != nil {
				t.Fatal(err)
			}
			if (fa != nil) != (arch == model.ArchFalconH1) {
				t.Fatalf("attention filter %v for %s", fa != nil, arch)
			}
			names := []string{"blocks.*.ssm.hook_final_state", "blocks.*.ssm.hook_eff_attn", "blocks.*.ssm.hook_dt", "blocks.*.ssm.hook_decay"}
			if fa != nil {
				names = append(names, "blocks.*.attn.hook_pattern")
			}
			cap := hs.Capture(names...)
			ids := make([]int, T)
			for i := range ids {
				ids[i] = (7*i + 3) % m.Vocab
			}
			if _, err := m.Forward([][]int{ids}, model.Options{Hooks: hs, TileRows: 4}); err != nil {
				t.Fatal(err)
			}
			sc := m.SSM
			H, P, N := sc.Heads, sc.HeadDim, sc.State
			if len(f.Layers) != len(m.Layers) || f.Hv != H {
				t.Fatalf("measured layers %v with %d heads, want all %d layers, %d heads", f.Layers, f.Hv, len(m.Layers), H)
			}
			for s, l := range f.Layers {
				get := func(k string) []float32 {
					return cap.Get(hooks.Name("blocks.{l}.ssm.hook_"+k, l)).Data().([]float32)
				}
				st, M, dt, decay := get("final_state"), get("eff_attn"), get("dt"), get("decay")
				for h := 0; h < H; h++ {
					var norm float64
					for _, v := range st[h*P*N : (h+1)*P*N] {
						norm += float64(v) * float64(v)
					}
					i := f.Index(0, s, h, T-1)
					if got, want := f.StateNorm[i], math.Sqrt(norm); math.Abs(got-want) > 1e-5*want {
						t.Errorf("layer %d head %d: state norm %v, ‖final state‖ %v", l, h, got, want)
					}
					for tt := 0; tt < T; tt++ {
						i := f.Index(0, s, h, tt)
						row := M[(h*T+tt)*T : (h*T+tt)*T+tt+1]
						if f.Beta[i] != float64(dt[tt*H+h]) || f.Decay[i] != float64(decay[tt*H+h]) || !math.IsNaN(f.Innovation[i]) {
							t.Fatalf("layer %d head %d token %d: beta %v decay %v innovation %v, want %v, %v, NaN",
								l, h, tt, f.Beta[i], f.Decay[i], f.Innovation[i], dt[tt*H+h], decay[tt*H+h])
						}
						if want := probes.EffAttnRow(row).NEff; math.Abs(f.NEffW[i]-want) > 1e-9*want {
							t.Errorf("layer %d head %d token %d: n_eff^W %v, want %v", l, h, tt, f.NEffW[i], want)
						}
					}
				}
			}
			if fa != nil {
				// the softmax heads of the same layers: Kish's n_eff and
				// the first-token mass of each row of hook_pattern
				for s, l := range fa.Layers {
					A := cap.Get(hooks.Name("blocks.{l}.attn.hook_pattern", l)).Data().([]float32)
					for h := 0; h < m.Heads; h++ {
						for tt := 0; tt < T; tt++ {
							i := fa.Index(0, s, h, tt)
							ref := probes.EffAttnRow(A[(h*T+tt)*T : (h*T+tt)*T+tt+1])
							if math.Abs(fa.NEffW[i]-ref.NEff) > 1e-9*ref.NEff || math.Abs(fa.FirstShare[i]-ref.FirstShare) > 1e-9 || !math.IsNaN(fa.Beta[i]) {
								t.Fatalf("attention layer %d head %d token %d: n_eff %v first %v beta %v, want %v %v NaN",
									l, h, tt, fa.NEffW[i], fa.FirstShare[i], fa.Beta[i], ref.NEff, ref.FirstShare)
							}
						}
					}
				}
				heads := appendGDNHeads(nil, appendGDNRows(appendGDNRows(nil, f, results.Chunk{T: T}, results.MixerMamba2), fa, results.Chunk{T: T}, results.MixerAttention))
				if want := len(m.Layers) * (H + m.Heads); len(heads) != want || heads[len(heads)-1].Mixer != results.MixerAttention {
					t.Errorf("%d head rows (want %d), last mixer %q", len(heads), want, heads[len(heads)-1].Mixer)
				}
			}
			rows := appendGDNRows(nil, f, results.Chunk{T: T}, results.MixerMamba2)
			if len(rows) != len(m.Layers)*H*T || rows[0].Mixer != results.MixerMamba2 {
				t.Errorf("%d rows (want %d), mixer %q", len(rows), len(m.Layers)*H*T, rows[0].Mixer)
			}
		})
	}
}
