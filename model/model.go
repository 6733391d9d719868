// Package model loads Hugging Face checkpoints (config.json plus safetensors
// or pytorch_model.bin) and runs forward passes in which every intermediate
// is a named hook point (package hooks).
//
// All computation is float32 with float64 accumulation for long sums (norms,
// softmax normalizers), except the matrix products of a pass in bf16
// arithmetic (Compute). The weight matrices stay in their stored dtype (F32,
// BF16 or F16, see Weight), memory-mapped from the checkpoint, and are
// widened inside the matrix products; small vectors (norms, biases) are
// widened to float32 on load.
package model

import (
	"errors"
	"fmt"
	"math"
	"sort"
	"strings"

	"github.com/filterlens/probe/hooks"
)

// Layer holds one transformer block's weights: the matrices [out, in]
// row-major (nn.Linear layout) in their stored dtype (Weight; the zero
// Weight is absent), each followed by its bias, and the norm weights. Nil
// biases and norms are absent in the architecture.
type Layer struct {
	Norm1W, Norm1B []float32 // pre-attention norm (B only for LayerNorm)
	Wq             Weight    // [H·dh, D]
	Bq             []float32 // [H·dh]
	Wk             Weight    // [KV·dh, D]
	Bk             []float32 // [KV·dh]
	Wv             Weight    // [KV·dh, D]
	Bv             []float32 // [KV·dh]
	Wg             Weight    // output-gate logits [H·g, D], g = 1 or dh (gated models)
	Bg             []float32 // [H·g]
	QNorm, KNorm   []float32 // per-head RMSNorm weights [dh] (QK-norm)
	Wo             Weight    // [D, H·dh]
	Bo             []float32 // [D]
	Norm2W, Norm2B []float32 // pre-MLP norm
	WGate          Weight    // SwiGLU gate projection [F, D] (absent for GPT-2)
	BGate          []float32 // [F]
	WUp            Weight    // [F, D]
	BUp            []float32 // [F]
	WDown          Weight    // [D, F]
	BDown          []float32 // [D]

	// mixer, when set, replaces the layer's softmax attention (the fields
	// from Wq to Wo are then unused; see tokenMixer).
	mixer tokenMixer
	// beside, when set, is a second token mixer that runs beside the
	// layer's softmax attention on the same normalized input; the token
	// mixer's output is attention's plus beside's (Falcon-H1's Mamba-2).
	beside tokenMixer
	// ffn, when set, replaces the dense MLP (the fields from WGate to
	// BDown are then unused; see channelMixer).
	ffn channelMixer

	// Sinks are the learned sink logits of the query heads ([H]; nil:
	// none): gpt-oss's extra softmax column per head, dropped after the
	// softmax (attnArgs.sinks).
	Sinks []float32

	// PostNorm1W and PostNorm2W are the RMSNorm weights applied to the
	// attention and MLP outputs before the residual adds (Gemma, OLMo 2;
	// nil: none). Norm1W and Norm2W may be nil too: no pre-norm.
	PostNorm1W, PostNorm2W []float32

	// Per-layer attention shape and value path (Gemma 4; zero values: the
	// Config's). DHead and KVHeads override Config.DHead and KVHeads for
	// this layer. VFromK takes the value from the raw k projection (no
	// Wv: Gemma 4's attention_k_eq_v), before KNorm and RoPE. VNorm is a
	// per-head RMSNorm weight [dh] on v (Gemma 4: ones, a weightless
	// norm). KVFrom = s + 1 makes the layer reuse layer s's k (after
	// KNorm and RoPE) and v instead of projecting its own (0: its own).
	DHead, KVHeads int
	VFromK         bool
	VNorm          []float32
	KVFrom         int

	// ffnBeside, when set, is a channel mixer run beside the dense MLP on the
	// same residual stream x (it applies its own norms): the channel
	// output is PostNorm2W(PostNormMLPW(mlp(Norm2W(x))) + ffnBeside(x))
	// (Gemma 4's experts beside its MLP).
	ffnBeside    channelMixer
	PostNormMLPW []float32

	// Scale multiplies the residual stream after the block (Gemma 4's
	// layer_scalar; 0: none).
	Scale float32
}

// Model is a loaded checkpoint ready to run.
type Model struct {
	Config
	Embed    Weight    // [V, D]
	PosEmbed []float32 // [MaxPos, D] (GPT-2)
	Layers   []Layer
	FinalW   []float32
	FinalB   []float32
	Head     Weight // [V, D]; the same storage as Embed when tied
	// EmbedNormW and EmbedNormB are a LayerNorm of the embeddings before
	// block 0 (RWKV's ln0), applied after hook_embed; nil: none.
	EmbedNormW, EmbedNormB []float32

	Dir        string
	Format     string   // checkpoint format (see checkpoint.Checkpoint.Format)
	Files      []string // files the weights came from
	DTypes     []string // stored dtypes of the weights
	Parameters int64    // stored parameter count (tied head counted once)
	// Compute is LoadOptions.Compute: the arithmetic of passes whose
	// Options.Compute is empty; with bf16, Load rounded the F32 and F16
	// weight matrices to bfloat16.
	Compute Compute
	// WeightBytes is the memory the parameters take as the model holds
	// them: 2 bytes per BF16 or F16 value kept as stored (the matrices of
	// the families that keep them, see Weight), 4 per value held as
	// float32 (norms, biases, F32 checkpoints, the research families'
	// widened weights); the tied head counted once.
	WeightBytes int64
	// Skipped lists the stored tensors the text model does not use and
	// the family skips by design (a vision-language wrapper's vision tower,
	// a multi-token-prediction head, Gemma 4's k and v projections of a
	// KV-shared layer), sorted; they are not counted in Parameters.
	Skipped []string
	// NoMemoryCheck runs passes without first comparing their estimated
	// memory (PassBytes) with the memory available; by default a pass that
	// cannot fit is refused before it allocates.
	NoMemoryCheck bool

	// points caches HookNames (set by Load and Generate; a copy of the
	// Model shares it).
	points *hookPoints

	// ext is the family's own state beyond the decoder layers (the RFA,
	// BFT, RT and AFA tensors, the Selective-RoPE rotary modules); nil for
	// the plain decoders. See family.go.
	ext any
}

// LoadOptions control Load.
type LoadOptions struct {
	// AllowUnexpected accepts tensors the architecture does not use
	// (they are listed in the error otherwise).
	AllowUnexpected bool
	// Compute is the arithmetic of the model's passes (Model.Compute,
	// Options.Compute): f32 (the default, also for ""), bf16 or bf16-proj.
	// With bf16 and bf16-proj, Load rounds the F32 and F16 weight matrices (Weight) to bfloat16
	// once, here: they are
	// then held as BF16 bits on the heap, 2 bytes per value, and the
	// stored float32 values are not read again (float32 passes of such a
	// model multiply the rounded weights). BF16 weights stay as mapped.
	// Norms and biases stay float32. The default, f32, keeps the weights
	// as stored.
	Compute Compute
	// NoMemoryCheck sets Model.NoMemoryCheck.
	NoMemoryCheck bool
}

// Load reads config.json and the weights of a checkpoint directory, or a
// GGUF file (dir names it, or a folder holding one and no config.json):
// its config from the metadata (GGUFConfig), its tensors one by one under
// their Hugging Face names (ggufSource), quantized matrices kept in their
// blocks (Weight).
func Load(dir string, opt LoadOptions) (*Model, error) {
	cfg, err := LoadConfig(dir)
	if err != nil {
		return nil, err
	}
	ck, err := openTensors(dir)
	if err != nil {
		return nil, err
	}
	defer ck.Close()
	m := &Model{Config: *cfg, Dir: dir, Format: ck.Format(), Files: ck.Files(), points: &hookPoints{}}
	ld := newLoader(ck, dir)
	ld.bf16 = opt.Compute.BF16Products()
	f, err := familyOf(cfg.Arch)
	if err != nil {
		return nil, fmt.Errorf("model: %s: %w", dir, err)
	}
	ld.guard(func() { f.load(m, ld) })
	m.Skipped = append(m.Skipped, ld.skip(f.skips)...) // after those the family's load skipped
	sort.Strings(m.Skipped)
	if err := ld.finish(opt.AllowUnexpected); err != nil {
		return nil, err
	}
	m.DTypes, m.Parameters, m.WeightBytes = ld.dtypes(), ld.params, ld.bytes
	if err := m.checkCompute(opt.Compute); err != nil {
		return nil, err
	}
	m.Compute, m.NoMemoryCheck = opt.Compute, opt.NoMemoryCheck
	return m, nil
}

// loader reads named tensors, checks their shapes, and remembers which
// stored tensors were used so that missing and unexpected ones can be
// reported together by name.
type loader struct {
	ck      tensorSource
	gen     *generator // when set, tensors are made up instead of read (see Generate)
	dir     string
	used    map[string]bool
	missing []string
	errs    []string
	types   map[string]bool
	params  int64
	bytes   int64 // WeightBytes of what was read
	// stand is the number of zero elements handed out so far in place of
	// tensors that are missing, misshapen or unreadable (see standIn).
	stand int
	// stopped is set when standIn stopped the loading: the tensors not
	// reached are then not reported as unexpected.
	stopped bool
	// bf16: weight rounds F32 and F16 matrices to bfloat16
	// (LoadOptions.Compute bf16).
	bf16 bool
}

// maxStandIn bounds the zero elements a loader hands out in place of
// tensors it could not read (so that loading goes on and every problem is
// reported at once): config.json alone must not make Load allocate more.
const maxStandIn = 1 << 22

// errStopLoading is what standIn panics with when the stand-ins would
// exceed maxStandIn; guard recovers it.
var errStopLoading = errors.New("model: loading stopped")

// standIn returns zeros of the given shape in place of tensor name, which
// could not be used. Past maxStandIn elements in all it records why and
// stops the loading (panic recovered by guard), since config.json then
// claims far more than the checkpoint holds.
func (ld *loader) standIn(name string, shape []int) []float32 {
	n := 1
	for _, d := range shape {
		if d < 0 || (d > 0 && n > (maxStandIn-ld.stand)/d) {
			ld.errs = append(ld.errs, fmt.Sprintf("stopped checking at tensor %q: config.json asks for shape %v, too large to stand in for a tensor that is missing or does not match (limit %d elements)",
				name, shape, maxStandIn))
			panic(errStopLoading)
		}
		n *= d
	}
	ld.stand += n
	return make([]float32, n)
}

// guard runs a family's loader, turning the stop of standIn into the
// errors finish reports.
func (ld *loader) guard(load func()) {
	defer func() {
		if r := recover(); r != nil {
			if r != errStopLoading {
				panic(r)
			}
			ld.stopped = true
		}
	}()
	load()
}

func newLoader(ck tensorSource, dir string) *loader {
	return &loader{ck: ck, dir: dir, used: map[string]bool{}, types: map[string]bool{}}
}

func (ld *loader) has(name string) bool {
	if ld.gen != nil {
		return ld.gen.has(name)
	}
	_, ok := ld.ck.Info(name)
	return ok
}

// get returns the tensor name as float32, checking that its shape is shape.
// Problems are collected and reported by finish.
func (ld *loader) get(name string, shape ...int) []float32 {
	if ld.gen != nil {
		return ld.gen.make(name, shape)
	}
	info, ok := ld.ck.Info(name)
	if !ok {
		ld.missing = append(ld.missing, name)
		return ld.standIn(name, shape)
	}
	ld.used[name] = true
	if !equalShape(info.Shape, shape) {
		ld.errs = append(ld.errs, fmt.Sprintf("tensor %q: expected shape %v from config.json, found %v", name, shape, info.Shape))
		return ld.standIn(name, shape)
	}
	data, err := ld.ck.Float32View(name) // float32 weights: views of the mapped file
	if err != nil {
		ld.errs = append(ld.errs, err.Error())
		return ld.standIn(name, shape)
	}
	ld.types[info.DType] = true
	ld.params += int64(len(data))
	ld.bytes += 4 * int64(len(data))
	return data
}

// weight returns the matrix name [rows, cols] in its stored dtype: BF16
// and F16 tensors as their bit patterns, F32 ones as float32 (both views of
// the mapped file where it can, see checkpoint.Uint16View and
// Float32View); other dtypes are widened to float32. Problems are
// collected as get collects them (a float32 stand-in of zeros).
func (ld *loader) weight(name string, rows, cols int) Weight {
	return ld.stacked(name, rows, cols)
}

// stacked is weight for a tensor of any rank ≥ 2, held as the matrix of
// its rows: shape [a, …, b, cols] gives a Weight of a·…·b rows of cols
// values (the experts' matrices a mixture of experts stores as one [E,
// out, in] tensor, moe.go).
func (ld *loader) stacked(name string, shape ...int) Weight {
	cols := shape[len(shape)-1]
	rows := prod(shape[:len(shape)-1])
	if ld.gen != nil {
		return ld.gen.weight(name, shape...)
	}
	info, ok := ld.ck.Info(name)
	if q, ok := ld.ck.(*ggufSource); ok && equalShape(info.Shape, shape) && isGGUFQuantized(info.DType) {
		return ld.quantized(q, name, info, rows, cols)
	}
	if !ok || !equalShape(info.Shape, shape) || (info.DType != "BF16" && info.DType != "F16") {
		w := f32Weight(ld.get(name, shape...), cols)
		if ld.bf16 && ok {
			w = w.roundedBF16()
			ld.bytes -= 2 * int64(len(w.Bits)) // held in 2 bytes, not get's 4
		} else if ok {
			w.release = ld.ck.Releaser(name)
		}
		return w
	}
	ld.used[name] = true
	bits, err := ld.ck.Uint16View(name)
	if err != nil {
		ld.errs = append(ld.errs, err.Error())
		return f32Weight(ld.standIn(name, shape), cols)
	}
	ld.types[info.DType] = true
	ld.params += int64(len(bits))
	ld.bytes += 2 * int64(len(bits))
	w := Weight{Rows: rows, Cols: cols, DType: info.DType, Bits: bits}
	if ld.bf16 {
		w = w.roundedBF16() // an F16 weight becomes a copy on the heap
	}
	if w.DType == info.DType {
		// still the mapping's pages: the embedding's can leave the
		// resident set after the lookup, in every arithmetic
		w.release = ld.ck.Releaser(name)
	}
	return w
}

// weight32 is weight widened to float32 on load: the research families
// (RFA, BFT, RT, AFA, Selective RoPE), small models whose loaders
// transform their weights.
func (ld *loader) weight32(name string, rows, cols int) Weight {
	return f32Weight(ld.get(name, rows, cols), cols)
}

// skip marks the stored tensors whose names start with one of prefixes
// (family.skips) as expected but unused, and returns their names (sorted).
func (ld *loader) skip(prefixes []string) []string {
	if ld.gen != nil {
		return nil
	}
	names := withPrefix(ld.ck.Names(), prefixes)
	for _, n := range names {
		ld.used[n] = true
	}
	return names
}

// ignore marks stored buffers the pass recomputes (rotary inv_freq, GPT-2's
// causal mask) as expected.
func (ld *loader) ignore(suffixes ...string) {
	if ld.gen != nil {
		return
	}
	for _, n := range ld.ck.Names() {
		for _, s := range suffixes {
			if strings.HasSuffix(n, s) {
				ld.used[n] = true
			}
		}
	}
}

func (ld *loader) finish(allowUnexpected bool) error {
	var unexpected []string
	for _, n := range ld.ck.Names() {
		if !ld.used[n] {
			unexpected = append(unexpected, n)
		}
	}
	var msg []string
	if len(ld.missing) > 0 {
		msg = append(msg, fmt.Sprintf("missing tensors: %s", list(ld.missing)))
	}
	msg = append(msg, ld.errs...)
	if len(unexpected) > 0 && !allowUnexpected && !ld.stopped {
		msg = append(msg, fmt.Sprintf("unexpected tensors (not used by this architecture; --allow-unexpected to ignore): %s", list(unexpected)))
	}
	if len(msg) > 0 {
		return fmt.Errorf("model: %s: %s", ld.dir, strings.Join(msg, "; "))
	}
	return nil
}

func (ld *loader) dtypes() []string {
	var ts []string
	for t := range ld.types {
		ts = append(ts, t)
	}
	sort.Strings(ts)
	return ts
}

func list(names []string) string {
	const max = 12
	if len(names) > max {
		return strings.Join(names[:max], ", ") + fmt.Sprintf(" and %d more", len(names)-max)
	}
	return strings.Join(names, ", ")
}

func prod(shape []int) int {
	n := 1
	for _, s := range shape {
		n *= s
	}
	return n
}

func equalShape(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// Options control a forward pass.
type Options struct {
	Hooks *hooks.Set
	// Logits requests the [B, T, V] logits in Output (they are also
	// computed when the "logits" hook is registered).
	Logits bool
	// LogitRows, when set, receives the logits in blocks of consecutive
	// rows of [B·T, V] (row b·T + t), in order: first is the block's first
	// row and z its [rows, V] logits, valid only during the call. Unless
	// Logits is set or "logits" is hooked, the pass then keeps only one
	// block (a few hundred rows) of logits at a time, not B·T·V.
	LogitRows func(first int, z []float32)
	// AllowExtrapolation runs sequences longer than max_position_embeddings
	// (refused otherwise; GPT-2's learned positions cannot extrapolate).
	AllowExtrapolation bool
	// TileRows is the number of query rows per attention tile (default 64).
	TileRows int
	// Threads is the number of attention workers (default GOMAXPROCS).
	Threads int
	// Compute is the arithmetic of the pass's matrix products, f32 or
	// bf16 (see Compute); "" is the model's (LoadOptions.Compute, default
	// f32).
	Compute Compute
	// SSMScan selects how Mamba-2 mixers (mamba2, Falcon-H1) run their
	// scan: 0, the default, the chunked scan in chunks of the mixer's own
	// setting (64 rows unless a test set ssmMixer.Scan); c > 0 chunks of c
	// rows; −1 (any negative value) the step-by-step recurrence. All give
	// the same values to float32 rounding (TestSSMScanOption); the choice
	// is one of speed (probe bench --modes ssm-recurrent).
	SSMScan int
}

// Output holds what a forward pass returns beyond its hooks.
type Output struct {
	Batch, T int
	Logits   []float32 // [B, T, V] when requested
}

// checkIDs validates a batch of token ids.
func (m *Model) checkIDs(ids [][]int, opt Options) (int, error) {
	if len(ids) == 0 || len(ids[0]) == 0 {
		return 0, fmt.Errorf("model: empty input (no tokens)")
	}
	T := len(ids[0])
	for b, seq := range ids {
		if len(seq) != T {
			return 0, fmt.Errorf("model: batch sequences differ in length: sequence 0 has %d tokens, sequence %d has %d", T, b, len(seq))
		}
		for t, id := range seq {
			if id < 0 || id >= m.Vocab {
				return 0, fmt.Errorf("model: token id %d at sequence %d position %d is outside the vocabulary [0, %d)", id, b, t, m.Vocab)
			}
		}
	}
	if T > m.MaxPos && (m.LearnedPositions() || !opt.AllowExtrapolation) {
		if m.LearnedPositions() {
			return 0, fmt.Errorf("model: sequence of %d tokens exceeds the %d learned positions of this %s model", T, m.MaxPos, m.Arch)
		}
		return 0, fmt.Errorf("model: sequence of %d tokens exceeds max_position_embeddings %d (use --allow-extrapolation to run it anyway)", T, m.MaxPos)
	}
	return T, nil
}

// firstNonFinite returns the index of the first NaN or ±Inf of x, or −1
// (16 lanes where the CPU has them, kern_amd64.go).
var firstNonFinite = firstNonFiniteGo

func firstNonFiniteGo(x []float32) int {
	for i, v := range x {
		if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
			return i
		}
	}
	return -1
}
