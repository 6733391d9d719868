// Package afatoy runs the AFA toy filters of zoo/train/afa_toy.py: P.
// Racioppo, "Attention as an Adaptive Filter" (paper 001) §4.2, one
// isotropic AFA layer (Algorithm 1, the attention of model/afa.go)
// predicting the next noisy measurement of a 2-D linear system, and the
// standard-attention baseline of the paper's Fig. 3. It is an experiment
// harness, not a checkpoint family of package model: inputs are real
// state-plane vectors, not tokens.
//
//	e_t = R·P_u z_t                  embedding: embed.weight [d_e, 2] = first columns of R (I or random orthogonal)
//	AFA:     y_t = Re(L_P(e^{λΔt} ⊙ ((1 − s)Z_v + s·Z̄_v)))_t   Algorithm 1 steps 2–18 on e (no norm, no residual, no FFN)
//	softmax: h = W_in e + PE;  h += Attn(LN(h));  h += FFN(LN(h)) per block;  y = W_out LN(h)
//	prediction of z_{t+1}: (Rᵀ y_t)[:2] = embed.weightᵀ·y_t
//
// The AFA layer runs as the one layer of an AFA language model of package
// model (its tensors renamed into that layout, Load): Forward feeds e to
// the layer's attention sub-block through its ln1.hook_normalized point and
// reads Re(L_P(Z⁺)) at hook_attn_out, so the toy and the language models
// share one AFA pass.
//
// config.json ("model_type": "afa_toy"): layer ("afa" or "softmax"),
// state_dim (2), embed_dim (d_e), seq_len, embedding, embedding_seed, the
// simulation options (data) and the training recipe (training), which the
// pass does not read; for "afa": num_heads, head_dim (2d reals per head,
// a multiple of 4), qkv_bias, o_bias and the "afa" object of
// model/afa_config.go (qk_source must be "values"); for "softmax": a
// "softmax" object with num_layers, num_heads, ffn_dim, positional
// ("sinusoidal", "rope", "none"), rope_theta, layer_norm_eps. Tensors of an
// AFA filter:
//
//	embed.weight                         [d_e, 2]
//	afa.v_proj.weight_{real,imag}        [H·d, d_e]   L_V
//	afa.v_proj.bias_{real,imag}          [H·d]        (qkv_bias)
//	afa.{q,k}_proj.weight_{real,imag}    [H, d, d]    per-head L_Q, L_K of Z_v
//	afa.{q,k}_proj.bias_{real,imag}      [H, d]       (qkv_bias)
//	afa.o_proj.weight_{real,imag}        [d_e, H·d]   L_P
//	afa.o_proj.bias_{real,imag}          [d_e]        (o_bias; Im cannot reach the output)
//	afa.alpha, afa.sigma, afa.eta, afa.tau_s [H]; afa.omega [H, d/2]; afa.delta [H, d]   as model/afa_config.go
//
// and of a softmax baseline (nn.Linear and nn.LayerNorm layouts):
// embed.weight, in_proj.{weight,bias}, layers.{l}.ln1.*, layers.{l}.attn.{q,k,v,o}_proj.*,
// layers.{l}.ln2.*, layers.{l}.mlp.fc1.*, layers.{l}.mlp.fc2.*, norm.*, out_proj.*.
package afatoy

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"gorgonia.org/tensor"

	"github.com/filterlens/probe/analysis/afatab"
	"github.com/filterlens/probe/checkpoint"
	"github.com/filterlens/probe/hooks"
	"github.com/filterlens/probe/model"
)

// ModelType is what config.json's model_type says of a toy filter.
const ModelType = "afa_toy"

// Config is the config.json of an AFA toy checkpoint.
type Config struct {
	// Layer is "afa" (one Algorithm 1 layer) or "softmax" (the Fig. 3 baseline).
	Layer    string
	StateDim int // dimension of the measured state (2)
	EmbedDim int // d_e
	SeqLen   int // input tokens the filter was trained on
	// Embedding is "identity" or "random_orthogonal" (R of e = R·P_u z;
	// embed.weight holds its first StateDim columns either way).
	Embedding string

	// AFA ("afa" only): heads, reals per head (2d), affine projections and
	// the options of model/afa_config.go.
	Heads, DHead   int
	QKVBias, OBias bool
	AFA            model.AFAConfig
	Softmax        afatab.SoftmaxConfig // "softmax" only
	Data           afatab.DataOptions

	// lm is the config.json of the one-layer AFA language model that runs
	// the AFA layer ("afa" only).
	lm []byte
}

// Filter is a loaded toy filter.
type Filter struct {
	Config Config
	Dir    string
	Embed  []float32 // [d_e, StateDim]

	afa *model.Model // the AFA layer as a one-layer AFA language model, "afa" only
	sm  *softmaxWeights
}

// ReadConfig reads and checks dir/config.json.
func ReadConfig(dir string) (*Config, error) {
	path := filepath.Join(dir, "config.json")
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	c, err := parseConfig(data)
	if err != nil {
		return nil, fmt.Errorf("afatoy: %s: %v", path, err)
	}
	return c, nil
}

func parseConfig(data []byte) (*Config, error) {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(data, &raw); err != nil {
		return nil, fmt.Errorf("not valid JSON: %v", err)
	}
	if mt := ""; raw["model_type"] == nil || json.Unmarshal(raw["model_type"], &mt) != nil || mt != ModelType {
		return nil, fmt.Errorf("model_type is not %q", ModelType)
	}
	c := &Config{}
	field := func(name string, dst any) error {
		if raw[name] == nil {
			return fmt.Errorf("field %s is required", name)
		}
		if err := json.Unmarshal(raw[name], dst); err != nil {
			return fmt.Errorf("field %s: %v", name, err)
		}
		return nil
	}
	num := func(name string, dst *int, min int) error {
		if err := field(name, dst); err != nil {
			return err
		}
		if *dst < min {
			return fmt.Errorf("field %s = %d must be ≥ %d", name, *dst, min)
		}
		return nil
	}
	for _, err := range []error{field("layer", &c.Layer), field("embedding", &c.Embedding),
		num("state_dim", &c.StateDim, 1), num("embed_dim", &c.EmbedDim, 1), num("seq_len", &c.SeqLen, 1)} {
		if err != nil {
			return nil, err
		}
	}
	if c.Embedding != "identity" && c.Embedding != "random_orthogonal" {
		return nil, fmt.Errorf("field embedding = %q is not one of [identity random_orthogonal]", c.Embedding)
	}
	if c.StateDim > c.EmbedDim {
		return nil, fmt.Errorf("state_dim %d exceeds embed_dim %d", c.StateDim, c.EmbedDim)
	}
	if raw["data"] != nil {
		if err := json.Unmarshal(raw["data"], &c.Data); err != nil {
			return nil, fmt.Errorf("field data: %v", err)
		}
	}
	switch c.Layer {
	case "afa":
		for _, err := range []error{num("num_heads", &c.Heads, 1), num("head_dim", &c.DHead, 4),
			field("qkv_bias", &c.QKVBias), field("o_bias", &c.OBias)} {
			if err != nil {
				return nil, err
			}
		}
		if c.DHead%4 != 0 {
			return nil, fmt.Errorf("head_dim %d must be a multiple of 4: d = head_dim/2 complex channels in conjugate pairs (±ω)", c.DHead)
		}
		// The layer's language model: one layer of width d_e, a vocabulary
		// of one token (Forward replaces its embedding) and no position
		// limit of its own (Forward allows extrapolation).
		lm := map[string]any{"model_type": "afa", "hidden_size": c.EmbedDim, "num_hidden_layers": 1,
			"num_attention_heads": c.Heads, "head_dim": c.DHead, "intermediate_size": 1, "vocab_size": 1,
			"max_position_embeddings": c.SeqLen, "qkv_bias": c.QKVBias, "o_bias": c.OBias}
		if raw["afa"] != nil {
			lm["afa"] = raw["afa"]
		}
		var err error
		if c.lm, err = json.Marshal(lm); err != nil {
			return nil, err
		}
		mc, err := model.ParseConfig(c.lm)
		if err != nil {
			return nil, err
		}
		c.AFA = *mc.AFA
		if c.AFA.QKSource != "values" {
			return nil, fmt.Errorf("field afa.qk_source = %q: the toy filter computes Z_q, Z_k from Z_v (\"values\", Algorithm 1 step 3) only", c.AFA.QKSource)
		}
	case "softmax":
		if err := parseSoftmax(c, raw["softmax"]); err != nil {
			return nil, err
		}
	default:
		return nil, fmt.Errorf("field layer = %q is not one of [afa softmax]", c.Layer)
	}
	return c, nil
}

// Load reads dir/config.json and dir/model.safetensors.
func Load(dir string) (*Filter, error) {
	cfg, err := ReadConfig(dir)
	if err != nil {
		return nil, err
	}
	path := filepath.Join(dir, "model.safetensors")
	ck, err := checkpoint.OpenFile(path)
	if err != nil {
		return nil, err
	}
	defer ck.Close()
	m := &Filter{Config: *cfg, Dir: dir}
	rd := &reader{ck: ck, path: path, used: map[string]bool{}}
	m.Embed = rd.get("embed.weight", cfg.EmbedDim, cfg.StateDim)
	if cfg.Layer == "afa" {
		ts := m.readAFA(rd)
		if err := rd.finish(); err != nil {
			return nil, err
		}
		m.afa, err = loadLM(cfg, ts)
		if err != nil {
			return nil, fmt.Errorf("afatoy: %s: %w", dir, err)
		}
		m.afa.Dir = dir
		return m, nil
	}
	m.readSoftmax(rd)
	if err := rd.finish(); err != nil {
		return nil, err
	}
	return m, nil
}

// reader reads named tensors of a toy checkpoint, checking their shapes,
// and reports every missing, misshapen and unexpected one together.
type reader struct {
	ck            *checkpoint.Checkpoint
	path          string
	used          map[string]bool
	missing, errs []string
}

// get returns the tensor name as float32 (nil where it cannot, recorded
// for finish).
func (rd *reader) get(name string, shape ...int) []float32 {
	info, ok := rd.ck.Info(name)
	if !ok {
		rd.missing = append(rd.missing, name)
		return nil
	}
	rd.used[name] = true
	if !slices.Equal(info.Shape, shape) {
		rd.errs = append(rd.errs, fmt.Sprintf("tensor %q: expected shape %v from config.json, found %v", name, shape, info.Shape))
		return nil
	}
	x, err := rd.ck.Float32(name)
	if err != nil {
		rd.errs = append(rd.errs, err.Error())
	}
	return x
}

func (rd *reader) finish() error {
	var msg []string
	if len(rd.missing) > 0 {
		msg = append(msg, "missing tensors: "+strings.Join(rd.missing, ", "))
	}
	msg = append(msg, rd.errs...)
	var unexpected []string
	for _, n := range rd.ck.Names() {
		if !rd.used[n] {
			unexpected = append(unexpected, n)
		}
	}
	if len(unexpected) > 0 {
		msg = append(msg, "unexpected tensors: "+strings.Join(unexpected, ", "))
	}
	if len(msg) > 0 {
		return fmt.Errorf("afatoy: %s: %s", rd.path, strings.Join(msg, "; "))
	}
	return nil
}

// readAFA reads the AFA layer's tensors and returns them under the names
// of layer 0 of an AFA language model (model/afa_config.go).
func (m *Filter) readAFA(rd *reader) []checkpoint.Tensor {
	c := &m.Config
	De, H, d := c.EmbedDim, c.Heads, c.DHead/2
	var ts []checkpoint.Tensor
	add := func(name string, shape ...int) {
		ts = append(ts, checkpoint.Tensor{Name: "model.layers.0.attn." + strings.TrimPrefix(name, "afa."), Shape: shape, Data: rd.get(name, shape...)})
	}
	cplx := func(name string, shape ...int) {
		add(name+"_real", shape...)
		add(name+"_imag", shape...)
	}
	cplx("afa.v_proj.weight", H*d, De)
	cplx("afa.q_proj.weight", H, d, d)
	cplx("afa.k_proj.weight", H, d, d)
	if c.QKVBias {
		cplx("afa.v_proj.bias", H*d)
		cplx("afa.q_proj.bias", H, d)
		cplx("afa.k_proj.bias", H, d)
	}
	cplx("afa.o_proj.weight", De, H*d)
	if c.OBias {
		cplx("afa.o_proj.bias", De)
	}
	for _, name := range []string{"afa.alpha", "afa.sigma", "afa.eta", "afa.tau_s"} {
		add(name, H)
	}
	add("afa.omega", H, d/2)
	add("afa.delta", H, d)
	return ts
}

// loadLM loads the AFA layer's tensors ts as the one-layer AFA language
// model of c.lm, through a checkpoint written to a temporary folder: its
// token embedding, norms and SwiGLU (width 1) are placeholders that the
// toy's pass replaces (the embedding and the norm before the layer) or
// does not read (what follows hook_attn_out).
func loadLM(c *Config, ts []checkpoint.Tensor) (*model.Model, error) {
	De := c.EmbedDim
	ones := make([]float32, De)
	for i := range ones {
		ones[i] = 1
	}
	ts = append(ts,
		checkpoint.Tensor{Name: "model.embed_tokens.weight", Shape: []int{1, De}, Data: make([]float32, De)},
		checkpoint.Tensor{Name: "model.layers.0.input_layernorm.weight", Shape: []int{De}, Data: ones},
		checkpoint.Tensor{Name: "model.layers.0.post_attention_layernorm.weight", Shape: []int{De}, Data: ones},
		checkpoint.Tensor{Name: "model.layers.0.mlp.gate_proj.weight", Shape: []int{1, De}, Data: make([]float32, De)},
		checkpoint.Tensor{Name: "model.layers.0.mlp.up_proj.weight", Shape: []int{1, De}, Data: make([]float32, De)},
		checkpoint.Tensor{Name: "model.layers.0.mlp.down_proj.weight", Shape: []int{De, 1}, Data: make([]float32, De)},
		checkpoint.Tensor{Name: "model.norm.weight", Shape: []int{De}, Data: ones})
	tmp, err := os.MkdirTemp("", "afatoy-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	if err := os.WriteFile(filepath.Join(tmp, "config.json"), c.lm, 0o644); err != nil {
		return nil, err
	}
	if err := checkpoint.WriteSafetensors(filepath.Join(tmp, "model.safetensors"), ts, nil); err != nil {
		return nil, err
	}
	return model.Load(tmp, model.LoadOptions{})
}

// AFAParams returns the AFA layer's head parameters (a = α², ω, σ², η², τ_s,
// s, Δt) as the pass uses them.
func (m *Filter) AFAParams() ([]model.AFAHeadParams, error) {
	if m.afa == nil {
		return nil, fmt.Errorf("afatoy: %s is a %q toy checkpoint, not AFA", m.Dir, m.Config.Layer)
	}
	return m.afa.AFAParams()
}

// Output is what a toy forward pass returns.
type Output struct {
	Batch, T int
	Out      []float32 // [B, T, d_e]: the model output in the embedding space
	Pred     []float32 // [B, T, StateDim]: the prediction of z_{t+1}, embed.weightᵀ·Out
	// Patterns holds the attention of each layer [B, H, T, T] (rows sum to
	// 1): the AFA filter's A = softmax_j(τ_s L), or each softmax layer's.
	Patterns [][]float32
	// Decayed is the AFA filter's Â = E ⊙ A [B, H, T, T], the weights its
	// values are summed with (rows sum to ≤ 1); nil for the baseline.
	Decayed []float32
	// Heads is H of Patterns.
	Heads int
}

// checkInput validates x [B, T, StateDim].
func (m *Filter) checkInput(x []float32, B, T int) error {
	S := m.Config.StateDim
	if B < 1 || T < 1 || len(x) != B*T*S {
		return fmt.Errorf("afatoy: toy input has %d values, want batch %d × %d positions × state dim %d", len(x), B, T, S)
	}
	if i := firstNonFinite(x); i >= 0 {
		return fmt.Errorf("afatoy: non-finite toy input %v at batch %d position %d", x[i], i/S/T, (i/S)%T)
	}
	return nil
}

func firstNonFinite(x []float32) int {
	return slices.IndexFunc(x, func(v float32) bool { return math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) })
}

// embed returns e = embed.weight·z per row: [B·T, d_e].
func (m *Filter) embed(x []float32, n int) []float32 {
	e := make([]float32, n*m.Config.EmbedDim)
	model.Linear(e, x, n, m.Config.StateDim, m.Embed, m.Config.EmbedDim, nil)
	return e
}

// project returns embed.weightᵀ·y per row: [n, StateDim].
func (m *Filter) project(y []float32, n int) []float32 {
	S, De := m.Config.StateDim, m.Config.EmbedDim
	out := make([]float32, n*S)
	for r := 0; r < n; r++ {
		for s := 0; s < S; s++ {
			var acc float64
			for k := 0; k < De; k++ {
				acc += float64(y[r*De+k]) * float64(m.Embed[k*S+s])
			}
			out[r*S+s] = float32(acc)
		}
	}
	return out
}

// Forward runs the filter on measurements x [B, T, StateDim] (row-major).
// Sequences longer than the training length are allowed (the pass has no
// position limit) but extrapolate.
func (m *Filter) Forward(x []float32, B, T int) (*Output, error) {
	if err := m.checkInput(x, B, T); err != nil {
		return nil, err
	}
	e := m.embed(x, B*T)
	var out *Output
	var err error
	if m.afa != nil {
		out, err = m.forwardAFA(e, B, T)
	} else {
		out, err = m.forwardSoftmax(e, B, T)
	}
	if err != nil {
		return nil, err
	}
	if i := firstNonFinite(out.Out); i >= 0 {
		return nil, fmt.Errorf("afatoy: %s: non-finite output %v at batch %d position %d", m.Dir, out.Out[i], i/m.Config.EmbedDim/T, (i/m.Config.EmbedDim)%T)
	}
	out.Pred = m.project(out.Out, B*T)
	return out, nil
}

// runLayer runs the AFA layer on the embedded inputs e [B·T, d_e]: it
// replaces the language model's normalized input of layer 0 by e and
// calls the functions of at (keyed by hook point, layer 0) on the values
// of the pass, which they may change.
func (m *Filter) runLayer(e []float32, B, T int, at map[string]func(x []float32)) error {
	hs := &hooks.Set{}
	at[hooks.LN1Normalized] = func(x []float32) { copy(x, e) }
	for point, fn := range at {
		hs.Add(hooks.Name(point, 0), func(_ string, _ int, x *tensor.Dense) error {
			fn(x.Data().([]float32))
			return nil
		})
	}
	ids := make([][]int, B)
	for b := range ids {
		ids[b] = make([]int, T)
	}
	_, err := m.afa.Forward(ids, model.Options{Hooks: hs, AllowExtrapolation: true})
	return err
}

// forwardAFA is Algorithm 1 steps 2–18 on the embedded inputs: the AFA
// language model's layer 0 from its normalized input to hook_attn_out.
func (m *Filter) forwardAFA(e []float32, B, T int) (*Output, error) {
	res := &Output{Batch: B, T: T, Heads: m.Config.Heads}
	keep := func(dst *[]float32) func([]float32) {
		return func(x []float32) { *dst = slices.Clone(x) }
	}
	var pattern []float32
	err := m.runLayer(e, B, T, map[string]func([]float32){
		hooks.AttnPattern:        keep(&pattern),
		hooks.AttnPatternDecayed: keep(&res.Decayed),
		hooks.AttnOut:            keep(&res.Out),
	})
	if err != nil {
		return nil, err
	}
	res.Patterns = [][]float32{pattern}
	return res, nil
}

// PulledForward returns Fig. 2's pulled-forward estimates of target i for
// every sequence of x [B, T, StateDim]: for j = 0..i the value of source j
// carried to time t_i by the learned dynamics and read out,
// embed.weightᵀ·Re(L_P(e^{λ(i−j)Δt} ⊙ Z_v,j)) (no prediction step, no
// residual mixing; notes 001 §C.2), as [B, i+1, StateDim]. The layer's
// pass computes it with these values in place of Z⁺ at its hook_z.
func (m *Filter) PulledForward(x []float32, B, T, i int) ([]float32, error) {
	if m.afa == nil {
		return nil, fmt.Errorf("afatoy: %s: pulled-forward estimates need an AFA filter, not %q", m.Dir, m.Config.Layer)
	}
	if err := m.checkInput(x, B, T); err != nil {
		return nil, err
	}
	if i < 0 || i >= T {
		return nil, fmt.Errorf("afatoy: pulled-forward target %d outside [0, %d)", i, T)
	}
	params, err := m.afa.AFAParams()
	if err != nil {
		return nil, err
	}
	De, dw := m.Config.EmbedDim, m.Config.DHead
	W := m.Config.Heads * dw
	var v, y []float32
	err = m.runLayer(m.embed(x, B*T), B, T, map[string]func([]float32){
		hooks.AttnV: func(x []float32) { v = slices.Clone(x) },
		hooks.AttnZ: func(z []float32) {
			clear(z)
			for b := 0; b < B; b++ {
				for j := 0; j <= i; j++ {
					lag := float64(i - j)
					for h := range params {
						ph := &params[h]
						dec := ph.Decay(lag)
						for ch, om := range ph.Omega {
							o := (b*T+j)*W + h*dw + 2*ch
							sn, cs := math.Sincos(om * ph.Dt * lag)
							re, im := float64(v[o]), float64(v[o+1])
							z[o] = float32(dec * (re*cs - im*sn))
							z[o+1] = float32(dec * (re*sn + im*cs))
						}
					}
				}
			}
		},
		hooks.AttnOut: func(x []float32) { y = slices.Clone(x) },
	})
	if err != nil {
		return nil, err
	}
	p := make([]float32, B*(i+1)*De)
	for b := 0; b < B; b++ {
		copy(p[b*(i+1)*De:(b+1)*(i+1)*De], y[b*T*De:])
	}
	return m.project(p, B*(i+1)), nil
}

// Data holds the trajectories stored beside a toy checkpoint
// (data.safetensors): N sequences of M measurements (inputs are the first
// seq_len, targets the next), the true states at the measured times, and
// the true states on the simulator's fine grid.
type Data struct {
	N, M, Fine, StateDim int
	Measurements         []float32 // [N, M, StateDim]
	States               []float32 // [N, M, StateDim]
	StatesFine           []float32 // [N, Fine, StateDim]
}

// ReadData reads a data.safetensors file of zoo/train/afa_toy.py.
func ReadData(path string) (*Data, error) {
	ck, err := checkpoint.OpenFile(path)
	if err != nil {
		return nil, err
	}
	defer ck.Close()
	get := func(name string) ([]float32, []int, error) {
		info, ok := ck.Info(name)
		if !ok {
			return nil, nil, fmt.Errorf("afatoy: %s: tensor %q is missing", path, name)
		}
		if len(info.Shape) != 3 {
			return nil, nil, fmt.Errorf("afatoy: %s: tensor %q has shape %v, want [N, steps, state_dim]", path, name, info.Shape)
		}
		v, err := ck.Float32(name)
		return v, info.Shape, err
	}
	d := &Data{}
	var sm, ss, sf []int
	if d.Measurements, sm, err = get("measurements"); err != nil {
		return nil, err
	}
	if d.States, ss, err = get("states"); err != nil {
		return nil, err
	}
	if d.StatesFine, sf, err = get("states_fine"); err != nil {
		return nil, err
	}
	if !slices.Equal(sm, ss) || sf[0] != sm[0] || sf[2] != sm[2] {
		return nil, fmt.Errorf("afatoy: %s: measurements %v, states %v and states_fine %v disagree", path, sm, ss, sf)
	}
	d.N, d.M, d.StateDim, d.Fine = sm[0], sm[1], sm[2], sf[1]
	return d, nil
}

// Inputs returns the first T measurements of every sequence [N, T, StateDim].
func (d *Data) Inputs(T int) ([]float32, error) {
	if T > d.M {
		return nil, fmt.Errorf("afatoy: toy data has %d measurements per sequence, %d inputs asked", d.M, T)
	}
	S := d.StateDim
	x := make([]float32, d.N*T*S)
	for b := 0; b < d.N; b++ {
		copy(x[b*T*S:(b+1)*T*S], d.Measurements[b*d.M*S:])
	}
	return x, nil
}
