package names

import (
	"slices"
	"testing"
)

func TestDistance(t *testing.T) {
	for _, c := range []struct {
		a, b string
		d    int
	}{{"", "", 0}, {"abc", "abc", 0}, {"", "abc", 3}, {"kitten", "sitting", 3}, {"hook_patern", "hook_pattern", 1}, {"sweep", "swep", 1}} {
		if got := Distance(c.a, c.b); got != c.d {
			t.Errorf("Distance(%q, %q) = %d, want %d", c.a, c.b, got, c.d)
		}
	}
}

func TestClosest(t *testing.T) {
	got := Closest("blocks.{l}.attn.hook_patern", []string{"blocks.{l}.attn.hook_z", "blocks.{l}.attn.hook_pattern", "blocks.{l}.attn.hook_pattern", "logits"}, 2)
	if !slices.Equal(got, []string{"blocks.{l}.attn.hook_pattern", "blocks.{l}.attn.hook_z"}) {
		t.Errorf("Closest = %v (nearest first, no repeats)", got)
	}
}
