// Package hooks names the points of a forward pass where activations can be
// captured or changed, in the style of TransformerLens, and carries the
// streaming interface through which attention rows reach their consumers
// without a T×T matrix.
//
// A hook point is a string such as "blocks.3.attn.hook_pattern". Users write
// these names in notebooks and papers, so they never change. Every point is an
// identity in the pass: a function registered at a point sees the live value
// as a *tensor.Dense whose backing array is the pass's own buffer, so reading
// it captures and writing to it intervenes — the rest of the pass uses the
// changed value.
package hooks

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"

	"gorgonia.org/tensor"
)

// Point documents one hook point: its name pattern ({l} is the layer index)
// and the shape of the value passed to hook functions.
type Point struct {
	Name  string
	Shape string
	Doc   string
}

// Points is the registry of hook points. The model issues no other names.
var Points = []Point{
	{"hook_embed", "[batch,pos,d_model]", "token embedding (GPT-2: before adding positions)"},
	{"hook_pos_embed", "[batch,pos,d_model]", "learned position embedding (GPT-2 only)"},
	{"blocks.{l}.hook_resid_pre", "[batch,pos,d_model]", "residual stream entering block l"},
	{"blocks.{l}.ln1.hook_normalized", "[batch,pos,d_model]", "input of attention after the pre-attention norm"},
	{"blocks.{l}.attn.hook_q", "[batch,pos,head,d_head]", "query projection (with bias), before QK-norm and RoPE"},
	{"blocks.{l}.attn.hook_k", "[batch,pos,kv_head,d_head]", "key projection (with bias), before QK-norm and RoPE"},
	{"blocks.{l}.attn.hook_v", "[batch,pos,kv_head,d_head]", "value projection (with bias)"},
	{"blocks.{l}.attn.hook_rot_q", "[batch,pos,head,d_head]", "query after QK-norm and RoPE, as it enters the dot product"},
	{"blocks.{l}.attn.hook_rot_k", "[batch,pos,kv_head,d_head]", "key after QK-norm and RoPE"},
	{"blocks.{l}.attn.hook_pattern", "[batch,head,query,key]", "post-softmax attention weights, before any output gate; materialized only when hooked"},
	{"blocks.{l}.attn.hook_pattern_decayed", "[batch,head,query,key]", "RFA only: decayed attention A = Â ⊙ E (Â is hook_pattern); rows sum to ≤ 1; materialized only when hooked"},
	{"blocks.{l}.attn.hook_gate", "[batch,pos,head] or [batch,pos,head,d_head]", "output gate sigmoid(logit), headwise or elementwise (gated models only)"},
	{"blocks.{l}.attn.hook_z", "[batch,pos,head,d_head]", "per-head attention output Σ_j α_tj v_j, after the gate, before o_proj"},
	{"blocks.{l}.hook_attn_out", "[batch,pos,d_model]", "attention block output (after o_proj) added to the residual"},
	{"blocks.{l}.hook_resid_mid", "[batch,pos,d_model]", "residual stream between attention and MLP"},
	{"blocks.{l}.ln2.hook_normalized", "[batch,pos,d_model]", "input of the MLP after the pre-MLP norm"},
	{"blocks.{l}.mlp.hook_pre", "[batch,pos,d_mlp]", "MLP hidden pre-activation (gate projection for SwiGLU)"},
	{"blocks.{l}.mlp.hook_post", "[batch,pos,d_mlp]", "MLP hidden after the activation (act(gate)·up for SwiGLU), before down_proj"},
	{"blocks.{l}.hook_mlp_out", "[batch,pos,d_model]", "MLP output added to the residual"},
	{"blocks.{l}.hook_resid_post", "[batch,pos,d_model]", "residual stream leaving block l"},
	{"ln_final.hook_normalized", "[batch,pos,d_model]", "output of the final norm"},
	{"logits", "[batch,pos,vocab]", "unembedding output; computed only when hooked or requested"},
}

// Name returns the concrete name of a per-layer point, e.g.
// Name("blocks.{l}.attn.hook_pattern", 3) = "blocks.3.attn.hook_pattern".
func Name(pattern string, layer int) string {
	return strings.Replace(pattern, "{l}", strconv.Itoa(layer), 1)
}

// Valid reports whether name (which may use * for the layer index) names a
// registered point, and for concrete names whether the layer is below
// nLayers.
func Valid(name string, nLayers int) error {
	for _, p := range Points {
		if match(strings.Replace(p.Name, "{l}", "*", 1), name) {
			if l, ok := layerOf(name); ok && (l < 0 || l >= nLayers) {
				return fmt.Errorf("hook %q: layer %d out of range (model has %d layers)", name, l, nLayers)
			}
			return nil
		}
	}
	return fmt.Errorf("unknown hook %q (see hooks.Points for the registry)", name)
}

func layerOf(name string) (int, bool) {
	if !strings.HasPrefix(name, "blocks.") {
		return 0, false
	}
	seg := strings.SplitN(name, ".", 3)[1]
	l, err := strconv.Atoi(seg)
	return l, err == nil
}

// match reports whether name matches pattern, where a "*" segment of the
// pattern matches any one dot-separated segment.
func match(pattern, name string) bool {
	ps, ns := strings.Split(pattern, "."), strings.Split(name, ".")
	if len(ps) != len(ns) {
		return false
	}
	for i := range ps {
		if ps[i] != "*" && ps[i] != ns[i] {
			return false
		}
	}
	return true
}

// Func is called at a hook point with the live value. Writing into x changes
// the value the rest of the pass uses.
type Func func(name string, x *tensor.Dense) error

type entry struct {
	pattern string
	fn      Func
}

type stream struct {
	layer int // -1: every layer
	c     AttnConsumer
}

// Set holds the functions and attention consumers registered for one or
// more forward passes. It is safe to register before a pass and to read it
// from the pass's goroutines; do not register while a pass runs.
type Set struct {
	entries []entry
	streams []stream
}

// Add registers fn at every point matching pattern ("*" matches a layer
// index). Functions run in the order they were added.
func (s *Set) Add(pattern string, fn Func) {
	s.entries = append(s.entries, entry{pattern, fn})
}

// Stream registers c for the attention rows of layer (or every layer when
// layer < 0).
func (s *Set) Stream(layer int, c AttnConsumer) {
	s.streams = append(s.streams, stream{layer, c})
}

// Has reports whether any function is registered at name. The pass calls it
// to skip work nobody asked for (the T×T pattern, the logits).
func (s *Set) Has(name string) bool {
	if s == nil {
		return false
	}
	for _, e := range s.entries {
		if match(e.pattern, name) {
			return true
		}
	}
	return false
}

// Consumers returns the attention consumers registered for layer.
func (s *Set) Consumers(layer int) []AttnConsumer {
	if s == nil {
		return nil
	}
	var cs []AttnConsumer
	for _, st := range s.streams {
		if st.layer < 0 || st.layer == layer {
			cs = append(cs, st.c)
		}
	}
	return cs
}

// Run calls the functions registered at name on data viewed with shape.
// The view shares data's memory.
func (s *Set) Run(name string, data []float32, shape ...int) error {
	if !s.Has(name) {
		return nil
	}
	x := tensor.New(tensor.WithShape(shape...), tensor.WithBacking(data))
	for _, e := range s.entries {
		if match(e.pattern, name) {
			if err := e.fn(name, x); err != nil {
				return fmt.Errorf("hook %s: %w", name, err)
			}
		}
	}
	return nil
}

// Capture records copies of the values at the points it was registered for.
type Capture struct {
	mu     sync.Mutex
	values map[string]*tensor.Dense
}

// Capture registers a capture of every point matching each pattern and
// returns it; after the pass, Get returns the captured values.
func (s *Set) Capture(patterns ...string) *Capture {
	c := &Capture{values: map[string]*tensor.Dense{}}
	for _, p := range patterns {
		s.Add(p, c.record)
	}
	return c
}

func (c *Capture) record(name string, x *tensor.Dense) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.values[name] = x.Clone().(*tensor.Dense)
	return nil
}

// Get returns the captured value at name, or nil.
func (c *Capture) Get(name string) *tensor.Dense {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.values[name]
}

// Names returns the captured names in pass order of layers, then name.
func (c *Capture) Names() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	names := make([]string, 0, len(c.values))
	for n := range c.values {
		names = append(names, n)
	}
	sort.Slice(names, func(i, j int) bool { return lessName(names[i], names[j]) })
	return names
}

// lessName orders names by layer number numerically, then lexically.
func lessName(a, b string) bool {
	la, oka := layerOf(a)
	lb, okb := layerOf(b)
	if oka && okb && la != lb {
		return la < lb
	}
	if oka != okb {
		return !oka // embeddings first
	}
	return a < b
}
