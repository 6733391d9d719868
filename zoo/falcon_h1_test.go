package zoo

import (
	"testing"

	"github.com/filterlens/probe/model"
)

// TestFalconH1TinyExercisesEveryMultiplier: the zoo's Falcon-H1-style model
// has every multiplier of the release's config at a value ≠ 1, B/C groups
// shared by several heads (1 < n_groups < heads), a per-group gated norm
// and an active dt floor, so that TestZooParity's logits comparison with
// falcon_h1.py checks each of them in the Go pass (a multiplier of 1 or a
// single group would pass whether or not it is applied).
func TestFalconH1TinyExercisesEveryMultiplier(t *testing.T) {
	m, err := model.Load("checkpoints/falcon_h1_tiny", model.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c := m.Config
	if c.Arch != model.ArchFalconH1 || c.SSM == nil || c.FalconH1 == nil || !c.SSM.Attention {
		t.Fatalf("checkpoints/falcon_h1_tiny loads as %q (SSM %v, attention beside it %v), want falcon_h1 with both mixers",
			c.Arch, c.SSM != nil, c.SSM != nil && c.SSM.Attention)
	}
	scales := map[string]float32{
		"embedding_multiplier": c.EmbedScale, "lm_head_multiplier": c.FalconH1.LMHeadScale, "key_multiplier": c.FalconH1.KeyScale,
		"attention_in_multiplier": c.AttnInScale, "attention_out_multiplier": c.AttnOutScale,
		"ssm_in_multiplier": c.SSM.InScale, "ssm_out_multiplier": c.SSM.OutScale,
		"mlp_multipliers[0]": c.FalconH1.GateScale, "mlp_multipliers[1]": c.FalconH1.DownScale,
	}
	for i, v := range c.SSM.Mup {
		scales[[]string{"ssm_multipliers[z]", "ssm_multipliers[x]", "ssm_multipliers[B]", "ssm_multipliers[C]", "ssm_multipliers[dt]"}[i]] = v
	}
	if len(scales) != 14 {
		t.Errorf("%d multipliers read, want 14 (ssm_multipliers has %d values)", len(scales), len(c.SSM.Mup))
	}
	for name, v := range scales {
		if v == 1 {
			t.Errorf("config.json: %s is 1: the parity test would not see it dropped", name)
		}
	}
	if g, h := c.SSM.Groups, c.SSM.Heads; !(g > 1 && g < h) || c.SSM.NormGroups != g {
		t.Errorf("mamba_n_groups %d, heads %d, gated-norm groups %d: want 1 < n_groups < heads and the norm per group", g, h, c.SSM.NormGroups)
	}
	if !(c.SSM.DtMin > 0) {
		t.Errorf("time_step_limit min %v: want a floor > 0", c.SSM.DtMin)
	}
}
