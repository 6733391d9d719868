package model

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/filterlens/probe/checkpoint"
	"github.com/filterlens/probe/hooks"
)

func rtCase(t *testing.T, layers, d, heads int, edit func(*Config)) Config {
	t.Helper()
	cfg, err := SmallConfig(ArchRT, Size{Layers: layers, DModel: d, Heads: heads, KVHeads: heads, Vocab: 53, MaxPos: 256})
	if err != nil {
		t.Fatal(err)
	}
	if edit != nil {
		edit(&cfg)
	}
	return cfg
}

// TestRTMatchesPyTorchReference compares logits and the RT intermediates
// with reference/rt/rt_ref.py (complex-tensor PyTorch) on random
// checkpoints of both option sets.
func TestRTMatchesPyTorchReference(t *testing.T) {
	needTorch(t)
	cases := []struct {
		name string
		cfg  Config
	}{
		{"paper-defaults", rtCase(t, 2, 24, 3, nil)},
		{"global-real-prop1-rms-bias-untied-noproj", rtCase(t, 3, 16, 2, func(c *Config) {
			c.RT.NormScope, c.RT.RobustDim, c.RT.Kernel, c.RT.Retraction = "global", "real", "prop1", "rms"
			c.RT.TangentProjection, c.RT.KappaEps = false, 0
			c.QKVBias, c.OBias, c.TiedHead = true, true, false
		})},
	}
	ids := [][]int{{3, 17, 5, 40, 9, 9, 22, 50, 1, 33, 12, 7, 3, 17}, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13}}
	for ci, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir, m := writeFilterCase(t, tc.cfg, uint64(21+ci), ids)
			ref := runReference(t, "rt/rt_ref.py", dir)
			pairs := map[string]string{"logits": "logits"}
			for l := 0; l < tc.cfg.Layers; l++ {
				for r, h := range map[string]string{
					"magnitude": "rt.hook_magnitude", "log_precision": "rt.hook_log_precision",
					"self_agreement": "rt.hook_self_agreement", "pattern": "attn.hook_pattern",
					"rot_q": "attn.hook_rot_q", "rot_k": "attn.hook_rot_k", "consensus": "rt.hook_consensus",
					"z": "attn.hook_z", "resid_mid": "hook_resid_mid", "retracted": "ln2.hook_normalized",
					"resid_post": "hook_resid_post",
				} {
					pairs[fmt.Sprintf("l%d.%s", l, r)] = hooks.Name("blocks.{l}."+h, l)
				}
			}
			hs := &hooks.Set{}
			var names []string
			for _, h := range pairs {
				names = append(names, h)
			}
			c := hs.Capture(names...)
			if _, err := m.Forward(ids, Options{Hooks: hs, TileRows: 5}); err != nil {
				t.Fatal(err)
			}
			worst := compareRef(t, ref, c, pairs, 1e-4)
			t.Logf("%s: worst rel err over logits and %d intermediates: %.2e", tc.name, len(pairs)-1, worst)
		})
	}
}

// setRaw overwrites every value of the named generated tensors of layer l
// (the model shares their memory).
func setRaw(ts []checkpoint.Tensor, suffix string, v float32) {
	for _, t := range ts {
		if strings.HasSuffix(t.Name, suffix) {
			for i := range t.Data.([]float32) {
				t.Data.([]float32)[i] = v
			}
		}
	}
}

// TestRTCosineLimit: notes 004 §A.18.3. With σ̃² = η² = γ² = 0 the
// precision is flat, κ = 1/τ_θ², and as ν → ∞ the logits become
// const + (2κ/d)·Re(q̂_i†e^{iω(t_i−t_j)}k̂_j): RT attention is QK-normalized
// cosine (RoPE) attention with logit scale 2β_s/(d·τ_θ²). The reference is
// the standard causal softmax attention (attention.go) on RT's own rotated
// unit queries and keys.
func TestRTCosineLimit(t *testing.T) {
	cfg := rtCase(t, 2, 24, 3, nil)
	m, ts, err := Generate(cfg, 4)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{".sigma_raw", ".eta_raw", ".gamma_raw"} {
		setRaw(ts, s, -100) // softplus(−100) = 3.7e-44
	}
	setRaw(ts, ".nu_raw", 1e7) // ν = 1e7
	B, T, H, dw := 2, 19, cfg.Heads, cfg.DHead
	ids := seqs(B, T, cfg.Vocab)
	hs := &hooks.Set{}
	c := hs.Capture("blocks.*.attn.hook_rot_q", "blocks.*.attn.hook_rot_k", "blocks.*.attn.hook_pattern")
	if _, err := m.Forward(ids, Options{Hooks: hs}); err != nil {
		t.Fatal(err)
	}
	ps, _ := m.RTParams()
	for l := 0; l < cfg.Layers; l++ {
		qt := c.Get(hooks.Name("blocks.{l}.attn.hook_rot_q", l)).Data().([]float32)
		kt := c.Get(hooks.Name("blocks.{l}.attn.hook_rot_k", l)).Data().([]float32)
		got := c.Get(hooks.Name("blocks.{l}.attn.hook_pattern", l)).Data().([]float32)
		for h := 0; h < H; h++ {
			p := ps[l*H+h]
			if k := p.Kappa(1, 1, 3); math.Abs(k*p.TauTheta2-1) > 1e-12 {
				t.Fatalf("flat limit: κ·τ_θ² = %v, want 1", k*p.TauTheta2)
			}
			// One head at a time: the standard pass with H = 1 on this head's slice.
			q1, k1 := make([]float32, B*T*dw), make([]float32, B*T*dw)
			for r := 0; r < B*T; r++ {
				copy(q1[r*dw:(r+1)*dw], qt[(r*H+h)*dw:])
				copy(k1[r*dw:(r+1)*dw], kt[(r*H+h)*dw:])
			}
			a := &attnArgs{batch: B, T: T, heads: 1, kvHeads: 1, dHead: dw,
				scale: float32(2 * p.Beta / (float64(p.C) * p.TauTheta2)),
				q:     q1, k: k1, v: make([]float32, B*T*dw), z: make([]float32, B*T*dw), pattern: make([]float32, B*T*T)}
			if err := causalAttention(a); err != nil {
				t.Fatal(err)
			}
			var worst float64
			for b := 0; b < B; b++ {
				for i := 0; i < T*T; i++ {
					worst = math.Max(worst, math.Abs(float64(got[(b*H+h)*T*T+i]-a.pattern[b*T*T+i])))
				}
			}
			if worst > 2e-5 {
				t.Fatalf("layer %d head %d: RT(ν=1e7, flat κ) vs cosine RoPE attention: max |ΔA| %.3g", l, h, worst)
			}
			if l == 0 && h == 0 {
				t.Logf("RT(ν = 1e7, σ̃ = η = γ = 0) vs cosine attention with scale 2β/(dτ_θ²): max |ΔA| %.2e", worst)
			}
		}
	}
}

// TestRTIdentities: rows of A sum to 1 (causal), the tangent update is
// orthogonal to the unit value (§A.18.4), ‖ū‖ ≤ 1 (§A.18.1), the
// transported cosine depends only on t_i − t_j (§A.18.5), and streamed
// rows equal hook_pattern.
func TestRTIdentities(t *testing.T) {
	cfg := rtCase(t, 2, 24, 3, nil)
	m, _, err := Generate(cfg, 6)
	if err != nil {
		t.Fatal(err)
	}
	B, T, H, dw := 2, 16, cfg.Heads, cfg.DHead
	ids := seqs(B, T, cfg.Vocab)
	for t := range ids[1] {
		ids[1][t] = []int{5, 30}[t%2] // period 2: positions t and t+2 carry the same token
	}
	hs := &hooks.Set{}
	c := hs.Capture("blocks.*.attn.hook_pattern", "blocks.*.attn.hook_v", "blocks.*.attn.hook_z",
		"blocks.*.rt.hook_consensus", "blocks.0.attn.hook_rot_q", "blocks.0.attn.hook_rot_k", "logits")
	rows := &rowCollector{T: T, H: H, rows: make([]float32, B*H*T*T), seen: make([]int, B*H)}
	hs.Stream(1, rows)
	if _, err := m.Forward(ids, Options{Hooks: hs}); err != nil {
		t.Fatal(err)
	}
	plain, err := m.Forward(ids, Options{Logits: true, TileRows: 3})
	if err != nil {
		t.Fatal(err)
	}
	if e, _ := relErr(plain.Logits, c.Get("logits").Data().([]float32)); e > 1e-6 {
		t.Fatalf("streamed vs materialized pattern: logits differ by %.3g", e)
	}
	if e, _ := relErr(rows.rows, c.Get("blocks.1.attn.hook_pattern").Data().([]float32)); e != 0 {
		t.Fatalf("streamed rows differ from hook_pattern: %.3g", e)
	}
	for l := 0; l < cfg.Layers; l++ {
		pat := c.Get(hooks.Name("blocks.{l}.attn.hook_pattern", l)).Data().([]float32)
		for r := 0; r < B*H*T; r++ {
			var s float64
			for j, a := range pat[r*T : (r+1)*T] {
				if j > r%T && a != 0 {
					t.Fatalf("layer %d row %d: weight %v on future key %d", l, r, a, j)
				}
				s += float64(a)
			}
			if math.Abs(s-1) > 1e-5 {
				t.Fatalf("layer %d row %d sums to %v", l, r, s)
			}
		}
		v := c.Get(hooks.Name("blocks.{l}.attn.hook_v", l)).Data().([]float32)
		z := c.Get(hooks.Name("blocks.{l}.attn.hook_z", l)).Data().([]float32)
		ub := c.Get(hooks.Name("blocks.{l}.rt.hook_consensus", l)).Data().([]float32)
		for r := 0; r < B*T*H; r++ {
			vh, zh := v[r*dw:(r+1)*dw], z[r*dw:(r+1)*dw]
			var dot float64
			for i := range vh {
				dot += float64(vh[i]) * float64(zh[i])
			}
			if cos := dot / math.Sqrt(sqNorm(vh)*sqNorm(zh)); math.Abs(cos) > 1e-5 {
				t.Fatalf("layer %d row %d: tangent update not orthogonal to v̂ (cos %.3g)", l, r, cos)
			}
			if n := math.Sqrt(sqNorm(ub[r*dw : (r+1)*dw])); n > 1+1e-6 {
				t.Fatalf("layer %d row %d: ‖ū‖ = %v > 1", l, r, n)
			}
		}
	}
	qt := c.Get("blocks.0.attn.hook_rot_q").Data().([]float32)
	kt := c.Get("blocks.0.attn.hook_rot_k").Data().([]float32)
	dot := func(i, j, h int) float64 {
		var s float64
		for x := 0; x < dw; x++ {
			s += float64(qt[((T+i)*H+h)*dw+x]) * float64(kt[((T+j)*H+h)*dw+x])
		}
		return s
	}
	for h := 0; h < H; h++ {
		for _, pr := range [][4]int{{3, 2, 1, 0}, {9, 4, 13, 8}, {6, 6, 2, 2}} {
			if a, b := dot(pr[0], pr[1], h), dot(pr[2], pr[3], h); math.Abs(a-b) > 1e-5 {
				t.Fatalf("head %d: Re(q̃ᴴk̃) at (%d,%d) = %v but at (%d,%d) = %v for the same tokens and lag", h, pr[0], pr[1], a, pr[2], pr[3], b)
			}
		}
	}
}

// TestRTConfigErrors: refused RT configurations name their field.
func TestRTConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		edit string
		want string
	}{
		{`"rt": {"norm_scope": "layer"}`, "rt.norm_scope"},
		{`"rt": {"kernel": "exact"}`, "rt.kernel"},
		{`"rt": {"retraction": "ln"}`, "rt.retraction"},
		{`"rt": {"kappa_eps": -1}`, "rt.kappa_eps"},
		{`"rt": {"min_exponent": 3}`, "rt.min_exponent"},
		{`"rt": {"tangent": true}`, "unknown field"},
		{`"head_dim": 7`, "head_dim 7"},
		{`"hidden_act": "tanh"`, "hidden_act"},
	} {
		js := `{"model_type": "rt_transformer", "hidden_size": 16, "num_hidden_layers": 1, "num_attention_heads": 2,
			"intermediate_size": 32, "vocab_size": 10, "max_position_embeddings": 8, ` + tc.edit + `}`
		_, err := ParseConfig([]byte(js))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want it to mention %q", tc.edit, err, tc.want)
		}
	}
}
