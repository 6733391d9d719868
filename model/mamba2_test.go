package model

import (
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"gorgonia.org/tensor"

	"github.com/filterlens/probe/hooks"
)

// mamba2Config returns a Mamba2Config config.json with the given fields
// changed (nil deletes one): by default an odd shape beside the golden
// case's (4 groups of 2 heads, state 8, conv 3, biases on in/out_proj).
func mamba2Config(t testing.TB, change map[string]any) []byte {
	t.Helper()
	f := map[string]any{
		"model_type": "mamba2", "hidden_size": 32, "num_hidden_layers": 2, "num_heads": 8, "head_dim": 8,
		"expand": 2, "state_size": 8, "n_groups": 4, "conv_kernel": 3, "chunk_size": 5, "vocab_size": 50,
		"layer_norm_epsilon": 1e-5, "time_step_limit": []float64{0.01, 0.5}, "use_conv_bias": true, "use_bias": true,
		"hidden_act": "silu", "tie_word_embeddings": true,
	}
	for k, v := range change {
		if v == nil {
			delete(f, k)
		} else {
			f[k] = v
		}
	}
	data, err := json.Marshal(f)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// TestMamba2ConfigRefused: inconsistent sizes, a time_step_limit with
// min > max, a chunk of 0 and an activation other than SiLU are refused
// naming the field; LoadConfig names config.json.
func TestMamba2ConfigRefused(t *testing.T) {
	if _, err := ParseConfig(mamba2Config(t, nil)); err != nil {
		t.Fatalf("the base config is refused: %v", err)
	}
	for _, c := range []struct {
		change map[string]any
		want   string
	}{
		{map[string]any{"num_heads": 6}, "num_heads 6 × head_dim 8"},
		{map[string]any{"head_dim": 4}, "head_dim 4"},
		{map[string]any{"n_groups": 3}, "n_groups 3"},
		{map[string]any{"state_size": 0}, "state_size"},
		{map[string]any{"num_heads": nil}, "num_heads is missing"},
		{map[string]any{"time_step_limit": []float64{0.5, 0.01}}, "time_step_limit"},
		{map[string]any{"time_step_limit": []float64{0.5}}, "time_step_limit"},
		{map[string]any{"chunk_size": 0}, "chunk_size"},
		{map[string]any{"conv_kernel": 0}, "conv_kernel"},
		{map[string]any{"expand": 1.3}, "expand"},
		{map[string]any{"hidden_act": "gelu"}, "hidden_act"},
	} {
		_, err := ParseConfig(mamba2Config(t, c.change))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: error %v, want one naming %q", c.change, err, c.want)
		}
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "config.json"), mamba2Config(t, map[string]any{"chunk_size": 0}), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadConfig(dir); err == nil || !strings.Contains(err.Error(), "config.json") || !strings.Contains(err.Error(), "chunk_size") {
		t.Errorf("LoadConfig: %v, want config.json and chunk_size named", err)
	}
}

// TestSSMEffectiveAttentionExact: on a Mamba-2 of an odd shape (4 groups
// of 2 heads, state 8, conv 3, in/out_proj biases, T = 37 not a multiple
// of the tile), every layer's captured hook_eff_attn M satisfies
// y_t = Σ_s M[t,s]·x_s + D·x_t and the final state is Σ_s Π_{r>s} decay_r
// dt_s x_s B_sᵀ (float64 from the captured factors), M is zero above the
// diagonal, and the rows streamed to a DeltaConsumer equal M.
func TestSSMEffectiveAttentionExact(t *testing.T) {
	cfg, err := ParseConfig(mamba2Config(t, nil))
	if err != nil {
		t.Fatal(err)
	}
	m, _, err := Generate(*cfg, 7)
	if err != nil {
		t.Fatal(err)
	}
	const B, T = 2, 37
	sc := m.SSM
	H, P, N, I := sc.Heads, sc.HeadDim, sc.State, sc.Inner
	hs := &hooks.Set{}
	cap := hs.Capture(ssmHookNames("*")...)
	rec := &deltaRecorder{layer: 1, B: B, H: H, T: T, w: make([]float32, B*H*T*T), seen: make([]int, B*H)}
	hs.Stream(1, rec)
	if _, err := m.Forward(seqs(B, T, m.Vocab), Options{Hooks: hs, TileRows: 5}); err != nil {
		t.Fatal(err)
	}
	for l := range m.Layers {
		get := func(k string) []float32 { return cap.Get(hooks.Name("blocks.{l}.ssm.hook_"+k, l)).Data().([]float32) }
		M, x, y, dt, decay, bb, st := get("eff_attn"), get("x"), get("y"), get("dt"), get("decay"), get("B"), get("final_state")
		skip := ssmOf(&m.Layers[l]).Skip
		var worstY, maxY, worstS, maxS float64
		for b := 0; b < B; b++ {
			for h := 0; h < H; h++ {
				for q := 0; q < T; q++ {
					for s := q + 1; s < T; s++ {
						if v := M[((b*H+h)*T+q)*T+s]; v != 0 {
							t.Fatalf("layer %d: M[%d,%d] = %v above the diagonal", l, q, s, v)
						}
					}
					for p := 0; p < P; p++ {
						want := float64(skip[h]) * float64(x[(b*T+q)*I+h*P+p])
						for s := 0; s <= q; s++ {
							want += float64(M[((b*H+h)*T+q)*T+s]) * float64(x[(b*T+s)*I+h*P+p])
						}
						got := float64(y[(b*T+q)*I+h*P+p])
						worstY, maxY = math.Max(worstY, math.Abs(got-want)), math.Max(maxY, math.Abs(want))
					}
				}
				for p := 0; p < P; p++ {
					for k := 0; k < N; k++ {
						var want float64
						for s := 0; s < T; s++ {
							g := float64(dt[(b*T+s)*H+h])
							for r := s + 1; r < T; r++ {
								g *= float64(decay[(b*T+r)*H+h])
							}
							want += g * float64(x[(b*T+s)*I+h*P+p]) * float64(bb[((b*T+s)*H+h)*N+k])
						}
						got := float64(st[((b*H+h)*P+p)*N+k])
						worstS, maxS = math.Max(worstS, math.Abs(got-want)), math.Max(maxS, math.Abs(want))
					}
				}
			}
		}
		if worstY/maxY > 1e-5 || worstS/maxS > 1e-5 {
			t.Errorf("layer %d: y vs M·x + D·x rel. %.2g, final state vs its factor sum rel. %.2g (want ≤ 1e-5)", l, worstY/maxY, worstS/maxS)
		}
		if l == 1 {
			if rec.outOfRow || rec.softmax != 0 {
				t.Errorf("streamed rows out of order (%v) or %d softmax tiles on a Mamba-2 layer", rec.outOfRow, rec.softmax)
			}
			for i := range rec.seen {
				if rec.seen[i] != T {
					t.Fatalf("(batch, head) %d: %d rows streamed, want %d", i, rec.seen[i], T)
				}
			}
			if rel, i := relErr(rec.w, M); rel != 0 {
				t.Errorf("streamed rows differ from hook_eff_attn by %.3g at %d", rel, i)
			}
		}
	}
}

// TestSSMDecayIntervention: the recurrence reads hook_decay, so zeroing it
// leaves no memory: y_t = dt_t·(C_t·B_t)·x_t + D·x_t, and the logits change.
func TestSSMDecayIntervention(t *testing.T) {
	cfg, err := ParseConfig(mamba2Config(t, nil))
	if err != nil {
		t.Fatal(err)
	}
	m, _, err := Generate(*cfg, 3)
	if err != nil {
		t.Fatal(err)
	}
	const B, T = 1, 11
	ids := seqs(B, T, m.Vocab)
	base, err := m.Forward(ids, Options{Logits: true})
	if err != nil {
		t.Fatal(err)
	}
	hs := &hooks.Set{}
	hs.Add("blocks.0.ssm.hook_decay", func(_ string, _ int, x *tensor.Dense) error {
		clear(x.Data().([]float32))
		return nil
	})
	cap := hs.Capture(ssmHookNames("0")...)
	out, err := m.Forward(ids, Options{Hooks: hs, Logits: true})
	if err != nil {
		t.Fatal(err)
	}
	if rel, _ := relErr(out.Logits, base.Logits); rel == 0 {
		t.Error("zeroing the decay did not change the logits")
	}
	get := func(k string) []float32 { return cap.Get("blocks.0.ssm.hook_" + k).Data().([]float32) }
	x, y, dt, bb, cc := get("x"), get("y"), get("dt"), get("B"), get("C")
	sc, skip := m.SSM, ssmOf(&m.Layers[0]).Skip
	H, P, N, I := sc.Heads, sc.HeadDim, sc.State, sc.Inner
	for tt := 0; tt < T; tt++ {
		for h := 0; h < H; h++ {
			var cb float64
			for k := 0; k < N; k++ {
				cb += float64(cc[(tt*H+h)*N+k]) * float64(bb[(tt*H+h)*N+k])
			}
			for p := 0; p < P; p++ {
				xv := float64(x[tt*I+h*P+p])
				want := float64(dt[tt*H+h])*cb*xv + float64(skip[h])*xv
				if got := float64(y[tt*I+h*P+p]); math.Abs(got-want) > 1e-5*(1+math.Abs(want)) {
					t.Fatalf("t %d head %d dim %d: y = %v with no memory, want %v", tt, h, p, got, want)
				}
			}
		}
	}
}

// TestMamba2LayerKinds: Mamba-2 has no softmax layers, and says what its
// layers are.
func TestMamba2LayerKinds(t *testing.T) {
	cfg, err := ParseConfig(mamba2Config(t, nil))
	if err != nil {
		t.Fatal(err)
	}
	if ls := cfg.SoftmaxLayers(); len(ls) != 0 {
		t.Errorf("softmax layers %v, want none", ls)
	}
	if k := cfg.LayerKinds()[0]; k != "Mamba-2 (8 heads × 8, state 8, 4 groups, conv 3)" {
		t.Errorf("layer kind %q", k)
	}
}

// ssmHookNames returns the ssm.hook_* points of layer (a number or *).
func ssmHookNames(layer string) []string {
	var out []string
	for _, k := range []string{"z", "x", "B_group", "B", "C", "dt", "A", "decay", "y", "final_state", "eff_attn", "out"} {
		out = append(out, "blocks."+layer+".ssm.hook_"+k)
	}
	return out
}

// TestTimeStepLimitInfinity: Python's json.dumps writes Mamba2Config's
// default time_step_limit (0.0, inf) as [0.0, Infinity]; it is read as no
// upper clamp, and an "Infinity" inside a string is left alone.
func TestTimeStepLimitInfinity(t *testing.T) {
	data := strings.Replace(string(mamba2Config(t, map[string]any{"time_step_limit": "LIMIT", "note": "NaN Infinity \"x\""})),
		`"LIMIT"`, `[0.0, Infinity]`, 1)
	c, err := ParseConfig([]byte(data))
	if err != nil {
		t.Fatal(err)
	}
	if c.SSM.DtMin != 0 || !math.IsInf(c.SSM.DtMax, 1) {
		t.Errorf("time_step_limit read as [%v, %v], want [0, +Inf]", c.SSM.DtMin, c.SSM.DtMax)
	}
	if got := string(quoteNonFinite([]byte(`{"a": "Infinity NaN", "b": [-Infinity, NaN, 1e5]}`))); got != `{"a": "Infinity NaN", "b": ["-Infinity", "NaN", 1e5]}` {
		t.Errorf("quoteNonFinite gave %s", got)
	}
	if _, err := ParseConfig([]byte(strings.Replace(data, "[0.0, Infinity]", "[NaN, 1]", 1))); err == nil || !strings.Contains(err.Error(), "time_step_limit") {
		t.Errorf("a NaN limit: %v, want time_step_limit refused", err)
	}
}

// TestSSMChunkedEqualsRecurrent: the chunked scan gives the recurrence's
// y and final state (to float32 rounding) for chunks of 1 row, sizes that
// do not divide T, and one longer than T; B and C stored per head (when
// hooked) give the per-group storage's logits exactly.
func TestSSMChunkedEqualsRecurrent(t *testing.T) {
	cfg, err := ParseConfig(mamba2Config(t, nil))
	if err != nil {
		t.Fatal(err)
	}
	m, _, err := Generate(*cfg, 11)
	if err != nil {
		t.Fatal(err)
	}
	ids := seqs(2, 37, m.Vocab)
	run := func(scan int) (*Output, *hooks.Capture) {
		for l := range m.Layers {
			ssmOf(&m.Layers[l]).Scan = scan
		}
		hs := &hooks.Set{}
		cap := hs.Capture("blocks.*.ssm.hook_y", "blocks.*.ssm.hook_final_state")
		out, err := m.Forward(ids, Options{Hooks: hs, Logits: true})
		if err != nil {
			t.Fatal(err)
		}
		return out, cap
	}
	ref, refCap := run(-1)
	// B and C are kept per group unless their hooks ask for them per head:
	// the same values either way
	hs := &hooks.Set{}
	hs.Capture("blocks.*.ssm.hook_B")
	perHead, err := m.Forward(ids, Options{Hooks: hs, Logits: true})
	if err != nil {
		t.Fatal(err)
	}
	if rel, i := relErr(perHead.Logits, ref.Logits); rel != 0 {
		t.Errorf("with hook_B captured (B, C per head) the logits differ by %.3g at %d", rel, i)
	}
	for _, scan := range []int{1, 5, 7, 16, 64} {
		out, cap := run(scan)
		if rel, i := relErr(out.Logits, ref.Logits); rel > 1e-5 {
			t.Errorf("chunk %d: logits differ from the recurrence's by %.3g at %d", scan, rel, i)
		}
		for l := range m.Layers {
			for _, k := range []string{"y", "final_state"} {
				n := hooks.Name("blocks.{l}.ssm.hook_"+k, l)
				if rel, i := relErr(cap.Get(n).Data().([]float32), refCap.Get(n).Data().([]float32)); rel > 1e-5 {
					t.Errorf("chunk %d: %s differs from the recurrence's by %.3g at %d", scan, n, rel, i)
				}
			}
		}
	}
}

// BenchmarkSSMScan compares the chunked scan with the recurrence on one
// head of Mamba-2-780M's shape (P = 64, N = 128) at T = 4096.
func BenchmarkSSMScan(b *testing.B) {
	const T, P, N = 4096, 64, 128
	rng := rand.New(rand.NewPCG(1, 2))
	fill := func(n int, lo, hi float64) []float32 {
		x := make([]float32, n)
		for i := range x {
			x[i] = float32(lo + (hi-lo)*rng.Float64())
		}
		return x
	}
	x, bb, cc := fill(T*P, -1, 1), fill(T*N, -1, 1), fill(T*N, -1, 1)
	dt, a := fill(T, 0.001, 0.1), fill(T, 0.9, 1)
	y, S := make([]float32, T*P), make([]float32, P*N)
	for _, chunk := range []int{-1, 32, 64, 128, 256} {
		b.Run(fmt.Sprintf("chunk=%d", chunk), func(b *testing.B) {
			var w *ssmChunk
			if chunk > 0 {
				w = newSSMChunk(chunk, P)
			}
			for i := 0; i < b.N; i++ {
				clear(S)
				if w == nil {
					ssmRecurrent(y, S, x, bb, cc, dt, a, T, P, N, 1, P, N, 1)
				} else {
					ssmChunked(y, S, x, bb, cc, dt, a, T, P, N, 1, P, N, 1, w)
				}
			}
			b.ReportMetric(float64(T*b.N)/b.Elapsed().Seconds(), "tokens/s")
		})
	}
}

// TestSSMBGroupHook: hook_B_group holds each group's B, which hook_B
// repeats to the group's heads; an intervention there reaches the heads'
// B and the pass, and hooking it alone leaves the logits of the pass
// without hooks bit for bit.
func TestSSMBGroupHook(t *testing.T) {
	cfg, err := ParseConfig(mamba2Config(t, nil))
	if err != nil {
		t.Fatal(err)
	}
	m, _, err := Generate(*cfg, 13)
	if err != nil {
		t.Fatal(err)
	}
	const B, T = 2, 9
	ids := seqs(B, T, m.Vocab)
	base, err := m.Forward(ids, Options{Logits: true})
	if err != nil {
		t.Fatal(err)
	}
	hs := &hooks.Set{}
	cap := hs.Capture("blocks.*.ssm.hook_B_group")
	out, err := m.Forward(ids, Options{Hooks: hs, Logits: true})
	if err != nil {
		t.Fatal(err)
	}
	if rel, i := relErr(out.Logits, base.Logits); rel != 0 {
		t.Errorf("with hook_B_group captured the logits differ by %.3g at %d", rel, i)
	}
	sc := m.SSM
	G, H, N := sc.Groups, sc.Heads, sc.State
	if G < 2 || H == G {
		t.Fatalf("config with %d groups of %d heads does not test the repetition", G, H)
	}
	hs = &hooks.Set{}
	hs.Add("blocks.0.ssm.hook_B_group", func(_ string, _ int, x *tensor.Dense) error {
		bg := x.Data().([]float32)
		for i := range bg[:N] { // row 0, group 0
			bg[i] *= 2
		}
		return nil
	})
	cap2 := hs.Capture("blocks.*.ssm.hook_B", "blocks.*.ssm.hook_B_group")
	changed, err := m.Forward(ids, Options{Hooks: hs, Logits: true})
	if err != nil {
		t.Fatal(err)
	}
	if rel, _ := relErr(changed.Logits, base.Logits); rel == 0 {
		t.Error("doubling B of group 0 at hook_B_group did not change the logits")
	}
	for l := range m.Layers {
		bg := cap.Get(hooks.Name(hooks.SSMBGroup, l)).Data().([]float32)
		bh := cap2.Get(hooks.Name(hooks.SSMB, l)).Data().([]float32)
		bg2 := cap2.Get(hooks.Name(hooks.SSMBGroup, l)).Data().([]float32)
		for r := 0; r < B*T; r++ {
			for h := 0; h < H; h++ {
				g := h / (H / G)
				for k := 0; k < N; k++ {
					want := bg2[(r*G+g)*N+k] // after the intervention
					if got := bh[(r*H+h)*N+k]; got != want {
						t.Fatalf("layer %d row %d head %d: hook_B %v, hook_B_group of group %d %v", l, r, h, got, g, want)
					}
					// layer 0's other rows and groups are untouched
					if l == 0 && (r > 0 || g > 0) && bg[(r*G+g)*N+k] != want {
						t.Fatalf("layer 0 row %d group %d: B_group %v without, %v with the intervention", r, g, bg[(r*G+g)*N+k], want)
					}
				}
			}
		}
	}
}

// TestSSMScanOption: Options.SSMScan runs a whole Mamba-2 or Falcon-H1
// model with the recurrence (−1) or chunks of a given size, and every
// choice gives the default chunked scan's logits and each layer's y within
// 1e-5 relative (what probe bench --modes ssm-recurrent times).
func TestSSMScanOption(t *testing.T) {
	for _, arch := range []Arch{ArchMamba2, ArchFalconH1} {
		t.Run(string(arch), func(t *testing.T) {
			cfg, err := SmallConfig(arch, Size{Layers: 2, DModel: 64, Heads: 4, KVHeads: 2, Vocab: 96, MaxPos: 256})
			if err != nil {
				t.Fatal(err)
			}
			m, _, err := Generate(cfg, 5)
			if err != nil {
				t.Fatal(err)
			}
			ids := seqs(1, 150, m.Vocab)
			run := func(scan int) (*Output, *hooks.Capture) {
				hs := &hooks.Set{}
				cap := hs.Capture("blocks.*.ssm.hook_y")
				out, err := m.Forward(ids, Options{Hooks: hs, Logits: true, SSMScan: scan})
				if err != nil {
					t.Fatal(err)
				}
				return out, cap
			}
			ref, refCap := run(0)
			for _, scan := range []int{-1, 1, 33, 256} {
				out, cap := run(scan)
				if rel, i := relErr(out.Logits, ref.Logits); rel > 1e-5 {
					t.Errorf("SSMScan %d: logits differ from the default scan's by %.3g at %d", scan, rel, i)
				}
				for l := range m.Layers {
					name := hooks.Name("blocks.{l}.ssm.hook_y", l)
					if rel, i := relErr(cap.Get(name).Data().([]float32), refCap.Get(name).Data().([]float32)); rel > 1e-5 {
						t.Errorf("SSMScan %d: %s differs by %.3g at %d", scan, name, rel, i)
					}
				}
			}
		})
	}
}
