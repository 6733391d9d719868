package hooks

import "testing"

// TestReach: how far a pass must run for what a Set reads.
func TestReach(t *testing.T) {
	const layers = 4
	for _, c := range []struct {
		name      string
		add       []string // Add patterns
		watch     []string // Watch patterns
		stream    []int    // consumer layers
		blocks    int
		headsOnly bool
	}{
		{name: "nothing: a timed pass runs every block", blocks: 4},
		{name: "watches alone", watch: []string{ResidPost, AttnOut}, blocks: 4},
		{name: "embedding", add: []string{Embed}, blocks: 0},
		{name: "embedding, watched blocks", add: []string{Embed}, watch: []string{ResidPost}, blocks: 0},
		{name: "pattern of layer 0", add: []string{"blocks.0.attn.hook_pattern"}, watch: []string{ResidPost}, blocks: 1, headsOnly: true},
		{name: "z of layer 2", add: []string{"blocks.2.attn.hook_z"}, blocks: 3, headsOnly: true},
		{name: "Gated DeltaNet output of layer 1", add: []string{"blocks.1.gdn.hook_core_out"}, blocks: 2, headsOnly: true},
		{name: "attn_out of layer 1", add: []string{"blocks.1.hook_attn_out"}, blocks: 2},
		{name: "MLP of layer 1", add: []string{"blocks.1.mlp.hook_post"}, blocks: 2},
		{name: "resid_pre of layer 2", add: []string{"blocks.2.hook_resid_pre"}, blocks: 2},
		{name: "resid_pre of layer 0", add: []string{"blocks.0.hook_resid_pre"}, blocks: 0},
		{name: "resid_pre of every layer", add: []string{ResidPre}, blocks: 3},
		{name: "every layer's gate", add: []string{AttnGate}, blocks: 4, headsOnly: true},
		{name: "every layer's attention, any point", add: []string{"blocks.*.attn.*"}, blocks: 4, headsOnly: true},
		{name: "every point of layer 1", add: []string{"blocks.1.*"}, blocks: 2},
		{name: "consumers of every layer", stream: []int{-1}, blocks: 4, headsOnly: true},
		{name: "consumers of layer 1, resid_post of layer 0", stream: []int{1}, add: []string{"blocks.0.hook_resid_post"}, blocks: 2, headsOnly: true},
		{name: "consumers of layer 1, resid_post of layer 1", stream: []int{1}, add: []string{"blocks.1.hook_resid_post"}, blocks: 2},
		{name: "final norm", add: []string{"blocks.0.attn.hook_q", LNFinalNormalized}, blocks: 4},
		{name: "logits", add: []string{Logits}, blocks: 4},
		{name: "an unknown name (the pass refuses it)", add: []string{"blocks.1.attn.hook_patern"}, blocks: 4},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := &Set{}
			for _, p := range c.add {
				s.Add(p, nil)
			}
			for _, p := range c.watch {
				s.Watch(p, nil)
			}
			for _, l := range c.stream {
				s.Stream(l, nil)
			}
			blocks, heads := s.Reach(layers)
			if blocks != c.blocks || heads != c.headsOnly {
				t.Errorf("Reach = %d blocks, heads only %v; want %d, %v", blocks, heads, c.blocks, c.headsOnly)
			}
		})
	}
	var s *Set
	if b, h := s.Reach(layers); b != layers || h {
		t.Errorf("nil Set: Reach = %d, %v; want every block", b, h)
	}
	s = &Set{}
	s.AddAny(nil)
	if b, h := s.Reach(layers); b != layers || h {
		t.Errorf("AddAny: Reach = %d, %v; want every block", b, h)
	}
}

// TestSinkMassPoint: blocks.{l}.attn.hook_sink_mass is a registered point
// of shape [batch, head, query], valid at any layer below the model's.
func TestSinkMassPoint(t *testing.T) {
	if err := Valid("blocks.3.attn.hook_sink_mass", 4); err != nil {
		t.Errorf("Valid: %v", err)
	}
	if err := Valid("blocks.*.attn.hook_sink_mass", 4); err != nil {
		t.Errorf("Valid with *: %v", err)
	}
	if err := Valid("blocks.4.attn.hook_sink_mass", 4); err == nil {
		t.Errorf("layer 4 of 4 accepted")
	}
	sh := Shapes(Name(AttnSinkMass, 0))
	if len(sh) != 1 || len(sh[0]) != 3 || sh[0][0] != "batch" || sh[0][1] != "head" || sh[0][2] != "query" {
		t.Errorf("Shapes = %v, want [[batch head query]]", sh)
	}
}
