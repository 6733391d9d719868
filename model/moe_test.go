package model

import (
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"testing"

	"github.com/filterlens/probe/checkpoint"
	"github.com/filterlens/probe/hooks"
)

// randomMoE returns a mixture of experts of E experts, k per token, width
// D and expert width F with N(0, 1/fan_in) weights; with biases (router
// and experts) when biased.
func randomMoE(rng *rand.Rand, cfg *MoEConfig, D int, biased bool) *moeLayer {
	E, F := cfg.Experts, cfg.DExpert
	mat := func(rows, cols int) Weight {
		w := make([]float32, rows*cols)
		for i := range w {
			w[i] = float32(rng.NormFloat64() / math.Sqrt(float64(cols)))
		}
		return f32Weight(w, cols)
	}
	vec := func(n int) []float32 {
		if !biased {
			return nil
		}
		b := make([]float32, n)
		for i := range b {
			b[i] = float32(0.3 * rng.NormFloat64())
		}
		return b
	}
	e := &moeLayer{cfg: cfg, act: "silu", router: mat(E, D), routerB: vec(E), experts: make([]moeExpert, E)}
	for x := range e.experts {
		e.experts[x] = moeExpert{gate: mat(F, D), up: mat(F, D), down: mat(D, F), bGate: vec(F), bUp: vec(F), bDown: vec(D)}
	}
	return e
}

// moeReference is the mixture of experts of the n rows of h in float64,
// token by token, every expert of the token's top k evaluated in full:
// the output [n, D], the chosen experts [n, k] and their weights.
func moeReference(e *moeLayer, h []float32, n int) (out []float64, ids []int, w []float64) {
	c := e.cfg
	E, K, F := c.Experts, c.TopK, c.DExpert
	D := e.router.Cols
	dot := func(wt Weight, r int, x []float64, b []float32) float64 {
		row := wt.widened()[r*wt.Cols : (r+1)*wt.Cols]
		s := 0.0
		for i, v := range row {
			s += float64(v) * x[i]
		}
		if b != nil {
			s += float64(b[r])
		}
		return s
	}
	out, ids, w = make([]float64, n*D), make([]int, n*K), make([]float64, n*K)
	for t := 0; t < n; t++ {
		xt := make([]float64, D) // the token
		for i := range xt {
			xt[i] = float64(h[t*D+i])
		}
		z := make([]float64, E)
		for r := range z {
			z[r] = dot(e.router, r, xt, e.routerB)
		}
		softmax := func(v []float64) []float64 {
			m, s := math.Inf(-1), 0.0
			for _, a := range v {
				m = math.Max(m, a)
			}
			p := make([]float64, len(v))
			for i, a := range v {
				p[i] = math.Exp(a - m)
				s += p[i]
			}
			for i := range p {
				p[i] /= s
			}
			return p
		}
		score := z
		if c.Order == RouteSoftmaxTopK {
			score = softmax(z)
		}
		order := make([]int, E)
		for i := range order {
			order[i] = i
		}
		sort.SliceStable(order, func(i, j int) bool { return score[order[i]] > score[order[j]] })
		sel := order[:K]
		wt := make([]float64, K)
		for j, x := range sel {
			wt[j] = score[x]
		}
		if c.Order == RouteTopKSoftmax {
			wt = softmax(wt)
		} else if c.Normalize {
			s := 0.0
			for _, v := range wt {
				s += v
			}
			for j := range wt {
				wt[j] /= s
			}
		}
		for j, x := range sel {
			ex := &e.experts[x]
			a := make([]float64, F)
			for f := range a {
				g, u := dot(ex.gate, f, xt, ex.bGate), dot(ex.up, f, xt, ex.bUp)
				a[f] = g / (1 + math.Exp(-g)) * u
			}
			for d := 0; d < D; d++ {
				out[t*D+d] += wt[j] * dot(ex.down, d, a, ex.bDown)
			}
			ids[t*K+j], w[t*K+j] = x, wt[j]
		}
	}
	return out, ids, w
}

// runMoE runs e on h [B·T, D] and returns the output and the values its
// hooks saw (copies), with edit, when set, applied to each hook's value.
func runMoE(t *testing.T, e *moeLayer, h []float32, B, T int, edit func(point string, x []float32)) ([]float32, map[string][]float32, error) {
	t.Helper()
	seen := map[string][]float32{}
	run := func(point string, l int, x []float32, shape ...int) {
		if edit != nil {
			edit(point, x)
		}
		seen[point] = append([]float32(nil), x...)
	}
	out := append([]float32(nil), h...) // out is h's storage, as in the pass
	err := e.mixChannels(&Model{}, out, out, 0, B, T, Options{}, run)
	return out, seen, err
}

// TestMoEMatchesReference: the mixer equals a float64 token-by-token
// reference in each router order, with and without renormalisation and
// biases, k from 1 to E, with expert row blocks smaller than an expert's
// tokens; its hooks show the reference's experts, in order, and weights.
func TestMoEMatchesReference(t *testing.T) {
	defer func(r int) { blockRows = r }(blockRows)
	blockRows = 3
	const B, T, D, F = 2, 9, 12, 7
	for _, c := range []struct {
		name   string
		cfg    MoEConfig
		biased bool
	}{
		{"softmax-first renormalised (Mixtral)", MoEConfig{Experts: 5, TopK: 2, DExpert: F, Normalize: true}, false},
		{"softmax-first as is (OLMoE)", MoEConfig{Experts: 6, TopK: 3, DExpert: F}, false},
		{"softmax-first k=1", MoEConfig{Experts: 4, TopK: 1, DExpert: F, Normalize: true}, false},
		{"softmax-first k=E", MoEConfig{Experts: 3, TopK: 3, DExpert: F}, false},
		{"top-k-first with biases (gpt-oss)", MoEConfig{Experts: 5, TopK: 2, DExpert: F, Order: RouteTopKSoftmax, RouterBias: true}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(11, 12))
			e := randomMoE(rng, &c.cfg, D, c.biased)
			h := make([]float32, B*T*D)
			for i := range h {
				h[i] = float32(rng.NormFloat64())
			}
			got, seen, err := runMoE(t, e, h, B, T, nil)
			if err != nil {
				t.Fatal(err)
			}
			ref, ids, w := moeReference(e, h, B*T)
			checkClose64(t, "output", got, ref, 1e-5)
			checkClose64(t, "hook_expert_weights", seen[hooks.MLPExpertWeights], w, 1e-6)
			for i, id := range ids {
				if got := seen[hooks.MLPExpertIndices][i]; got != float32(id) {
					t.Fatalf("hook_expert_indices at token %d slot %d: %v, want %d", i/c.cfg.TopK, i%c.cfg.TopK, got, id)
				}
			}
			if n := len(seen[hooks.MLPRouterLogits]); n != B*T*c.cfg.Experts {
				t.Errorf("hook_router_logits has %d values, want %d", n, B*T*c.cfg.Experts)
			}
		})
	}
}

// checkClose64 fails when max|got − ref| / max|ref| exceeds tol.
func checkClose64(t *testing.T, what string, got []float32, ref []float64, tol float64) {
	t.Helper()
	if len(got) != len(ref) {
		t.Fatalf("%s: %d values, want %d", what, len(got), len(ref))
	}
	var diff, most float64
	at := 0
	for i, r := range ref {
		most = math.Max(most, math.Abs(r))
		if d := math.Abs(float64(got[i]) - r); d > diff || math.IsNaN(d) {
			diff, at = d, i
		}
	}
	if diff > tol*most || math.IsNaN(diff) {
		t.Errorf("%s: rel. error %.3g > %.0e at %d (got %v, want %v)", what, diff/most, tol, at, got[at], ref[at])
	}
}

// TestMoEUnroutedExpertNotRun: an expert no token is routed to is not
// computed at all (its NaN weights would reach the output otherwise), and
// the output is the same bits as with that expert's weights zero.
func TestMoEUnroutedExpertNotRun(t *testing.T) {
	const B, T, D, F = 1, 16, 8, 5
	rng := rand.New(rand.NewPCG(3, 4))
	cfg := &MoEConfig{Experts: 4, TopK: 2, DExpert: F, Normalize: true, RouterBias: true}
	e := randomMoE(rng, cfg, D, false)
	e.routerB = []float32{0, 0, -1e4, 0} // expert 2: probability 0
	h := make([]float32, B*T*D)
	for i := range h {
		h[i] = float32(rng.NormFloat64())
	}
	fill := func(v float32) {
		ex := &e.experts[2]
		for _, w := range []Weight{ex.gate, ex.up, ex.down} {
			for i := range w.F32 {
				w.F32[i] = v
			}
		}
	}
	fill(0)
	zero, _, err := runMoE(t, e, h, B, T, nil)
	if err != nil {
		t.Fatal(err)
	}
	fill(float32(math.NaN()))
	poisoned, seen, err := runMoE(t, e, h, B, T, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range seen[hooks.MLPExpertIndices] {
		if v == 2 {
			t.Fatal("a token was routed to expert 2: the test's router bias does not exclude it")
		}
	}
	for i := range zero {
		if math.Float32bits(zero[i]) != math.Float32bits(poisoned[i]) {
			t.Fatalf("output %d: %v with the unrouted expert's weights NaN, %v with them 0", i, poisoned[i], zero[i])
		}
	}
}

// TestTopKOrder: descending values, ties to the lower index (torch.topk).
func TestTopKOrder(t *testing.T) {
	for _, c := range []struct {
		v    []float32
		want []int
	}{
		{[]float32{0.1, 0.5, 0.2, 0.5}, []int{1, 3}},
		{[]float32{1, 1, 1}, []int{0, 1, 2}},
		{[]float32{-3, -1, -2, -1, 0}, []int{4, 1, 3}},
	} {
		sel := make([]int, len(c.want))
		topK(sel, c.v)
		if fmt.Sprint(sel) != fmt.Sprint(c.want) {
			t.Errorf("topK(%v) = %v, want %v", c.v, sel, c.want)
		}
	}
}

// TestMoEHooksIntervene: hook_expert_indices and hook_expert_weights are
// identity points: values written there route the tokens (every token to
// experts 3 and 0 with weights ¾ and ¼ gives ¾·expert₃ + ¼·expert₀); a
// value that is not an expert id is refused, naming the hook.
func TestMoEHooksIntervene(t *testing.T) {
	const B, T, D, F = 2, 5, 8, 6
	rng := rand.New(rand.NewPCG(5, 6))
	cfg := &MoEConfig{Experts: 4, TopK: 2, DExpert: F, Normalize: true}
	e := randomMoE(rng, cfg, D, false)
	h := make([]float32, B*T*D)
	for i := range h {
		h[i] = float32(rng.NormFloat64())
	}
	got, _, err := runMoE(t, e, h, B, T, func(point string, x []float32) {
		for i := range x {
			switch point {
			case hooks.MLPExpertIndices:
				x[i] = [2]float32{3, 0}[i%2]
			case hooks.MLPExpertWeights:
				x[i] = [2]float32{0.75, 0.25}[i%2]
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	// the reference with a router that puts 3 then 0 on top, and
	// weights forced the same way: a mixer of experts 3 and 0 alone
	one := func(x int) []float64 {
		single := &moeLayer{cfg: &MoEConfig{Experts: 1, TopK: 1, DExpert: F}, act: "silu",
			router: f32Weight(make([]float32, D), D), experts: []moeExpert{e.experts[x]}}
		y, _, _ := moeReference(single, h, B*T)
		return y
	}
	y3, y0 := one(3), one(0)
	want := make([]float64, len(y3))
	for i := range want {
		want[i] = 0.75*y3[i] + 0.25*y0[i]
	}
	checkClose64(t, "rerouted output", got, want, 1e-5)

	for _, bad := range []float32{4, -1, 1.5} {
		_, _, err := runMoE(t, e, h, B, T, func(point string, x []float32) {
			if point == hooks.MLPExpertIndices {
				x[3] = bad
			}
		})
		if err == nil || !strings.Contains(err.Error(), "blocks.0.mlp.hook_expert_indices") || !strings.Contains(err.Error(), "not an expert id") {
			t.Errorf("index %v written by a hook: error %v, want one naming the hook", bad, err)
		}
	}
}

// TestMoEScratchPerPass: the mixer's allocations do not grow with the
// tokens (its buffers come from a pool; per pass it allocates at most a
// few per goroutine), and its scratch fits scratchFloats.
func TestMoEScratchPerPass(t *testing.T) {
	const D, F = 16, 8
	rng := rand.New(rand.NewPCG(7, 8))
	cfg := &MoEConfig{Experts: 6, TopK: 2, DExpert: F, Normalize: true}
	e := randomMoE(rng, cfg, D, false)
	moeKept.Lock()
	moeKept.list = nil // buffers kept from other tests' larger models
	moeKept.Unlock()
	allocs := func(T int) float64 {
		h := make([]float32, T*D)
		for i := range h {
			h[i] = float32(rng.NormFloat64())
		}
		run := func(string, int, []float32, ...int) {}
		return testing.AllocsPerRun(5, func() {
			if err := e.mixChannels(&Model{}, h, h, 0, 1, T, Options{}, run); err != nil {
				t.Fatal(err)
			}
		})
	}
	small, large := allocs(32), allocs(1024)
	// the kept buffers survive a collection (a sync.Pool's would not)
	runtime.GC()
	runtime.GC()
	if k := getMoEScratch(); len(k.f) == 0 {
		t.Errorf("after two collections the kept buffers are gone: the next pass allocates them again")
	} else {
		putMoEScratch(k)
	}
	if large > small+float64(8*runtime.GOMAXPROCS(0)) {
		t.Errorf("allocations per pass: %v for 32 tokens, %v for 1024: they grow with the tokens", small, large)
	}
	s := getMoEScratch()
	defer putMoEScratch(s)
	if used, bound := len(s.f)+len(s.ids), e.scratchFloats(1, 1024); used > bound {
		t.Errorf("scratch after 1024 tokens: %d values, scratchFloats says %d", used, bound)
	}
}

// TestMoEConfigRefused: config.json fields a mixture of experts cannot
// run are refused naming config.json and the field.
func TestMoEConfigRefused(t *testing.T) {
	for _, c := range []struct {
		golden string
		set    map[string]any
		want   string
	}{
		{"mixtral", map[string]any{"num_experts_per_tok": 5}, "num_experts_per_tok 5 exceeds the 4 experts"},
		{"mixtral", map[string]any{"num_local_experts": nil}, "num_local_experts is missing"},
		{"mixtral", map[string]any{"num_experts_per_tok": 0}, "num_experts_per_tok = 0 must be positive"},
		{"qwen3_moe", map[string]any{"mlp_only_layers": []int{4}}, "mlp_only_layers: layer 4"},
		{"qwen3_moe", map[string]any{"decoder_sparse_step": 0}, "decoder_sparse_step = 0"},
		{"qwen3_moe", map[string]any{"moe_intermediate_size": nil}, "moe_intermediate_size is missing"},
		{"qwen3_moe", map[string]any{"use_sliding_window": true}, "use_sliding_window"},
		{"qwen3_moe", map[string]any{"num_experts": 6}, "num_experts 6 and num_local_experts 8 disagree"},
		{"olmoe", map[string]any{"clip_qkv": -1}, "clip_qkv -1"},
		{"olmoe", map[string]any{"clip_qkv": "8"}, "clip_qkv"},
		{"olmoe", map[string]any{"rope_parameters": map[string]any{"rope_type": "su", "rope_theta": 1e4}}, "rope_parameters"},
	} {
		src := filepath.Join(goldenDir, c.golden, "config.json")
		data, err := os.ReadFile(src)
		if err != nil {
			t.Skipf("golden data not available: %v", err)
		}
		var m map[string]any
		if err := json.Unmarshal(data, &m); err != nil {
			t.Fatal(err)
		}
		for k, v := range c.set {
			if v == nil {
				delete(m, k)
			} else {
				m[k] = v
			}
		}
		dir := t.TempDir()
		out, _ := json.Marshal(m)
		if err := os.WriteFile(filepath.Join(dir, "config.json"), out, 0o644); err != nil {
			t.Fatal(err)
		}
		_, err = LoadConfig(dir)
		if err == nil || !strings.Contains(err.Error(), "config.json") || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s with %v: error %v, want one naming config.json and %q", c.golden, c.set, err, c.want)
		}
	}
}

// TestMoEParsesGoldenConfigs: what each golden config.json says, field
// by field (transformers 5's rope_parameters included).
func TestMoEParsesGoldenConfigs(t *testing.T) {
	for _, c := range []struct {
		name              string
		arch              Arch
		experts, k, width int
		normalize         bool
		dense             []bool
		theta             float64
		sliding           int
	}{
		{"mixtral", ArchMixtral, 4, 2, 64, true, nil, 1e6, 16},
		{"qwen3_moe", ArchQwen3MoE, 8, 2, 32, true, []bool{true, false, false, false}, 1e6, 0},
		{"olmoe", ArchOLMoE, 8, 2, 32, false, nil, 1e4, 0},
	} {
		cfg, err := LoadConfig(filepath.Join(goldenDir, c.name))
		if err != nil {
			t.Skipf("golden data not available: %v", err)
		}
		mc := cfg.MoE
		if cfg.Arch != c.arch || mc == nil || mc.Experts != c.experts || mc.TopK != c.k || mc.DExpert != c.width ||
			mc.Normalize != c.normalize || fmt.Sprint(mc.Dense) != fmt.Sprint(c.dense) || mc.Order != RouteSoftmaxTopK ||
			cfg.RoPE.Theta != c.theta || cfg.Sliding != c.sliding {
			t.Errorf("%s: parsed %s, θ %g, window %d, %+v", c.name, cfg.Arch, cfg.RoPE.Theta, cfg.Sliding, mc)
		}
	}
}

// goldenTensors reads every tensor of a golden case's model.safetensors.
func goldenTensors(t *testing.T, name string) map[string]checkpoint.Tensor {
	t.Helper()
	ck, err := checkpoint.OpenFile(filepath.Join(goldenDir, name, "model.safetensors"))
	if err != nil {
		t.Skipf("golden data not available: %v", err)
	}
	defer ck.Close()
	out := map[string]checkpoint.Tensor{}
	for _, n := range ck.Names() {
		info, _ := ck.Info(n)
		x, err := ck.Float32(n)
		if err != nil {
			t.Fatal(err)
		}
		out[n] = checkpoint.Tensor{Name: n, Shape: info.Shape, Data: x}
	}
	return out
}

// splitExperts rewrites the fused expert tensors of layer prefixes into
// one module per expert under module with the names gate, up, down (%d
// the expert; the router moves to module+"gate.weight").
func splitExperts(ts map[string]checkpoint.Tensor, layers int, module, gate, up, down string) map[string]checkpoint.Tensor {
	out := map[string]checkpoint.Tensor{}
	for n, x := range ts {
		out[n] = x
	}
	for l := 0; l < layers; l++ {
		p := fmt.Sprintf("model.layers.%d.", l)
		gu, ok := out[p+"mlp.experts.gate_up_proj"]
		if !ok {
			continue
		}
		dn := out[p+"mlp.experts.down_proj"]
		r := out[p+"mlp.gate.weight"]
		delete(out, p+"mlp.experts.gate_up_proj")
		delete(out, p+"mlp.experts.down_proj")
		delete(out, p+"mlp.gate.weight")
		r.Name = p + module + "gate.weight"
		out[r.Name] = r
		E, F2, D := gu.Shape[0], gu.Shape[1], gu.Shape[2]
		F := F2 / 2
		g, d := gu.Data.([]float32), dn.Data.([]float32)
		for x := 0; x < E; x++ {
			for _, part := range []struct {
				name  string
				shape []int
				data  []float32
			}{
				{gate, []int{F, D}, g[x*F2*D : x*F2*D+F*D]},
				{up, []int{F, D}, g[x*F2*D+F*D : (x+1)*F2*D]},
				{down, []int{D, F}, d[x*D*F : (x+1)*D*F]},
			} {
				n := p + module + fmt.Sprintf(part.name, x)
				out[n] = checkpoint.Tensor{Name: n, Shape: part.shape, Data: part.data}
			}
		}
	}
	return out
}

// writeCase writes config.json of a golden case and the tensors ts, the
// matrices (rank ≥ 2) in dtype, to a new checkpoint directory.
func writeCase(t *testing.T, name string, ts map[string]checkpoint.Tensor, dtype string) string {
	t.Helper()
	dir := t.TempDir()
	cfg, err := os.ReadFile(filepath.Join(goldenDir, name, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "config.json"), cfg, 0o644); err != nil {
		t.Fatal(err)
	}
	var list []checkpoint.Tensor
	for _, x := range ts {
		if len(x.Shape) >= 2 {
			if x.Data, err = checkpoint.Convert(x.Data.([]float32), dtype); err != nil {
				t.Fatal(err)
			}
		}
		list = append(list, x)
	}
	if err := checkpoint.WriteSafetensors(filepath.Join(dir, "model.safetensors"), list, nil); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestMoEExpertLayouts: the experts load from every layout checkpoints
// use — transformers 5's fused tensors, Mixtral's released
// block_sparse_moe.experts.{e}.w1/w3/w2, the per-expert gate/up/down_proj
// modules of earlier Qwen3-MoE and OLMoE — to the same logits bit for bit,
// in float32 and kept as stored in bf16; a layer whose experts are in none
// is refused naming the layer and the names looked for.
func TestMoEExpertLayouts(t *testing.T) {
	ts := goldenTensors(t, "mixtral")
	const layers = 3
	ids := seqs(2, 11, 512)
	logits := func(dir string) (*Model, []float32) {
		t.Helper()
		m, err := Load(dir, LoadOptions{})
		if err != nil {
			t.Fatal(err)
		}
		out, err := m.Forward(ids, Options{Logits: true})
		if err != nil {
			t.Fatal(err)
		}
		return m, out.Logits
	}
	same := func(what string, a, b []float32) {
		t.Helper()
		for i := range a {
			if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
				t.Fatalf("%s: logit %d is %v, %v with the fused layout", what, i, b[i], a[i])
			}
		}
	}
	released := splitExperts(ts, layers, "block_sparse_moe.", "experts.%d.w1.weight", "experts.%d.w3.weight", "experts.%d.w2.weight")
	modules := splitExperts(ts, layers, "mlp.", "experts.%d.gate_proj.weight", "experts.%d.up_proj.weight", "experts.%d.down_proj.weight")
	for _, dtype := range []string{"F32", "BF16"} {
		m, fused := logits(writeCase(t, "mixtral", ts, dtype))
		if got := m.Layers[1].ffn.(*moeLayer).experts[2].down.DType; got != dtype {
			t.Errorf("%s: an expert's weight is held as %s", dtype, got)
		}
		_, a := logits(writeCase(t, "mixtral", released, dtype))
		same(dtype+" block_sparse_moe.experts.{e}.w1/w3/w2", fused, a)
		_, b := logits(writeCase(t, "mixtral", modules, dtype))
		same(dtype+" mlp.experts.{e}.{gate,up,down}_proj", fused, b)
	}

	renamed := map[string]checkpoint.Tensor{}
	for n, x := range ts {
		n = strings.Replace(n, "layers.1.mlp.experts.gate_up_proj", "layers.1.mlp.experts.w13", 1)
		x.Name = n
		renamed[n] = x
	}
	_, err := Load(writeCase(t, "mixtral", renamed, "F32"), LoadOptions{})
	if err == nil || !strings.Contains(err.Error(), "model.layers.1.: no experts in a known layout") ||
		!strings.Contains(err.Error(), "model.layers.1.mlp.experts.gate_up_proj") {
		t.Errorf("experts under unknown names: error %v, want one naming the layer and the names looked for", err)
	}
}

// BenchmarkMoELayer times the mixture of experts of 8 experts, 2 per
// token (D 1024, expert width 1024) on 512 tokens, beside the dense
// SwiGLU MLP of width k·F = 2048 that multiplies as many values per token:
// the gathering, routing and scatter-add are what the first costs more.
func BenchmarkMoELayer(b *testing.B) {
	const T, D, F = 512, 1024, 1024
	rng := rand.New(rand.NewPCG(1, 2))
	cfg := &MoEConfig{Experts: 8, TopK: 2, DExpert: F, Normalize: true}
	e := randomMoE(rng, cfg, D, false)
	h := make([]float32, T*D)
	for i := range h {
		h[i] = float32(rng.NormFloat64())
	}
	out := make([]float32, T*D)
	run := func(string, int, []float32, ...int) {}
	b.Run("moe", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			if err := e.mixChannels(&Model{}, out, h, 0, 1, T, Options{}, run); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*T), "ns/token")
	})
	b.Run("dense k·F", func(b *testing.B) {
		L := &Layer{}
		dense := randomMoE(rng, &MoEConfig{Experts: 1, TopK: 1, DExpert: 2 * F}, D, false).experts[0]
		L.WGate, L.WUp, L.WDown = dense.gate, dense.up, dense.down
		var buf []float32
		for i := 0; i < b.N; i++ {
			mlpBlock(out, h, &buf, L, "silu", 1, T, D, 2*F, ComputeF32, nil, run, 0)
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*T), "ns/token")
	})
}

// TestMoERouterBiasLoaded: with MoEConfig.RouterBias the loader reads
// the router's bias beside its weight (….gate.bias) and the pass adds it
// to the logits.
func TestMoERouterBiasLoaded(t *testing.T) {
	cfg, err := SmallConfig(ArchMixtral, Size{Layers: 2, DModel: 32, Heads: 4, KVHeads: 2, Vocab: 61, MaxPos: 64})
	if err != nil {
		t.Fatal(err)
	}
	mc := *cfg.MoE
	mc.RouterBias = true
	cfg.MoE = &mc
	m, tensors, err := Generate(cfg, 9)
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, x := range tensors {
		names[x.Name] = true
	}
	for l := range m.Layers {
		e := m.Layers[l].ffn.(*moeLayer)
		if name := fmt.Sprintf("model.layers.%d.mlp.gate.bias", l); len(e.routerB) != mc.Experts || !names[name] {
			t.Fatalf("layer %d: router bias of %d values, %s made: %v", l, len(e.routerB), name, names[name])
		}
		for i := range e.routerB {
			e.routerB[i] = 5 * float32(i) // expert E−1 first everywhere
		}
	}
	hs := &hooks.Set{}
	cap := hs.Capture("blocks.*.mlp.hook_expert_indices")
	if _, err := m.Forward(seqs(1, 5, m.Vocab), Options{Hooks: hs}); err != nil {
		t.Fatal(err)
	}
	for i, v := range cap.Get("blocks.1.mlp.hook_expert_indices").Data().([]float32) {
		if want := float32(mc.Experts - 1 - i%mc.TopK); v != want {
			t.Fatalf("slot %d: expert %v, want %v from the bias", i, v, want)
		}
	}
}
