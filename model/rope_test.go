package model

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/filterlens/probe/checkpoint"
)

// ropeOf reads the RoPE of a config.json the way fromDecoder does, for any
// model_type (the families of the golden cases may not be registered).
func ropeOf(data []byte) (RoPEConfig, int, error) {
	cf := &configFile{data: data}
	if err := json.Unmarshal(data, &cf.r); err != nil {
		return RoPEConfig{}, 0, err
	}
	_ = json.Unmarshal(data, &cf.raw)
	cf.r.RopeScaling = cf.raw["rope_scaling"]
	dh := 0
	if cf.r.HeadDim != nil {
		dh = *cf.r.HeadDim
	} else if cf.r.HiddenSize != nil && cf.r.NumHeads != nil {
		dh = *cf.r.HiddenSize / *cf.r.NumHeads
	}
	maxPos := 0
	if cf.r.MaxPos != nil {
		maxPos = *cf.r.MaxPos
	}
	rc, err := cf.r.rope(maxPos, dh)
	return rc, dh, err
}

// TestRoPEGoldenConfigs: the RoPE of the golden cases' config.json (OLMo 3
// and gpt-oss YaRN, Phi-3 LongRoPE with partial rotary), field by field as
// the case READMEs state them.
func TestRoPEGoldenConfigs(t *testing.T) {
	olmo3 := RoPEConfig{Theta: 500000, Type: "yarn", Factor: 8, OrigMax: 32, BetaFast: 32, BetaSlow: 1, AttnFactor: 1.2079441541679836}
	gptOSS := RoPEConfig{Theta: 150000, Type: "yarn", Factor: 32, OrigMax: 4096, BetaFast: 32, BetaSlow: 1, NoTruncate: true}
	phi3 := RoPEConfig{Theta: 10000, Type: "longrope", Factor: 4, OrigMax: 32, Dims: 12, Factors: &LongRoPEFactors{
		Short: []float64{1.0432, 1.0935, 1.127, 1.1535, 1.2846, 1.2851},
		Long:  []float64{1.6434, 2.8313, 3.0894, 5.2007, 6.0999, 6.6996},
	}}
	for _, c := range []struct {
		name  string
		want  RoPEConfig
		scale float64 // attention factor on cos and sin
	}{
		{"olmo3", olmo3, 0.1*math.Log(8) + 1},
		{"gpt_oss", gptOSS, 0.1*math.Log(32) + 1},
		{"gpt_oss_mxfp4", gptOSS, 0.1*math.Log(32) + 1},
		{"phi3", phi3, 1.1832159566199232}, // √(1 + ln 4 / ln 32), README
	} {
		data, err := os.ReadFile(filepath.Join(goldenDir, c.name, "config.json"))
		if err != nil {
			t.Skipf("golden data not available: %v", err)
		}
		got, _, err := ropeOf(data)
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s: RoPE %+v, want %+v", c.name, got, c.want)
		}
		if s := got.attentionScale(); math.Abs(s-c.scale) > 1e-15 {
			t.Errorf("%s: attention factor %.17g, want %.17g", c.name, s, c.scale)
		}
	}
}

// ropeTorchCase is one table of testdata/rope_torch.json, written by
// reference/rope/rope_ref.py (PyTorch 1.13, float32 as transformers).
type ropeTorchCase struct {
	Name            string          `json:"name"`
	Config          json.RawMessage `json:"config"`
	HeadDim         int             `json:"head_dim"`
	SeqLen          int             `json:"seq_len"`
	Positions       []int           `json:"positions"`
	Dim             int             `json:"dim"`
	InvFreq         []float64       `json:"inv_freq"`
	AttentionFactor float64         `json:"attention_factor"`
	Cos, Sin        [][]float64
}

// TestRoPEMatchesTorch: parsed from the case's config.json fields, the
// inverse frequencies equal PyTorch's within 1 float32 ulp (torch's float32
// pow, Sleef's on x86, is not correctly rounded; here the float64 power is
// rounded: most agree bit for bit), the attention factor to the last bit of
// float64, and cos and sin at the listed positions of a pass of seq_len
// positions within 2 ulps plus what the inv_freq difference and the
// angle's rounding move them. Cases: the three golden
// configs, gpt-oss's shape at positions up to 8191, LongRoPE at and past
// its original length, YaRN with mscale/mscale_all_dim, with partial
// rotary, truncate false and a null factor, LongRoPE with a top-level
// original length and a given attention factor.
func TestRoPEMatchesTorch(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("testdata", "rope_torch.json"))
	if err != nil {
		t.Fatal(err)
	}
	var ref struct {
		Cases []ropeTorchCase `json:"cases"`
	}
	if err := json.Unmarshal(data, &ref); err != nil {
		t.Fatal(err)
	}
	if len(ref.Cases) < 12 {
		t.Fatalf("%d cases in rope_torch.json, want 12", len(ref.Cases))
	}
	for _, c := range ref.Cases {
		var cfg map[string]any
		if err := json.Unmarshal(c.Config, &cfg); err != nil {
			t.Fatal(err)
		}
		cfg["head_dim"] = c.HeadDim
		cfgJSON, _ := json.Marshal(cfg)
		rc, dh, err := ropeOf(cfgJSON)
		if err != nil {
			t.Errorf("%s: %v", c.Name, err)
			continue
		}
		d := rc.dims(dh)
		if d != c.Dim {
			t.Errorf("%s: %d rotated dimensions, want %d", c.Name, d, c.Dim)
			continue
		}
		if s := rc.attentionScale(); s != c.AttentionFactor {
			t.Errorf("%s: attention factor %.17g, want %.17g", c.Name, s, c.AttentionFactor)
		}
		inv := rc.invFreq(d, c.SeqLen)
		for i, f := range inv {
			if g := float64(f); g != c.InvFreq[i] && math.Abs(g-c.InvFreq[i]) > ulp32(c.InvFreq[i]) {
				t.Errorf("%s: inv_freq[%d] = %.9g, torch %.9g: more than 1 ulp apart", c.Name, i, f, c.InvFreq[i])
			}
		}
		tab := newRopeTable(rc, d, c.SeqLen)
		half := d / 2
		for k, p := range c.Positions {
			for i := 0; i < half; i++ {
				// 2 ulps of cos/sin, plus what one ulp of inv_freq and the
				// rounding of the angle p·inv_freq move them
				a := float64(p) * c.InvFreq[i]
				tol := c.AttentionFactor * (2*ulp32(1) + float64(p)*math.Abs(float64(inv[i])-c.InvFreq[i]) + ulp32(a))
				for _, v := range []struct {
					what      string
					got, want float64
				}{{"cos", float64(tab.cos[p*half+i]), c.Cos[k][i]}, {"sin", float64(tab.sin[p*half+i]), c.Sin[k][i]}} {
					if math.Abs(v.got-v.want) > tol {
						t.Errorf("%s: %s[pos %d, %d] = %.9g, torch %.9g (tolerance %.2g)", c.Name, v.what, p, i, v.got, v.want, tol)
					}
				}
			}
		}
	}
}

// ulp32 returns the spacing of float32 values at |x|.
func ulp32(x float64) float64 {
	f := float32(math.Abs(x))
	return float64(math.Nextafter32(f, float32(math.Inf(1))) - f)
}

// refInvFreq64 is an independent float64 statement of the scaled inverse
// frequencies (yarn and longrope) and attention factor of d rotated
// dimensions, from the formulas of YaRN (Peng et al. 2023, as transformers
// implements it) and LongRoPE (Ding et al. 2024, Phi-3).
func refInvFreq64(rc RoPEConfig, d, seqLen int) ([]float64, float64) {
	inv := make([]float64, d/2)
	att := 1.0
	for i := range inv {
		inv[i] = math.Pow(rc.Theta, -float64(2*i)/float64(d))
	}
	switch rc.Type {
	case "yarn":
		// dimension index at which a frequency turns r times over orig positions
		dimOf := func(r float64) float64 {
			return float64(d) * math.Log(float64(rc.OrigMax)/(2*math.Pi*r)) / (2 * math.Log(rc.Theta))
		}
		lo, hi := dimOf(32), dimOf(1)
		if !rc.NoTruncate {
			lo, hi = math.Floor(lo), math.Ceil(hi)
		}
		lo, hi = math.Max(lo, 0), math.Min(hi, float64(d-1))
		for i := range inv {
			gamma := math.Min(math.Max((float64(i)-lo)/(hi-lo), 0), 1) // 0: extrapolate, 1: interpolate
			inv[i] = (1-gamma)*inv[i] + gamma*inv[i]/rc.Factor
		}
		att = 0.1*math.Log(rc.Factor) + 1
	case "longrope":
		lambda := rc.Factors.Short
		if seqLen > rc.OrigMax {
			lambda = rc.Factors.Long
		}
		for i := range inv {
			inv[i] /= lambda[i]
		}
		att = math.Sqrt(1 + math.Log(rc.Factor)/math.Log(float64(rc.OrigMax)))
	}
	return inv, att
}

// TestRoPEAgainstFormula checks the float32 tables against the float64
// formulas (refInvFreq64) over a pass of T positions, |Δ| ≤ 1e-5 (float32
// angles of positions < 64): YaRN with and without truncate, with partial
// rotary; LongRoPE below, at and above its original length, where one more
// position switches every row, the early ones included, to long_factor.
func TestRoPEAgainstFormula(t *testing.T) {
	lr := &LongRoPEFactors{Short: []float64{1.02, 1.1, 1.3, 1.5, 1.9, 2.4}, Long: []float64{1.5, 2.5, 3.5, 5, 7, 9}}
	yarn := RoPEConfig{Theta: 10000, Type: "yarn", Factor: 16, OrigMax: 64}
	cases := []struct {
		name string
		rc   RoPEConfig
		dh   int
		T    int
	}{
		{"yarn truncate", yarn, 64, 48},
		{"yarn no truncate", func() RoPEConfig { r := yarn; r.NoTruncate = true; return r }(), 64, 48},
		{"yarn partial", func() RoPEConfig { r := yarn; r.Dims = 32; return r }(), 64, 48},
		{"longrope below", RoPEConfig{Theta: 10000, Type: "longrope", Factor: 4, OrigMax: 32, Dims: 12, Factors: lr}, 16, 20},
		{"longrope at", RoPEConfig{Theta: 10000, Type: "longrope", Factor: 4, OrigMax: 32, Dims: 12, Factors: lr}, 16, 32},
		{"longrope above", RoPEConfig{Theta: 10000, Type: "longrope", Factor: 4, OrigMax: 32, Dims: 12, Factors: lr}, 16, 33},
		{"longrope far above", RoPEConfig{Theta: 10000, Type: "longrope", Factor: 4, OrigMax: 32, Factors: &LongRoPEFactors{
			Short: append(append([]float64{}, lr.Short...), lr.Short[:2]...), Long: append(append([]float64{}, lr.Long...), lr.Long[:2]...)}}, 16, 60},
	}
	for _, c := range cases {
		d := c.rc.dims(c.dh)
		inv, att := refInvFreq64(c.rc, d, c.T)
		tab := newRopeTable(c.rc, d, c.T)
		half := d / 2
		worst := 0.0
		for p := 0; p < c.T; p++ {
			for i := 0; i < half; i++ {
				a := float64(p) * inv[i]
				worst = math.Max(worst, math.Abs(float64(tab.cos[p*half+i])-att*math.Cos(a)))
				worst = math.Max(worst, math.Abs(float64(tab.sin[p*half+i])-att*math.Sin(a)))
			}
		}
		if worst > 1e-5 {
			t.Errorf("%s: max |table − formula| = %.3g over %d positions × %d frequencies", c.name, worst, c.T, half)
		}
	}

	// YaRN's truncate changes the ramp: the two tables differ.
	trunc, free := yarn.invFreq(64, 48), func() RoPEConfig { r := yarn; r.NoTruncate = true; return r }().invFreq(64, 48)
	if reflect.DeepEqual(trunc, free) {
		t.Error("yarn: truncate false gave the frequencies of truncate true")
	}
	// LongRoPE: position 5 of a pass of 32 (= original length) uses the
	// short factors, of a pass of 33 the long ones.
	rc := cases[4].rc
	at, above := newRopeTable(rc, 12, 32), newRopeTable(rc, 12, 33)
	for i := 1; i < 6; i++ {
		s := math.Pow(10000, -float64(2*i)/12)
		if got, want := float64(at.cos[5*6+i]), math.Cos(5*s/lr.Short[i])*1.1832159566199232; math.Abs(got-want) > 1e-6 {
			t.Errorf("longrope at the original length: cos[5, %d] = %v, want %v (short factors)", i, got, want)
		}
		if got, want := float64(above.cos[5*6+i]), math.Cos(5*s/lr.Long[i])*1.1832159566199232; math.Abs(got-want) > 1e-6 {
			t.Errorf("longrope past the original length: cos[5, %d] = %v, want %v (long factors)", i, got, want)
		}
	}
}

// TestRoPEApplyPartial: apply rotates the first Dims dimensions of a head
// (rotate-half over them, times the attention factor) and leaves the rest.
func TestRoPEApplyPartial(t *testing.T) {
	rc := RoPEConfig{Theta: 10000, Type: "yarn", Factor: 4, OrigMax: 16, Dims: 8}
	tab := newRopeTable(rc, 8, 10)
	x := make([]float32, 16)
	for i := range x {
		x[i] = float32(i + 1)
	}
	orig := append([]float32{}, x...)
	tab.apply(x, 7)
	inv, att := refInvFreq64(rc, 8, 10)
	for i := 0; i < 4; i++ {
		c, s := att*math.Cos(7*inv[i]), att*math.Sin(7*inv[i])
		w1 := float64(orig[i])*c - float64(orig[i+4])*s
		w2 := float64(orig[i+4])*c + float64(orig[i])*s
		if math.Abs(float64(x[i])-w1) > 1e-5 || math.Abs(float64(x[i+4])-w2) > 1e-5 {
			t.Errorf("pair %d: (%v, %v), want (%v, %v)", i, x[i], x[i+4], w1, w2)
		}
	}
	for i := 8; i < 16; i++ {
		if x[i] != orig[i] {
			t.Errorf("x[%d] = %v changed: only the first 8 dimensions rotate", i, x[i])
		}
	}
}

// llamaWith returns a Llama config.json with the given extra fields.
func llamaWith(extra string) string {
	return `{"model_type":"llama","hidden_size":64,"num_hidden_layers":2,"num_attention_heads":4,"intermediate_size":128,"vocab_size":10,"max_position_embeddings":4096` + extra + `}`
}

// TestRoPEConfigParsing: which of rope_scaling, rope_parameters and the
// top-level fields win, as transformers 5 standardises them.
func TestRoPEConfigParsing(t *testing.T) {
	yarnLF := `"rope_type":"yarn","factor":4,"original_max_position_embeddings":1024`
	cases := []struct {
		name, extra string
		want        RoPEConfig
	}{
		{"rope_theta inside rope_parameters", `,"rope_parameters":{"rope_type":"default","rope_theta":500000}`,
			RoPEConfig{Theta: 500000, Type: "default", Factor: 1}},
		{"top-level rope_theta beside rope_parameters", `,"rope_theta":1e6,"rope_parameters":{"rope_type":"linear","factor":2}`,
			RoPEConfig{Theta: 1e6, Type: "linear", Factor: 2}},
		{"object's rope_theta first", `,"rope_theta":1e6,"rope_parameters":{"rope_type":"default","rope_theta":2e6}`,
			RoPEConfig{Theta: 2e6, Type: "default", Factor: 1}},
		{"rope_scaling before rope_parameters", `,"rope_scaling":{` + yarnLF + `},"rope_parameters":{"rope_type":"default","rope_theta":3}`,
			RoPEConfig{Theta: 10000, Type: "yarn", Factor: 4, OrigMax: 1024}},
		{"empty rope_scaling: rope_parameters", `,"rope_scaling":{},"rope_parameters":{"rope_type":"linear","factor":3,"rope_theta":7}`,
			RoPEConfig{Theta: 7, Type: "linear", Factor: 3}},
		{"legacy type key", `,"rope_scaling":{"type":"yarn","factor":4}`,
			RoPEConfig{Theta: 10000, Type: "yarn", Factor: 4, OrigMax: 4096}},
		{"top-level original length first", `,"original_max_position_embeddings":512,"rope_parameters":{` + yarnLF + `}`,
			RoPEConfig{Theta: 10000, Type: "yarn", Factor: 4, OrigMax: 512}},
		{"yarn null factor", `,"rope_parameters":{"rope_type":"yarn","factor":null,"original_max_position_embeddings":1024}`,
			RoPEConfig{Theta: 10000, Type: "yarn", Factor: 4, OrigMax: 1024}},
		{"yarn every field", `,"rope_parameters":{` + yarnLF + `,"beta_fast":16,"beta_slow":2,"mscale":0.7,"mscale_all_dim":0.5,"attention_factor":1.5,"truncate":false}`,
			RoPEConfig{Theta: 10000, Type: "yarn", Factor: 4, OrigMax: 1024, BetaFast: 16, BetaSlow: 2, MScale: 0.7, MScaleAllDim: 0.5, AttnFactor: 1.5, NoTruncate: true}},
		{"llama3 original length defaults to max", `,"rope_scaling":{"rope_type":"llama3","factor":8,"low_freq_factor":1,"high_freq_factor":4}`,
			RoPEConfig{Theta: 10000, Type: "llama3", Factor: 8, LowFreq: 1, HighFreq: 4, OrigMax: 4096}},
		{"partial rotary, top level", `,"partial_rotary_factor":0.5,"rope_parameters":{"rope_type":"longrope","short_factor":[1,1,1,1],"long_factor":[2,2,2,2],"original_max_position_embeddings":1024}`,
			RoPEConfig{Theta: 10000, Type: "longrope", Factor: 4, OrigMax: 1024, Dims: 8, Factors: &LongRoPEFactors{Short: []float64{1, 1, 1, 1}, Long: []float64{2, 2, 2, 2}}}},
		{"partial rotary 1 rotates the whole head", `,"rope_parameters":{"rope_type":"default","partial_rotary_factor":1}`,
			RoPEConfig{Theta: 10000, Type: "default", Factor: 1}},
	}
	for _, c := range cases {
		cfg, err := ParseConfig([]byte(llamaWith(c.extra)))
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if !reflect.DeepEqual(cfg.RoPE, c.want) {
			t.Errorf("%s: RoPE %+v, want %+v", c.name, cfg.RoPE, c.want)
		}
	}
}

// TestRoPEConfigErrors: unknown rope types and malformed fields are
// refused with the field's name.
func TestRoPEConfigErrors(t *testing.T) {
	lr := func(extra string) string {
		return `,"rope_parameters":{"rope_type":"longrope","short_factor":[1,1,1,1,1,1,1,1],"long_factor":[2,2,2,2,2,2,2,2]` + extra + `}`
	}
	cases := []struct{ name, extra, want string }{
		{"unknown type", `,"rope_parameters":{"rope_type":"proportional"}`, `rope_parameters.rope_type "proportional" is not supported (supported: default, linear, dynamic, llama3, yarn, longrope)`},
		{"type not a string", `,"rope_scaling":{"rope_type":3}`, "field rope_scaling.rope_type: want a string"},
		{"not an object", `,"rope_parameters":[1]`, "field rope_parameters: want an object"},
		{"per layer type", `,"rope_parameters":{"full_attention":{"rope_type":"default"}}`, "field rope_parameters: one RoPE per layer type (full_attention) is not supported"},
		{"theta inside", `,"rope_parameters":{"rope_theta":-1}`, "rope_parameters.rope_theta = -1 must be positive"},
		{"theta top level", `,"rope_theta":0`, "rope_theta 0 must be positive"},
		{"theta not a number", `,"rope_parameters":{"rope_theta":"big"}`, "field rope_parameters.rope_theta: want a number"},
		{"yarn without factor", `,"rope_parameters":{"rope_type":"yarn"}`, "field rope_parameters.factor is missing (needed for rope_type yarn)"},
		{"linear null factor", `,"rope_scaling":{"rope_type":"linear","factor":null}`, "field rope_scaling.factor is missing"},
		{"zero factor", `,"rope_scaling":{"rope_type":"dynamic","factor":0}`, "rope_scaling.factor = 0 must be positive"},
		{"negative beta", `,"rope_parameters":{"rope_type":"yarn","factor":4,"beta_fast":-32}`, "rope_parameters.beta_fast = -32 must not be negative"},
		{"truncate not a bool", `,"rope_parameters":{"rope_type":"yarn","factor":4,"truncate":"no"}`, "field rope_parameters.truncate: want true or false"},
		{"attention factor", `,"rope_parameters":{"rope_type":"yarn","factor":4,"attention_factor":-1}`, "rope_parameters.attention_factor = -1 must be positive"},
		{"mscale ratio", `,"rope_parameters":{"rope_type":"yarn","factor":4,"mscale":1,"mscale_all_dim":-20}`, "the attention factor derived from factor 4, mscale 1 and mscale_all_dim -20"},
		{"original length zero", `,"rope_parameters":{"rope_type":"yarn","factor":4,"original_max_position_embeddings":0}`, "rope_parameters.original_max_position_embeddings = 0 must be a positive integer"},
		{"original length fraction", `,"original_max_position_embeddings":1.5,"rope_parameters":{"rope_type":"yarn","factor":4}`, "original_max_position_embeddings = 1.5 must be a positive integer"},
		{"llama3 without low_freq_factor", `,"rope_scaling":{"rope_type":"llama3","factor":8,"high_freq_factor":4}`, "field rope_scaling.low_freq_factor is missing (needed for rope_type llama3)"},
		{"longrope without long_factor", `,"rope_parameters":{"rope_type":"longrope","short_factor":[1,1,1,1,1,1,1,1]}`, "field rope_parameters.long_factor is missing"},
		{"longrope wrong length", `,"rope_parameters":{"rope_type":"longrope","short_factor":[1,1],"long_factor":[2,2,2,2,2,2,2,2]}`, "rope_parameters.short_factor has 2 entries, want 8 (one per rotated pair: 16 rotated dimensions of head_dim 16)"},
		{"longrope length with partial rotary", `,"partial_rotary_factor":0.5` + lr(""), "rope_parameters.short_factor has 8 entries, want 4 (one per rotated pair: 8 rotated dimensions of head_dim 16)"},
		{"longrope non-positive entry", lr(`,"short_factor":[1,1,0,1,1,1,1,1]`), "rope_parameters.short_factor[2] = 0 must be positive"},
		{"longrope factors not numbers", `,"rope_parameters":{"rope_type":"longrope","short_factor":"ones","long_factor":[2]}`, "field rope_parameters.short_factor: want a list of numbers"},
		{"longrope zero factor", lr(`,"factor":0`), "rope_parameters.factor = 0 must be positive"},
		{"partial odd", `,"partial_rotary_factor":0.3125`, "partial_rotary_factor 0.3125: need 0 < factor ≤ 1 giving an even number ≥ 2 of rotated dimensions of head_dim 16 (got 5)"},
		{"partial 30/44 of 44", `,"head_dim":44,"partial_rotary_factor":0.6818181818181818`, "(got 29)"},
		{"partial too large", `,"rope_parameters":{"partial_rotary_factor":1.5}`, "rope_parameters.partial_rotary_factor 1.5: need 0 < factor ≤ 1"},
	}
	for _, c := range cases {
		_, err := ParseConfig([]byte(llamaWith(c.extra)))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want one containing %q", c.name, err, c.want)
		}
	}
}

// TestRoPEWrittenBack: a configuration's config.json as decoderHFConfig
// writes it (probe generate) parses back to the same RoPE, for every type
// and partial rotary.
func TestRoPEWrittenBack(t *testing.T) {
	for _, extra := range []string{
		`,"rope_parameters":{"rope_type":"yarn","factor":32,"original_max_position_embeddings":128,"rope_theta":150000,"truncate":false,"beta_fast":16,"beta_slow":2}`,
		`,"rope_parameters":{"rope_type":"yarn","factor":8,"original_max_position_embeddings":512,"attention_factor":1.2079441541679836}`,
		`,"rope_scaling":{"type":"yarn","factor":40,"mscale":0.707,"mscale_all_dim":0.707,"original_max_position_embeddings":64}`,
		`,"original_max_position_embeddings":1024,"partial_rotary_factor":0.75,"rope_scaling":{"rope_type":"longrope","short_factor":[1,1.1,1.2,1.3,1.4,1.5],"long_factor":[2,3,4,5,6,7]}`,
		`,"rope_parameters":{"rope_type":"longrope","factor":16,"attention_factor":1.3,"short_factor":[1,1,1,1,1,1,1,1],"long_factor":[2,2,2,2,2,2,2,2],"original_max_position_embeddings":256}`,
		`,"rope_scaling":{"rope_type":"llama3","factor":8,"low_freq_factor":1,"high_freq_factor":4,"original_max_position_embeddings":512}`,
		`,"rope_scaling":{"rope_type":"dynamic","factor":2}`,
		`,"head_dim":44,"partial_rotary_factor":0.6818181818181819`, // int(44·f) = 30, while int(44·(30/44)) = 29
	} {
		c, err := ParseConfig([]byte(llamaWith(extra)))
		if err != nil {
			t.Errorf("%s: %v", extra, err)
			continue
		}
		out, err := json.Marshal(c.HFConfig())
		if err != nil {
			t.Fatal(err)
		}
		c2, err := ParseConfig(out)
		if err != nil {
			t.Errorf("%s: written back as %s: %v", extra, out, err)
			continue
		}
		if !reflect.DeepEqual(c.RoPE, c2.RoPE) {
			t.Errorf("%s: RoPE %+v written back as %s parses to %+v", extra, c.RoPE, out, c2.RoPE)
		}
	}
}

// TestRoPEGoldenLayer0Attention recomputes layer 0's attention of the
// golden cases phi3 (LongRoPE, long factors at T = 48 > 32, partial rotary
// 0.75, fused qkv_proj), olmo3 (YaRN with a given attention factor,
// QK-norm over the whole projection, no pre-norm, window 16) and gpt_oss
// (YaRN with truncate false, q/k biases, learned sinks, window 16) from
// their weights, in float64 but for the float32 RoPE tables of this file's
// subject, and compares the probabilities with attn.0 (|Δ| ≤ 3e-5, the
// cases' guide). The families themselves are not needed: embedding, norm,
// projections, RoPE and softmax are all that layer 0's attention reads.
func TestRoPEGoldenLayer0Attention(t *testing.T) {
	for _, name := range []string{"phi3", "olmo3", "gpt_oss"} {
		dir := filepath.Join(goldenDir, name)
		data, err := os.ReadFile(filepath.Join(dir, "config.json"))
		if err != nil {
			t.Skipf("golden data not available: %v", err)
		}
		rc, dh, err := ropeOf(data)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		var cfg struct {
			D      int     `json:"hidden_size"`
			H      int     `json:"num_attention_heads"`
			KV     int     `json:"num_key_value_heads"`
			Eps    float64 `json:"rms_norm_eps"`
			Window int     `json:"sliding_window"`
		}
		if err := json.Unmarshal(data, &cfg); err != nil {
			t.Fatal(err)
		}
		ck, err := checkpoint.OpenFile(filepath.Join(dir, "model.safetensors"))
		if err != nil {
			t.Fatal(err)
		}
		defer ck.Close()
		w := func(n string) []float32 {
			x, err := ck.Float32("model." + n)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			return x
		}
		g := openGolden(t, dir)
		ids := g.ids(t)
		ref := g.f32(t, "attn.0")
		B, T, D, H, KV := g.B, g.T, cfg.D, cfg.H, cfg.KV
		// y = W x (+ b) for W of rows×D
		lin := func(W, b []float32, x []float64, rows int) []float64 {
			y := make([]float64, rows)
			for r := range y {
				s := 0.0
				for j, v := range x {
					s += float64(W[r*len(x)+j]) * v
				}
				if b != nil {
					s += float64(b[r])
				}
				y[r] = s
			}
			return y
		}
		rms := func(x []float64, wt []float32) []float64 {
			ss := 0.0
			for _, v := range x {
				ss += v * v
			}
			inv := 1 / math.Sqrt(ss/float64(len(x))+cfg.Eps)
			y := make([]float64, len(x))
			for i, v := range x {
				y[i] = v * inv * float64(wt[i])
			}
			return y
		}
		tab := newRopeTable(rc, rc.dims(dh), T)
		emb := w("embed_tokens.weight")
		var sinks []float32
		window := 0
		if name != "phi3" {
			window = cfg.Window // layer 0 is a sliding layer in both
		}
		if name == "gpt_oss" {
			sinks = w("layers.0.self_attn.sinks")
		}
		worst := 0.0
		for b := 0; b < B; b++ {
			q := make([][]float64, T) // [t][H·dh], after RoPE
			k := make([][]float64, T)
			for p := 0; p < T; p++ {
				x := make([]float64, D)
				for j := range x {
					x[j] = float64(emb[ids[b][p]*D+j])
				}
				switch name {
				case "phi3":
					qkv := lin(w("layers.0.self_attn.qkv_proj.weight"), nil, rms(x, w("layers.0.input_layernorm.weight")), (H+2*KV)*dh)
					q[p], k[p] = qkv[:H*dh], qkv[H*dh:(H+KV)*dh]
				case "olmo3":
					q[p] = rms(lin(w("layers.0.self_attn.q_proj.weight"), nil, x, H*dh), w("layers.0.self_attn.q_norm.weight"))
					k[p] = rms(lin(w("layers.0.self_attn.k_proj.weight"), nil, x, KV*dh), w("layers.0.self_attn.k_norm.weight"))
				case "gpt_oss":
					h := rms(x, w("layers.0.input_layernorm.weight"))
					q[p] = lin(w("layers.0.self_attn.q_proj.weight"), w("layers.0.self_attn.q_proj.bias"), h, H*dh)
					k[p] = lin(w("layers.0.self_attn.k_proj.weight"), w("layers.0.self_attn.k_proj.bias"), h, KV*dh)
				}
				for _, v := range [][]float64{q[p], k[p]} {
					head := make([]float32, dh)
					for o := 0; o < len(v); o += dh {
						for i := range head {
							head[i] = float32(v[o+i])
						}
						tab.apply(head, p)
						for i := range head {
							v[o+i] = float64(head[i])
						}
					}
				}
			}
			for hd := 0; hd < H; hd++ {
				kh := hd / (H / KV)
				for i := 0; i < T; i++ {
					row := make([]float64, T)
					mx := math.Inf(-1)
					if sinks != nil {
						mx = float64(sinks[hd])
					}
					for j := 0; j <= i; j++ {
						if window > 0 && j <= i-window {
							row[j] = math.Inf(-1)
							continue
						}
						s := 0.0
						for c := 0; c < dh; c++ {
							s += q[i][hd*dh+c] * k[j][kh*dh+c]
						}
						row[j] = s / math.Sqrt(float64(dh))
						mx = math.Max(mx, row[j])
					}
					sum := 0.0
					if sinks != nil {
						sum = math.Exp(float64(sinks[hd]) - mx)
					}
					for j := 0; j <= i; j++ {
						row[j] = math.Exp(row[j] - mx)
						sum += row[j]
					}
					for j := 0; j < T; j++ {
						got := 0.0
						if j <= i {
							got = row[j] / sum
						}
						worst = math.Max(worst, math.Abs(got-float64(ref[((b*H+hd)*T+i)*T+j])))
					}
				}
			}
		}
		t.Logf("%s: layer 0 attention max |Δ| %.2e", name, worst)
		if worst > 3e-5 {
			t.Errorf("%s: layer 0 attention max |Δ| %.3g vs attn.0, want ≤ 3e-5", name, worst)
		}
	}
}

// BenchmarkNewRopeTable: the cos/sin table of a pass (T = 32768, head 128).
func BenchmarkNewRopeTable(b *testing.B) {
	for _, rc := range []RoPEConfig{
		{Theta: 10000, Type: "default", Factor: 1},
		{Theta: 150000, Type: "yarn", Factor: 32, OrigMax: 4096, NoTruncate: true},
		{Theta: 10000, Type: "longrope", Factor: 32, OrigMax: 4096, Factors: &LongRoPEFactors{Short: make([]float64, 64), Long: make([]float64, 64)}},
	} {
		for i := range 64 {
			if rc.Factors != nil {
				rc.Factors.Short[i], rc.Factors.Long[i] = 1, 1+float64(i)
			}
		}
		b.Run(rc.Type, func(b *testing.B) {
			for range b.N {
				newRopeTable(rc, 128, 32768)
			}
		})
	}
}
