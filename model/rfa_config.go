package model

import (
	"encoding/json"
	"fmt"
	"math"
	"strings"
)

// ArchRFA is Racioppo's Robust Filter Attention language model ("Robust
// Filter Attention: Self-Attention as a Parallel State Estimator"; the
// authors' code is github.com/PCR-git/Robust-Filter-Attention). Its
// config.json is the authors' argparse namespace (field names exactly as
// their code reads them) plus "architecture": "rfa_lm".
const ArchRFA Arch = "rfa"

// rfaArchitecture is the value of config.json's "architecture" field that
// selects RFA.
const rfaArchitecture = "rfa_lm"

// RFAConfig holds what the RFA forward pass needs beyond Config. Every
// field is read from config.json (the authors' args) except the constants
// that the authors' code hard-codes, which are listed with their values and
// may be changed on a loaded model (m.Config.RFA) before Forward.
//
// For RFA, Config.DHead is d, the number of complex dimensions per head
// (d_k_total/n_heads): the d of κ = (ν+d)/d (paper Eq. 11) and of
// ν = d·softplus(ν′) + 2 + ε. Every per-head tensor the pass exposes holds
// 2·d reals laid out [..., d, 2] with the last axis (real, imaginary), the
// authors' internal layout. Config.KVHeads = Config.Heads, Config.DMLP is
// the FFN width, Config.Act is "relu", Config.NormEps the LayerNorm ε, and
// Config.MaxPos the length of the authors' t_measure buffer (4096): longer
// inputs run only with Options.AllowExtrapolation (nothing here is
// materialized at that size). Config.Gate is GateHeadwise when the C.4
// confidence gate is active (one gate per head and position) and GateNone
// otherwise.
type RFAConfig struct {
	// DecayScale multiplies the mu_v buffer to give the effective decay μ
	// of each head: max_fixed_decay/(seq_len−1) when
	// scale_decay_by_time_interval is true (the authors' M1 setting), 1
	// otherwise (M2).
	DecayScale float64
	// LearnTShift: the learned prediction shift Δt₊ = softplus(t_shift_param)
	// of App. C.6 (learn_t_shift) is added to every lag inside V and E, and
	// the output is rotated forward by e^{iωΔt₊}. False: Δt₊ = 0.
	LearnTShift bool
	// Gate: the App. C.4 total-precision confidence gate is applied
	// (use_inner_residual with use_total_precision_gate, the authors' M2.7).
	Gate bool
	// OmegaRescale multiplies the omega_v buffer (omega_rescale).
	OmegaRescale float64
	// Epsilon is the ε added after softplus (epsilon): η², γ², τ_s and ν.
	Epsilon float64
	// MinExponent and MaxExponent clamp the decay exponent −μ·lag
	// (min_exponent, max_exponent): E = exp(clamp(−μ·lag, min, max)).
	MinExponent, MaxExponent float64
	// SeqLen is the training length (seq_len), used only by DecayScale.
	SeqLen int

	// CovEps is added to the covariance kernel V (hard-coded 0.01 in the
	// authors' code; not in the paper's Eq. 9).
	CovEps float64
	// BrownianBelow: heads with |μ| below it use the μ → 0 (L'Hôpital)
	// kernel σ²·lag instead of σ²(1 − e^{−2μ·lag})/(2μ) (authors: 1e-5).
	BrownianBelow float64
	// ClampResidual clamps ‖R_qk‖² (Eq. 10, computed by its expansion) at 0
	// before the logit. The authors' code does not clamp; the two differ
	// only where rounding makes the expansion slightly negative. Default
	// true.
	ClampResidual bool

	// Ablation is the authors' ablation_name when config.json has one
	// ("M1", "M2", "M2.7"), for reports only.
	Ablation string
}

// rfaRaw is the part of the authors' args namespace that sizes the model.
type rfaRaw struct {
	Vocab   *int `json:"vocab_size"`
	DE      *int `json:"d_e"`
	Heads   *int `json:"n_heads"`
	Blocks  *int `json:"num_blocks"`
	DKTotal *int `json:"d_k_total"`
	DVTotal *int `json:"d_v_total"`
	Hidden  *int `json:"hidden_dim"`
	MaxLen  *int `json:"internal_buffer_max_len"`
}

// rfaFixed lists the args fields that change the forward pass and the one
// value this implementation supports (the authors' M1, M2 and M2.7
// settings, verified against their code by the golden cases). A field that
// is absent is taken to have that value; any other value is refused with
// the field's name, so an unverified ablation never runs silently.
var rfaFixed = []struct {
	field string
	want  any // bool, float64 or nil (JSON null)
	what  string
}{
	{"t_equal", true, "equally spaced positions t_i = i"},
	{"sep_params", false, "one parameter set shared by the q/k and v paths"},
	{"lambda_real_zero", false, "the M2.6 ablation (decay forced to 0) is not implemented"},
	{"use_full_residual_norm", 1.0, "the full residual norm of Eq. 10 (M2.6 uses the cross term only)"},
	{"use_robust_weight", true, "the Student-t logit of Eq. 11 (the M2.1 Gaussian ablation is not implemented)"},
	{"additive_bias_type", 1.0, "the additive bias B = −log V (Alg. 1)"},
	{"multiplicative_bias_type", 1.0, "the multiplicative term P = 1/(ν·V) (Eq. 11)"},
	{"t_shift", nil, "a fixed prediction shift is not implemented (learn_t_shift is)"},
	{"learn_rotations", false, "ω read from the omega_v buffer"},
	{"learn_decay", false, "μ read from the mu_v buffer"},
	{"rotate_values", true, "values rotated and counter-rotated (the M2.4 ablation is not implemented)"},
	{"zero_process_noise", false, "the M2.2 ablation is not implemented"},
	{"zero_key_measurement_noise", false, "the M2.2 ablation is not implemented"},
	{"zero_rotations", false, "the M2.5 ablation is not implemented"},
	{"use_outer_residual", true, "pre-norm blocks with the outer residual"},
	{"use_complex_input_norm", 0.0, "no complex norm before the projections"},
	{"use_complex_output_norm", false, "no complex norm after the aggregation"},
	{"use_real_input_norm", true, "LayerNorm before attention (norm1)"},
	{"use_real_output_norm", true, "LayerNorm before the FFN (norm2)"},
	{"add_gaussian_noise", false, "deterministic evaluation (App. C.5 sampling is not implemented)"},
	{"use_complex_conj_constraint", true, "interleaved conjugate frequency pairs (ω′, −ω′)"},
	{"use_colored_prior", false, "the App. C.7 colored prior is not implemented"},
	{"use_ss_process_noise", false, "σ² learned directly (the sigma_tilde kernel is not implemented)"},
	{"use_log_linear_decay", false, "not verified against the authors' code"},
	{"use_alibi", false, "no ALiBi bias"},
	{"use_rope", true, "rotary dynamics"},
	{"sigma_sq_v_floor", 0.0, "no floor on σ²"},
}

// fromRFA fills c from the authors' args namespace in config.json.
func (c *Config) fromRFA(data []byte) error {
	var r rfaRaw
	if err := json.Unmarshal(data, &r); err != nil {
		return fmt.Errorf("not valid JSON: %v", err)
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(data, &raw); err != nil {
		return fmt.Errorf("not valid JSON: %v", err)
	}
	c.Arch, c.ModelType = ArchRFA, rfaArchitecture
	var err error
	for _, f := range []struct {
		dst  *int
		name string
		p    *int
	}{
		{&c.Vocab, "vocab_size", r.Vocab},
		{&c.DModel, "d_e", r.DE},
		{&c.Heads, "n_heads", r.Heads},
		{&c.Layers, "num_blocks", r.Blocks},
	} {
		if *f.dst, err = need(f.name, f.p); err != nil {
			return err
		}
	}
	dk, err := need("d_k_total", r.DKTotal)
	if err != nil {
		return err
	}
	dv, err := need("d_v_total", r.DVTotal)
	if err != nil {
		return err
	}
	if dk != dv {
		return fmt.Errorf("d_k_total %d differs from d_v_total %d: only equal query/key and value widths are supported", dk, dv)
	}
	if dk%c.Heads != 0 {
		return fmt.Errorf("d_k_total %d is not a multiple of n_heads %d", dk, c.Heads)
	}
	c.DHead = dk / c.Heads
	if c.DHead%2 != 0 {
		return fmt.Errorf("d_k_total/n_heads = %d complex dimensions per head must be even (conjugate frequency pairs)", c.DHead)
	}
	c.KVHeads = c.Heads
	// The authors' notebook builds the FFN with hidden_dim = 4·d_v_total;
	// the golden configs also record it as hidden_dim.
	c.DMLP = 4 * dv
	if r.Hidden != nil {
		if c.DMLP, err = need("hidden_dim", r.Hidden); err != nil {
			return err
		}
	}
	c.MaxPos = 4096 // max_len hard-coded in MultiheadIsotropicRFA (t_measure's length)
	if r.MaxLen != nil {
		if c.MaxPos, err = need("internal_buffer_max_len", r.MaxLen); err != nil {
			return err
		}
	}
	c.NormEps, c.Act, c.TiedHead = 1e-5, "relu", true
	c.QKVBias, c.OBias, c.MLPBias = true, true, true
	c.DType = "float32"

	for _, f := range rfaFixed {
		v, ok := raw[f.field]
		if !ok {
			continue
		}
		if err := checkFixed(f.field, v, f.want, f.what); err != nil {
			return err
		}
	}
	rc := &RFAConfig{CovEps: 0.01, BrownianBelow: 1e-5, ClampResidual: true,
		OmegaRescale: 1, Epsilon: 1e-5, MinExponent: -10, MaxExponent: 0}
	var scale, inner, gate bool
	// These four select between supported forward passes (M1/M2, shift,
	// gate); they have no safe default and must be present.
	flags := []struct {
		field string
		dst   *bool
	}{
		{"scale_decay_by_time_interval", &scale},
		{"learn_t_shift", &rc.LearnTShift},
		{"use_inner_residual", &inner},
		{"use_total_precision_gate", &gate},
	}
	for _, f := range flags {
		v, ok := raw[f.field]
		if !ok {
			return fmt.Errorf("field %s is missing (RFA args namespace)", f.field)
		}
		x, err := jsonFlag(f.field, v)
		if err != nil {
			return err
		}
		*f.dst = x != 0
	}
	if inner && !gate {
		return fmt.Errorf("use_inner_residual without use_total_precision_gate is not supported (only the M2.7 confidence gate is implemented)")
	}
	rc.Gate = inner && gate
	c.Gate = GateNone
	if rc.Gate {
		c.Gate = GateHeadwise
	}
	for _, f := range []struct {
		field string
		dst   *float64
	}{
		{"omega_rescale", &rc.OmegaRescale},
		{"epsilon", &rc.Epsilon},
		{"min_exponent", &rc.MinExponent},
		{"max_exponent", &rc.MaxExponent},
	} {
		if v, ok := raw[f.field]; ok {
			if *f.dst, err = jsonNumber(f.field, v); err != nil {
				return err
			}
		}
	}
	if rc.MinExponent > rc.MaxExponent {
		return fmt.Errorf("min_exponent %v exceeds max_exponent %v", rc.MinExponent, rc.MaxExponent)
	}
	if !(rc.Epsilon >= 0) {
		return fmt.Errorf("epsilon %v must be ≥ 0", rc.Epsilon)
	}
	rc.DecayScale = 1
	if scale {
		v, ok := raw["max_fixed_decay"]
		if !ok {
			return fmt.Errorf("field max_fixed_decay is missing (needed by scale_decay_by_time_interval)")
		}
		maxDecay, err := jsonNumber("max_fixed_decay", v)
		if err != nil {
			return err
		}
		v, ok = raw["seq_len"]
		if !ok {
			return fmt.Errorf("field seq_len is missing (needed by scale_decay_by_time_interval)")
		}
		sl, err := jsonNumber("seq_len", v)
		if err != nil {
			return err
		}
		if sl < 2 || sl != math.Trunc(sl) {
			return fmt.Errorf("seq_len %v must be an integer ≥ 2", sl)
		}
		rc.SeqLen = int(sl)
		rc.DecayScale = maxDecay / (sl - 1)
	}
	if v, ok := raw["ablation_name"]; ok {
		_ = json.Unmarshal(v, &rc.Ablation)
	}
	c.RFA = rc
	return nil
}

// isRFAConfig reports whether config.json declares "architecture": "rfa_lm".
func isRFAConfig(raw map[string]json.RawMessage) bool {
	var a string
	if v, ok := raw["architecture"]; ok && json.Unmarshal(v, &a) == nil {
		return a == rfaArchitecture
	}
	return false
}

// jsonFlag reads a boolean flag that Python may have stored as true/false
// or as a number (True == 1).
func jsonFlag(field string, v json.RawMessage) (float64, error) {
	var x any
	if err := json.Unmarshal(v, &x); err != nil {
		return 0, fmt.Errorf("field %s: %v", field, err)
	}
	switch x := x.(type) {
	case bool:
		if x {
			return 1, nil
		}
		return 0, nil
	case float64:
		return x, nil
	}
	return 0, fmt.Errorf("field %s = %s: want a boolean or a number", field, strings.TrimSpace(string(v)))
}

func jsonNumber(field string, v json.RawMessage) (float64, error) {
	var x float64
	if err := json.Unmarshal(v, &x); err != nil {
		return 0, fmt.Errorf("field %s = %s: want a number", field, strings.TrimSpace(string(v)))
	}
	return x, nil
}

// checkFixed compares a config field with the only supported value.
func checkFixed(field string, v json.RawMessage, want any, what string) error {
	refuse := func() error {
		w, _ := json.Marshal(want)
		return fmt.Errorf("field %s = %s is not supported (supported: %s — %s)", field, strings.TrimSpace(string(v)), w, what)
	}
	if want == nil {
		if strings.TrimSpace(string(v)) != "null" {
			return refuse()
		}
		return nil
	}
	x, err := jsonFlag(field, v)
	if err != nil {
		return err
	}
	var w float64
	switch want := want.(type) {
	case bool:
		if want {
			w = 1
		}
	case float64:
		w = want
	}
	if x != w {
		return refuse()
	}
	return nil
}

// rfaFamily is Robust Filter Attention in its authors' state-dict layout.
// It has no config.json writer: random RFA checkpoints cannot be generated
// (the zoo has trained ones).
var rfaFamily = &family{
	arch: ArchRFA, modelTypes: `"architecture": "rfa_lm" (RFA authors' args)`,
	detect:        func(cf *configFile) bool { return isRFAConfig(cf.raw) },
	parse:         func(c *Config, cf *configFile) error { return c.fromRFA(cf.data) },
	load:          loadRFA,
	complexValues: true,
	positions:     "RFA rotations e^{iωt} with decay e^{−μ·lag} (probe params lists them per head)",
	headParams:    rfaHeadTable,
}
