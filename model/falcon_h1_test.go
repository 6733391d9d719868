package model

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/filterlens/probe/hooks"
)

// falconH1Config returns the falcon_h1 golden case's config.json with the
// given fields changed (nil deletes one).
func falconH1Config(t testing.TB, change map[string]any) []byte {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(goldenDir, "falcon_h1", "config.json"))
	if err != nil {
		t.Skipf("golden data not found: %v", err)
	}
	var f map[string]any
	if err := json.Unmarshal(data, &f); err != nil {
		t.Fatal(err)
	}
	for k, v := range change {
		if v == nil {
			delete(f, k)
		} else {
			f[k] = v
		}
	}
	if data, err = json.Marshal(f); err != nil {
		t.Fatal(err)
	}
	return data
}

// TestFalconH1ConfigRefused: what the mixer does not implement and
// inconsistent Mamba-2 sizes or multipliers are refused naming the field.
func TestFalconH1ConfigRefused(t *testing.T) {
	c, err := ParseConfig(falconH1Config(t, nil))
	if err != nil {
		t.Fatalf("the golden config is refused: %v", err)
	}
	if c.EmbedScale != 2 || c.LogitDivisor != 2 || c.AttnInScale != 1.1 || c.AttnOutScale != 0.9 ||
		c.SSM.InScale != 1.2 || c.SSM.OutScale != 0.8 || c.SSM.NormGroups != 2 || c.FalconH1.GateScale != 0.8 || c.FalconH1.DownScale != 1.2 {
		t.Errorf("multipliers read as %+v, SSM %+v, MLP %+v", c, *c.SSM, *c.FalconH1)
	}
	if c, err := ParseConfig(falconH1Config(t, map[string]any{"mamba_d_head": "auto", "tie_word_embeddings": nil})); err != nil || c.SSM.HeadDim != 16 || c.TiedHead {
		t.Errorf("mamba_d_head auto, no tie_word_embeddings: %v; want head dim 16, untied", err)
	}
	for _, tc := range []struct {
		change map[string]any
		want   string
	}{
		{map[string]any{"mamba_norm_before_gate": true}, "mamba_norm_before_gate"},
		{map[string]any{"mamba_rms_norm": false}, "mamba_rms_norm"},
		{map[string]any{"projectors_bias": true}, "projectors_bias"},
		{map[string]any{"mamba_d_head": 12}, "mamba_d_head"},
		{map[string]any{"mamba_d_head": "half"}, "mamba_d_head"},
		{map[string]any{"mamba_n_groups": 3}, "n_groups 3"},
		{map[string]any{"mamba_d_state": 0}, "mamba_d_state"},
		{map[string]any{"mamba_chunk_size": 0}, "mamba_chunk_size"},
		{map[string]any{"time_step_limit": []float64{1, 0.01}}, "time_step_limit"},
		{map[string]any{"ssm_multipliers": []float64{1, 1}}, "ssm_multipliers"},
		{map[string]any{"mlp_multipliers": []float64{1, 0}}, "mlp_multipliers[1]"},
		{map[string]any{"lm_head_multiplier": 0}, "lm_head_multiplier"},
	} {
		_, err := ParseConfig(falconH1Config(t, tc.change))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: error %v, want one naming %q", tc.change, err, tc.want)
		}
	}
}

// TestFalconH1BranchesSum: on a generated Falcon-H1 (GQA, multipliers away
// from 1), hook_attn_out is attention_out_multiplier·hook_attn_branch_out +
// ssm_out_multiplier·ssm.hook_out, and the layer's attention streams
// softmax rows while its Mamba-2 streams effective-attention rows.
func TestFalconH1BranchesSum(t *testing.T) {
	cfg, err := SmallConfig(ArchFalconH1, Size{Layers: 2, DModel: 32, Heads: 4, KVHeads: 2, Vocab: 40, MaxPos: 64})
	if err != nil {
		t.Fatal(err)
	}
	m, _, err := Generate(cfg, 5)
	if err != nil {
		t.Fatal(err)
	}
	const B, T = 2, 13
	hs := &hooks.Set{}
	cap := hs.Capture("blocks.*.hook_attn_out", "blocks.*.hook_attn_branch_out", "blocks.*.ssm.hook_out")
	rec := &deltaRecorder{layer: 1, B: B, H: m.SSM.Heads, T: T, w: make([]float32, B*m.SSM.Heads*T*T), seen: make([]int, B*m.SSM.Heads)}
	hs.Stream(1, rec)
	if _, err := m.Forward(seqs(B, T, m.Vocab), Options{Hooks: hs}); err != nil {
		t.Fatal(err)
	}
	for l := range m.Layers {
		get := func(p string) []float32 { return cap.Get(hooks.Name(p, l)).Data().([]float32) }
		sum, a, s := get("blocks.{l}.hook_attn_out"), get("blocks.{l}.hook_attn_branch_out"), get("blocks.{l}.ssm.hook_out")
		want := make([]float32, len(sum))
		for i := range want {
			want[i] = m.AttnOutScale*a[i] + m.SSM.OutScale*s[i]
		}
		if rel, i := relErr(sum, want); rel > 1e-6 {
			t.Errorf("layer %d: hook_attn_out differs from the multiplied branches by %.3g at %d", l, rel, i)
		}
	}
	if rec.softmax != B*m.Heads*((T+defaultTileRows-1)/defaultTileRows) || rec.outOfRow || rec.seen[0] != T {
		t.Errorf("layer 1 streamed %d softmax tiles, Mamba-2 rows %v (in order: %v)", rec.softmax, rec.seen, !rec.outOfRow)
	}
}
