package model

import (
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
)

// A family is one architecture's entry in the registry (families): how its
// config.json is recognised and parsed, how its tensors are loaded (or made
// up, for Generate), what config.json describes a configuration, and which
// small configuration `probe generate` starts from. Everything outside a
// family's own file that depends on the family goes through this table; a
// family whose forward pass is not the decoder pass of forward.go keeps its
// own state in Model.ext and makes it an ownPass.
type family struct {
	arch Arch
	// modelTypes says what config.json holds for this family, for messages
	// and the documentation.
	modelTypes string
	// detect reports whether a config.json is this family's.
	detect func(cf *configFile) bool
	// parse fills c, whose Arch is already set, from config.json.
	parse func(c *Config, cf *configFile) error
	// load reads the family's tensors into m through ld (or, when ld
	// generates, makes them up under their checkpoint names).
	load func(m *Model, ld *loader)
	// hfConfig returns the config.json fields that describe c.
	hfConfig func(c *Config) map[string]any
	// small returns the config.json fields of a small model of this family
	// (SmallConfig), or an error naming the size that does not fit.
	small func(s Size) (map[string]any, error)
	// skips are the name prefixes of stored tensors that are not part of
	// the text model and are skipped by design (a vision-language
	// wrapper's vision tower); Model.Skipped lists them.
	skips []string
	// prefix is the tensor-name prefix Generate checks for (see
	// generator.has).
	prefix string
	// generated, when set, moves the family's own parameters of a generated
	// model into their working ranges (after the generic initialisation);
	// Generate then draws from the filter families' random stream.
	generated func(rng *rand.Rand, c *Config) func(name string, x []float32)
	// offsetNorms says that the family's norms scale by 1 + w (Gemma): its
	// stored norm weights w are neutral at 0, and Generate draws them near
	// 0 instead of near 1.
	offsetNorms bool
	// positions describes how the family encodes positions, for `probe
	// inspect` (Config.Positions); "": the rotary embedding of c.RoPE.
	positions string
	// learnedPositions says that positions come from a learned table of
	// MaxPos rows (GPT-2), so no sequence may be longer, even with
	// AllowExtrapolation (Config.LearnedPositions).
	learnedPositions bool
	// complexValues says that the attention streams complex values:
	// hooks.AttnTile.DHead is 2·DHead reals per head (Config.ValueDim).
	complexValues bool
	// headParams, for a family with learned per-head filter parameters,
	// reads them out as a table (Model.HeadParams, `probe params`).
	headParams func(m *Model) *HeadTable
}

// A HeadTable is a family's learned per-head filter parameters
// (Model.HeadParams): named columns and one row per (layer, head), layer
// major.
type HeadTable struct {
	// Title says what the rows are ("RFA filter parameters"), Shape what
	// the heads are ("d = 16 complex dims per head").
	Title, Shape string
	// Notes explain the columns, a line each.
	Notes   []string
	Columns []HeadColumn
	// Rows hold a value per column: an int, a float64 (NaN where the head
	// has none), a string or a bool.
	Rows [][]any
}

// A HeadColumn names a column of a HeadTable: Name is its key in JSON and
// Label its header in text; an empty one leaves the column out of that
// form (a value only a program needs, or one the text shows only where
// it applies).
type HeadColumn struct{ Name, Label string }

// absRange returns the smallest and largest |x| of xs (0, 0 for none): the
// band of a per-channel parameter over a head's channels.
func absRange(xs []float64) (lo, hi float64) {
	for i, x := range xs {
		x = math.Abs(x)
		if i == 0 || x < lo {
			lo = x
		}
		hi = max(hi, x)
	}
	return lo, hi
}

// HeadParams returns the model's learned per-head filter parameters, or
// an error naming the families that have them.
func (m *Model) HeadParams() (*HeadTable, error) {
	f, err := familyOf(m.Arch)
	if err != nil {
		return nil, fmt.Errorf("model: %w", err)
	}
	if f.headParams == nil {
		var have []string
		for _, f := range families {
			if f.headParams != nil {
				have = append(have, string(f.arch))
			}
		}
		return nil, fmt.Errorf("model: %s is a %s checkpoint, which has no learned per-head filter parameters to read out (families that have them: %s)",
			m.Dir, m.Arch, strings.Join(have, ", "))
	}
	return f.headParams(m), nil
}

// families lists every supported architecture in detection order: the
// first whose detect accepts a config.json parses it. The families that
// are recognised by their own fields come before the model_type ones
// (Qiu et al.'s gated checkpoints say qwen3 or qwen2).
var families = []*family{
	rfaFamily, afaFamily, rtFamily, bftFamily, selropeFamily, rwkv7Family,
	gatedFamily, qwen3Family, qwen2Family, llamaFamily, gpt2Family,
	qwen35Family,
	gemma2Family, gemma3Family,
	olmo2Family, olmo3Family, phi3Family,
	mixtralFamily, qwen3MoEFamily, olmoeFamily, gptOssFamily,
	smollm3Family, graniteFamily, gemmaFamily, gptNeoXFamily,
	mamba2Family, falconH1Family, gemma4Family,
}

// configFile is a config.json as every family's detect and parse see it:
// the bytes, the top-level fields, and the common Hugging Face fields.
type configFile struct {
	data []byte
	raw  map[string]json.RawMessage
	r    rawConfig
}

// modelType is config.json's model_type ("" when absent or not a string).
func (cf *configFile) modelType() string { return cf.r.ModelType }

// dtype is config.json's torch_dtype, or dtype as transformers 5 writes it.
func (cf *configFile) dtype() string {
	if cf.r.TorchDType != "" {
		return cf.r.TorchDType
	}
	var s string
	if raw, ok := cf.raw["dtype"]; ok {
		_ = json.Unmarshal(raw, &s)
	}
	return s
}

// textConfig returns the text_config object of a vision-language
// config.json as a config.json of its own, whose model_type, when given,
// must be want.
func (cf *configFile) textConfig(want string) (*configFile, error) {
	data, ok := cf.raw["text_config"]
	if !ok || string(data) == "null" {
		return nil, fmt.Errorf("field is missing (model_type %s keeps its text model's fields there)", cf.modelType())
	}
	tc := &configFile{data: data}
	if err := json.Unmarshal(data, &tc.raw); err != nil {
		return nil, fmt.Errorf("want an object: %v", err)
	}
	if err := json.Unmarshal(data, &tc.r); err != nil {
		return nil, err
	}
	if mt := tc.modelType(); mt != "" && mt != want {
		return nil, fmt.Errorf("model_type %q, want %s", mt, want)
	}
	return tc, nil
}

// familyOf returns the registry entry of arch.
func familyOf(arch Arch) (*family, error) {
	for _, f := range families {
		if f.arch == arch {
			return f, nil
		}
	}
	return nil, fmt.Errorf("unknown architecture %q (known: %s)", arch, strings.Join(Archs(), ", "))
}

// Archs lists the architectures of the registry, in detection order (the
// values of `probe generate --arch`).
func Archs() []string {
	names := make([]string, len(families))
	for i, f := range families {
		names[i] = string(f.arch)
	}
	return names
}

// SmallArchs lists the architectures SmallConfig and Generate can make
// (every family with a config.json writer; RFA checkpoints come from its
// authors' code), in registry order.
func SmallArchs() []Arch {
	var as []Arch
	for _, f := range families {
		if f.small != nil {
			as = append(as, f.arch)
		}
	}
	return as
}

// SkippedNames returns the names among the stored tensor names that a
// model of configuration c skips by design (what Load puts in
// Model.Skipped), without loading anything.
func SkippedNames(c *Config, names []string) []string {
	f, err := familyOf(c.Arch)
	if err != nil {
		return nil
	}
	return withPrefix(names, f.skips)
}

// withPrefix returns the names that start with one of prefixes, sorted.
func withPrefix(names, prefixes []string) []string {
	var out []string
	for _, n := range names {
		for _, p := range prefixes {
			if strings.HasPrefix(n, p) {
				out = append(out, n)
				break
			}
		}
	}
	sort.Strings(out)
	return out
}

// supportedModelTypes lists what config.json may say, family by family,
// for the error on an unknown model_type.
func supportedModelTypes() string {
	var s []string
	for _, f := range families {
		s = append(s, f.modelTypes)
	}
	return strings.Join(s, "; ")
}

// Size is the shape of a small random model (SmallConfig). KVHeads is used
// by the families with grouped-query attention; the others need it equal
// to Heads.
type Size struct {
	Layers, DModel, Heads, KVHeads, Vocab, MaxPos int
}

// SmallConfig returns a small configuration of arch for demos and tests
// (each family's small says which widths it derives from s), exactly as a
// reader of its written config.json gets it.
func SmallConfig(arch Arch, s Size) (Config, error) {
	f, err := familyOf(arch)
	if err != nil {
		return Config{}, err
	}
	if s.Layers <= 0 || s.DModel <= 0 || s.Heads <= 0 || s.KVHeads <= 0 || s.Vocab <= 0 || s.MaxPos <= 0 {
		return Config{}, fmt.Errorf("%s: layers %d, d_model %d, heads %d, kv heads %d, vocabulary %d and max positions %d must all be positive",
			arch, s.Layers, s.DModel, s.Heads, s.KVHeads, s.Vocab, s.MaxPos)
	}
	fields, err := f.small(s)
	if err != nil {
		return Config{}, fmt.Errorf("%s: %w", arch, err)
	}
	return roundTrip(fields)
}

// HFConfig returns the config.json fields that describe c to its family's
// reference code (and to ParseConfig).
func (c *Config) HFConfig() map[string]any {
	f, err := familyOf(c.Arch)
	if err != nil {
		return nil
	}
	return f.hfConfig(c)
}

// Positions describes how a model of configuration c encodes positions (a
// family's own scheme, or the rotary embedding with its θ, scaling and, on
// sliding-window layers, its local θ).
func (c *Config) Positions() string {
	if f, err := familyOf(c.Arch); err == nil && f.positions != "" {
		return f.positions
	}
	s := fmt.Sprintf("rotate-half, theta %g, scaling %s", c.RoPE.Theta, c.RoPE.Type)
	if c.RoPE.Type != "default" {
		s += fmt.Sprintf(" (factor %g)", c.RoPE.Factor)
	}
	if lr := c.LocalRoPE; lr != nil {
		s += fmt.Sprintf(" on full-attention layers; theta %g, scaling %s on sliding layers", lr.Theta, lr.Type)
	}
	if c.RoPE.Dims > 0 {
		s += fmt.Sprintf("; the first %d of %d dimensions of each head rotated", c.RoPE.Dims, c.DHead)
	}
	var nope []string
	for l := range c.NoRoPE {
		if c.NoRoPE[l] {
			nope = append(nope, fmt.Sprint(l))
		}
	}
	if len(nope) > 0 {
		s += "; no RoPE (NoPE) in layers " + strings.Join(nope, ", ")
	}
	return s
}

// LearnedPositions reports whether the model reads positions from a learned
// table of MaxPos rows (GPT-2): then no sequence may be longer than MaxPos,
// even with extrapolation allowed.
func (c *Config) LearnedPositions() bool {
	f, err := familyOf(c.Arch)
	return err == nil && f.learnedPositions
}

// ValueDim is the number of reals per head in the value vectors that the
// attention streams to hooks.AttnConsumer (hooks.AttnTile.DHead): DHead,
// or 2·DHead for a family whose values are complex (RFA).
func (c *Config) ValueDim() int {
	if f, err := familyOf(c.Arch); err == nil && f.complexValues {
		return 2 * c.DHead
	}
	return c.DHead
}

// LayerValueDim is the value width per head of layer l's attention: the
// full-attention layers of a model with GlobalDHead (Gemma 4) have heads
// of that width, every other layer ValueDim.
func (c *Config) LayerValueDim(l int) int {
	if c.GlobalDHead > 0 && c.layerWindow(l) == 0 {
		return c.GlobalDHead
	}
	return c.ValueDim()
}

// LayerValueDims returns every layer's LayerValueDim when they differ,
// nil when every layer's heads are ValueDim wide.
func (c *Config) LayerValueDims() []int {
	w := make([]int, c.Layers)
	for l := range w {
		w[l] = c.LayerValueDim(l)
	}
	if len(w) == 0 || slices.Min(w) == slices.Max(w) {
		return nil
	}
	return w
}

// roundTrip returns the configuration a reader of fields as config.json
// gets.
func roundTrip(fields map[string]any) (Config, error) {
	data, err := json.Marshal(fields)
	if err != nil {
		return Config{}, err
	}
	c, err := ParseConfig(data)
	if err != nil {
		return Config{}, err
	}
	return *c, nil
}

// ownPass is implemented by the state (Model.ext) of a family whose
// forward pass is its own; the other families run the decoder pass of
// forward.go.
type ownPass interface {
	forward(m *Model, ids [][]int, opt Options) (*Output, error)
}
