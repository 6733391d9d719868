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

	"github.com/filterlens/probe/checkpoint"
	"github.com/filterlens/probe/hooks"
)

// TestRWKV7Config reads the golden case's authors' args into the sizes
// of the reference and refuses other RWKV generations, inconsistent head
// sizes and missing LoRA ranks, naming the field.
func TestRWKV7Config(t *testing.T) {
	c, err := goldenConfigWith(t, "rwkv7", func(map[string]any) {})
	if err != nil {
		t.Fatal(err)
	}
	rc := c.RWKV7
	if c.Arch != ArchRWKV7 || rc == nil || c.Heads != 4 || c.KVHeads != 4 || c.DHead != 16 || c.DModel != 64 || c.DMLP != 256 ||
		c.Layers != 3 || c.Vocab != 512 || c.NormEps != 1e-5 || rc.GroupNormEps != 64e-5 ||
		rc.DecayLoRA != 16 || rc.ICLRLoRA != 16 || rc.ValueLoRA != 16 || rc.GateLoRA != 16 {
		t.Fatalf("parsed %+v / %+v", c, rc)
	}
	checkRefused(t, "rwkv7", []refusal{
		{"RWKV-6", func(m map[string]any) { m["architecture"] = "RWKV-6 x060" }, "field architecture"},
		{"x060 args", func(m map[string]any) { m["my_testing"] = "x060" }, "field my_testing"},
		{"head size not dividing", func(m map[string]any) { m["head_size"] = 24 }, "head_size 24 does not divide n_embd 64"},
		{"n_head inconsistent", func(m map[string]any) { m["n_head"] = 8 }, "field n_head 8"},
		{"dim_att other than n_embd", func(m map[string]any) { m["dim_att"] = 128 }, "field dim_att"},
		{"no decay rank", func(m map[string]any) { delete(m, "D_DECAY_LORA") }, "field D_DECAY_LORA is missing"},
		{"zero gate rank", func(m map[string]any) { m["D_GATE_LORA"] = 0 }, "field D_GATE_LORA = 0"},
		{"negative group-norm eps", func(m map[string]any) { m["ln_x_group_norm_eps"] = -1 }, "field ln_x_group_norm_eps"},
		{"zero divisor", func(m map[string]any) { delete(m, "ln_x_group_norm_eps"); m["head_size_divisor"] = 0 }, "field head_size_divisor"},
	})
}

// randomRWKV returns random recurrence inputs of one sequence of T steps
// and H heads of N channels, [T, H·N] each, in the released models'
// ranges: w in (0.55, 1), a in (0, 1), κ̂ unit per head.
func randomRWKV(rng *rand.Rand, T, H, N int) (r, w, k, kk, a, v []float32) {
	n := T * H * N
	mk := func(f func() float64) []float32 {
		x := make([]float32, n)
		for i := range x {
			x[i] = float32(f())
		}
		return x
	}
	r, k, v = mk(rng.NormFloat64), mk(rng.NormFloat64), mk(rng.NormFloat64)
	w = mk(func() float64 { return 0.55 + 0.45*rng.Float64() })
	a = mk(rng.Float64)
	kk = mk(rng.NormFloat64)
	for i := 0; i < n; i += N {
		var s float64
		for _, x := range kk[i : i+N] {
			s += float64(x) * float64(x)
		}
		for j := range kk[i : i+N] {
			kk[i+j] /= float32(math.Sqrt(s))
		}
	}
	return
}

// TestRWKVAttentionIsExact: the streamed effective attention reproduces
// the recurrence's output, wkv_t = Σ_s M[t,s] v_s, for every head of a
// long random sequence, in tiles of 1, 5 and T rows (the same rows), with
// zeros above the diagonal.
func TestRWKVAttentionIsExact(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 31))
	T, H, N := 97, 3, 8
	C := H * N
	r, w, k, kk, a, v := randomRWKV(rng, T, H, N)
	wkv := make([]float32, T*C)
	for h := 0; h < H; h++ {
		rwkvRecurrent(wkv, make([]float32, N*N), r, w, k, kk, a, v, h*N, T, C, N)
	}
	for h := 0; h < H; h++ {
		var first []float32
		for _, tile := range []int{1, 5, T} {
			M := make([]float32, T*T)
			for i := range M {
				M[i] = float32(math.NaN()) // every row must be delivered
			}
			err := rwkvAttention(r, w, k, kk, a, h*N, T, C, N, tile, func(t0, n, width int, rows []float32) error {
				if width != t0+n {
					return fmt.Errorf("tile at %d of %d rows has width %d", t0, n, width)
				}
				for q := 0; q < n; q++ {
					copy(M[(t0+q)*T:(t0+q+1)*T], make([]float32, T))
					copy(M[(t0+q)*T:], rows[q*width:(q+1)*width])
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			got := make([]float32, T*N)
			ref := make([]float32, T*N)
			for q := 0; q < T; q++ {
				for s := q + 1; s < T; s++ {
					if M[q*T+s] != 0 {
						t.Fatalf("head %d tile %d: M[%d,%d] = %v above the diagonal", h, tile, q, s, M[q*T+s])
					}
				}
				for i := 0; i < N; i++ {
					var y float64
					for s := 0; s <= q; s++ {
						y += float64(M[q*T+s]) * float64(v[s*C+h*N+i])
					}
					got[q*N+i] = float32(y)
					ref[q*N+i] = wkv[q*C+h*N+i]
				}
			}
			checkClose(t, fmt.Sprintf("head %d tile %d: M·v vs wkv", h, tile), got, ref)
			if first == nil {
				first = M
			} else if rel, _ := relErr(M, first); rel != 0 {
				t.Errorf("head %d: tile %d gives other rows than tile 1 (rel. %g)", h, tile, rel)
			}
		}
	}
}

// TestRWKV7DeltaStream: the effective attention rows of each RWKV-7 layer
// streamed to a DeltaConsumer, in tiles of 1, 7 and 64 rows, equal the
// golden eff_attn; softmax consumers get nothing.
func TestRWKV7DeltaStream(t *testing.T) {
	dir := filepath.Join(goldenDir, "rwkv7")
	m, err := Load(dir, LoadOptions{})
	if err != nil {
		t.Skipf("golden data not available: %v", err)
	}
	g := openGolden(t, dir)
	H := m.Heads
	for _, tile := range []int{1, 7, 64} {
		for l := range m.Layers {
			r := &deltaRecorder{layer: l, B: g.B, H: H, T: g.T, w: make([]float32, g.B*H*g.T*g.T), seen: make([]int, g.B*H)}
			hs := &hooks.Set{}
			hs.Stream(l, r)
			if _, err := m.Forward(g.ids(t), Options{Hooks: hs, TileRows: tile}); err != nil {
				t.Fatal(err)
			}
			if r.outOfRow || r.softmax != 0 {
				t.Errorf("tile %d layer %d: rows out of order %v, softmax tiles %d", tile, l, r.outOfRow, r.softmax)
			}
			checkClose(t, fmt.Sprintf("streamed eff_attn.%d (tile %d)", l, tile), r.w, g.f32(t, fmt.Sprintf("eff_attn.%d", l)))
		}
	}
}

// TestRWKV7Causal: the first T/2 tokens alone give the same logits at
// their positions as the full golden sequence (the recurrence has no
// chunking), and the sequences of a batch do not see each other.
func TestRWKV7Causal(t *testing.T) {
	dir := filepath.Join(goldenDir, "rwkv7")
	m, err := Load(dir, LoadOptions{})
	if err != nil {
		t.Skipf("golden data not available: %v", err)
	}
	g := openGolden(t, dir)
	ids := g.ids(t)
	full, err := m.Forward(ids, Options{Logits: true})
	if err != nil {
		t.Fatal(err)
	}
	h := g.T / 2
	V := m.Vocab
	for b := range ids {
		part, err := m.Forward([][]int{ids[b][:h]}, Options{Logits: true})
		if err != nil {
			t.Fatal(err)
		}
		checkClose(t, fmt.Sprintf("sequence %d, first %d tokens alone", b, h), part.Logits, full.Logits[b*g.T*V:(b*g.T+h)*V])
	}
}

// TestRWKV7Refuses: a checkpoint whose tensor does not fit config.json is
// refused naming the tensor.
func TestRWKV7Refuses(t *testing.T) {
	dir := filepath.Join(goldenDir, "rwkv7")
	if _, err := LoadConfig(dir); err != nil {
		t.Skipf("golden data not available: %v", err)
	}
	c, err := goldenConfigWith(t, "rwkv7", func(m map[string]any) { m["D_MV_LORA"] = 8 })
	if err != nil {
		t.Fatal(err)
	}
	if c.RWKV7.ValueLoRA != 8 {
		t.Fatalf("D_MV_LORA read as %d", c.RWKV7.ValueLoRA)
	}
	tmp := variantDir(t, dir, "model.safetensors", "model.safetensors")
	os.Remove(filepath.Join(tmp, "config.json"))
	data, _ := json.Marshal(c.HFConfig())
	if err := os.WriteFile(filepath.Join(tmp, "config.json"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = Load(tmp, LoadOptions{})
	if err == nil || !strings.Contains(err.Error(), `"blocks.0.att.v1"`) {
		t.Errorf("error %v, want the mismatched blocks.0.att.v1 named", err)
	}
}

// TestRWKV7GeneratedShapes runs a generated RWKV-7 of another shape
// (heads of 8, LoRA ranks of 32, three sequences of 70 tokens) and checks
// its hooks against each other: wkv = M·v with the materialized
// effective attention, the last wkv = S_T r_T with the final state
// (S[i,j], i value, j key), κ̂ of unit norm per head, w in (e^{−e^{−½}}, 1).
func TestRWKV7GeneratedShapes(t *testing.T) {
	cfg, err := SmallConfig(ArchRWKV7, Size{Layers: 3, DModel: 48, Heads: 6, KVHeads: 6, Vocab: 83, MaxPos: 128})
	if err != nil {
		t.Fatal(err)
	}
	m, _, err := Generate(cfg, 11)
	if err != nil {
		t.Fatal(err)
	}
	B, T, H, N := 3, 70, m.Heads, m.DHead
	C := H * N
	hs := &hooks.Set{}
	cap := hs.Capture("blocks.*.rwkv.hook_eff_attn", "blocks.*.rwkv.hook_v", "blocks.*.rwkv.hook_wkv", "blocks.*.rwkv.hook_state",
		"blocks.*.rwkv.hook_r", "blocks.*.rwkv.hook_kk", "blocks.*.rwkv.hook_w")
	if _, err := m.Forward(seqs(B, T, m.Vocab), Options{Hooks: hs, Logits: true, TileRows: 9}); err != nil {
		t.Fatal(err)
	}
	get := func(p string, l int) []float32 { return cap.Get(hooks.Name(p, l)).Data().([]float32) }
	for l := range m.Layers {
		M, v, wkv, S := get(hooks.RWKVEffAttn, l), get(hooks.RWKVV, l), get(hooks.RWKVWKV, l), get(hooks.RWKVState, l)
		r, kk, w := get(hooks.RWKVR, l), get(hooks.RWKVKK, l), get(hooks.RWKVW, l)
		got := make([]float32, B*T*C)
		last, lastRef := make([]float32, B*C), make([]float32, B*C)
		for b := 0; b < B; b++ {
			for h := 0; h < H; h++ {
				for q := 0; q < T; q++ {
					for i := 0; i < N; i++ {
						var y float64
						for s := 0; s <= q; s++ {
							y += float64(M[((b*H+h)*T+q)*T+s]) * float64(v[(b*T+s)*C+h*N+i])
						}
						got[(b*T+q)*C+h*N+i] = float32(y)
					}
				}
				for i := 0; i < N; i++ {
					var y float64
					for j := 0; j < N; j++ {
						y += float64(S[((b*H+h)*N+i)*N+j]) * float64(r[(b*T+T-1)*C+h*N+j])
					}
					last[b*C+h*N+i], lastRef[b*C+h*N+i] = float32(y), wkv[(b*T+T-1)*C+h*N+i]
				}
			}
		}
		checkClose(t, fmt.Sprintf("layer %d: M·v vs wkv", l), got, wkv)
		checkClose(t, fmt.Sprintf("layer %d: S_T·r_T vs the last wkv", l), last, lastRef)
		for i := 0; i < len(kk); i += N {
			var s float64
			for _, x := range kk[i : i+N] {
				s += float64(x) * float64(x)
			}
			if math.Abs(s-1) > 1e-5 {
				t.Fatalf("layer %d: |κ̂|² = %v at %d", l, s, i)
			}
		}
		lo := float32(math.Exp(-math.Exp(-0.5)))
		for i, x := range w {
			if !(x >= lo && x <= 1) {
				t.Fatalf("layer %d: decay %v at %d outside [%v, 1]", l, x, i, lo)
			}
		}
	}
}

// TestRWKV7FlaLayout writes the golden weights under fla-hub's names
// (LoRAs as nn.Sequential with their biases, k_k and k_a as [C], layer 0
// without v_lora) with fla's config.json, and checks that they run as the
// authors' layout does with the same group-norm eps (fla's head_dim ·
// norm_eps): the same logits.
func TestRWKV7FlaLayout(t *testing.T) {
	src := filepath.Join(goldenDir, "rwkv7")
	ck, err := checkpoint.OpenFile(filepath.Join(src, "model.safetensors"))
	if err != nil {
		t.Skipf("golden data not available: %v", err)
	}
	defer ck.Close()
	get := func(n string) ([]float32, []int) {
		x, err := ck.Float32(n)
		if err != nil {
			t.Fatal(err)
		}
		info, _ := ck.Info(n)
		return x, info.Shape
	}
	var out []checkpoint.Tensor
	put := func(name string, x []float32, shape ...int) {
		out = append(out, checkpoint.Tensor{Name: name, Shape: shape, Data: x})
	}
	same := func(from, to string) {
		x, shape := get(from)
		put(to, x, shape...)
	}
	const C, L = 64, 3
	same("emb.weight", "model.embeddings.weight")
	same("blocks.0.ln0.weight", "model.layers.0.pre_norm.weight")
	same("blocks.0.ln0.bias", "model.layers.0.pre_norm.bias")
	for l := 0; l < L; l++ {
		b, p := fmt.Sprintf("blocks.%d.", l), fmt.Sprintf("model.layers.%d.", l)
		for from, to := range map[string]string{"ln1": "attn_norm", "ln2": "ffn_norm", "att.ln_x": "attn.g_norm"} {
			same(b+from+".weight", p+to+".weight")
			same(b+from+".bias", p+to+".bias")
		}
		for from, to := range map[string]string{"receptance": "r_proj", "key": "k_proj", "value": "v_proj", "output": "o_proj"} {
			same(b+"att."+from+".weight", p+"attn."+to+".weight")
		}
		for _, x := range []string{"x_r", "x_w", "x_k", "x_v", "x_a", "x_g", "r_k"} {
			same(b+"att."+x, p+"attn."+x)
		}
		for _, x := range []string{"k_k", "k_a"} {
			v, _ := get(b + "att." + x)
			put(p+"attn."+x, v, C)
		}
		for _, lr := range []struct{ name, one, two, bias string }{{"w_lora", "w1", "w2", "w0"}, {"a_lora", "a1", "a2", "a0"}, {"v_lora", "v1", "v2", "v0"}, {"g_lora", "g1", "g2", ""}} {
			if lr.name == "v_lora" && l == 0 {
				continue
			}
			one, s1 := get(b + "att." + lr.one)
			two, s2 := get(b + "att." + lr.two)
			put(p+"attn."+lr.name+".lora.0.weight", transposed(one, s1[0], s1[1]), s1[1], s1[0])
			put(p+"attn."+lr.name+".lora.2.weight", transposed(two, s2[0], s2[1]), s2[1], s2[0])
			if lr.bias != "" {
				v, _ := get(b + "att." + lr.bias)
				put(p+"attn."+lr.name+".lora.2.bias", v, C)
			}
		}
		v, _ := get(b + "ffn.x_k")
		put(p+"ffn.x_k", v, C)
		same(b+"ffn.key.weight", p+"ffn.key.weight")
		same(b+"ffn.value.weight", p+"ffn.value.weight")
	}
	same("ln_out.weight", "model.norm.weight")
	same("ln_out.bias", "model.norm.bias")
	same("head.weight", "lm_head.weight")
	fla := t.TempDir()
	cfg, _ := json.Marshal(map[string]any{
		"model_type": "rwkv7", "hidden_size": C, "num_hidden_layers": L, "head_dim": 16, "intermediate_size": 256,
		"vocab_size": 512, "decay_low_rank_dim": 16, "a_low_rank_dim": 16, "v_low_rank_dim": 16, "gate_low_rank_dim": 16,
		"norm_eps": 1e-5, "norm_first": true, "norm_bias": true, "hidden_act": "sqrelu", "attn": nil, "fuse_norm": true,
		"tie_word_embeddings": false, "value_dim": []int{C, C, C},
	})
	if err := os.WriteFile(filepath.Join(fla, "config.json"), cfg, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := checkpoint.WriteSafetensors(filepath.Join(fla, "model.safetensors"), out, nil); err != nil {
		t.Fatal(err)
	}
	a, err := Load(fla, LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if a.RWKV7.GroupNormEps != 16e-5 || a.RWKV7.Layout != "fla" {
		t.Fatalf("fla config read as %+v", *a.RWKV7)
	}
	authors := variantDir(t, src, "model.safetensors", "model.safetensors")
	os.Remove(filepath.Join(authors, "config.json"))
	c := a.Config
	c.RWKV7 = &RWKV7Config{DecayLoRA: 16, ICLRLoRA: 16, ValueLoRA: 16, GateLoRA: 16, GroupNormEps: 16e-5}
	data, _ := json.Marshal(c.HFConfig())
	if err := os.WriteFile(filepath.Join(authors, "config.json"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	b, err := Load(authors, LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ids := openGolden(t, src).ids(t)
	x, err := a.Forward(ids, Options{Logits: true})
	if err != nil {
		t.Fatal(err)
	}
	y, err := b.Forward(ids, Options{Logits: true})
	if err != nil {
		t.Fatal(err)
	}
	checkClose(t, "logits, fla layout vs the authors'", x.Logits, y.Logits)
	for _, r := range []struct {
		what  string
		field string
		value any
		want  string
	}{
		{"hybrid", "attn", map[string]any{"layers": []int{1}, "num_heads": 4}, "field attn"},
		{"other act", "hidden_act", "relu", "field hidden_act"},
		{"no norm bias", "norm_bias", false, "field norm_bias"},
		{"other value dim", "value_dim", 32, "field value_dim 32"},
		{"head dim not dividing", "head_dim", 24, "head_dim 24 does not divide"},
	} {
		var m map[string]any
		_ = json.Unmarshal(cfg, &m)
		m[r.field] = r.value
		data, _ := json.Marshal(m)
		if _, err := ParseConfig(data); err == nil || !strings.Contains(err.Error(), r.want) {
			t.Errorf("%s: error %v, want one containing %q", r.what, err, r.want)
		}
	}
}
