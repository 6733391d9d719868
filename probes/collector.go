package probes

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/filterlens/probe/hooks"

	"github.com/filterlens/probe/analysis/results"
	"github.com/filterlens/probe/model"
	"gorgonia.org/tensor"
)

// CollectorOptions configures a Collector. The zero value reproduces the
// paper's App. I diagnostic and the golden diagnostics files.
type CollectorOptions struct {
	// Lambda selects the λobs form and its parameters (default Eq. 6 with
	// ν = 1, σ0² = 1/d_head, no cap). Lambda.Reduction is ignored: the
	// Collector stores all three reductions (MetricLambdaObs,
	// MetricLambdaObsDimMean, MetricLambdaObsHarmonic).
	Lambda LambdaOptions
	// LambdaPrior is the prior precision λ in K = λobs/(λ + λobs). Zero
	// selects the App. I value λ = 1.
	LambdaPrior float64
	// Moments selects how S is computed (default TwoPass; Expanded only
	// for comparison, see MomentsMethod).
	Moments MomentsMethod
	// Kernel selects where the row moments come from: the attention pass's
	// matrix products where the model offers them (MatrixKernel, the
	// default) or a walk over every row (RowKernel). See Kernel.
	Kernel Kernel
	// Reductions selects the reductions over the head dimension stored
	// (default AllReductions; MeanReduction stores (i) only, which lets the
	// attention skip its per-dimension product; see Reductions).
	Reductions Reductions
	// KeepPerDim also keeps the per-dimension S_i and λobs_i for every row
	// (MetricS, MetricLambdaObsDim, layout [B,L,H,T,DHead]): 2·DHead more
	// float32 per cell.
	KeepPerDim bool
	// ContinueOnNonFinite makes ConsumeAttn store a row whose weights or
	// values are NaN/Inf (its metrics then hold NaN/Inf), count it and go
	// on, instead of returning a *NonFiniteError. The first such row is
	// recorded either way (FirstNonFinite).
	ContinueOnNonFinite bool
	// BOSKeys are the key positions whose attention mass is stored as
	// MetricBOSMass (ColumnMass). Nil selects {0}: α[t, 0], the first token
	// of the sequence (notes §F.1.3: with a prepended BOS/<|endoftext|> it is
	// that token, otherwise the first chunk token).
	BOSKeys []int
	// SinkRows selects the rows the diagnostics read on a model with
	// learned attention sinks (gpt-oss; tiles with hooks.AttnTile.Sink):
	// RenormRows (the default) divides each row by its own sum Σα = 1 − σ,
	// RawRows takes the rows as the model returns them (see SinkRows).
	// Rows of a model without sinks are read as they are under both.
	SinkRows SinkRows
	// Sinks says that the model has learned attention sinks
	// (analysis.HasSinks): the Collector then keeps each row's sink mass
	// (MetricSinkMass), one more float32 per cell; without it a tile's Sink
	// still decides SinkRows' reading, but σ is not stored.
	Sinks bool
	// Layers are the layers that have cells, ascending (nil: every layer).
	// The metric slices hold only these layers, in this order; the rows
	// and gates of other layers are ignored and Get reads NaN there.
	// NewModelCollector sets it to a hybrid model's softmax layers, so
	// that its Gated DeltaNet layers hold no cells.
	Layers []int
}

// NonFiniteError reports an attention row whose weights or values contain
// NaN or ±Inf.
type NonFiniteError struct {
	Batch, Layer, Head, Query int
	// Where is "attention weights" when the row's α are not finite, and
	// "values" when α are finite but some value vector entry v_j (j ≤ t) is
	// not.
	Where string
}

// Error names the batch, layer, head and query of the row.
func (e *NonFiniteError) Error() string {
	return fmt.Sprintf("probes: non-finite %s in attention row: layer %d, head %d, query %d (batch %d)",
		e.Where, e.Layer, e.Head, e.Query, e.Batch)
}

// Collector is a hooks.AttnConsumer that computes the BFT diagnostics of
// every streamed attention row and keeps one float32 per metric and
// (batch, layer, head, query) cell, never a T×T matrix.
//
// Every value is computed in float64 and rounded to float32 once, when it
// is stored: the attention weights and values it comes from are float32,
// so a float64 result carries no information beyond ~1e-7 relative. (Only
// results outside float32's range change further: below ~1e-38 they lose
// digits or become 0, above ~3.4e38 ±Inf — in practice the Naive λobs of a
// row whose S is nearly 0.) Readers accumulate in float64 (Get and GetDim
// widen).
//
// Every per-cell metric is a flat slice of length B·L'·H·T with layout
// [B, L', H, T], L' the number of layers with cells (CollectorOptions.Layers;
// L' = L by default): cell (b, l, h, t) is at index Index(b, l, h, t) =
// ((b·L' + s)·H + h)·T + t, s the layer's place among them (s = l by
// default). The per-dimension metrics (KeepPerDim) have layout
// [B, L', H, T, DHead]. Cells that no row has reached hold NaN.
//
// ConsumeAttn may run concurrently for different (batch, head) pairs (and
// different layers): each call writes only its own cells and uses its own
// scratch from a pool, so there is no allocation per row and no lock on the
// hot path. SetGate may run concurrently with ConsumeAttn. Read the results
// after the forward pass has returned.
type Collector struct {
	// B, L, H, T and DHead are the shapes given to NewCollector: batch,
	// layers, query heads, maximum sequence length (queries) and value
	// dimension per head (the widest layer's, for a model whose layers'
	// heads differ in width: LayerDHead).
	B, L, H, T, DHead int

	// Per-cell metrics, layout [B, L', H, T] (L' the layers with cells; see
	// the Metric* constants).
	NEff, NEffEntropy, SumAlpha, SMean []float32
	// LambdaObs and K use reduction FromMean (i); LambdaObsDimMean and
	// KDimMean reduction PerDimMean (ii); LambdaObsHarmonic reduction
	// Harmonic (iii).
	LambdaObs, K, LambdaObsDimMean, KDimMean, LambdaObsHarmonic []float32
	BOSMass, ENorm, Gate                                        []float32
	// SinkMass is σ, the weight of the sink column the softmax dropped
	// (hooks.AttnTile.Sink), as the model computed it whatever SinkRows
	// says (0 for a tile without Sink); nil unless CollectorOptions.Sinks.
	SinkMass []float32

	// Per-dimension metrics, layout [B, L, H, T, DHead]; nil unless
	// CollectorOptions.KeepPerDim.
	S, LambdaObsDim []float32

	opts    CollectorOptions // resolved
	lambdaK float64          // resolved LambdaPrior
	// width and lambda are, per layer, the heads' value width and the
	// λobs options resolved for it (σ₀² = 1/width by default), for a model
	// whose layers differ in head width (NewModelCollector); nil: DHead
	// and opts.Lambda for every layer.
	width  []int
	lambda []LambdaOptions
	slot   []int     // [L]: the layer's place among Layers, −1 for none
	pool   sync.Pool // *scratch

	mu       sync.Mutex
	firstBad *NonFiniteError
	nBad     atomic.Int64
}

// scratch is one goroutine's per-call working memory (len DHead each;
// alpha: a renormalised row, up to T).
type scratch struct {
	e, s, b, lam []float64
	alpha        []float32
}

// NewCollector returns a Collector for batch size b, nLayers layers, nHeads
// query heads, sequences of at most seqLen queries and value dimension dHead
// per head. It allocates 12 float32 per (batch, layer, head, query) cell
// (9 with MeanReduction), one more with Sinks and 2·dHead more with KeepPerDim, all set to NaN,
// for the layers of opts.Layers (all by default).
func NewCollector(b, nLayers, nHeads, seqLen, dHead int, opts CollectorOptions) (*Collector, error) {
	if b <= 0 || nLayers <= 0 || nHeads <= 0 || seqLen <= 0 || dHead <= 0 {
		return nil, fmt.Errorf("probes: NewCollector: shapes must be positive, got B=%d L=%d H=%d T=%d dHead=%d",
			b, nLayers, nHeads, seqLen, dHead)
	}
	if err := opts.Lambda.Validate(); err != nil {
		return nil, err
	}
	if opts.LambdaPrior < 0 || math.IsNaN(opts.LambdaPrior) {
		return nil, fmt.Errorf("probes: CollectorOptions.LambdaPrior = %v, want ≥ 0 (0 selects 1)", opts.LambdaPrior)
	}
	if opts.SinkRows != RenormRows && opts.SinkRows != RawRows {
		return nil, fmt.Errorf("probes: unknown SinkRows %d", int(opts.SinkRows))
	}
	if opts.Moments != TwoPass && opts.Moments != Expanded {
		return nil, fmt.Errorf("probes: unknown MomentsMethod %d", int(opts.Moments))
	}
	if opts.Kernel != MatrixKernel && opts.Kernel != RowKernel {
		return nil, fmt.Errorf("probes: unknown Kernel %d", int(opts.Kernel))
	}
	switch {
	case opts.Reductions != AllReductions && opts.Reductions != MeanReduction:
		return nil, fmt.Errorf("probes: unknown Reductions %d", int(opts.Reductions))
	case opts.Reductions == MeanReduction && opts.KeepPerDim:
		return nil, fmt.Errorf("probes: CollectorOptions.KeepPerDim needs Reductions = %s (per-dimension S), got %s",
			AllReductions, opts.Reductions)
	}
	slot := make([]int, nLayers)
	if opts.Layers == nil {
		for l := range slot {
			slot[l] = l
			opts.Layers = append(opts.Layers, l)
		}
	} else {
		for l := range slot {
			slot[l] = -1
		}
		for i, l := range opts.Layers {
			if l < 0 || l >= nLayers || i > 0 && l <= opts.Layers[i-1] {
				return nil, fmt.Errorf("probes: CollectorOptions.Layers %v: want ascending layers in [0, %d)", opts.Layers, nLayers)
			}
			slot[l] = i
		}
		opts.Layers = slices.Clone(opts.Layers)
	}
	opts.Lambda = opts.Lambda.WithDefaults(dHead)
	if opts.BOSKeys == nil {
		opts.BOSKeys = []int{0}
	} else {
		opts.BOSKeys = append([]int(nil), opts.BOSKeys...)
	}
	c := &Collector{B: b, L: nLayers, H: nHeads, T: seqLen, DHead: dHead, opts: opts, lambdaK: opts.LambdaPrior, slot: slot}
	if c.lambdaK == 0 {
		c.lambdaK = 1
	}
	n := b * len(opts.Layers) * nHeads * seqLen
	for _, m := range c.cellMetrics() {
		*m.x = nanSlice[float32](n)
	}
	if opts.KeepPerDim {
		c.S = nanSlice[float32](n * dHead)
		c.LambdaObsDim = nanSlice[float32](n * dHead)
	}
	c.pool.New = func() any {
		buf := make([]float64, 4*dHead)
		return &scratch{e: buf[:dHead:dHead], s: buf[dHead : 2*dHead : 2*dHead],
			b: buf[2*dHead : 3*dHead : 3*dHead], lam: buf[3*dHead:]}
	}
	return c, nil
}

// NewModelCollector is NewCollector for the softmax attention of a model
// of configuration cfg: its layers and query heads, the value dimension of
// its heads, and, unless opts.Layers is set, cells for its softmax layers
// only (model.Config.SoftmaxLayers: a hybrid model's Gated DeltaNet layers
// stream no attention rows).
//
// A model whose layers' heads differ in width (model.Config.LayerValueDim:
// Gemma 4's global layers) gets a Collector of the widest (DHead) whose
// layers each read their own width (LayerDHead); the per-dimension
// metrics of a narrower layer fill the first of its DHead places per cell
// and leave the rest NaN, and σ₀², when left to its default, is 1/width of
// each layer.
func NewModelCollector(b int, cfg *model.Config, seqLen int, opts CollectorOptions) (*Collector, error) {
	if opts.Layers == nil {
		opts.Layers = cfg.SoftmaxLayers()
	}
	width := cfg.LayerValueDims()
	if width == nil {
		return NewCollector(b, cfg.Layers, cfg.Heads, seqLen, cfg.ValueDim(), opts)
	}
	sigma02 := opts.Lambda.Sigma02
	c, err := NewCollector(b, cfg.Layers, cfg.Heads, seqLen, slices.Max(width), opts)
	if err != nil {
		return nil, err
	}
	c.width, c.lambda = width, make([]LambdaOptions, len(width))
	for l, d := range width {
		o := c.opts.Lambda
		o.Sigma02 = sigma02
		c.lambda[l] = o.WithDefaults(d)
	}
	return c, nil
}

// LayerDHead returns the value width per head of layer l's attention (the
// Collector's DHead unless the model's layers differ: NewModelCollector).
func (c *Collector) LayerDHead(l int) int {
	if c.width != nil {
		return c.width[l]
	}
	return c.DHead
}

// layerLambda returns the λobs options of layer l (σ₀² resolved for its
// width).
func (c *Collector) layerLambda(l int) *LambdaOptions {
	if c.lambda != nil {
		return &c.lambda[l]
	}
	return &c.opts.Lambda
}

// CheckModelMemory is m.CheckMemory for a pass of b sequences of T tokens
// (options opt) with the diagnostics of NewModelCollector(b, &m.Config, T,
// opts), before either allocates: a command checks its longest pass
// first, as the Collector's results alone can exceed the memory.
func CheckModelMemory(m *model.Model, b, T int, opt model.Options, opts CollectorOptions) error {
	col, err := NewModelCollector(b, &m.Config, 1, opts) // its results grow as T
	if err != nil {
		return err
	}
	opt.Hooks = col.Hooks(&m.Config)
	return m.CheckMemory(b, T, opt, col.Bytes()*int64(T))
}

// nanSlice returns n NaNs (cells no row has reached).
func nanSlice[E float32 | float64](n int) []E {
	x := make([]E, n)
	nan := E(math.NaN())
	for i := range x {
		x[i] = nan
	}
	return x
}

// namedMetric is a metric's name and the Collector field that holds it.
type namedMetric struct {
	name string
	x    *[]float32
}

// cellMetrics returns the per-cell metrics the options ask for (see
// Reductions.Stores), in table order.
func (c *Collector) cellMetrics() []namedMetric {
	all := []namedMetric{{results.MetricNEff, &c.NEff}, {results.MetricNEffEntropy, &c.NEffEntropy}, {results.MetricSumAlpha, &c.SumAlpha},
		{results.MetricSMean, &c.SMean}, {results.MetricLambdaObs, &c.LambdaObs}, {results.MetricK, &c.K},
		{results.MetricLambdaObsDimMean, &c.LambdaObsDimMean}, {results.MetricKDimMean, &c.KDimMean},
		{results.MetricLambdaObsHarmonic, &c.LambdaObsHarmonic}, {results.MetricBOSMass, &c.BOSMass}, {results.MetricSinkMass, &c.SinkMass},
		{results.MetricENorm, &c.ENorm}, {results.MetricGate, &c.Gate}}
	return slices.DeleteFunc(all, func(m namedMetric) bool {
		return !c.opts.Reductions.Stores(m.name) || (m.name == results.MetricSinkMass && !c.opts.Sinks)
	})
}

// metrics returns cellMetrics, then the per-dimension metrics when
// KeepPerDim is set.
func (c *Collector) metrics() []namedMetric {
	m := c.cellMetrics()
	if c.opts.KeepPerDim {
		m = append(m, namedMetric{results.MetricS, &c.S}, namedMetric{results.MetricLambdaObsDim, &c.LambdaObsDim})
	}
	return m
}

// Reductions selects which reductions of the per-dimension statistic over
// the head dimension (notes §B.4; Reduction) a Collector stores.
type Reductions int

const (
	// AllReductions (the default) stores (i) FromMean as MetricLambdaObs
	// and MetricK, (ii) PerDimMean as MetricLambdaObsDimMean and
	// MetricKDimMean and (iii) Harmonic as MetricLambdaObsHarmonic. (ii)
	// and (iii) need S per dimension: with MatrixKernel one more float32
	// product per tile with as many columns as α·v (docs/diagnostics.md
	// measures what each costs over the forward pass).
	AllReductions Reductions = iota
	// MeanReduction stores (i) only — the reading the paper's figures use
	// (notes §B.4) — and not the metrics of (ii) and (iii) (Metrics omits
	// them, their slices are nil): with MatrixKernel the attention then
	// forms Σ_i S_i alone (hooks.SumOnlyConsumer), in its softmax pass.
	MeanReduction
)

// String returns the name flags and manifests use: "all" or "mean".
func (r Reductions) String() string {
	switch r {
	case AllReductions:
		return "all"
	case MeanReduction:
		return "mean"
	}
	return fmt.Sprintf("Reductions(%d)", int(r))
}

// Stores reports whether a Collector with these reductions holds the
// per-cell metric name: every one but those of (ii) and (iii) under
// MeanReduction.
func (r Reductions) Stores(name string) bool {
	switch name {
	case results.MetricLambdaObsDimMean, results.MetricKDimMean, results.MetricLambdaObsHarmonic:
		return r == AllReductions
	}
	return true
}

// ParseReductions parses "all" or "mean".
func ParseReductions(s string) (Reductions, bool) {
	for _, r := range []Reductions{AllReductions, MeanReduction} {
		if r.String() == s {
			return r, true
		}
	}
	return 0, false
}

// Options returns the Collector's options with defaults resolved.
func (c *Collector) Options() CollectorOptions { return c.opts }

// Index returns the flat index of cell (b, l, h, t) in the [B, L', H, T]
// metric slices (see Collector). It panics for a layer without cells
// (HasLayer).
func (c *Collector) Index(b, l, h, t int) int {
	s := c.slot[l]
	if s < 0 {
		panic(fmt.Sprintf("probes: Collector.Index: layer %d has no cells (the collector's layers: %v)", l, c.opts.Layers))
	}
	return ((b*len(c.opts.Layers)+s)*c.H+h)*c.T + t
}

// HasLayer reports whether layer l has cells (CollectorOptions.Layers).
func (c *Collector) HasLayer(l int) bool { return l >= 0 && l < c.L && c.slot[l] >= 0 }

// Bytes is the memory of the Collector's results: 4 bytes per stored
// value of its metrics (Metrics).
func (c *Collector) Bytes() int64 {
	var n int64
	for _, m := range c.metrics() {
		n += 4 * int64(len(*m.x))
	}
	return n
}

// Metrics returns the names of the metrics this Collector holds: the
// per-cell ones, then the per-dimension ones when KeepPerDim is set.
func (c *Collector) Metrics() []string {
	var names []string
	for _, m := range c.metrics() {
		names = append(names, m.name)
	}
	return names
}

// Metric returns the flat slice of the named metric (layout [B, L', H, T],
// or [B, L', H, T, DHead] for MetricS and MetricLambdaObsDim, L' the layers
// with cells) and whether the
// Collector holds it. The slice is the Collector's own storage (float32,
// see Collector).
func (c *Collector) Metric(name string) ([]float32, bool) {
	for _, m := range c.metrics() {
		if m.name == name {
			return *m.x, true
		}
	}
	return nil, false
}

// Get returns the named per-cell metric at (b, l, h, t), or an error
// naming the metrics this Collector holds when it holds no per-cell metric
// of that name, or naming the shape when an index is out of range.
func (c *Collector) Get(metric string, b, l, h, t int) (float64, error) {
	x, ok := c.Metric(metric)
	if !ok || metric == results.MetricS || metric == results.MetricLambdaObsDim {
		return math.NaN(), fmt.Errorf("probes: Collector.Get: %q is not a per-cell metric of this Collector (it holds %s)", metric, strings.Join(c.Metrics(), ", "))
	}
	if err := c.checkCell(b, l, h, t); err != nil || !c.HasLayer(l) {
		return math.NaN(), err
	}
	return float64(x[c.Index(b, l, h, t)]), nil
}

// GetDim returns the named per-dimension metric (MetricS or
// MetricLambdaObsDim, kept with KeepPerDim) at (b, l, h, t, i), or an error
// when the metric is not held or an index is out of range.
func (c *Collector) GetDim(metric string, b, l, h, t, i int) (float64, error) {
	x, ok := c.Metric(metric)
	if !ok || (metric != results.MetricS && metric != results.MetricLambdaObsDim) {
		return math.NaN(), fmt.Errorf("probes: Collector.GetDim: %q is not a per-dimension metric of this Collector (per-dimension metrics need KeepPerDim: %s, %s)", metric, results.MetricS, results.MetricLambdaObsDim)
	}
	if err := c.checkCell(b, l, h, t); err != nil {
		return math.NaN(), err
	}
	if i < 0 || i >= c.DHead {
		return math.NaN(), fmt.Errorf("probes: Collector.GetDim: dimension %d out of range [0,%d)", i, c.DHead)
	}
	if !c.HasLayer(l) {
		return math.NaN(), nil
	}
	return float64(x[c.Index(b, l, h, t)*c.DHead+i]), nil
}

func (c *Collector) checkCell(b, l, h, t int) error {
	if b < 0 || b >= c.B || l < 0 || l >= c.L || h < 0 || h >= c.H || t < 0 || t >= c.T {
		return fmt.Errorf("probes: cell (b=%d, l=%d, h=%d, t=%d) out of range [%d,%d,%d,%d]",
			b, l, h, t, c.B, c.L, c.H, c.T)
	}
	return nil
}

// SetGate stores the output gate value g of query t of head h in layer l,
// batch b (the argument order follows the model's [B, T, H] gate layout;
// storage is [B, L', H, T] like every metric). For an element-wise gate pass
// GateMean of the head's d_head gate values, or use SetGateVector. It panics
// if an index is out of range, and ignores a layer without cells.
func (c *Collector) SetGate(b, l, t, h int, g float64) {
	if err := c.checkCell(b, l, h, t); err != nil {
		panic(err)
	}
	if c.HasLayer(l) {
		c.Gate[c.Index(b, l, h, t)] = float32(g)
	}
}

// SetGateVector stores GateMean(g), the mean of an element-wise gate over
// the head dimension, as the gate of (b, l, t, h); see SetGate.
func (c *Collector) SetGateVector(b, l, t, h int, g []float32) {
	c.SetGate(b, l, t, h, GateMean(g))
}

// SetLayerGates stores the gates of one whole layer, given in the model's
// layout [B, T', H, perHead] with T' ≤ T queries: perHead = 1 for a
// head-wise gate, perHead = d_head for an element-wise gate (reduced by
// GateMean). len(gates) must be a multiple of B·H·perHead. The gates of a
// layer without cells are ignored.
func (c *Collector) SetLayerGates(l int, gates []float32, perHead int) error {
	if l < 0 || l >= c.L {
		return fmt.Errorf("probes: SetLayerGates: layer %d out of range [0,%d)", l, c.L)
	}
	if !c.HasLayer(l) {
		return nil
	}
	row := c.H * perHead
	if perHead <= 0 || len(gates)%(c.B*row) != 0 {
		return fmt.Errorf("probes: SetLayerGates: %d gate values do not form [B=%d, T, H=%d, %d]",
			len(gates), c.B, c.H, perHead)
	}
	nt := len(gates) / (c.B * row)
	if nt > c.T {
		return fmt.Errorf("probes: SetLayerGates: %d queries exceed T=%d", nt, c.T)
	}
	for b := 0; b < c.B; b++ {
		for t := 0; t < nt; t++ {
			for h := 0; h < c.H; h++ {
				o := ((b*nt+t)*c.H + h) * perHead
				c.Gate[c.Index(b, l, h, t)] = float32(GateMean(gates[o : o+perHead]))
			}
		}
	}
	return nil
}

// FirstNonFinite returns the first row (in the order the Collector saw
// them) whose weights or values were not finite, and whether there was one.
func (c *Collector) FirstNonFinite() (NonFiniteError, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.firstBad == nil {
		return NonFiniteError{}, false
	}
	return *c.firstBad, true
}

// NonFiniteRows returns how many rows with non-finite weights or values the
// Collector has seen.
func (c *Collector) NonFiniteRows() int64 { return c.nBad.Load() }

// ErrTileShape is wrapped by the errors ConsumeAttn returns for tiles that
// do not fit the Collector or are inconsistent.
var ErrTileShape = errors.New("probes: tile shape")

func (c *Collector) checkTile(a *hooks.AttnTile) error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: batch %d layer %d head %d: %s", ErrTileShape, a.Batch, a.Layer, a.Head,
			fmt.Sprintf(format, args...))
	}
	switch {
	case a.Batch < 0 || a.Batch >= c.B || a.Layer < 0 || a.Layer >= c.L || a.Head < 0 || a.Head >= c.H:
		return bad("(batch, layer, head) outside the collector's [B=%d, L=%d, H=%d]", c.B, c.L, c.H)
	case a.DHead != c.LayerDHead(a.Layer):
		return bad("DHead %d, collector has %d for this layer", a.DHead, c.LayerDHead(a.Layer))
	case a.Q0 < 0 || a.Rows < 0:
		return bad("Q0 %d, Rows %d", a.Q0, a.Rows)
	}
	if a.Rows == 0 {
		return nil
	}
	last := a.Q0 + a.Rows // length of the last row, and the number of keys it reads
	switch {
	case last > c.T:
		return bad("queries [%d,%d) exceed the collector's T=%d", a.Q0, last, c.T)
	case last > a.T:
		return bad("queries [%d,%d) exceed the tile's T=%d key positions", a.Q0, last, a.T)
	case a.Stride < last:
		return bad("Stride %d shorter than the last row (%d weights)", a.Stride, last)
	case len(a.Alpha) < (a.Rows-1)*a.Stride+last:
		return bad("len(Alpha) %d < (Rows−1)·Stride + %d = %d", len(a.Alpha), last, (a.Rows-1)*a.Stride+last)
	case a.VStride < a.DHead:
		return bad("VStride %d < DHead %d", a.VStride, a.DHead)
	case len(a.V) < (last-1)*a.VStride+a.DHead:
		return bad("len(V) %d < %d needed for keys 0..%d", len(a.V), (last-1)*a.VStride+a.DHead, last-1)
	}
	return nil
}

// ConsumeAttn implements hooks.AttnConsumer: it computes and stores the
// diagnostics of every row of the tile. It returns an error wrapping
// ErrTileShape for a tile that does not fit, and a *NonFiniteError at the
// first row whose weights or values are NaN/Inf (that row's metrics are
// stored as computed; later rows of the tile are not processed) unless
// ContinueOnNonFinite is set. A tile of a layer without cells is ignored.
func (c *Collector) ConsumeAttn(a *hooks.AttnTile) error {
	if err := c.checkTile(a); err != nil {
		return err
	}
	if a.Rows == 0 || !c.HasLayer(a.Layer) {
		return nil
	}
	sc := c.pool.Get().(*scratch)
	defer c.pool.Put(sc)
	base := c.Index(a.Batch, a.Layer, a.Head, 0)
	renorm := a.Sink != nil && c.opts.SinkRows == RenormRows
	for r := 0; r < a.Rows; r++ {
		t := a.Q0 + r
		alpha := a.Row(r)
		if renorm {
			sc.alpha = renormRow(sc.alpha, alpha)
			alpha = sc.alpha
		}
		if c.SinkMass != nil {
			c.SinkMass[base+t] = a.SinkMass(r)
		}
		if where := c.row(sc, a.Layer, base+t, alpha, a.V, a.VStride); where != "" {
			e := &NonFiniteError{Batch: a.Batch, Layer: a.Layer, Head: a.Head, Query: t, Where: where}
			c.nBad.Add(1)
			c.mu.Lock()
			if c.firstBad == nil {
				c.firstBad = e
			}
			c.mu.Unlock()
			if !c.opts.ContinueOnNonFinite {
				return e
			}
		}
	}
	return nil
}

// row computes and stores one row's metrics of layer l at flat cell index
// idx. It returns "" for a finite row, else which input was not finite.
func (c *Collector) row(sc *scratch, l, idx int, alpha []float32, V []float32, vStride int) string {
	var s1, s2, h float64
	for _, a := range alpha {
		x := float64(a)
		s1 += x
		s2 += x * x
		if a != 0 {
			h -= x * math.Log(x)
		}
	}
	neff := 1 / s2

	o := c.layerLambda(l)
	w := c.LayerDHead(l)
	e, s, lams := sc.e[:w], sc.s[:w], sc.lam[:w]
	var bm []float64
	if o.Form == Sandwich {
		bm = sc.b[:w]
	}
	MomentsStrided(e, s, bm, alpha, V, vStride, c.opts.Moments)

	var sumS, sumE, e2 float64
	for i, ei := range e {
		sumE += ei
		e2 += ei * ei
		sumS += s[i]
	}
	d := float64(w)
	sMean := sumS / d

	st := RowStats{NEff: neff, SumAlpha: s1, S: s, B: bm}
	stat := o.stat(&st)
	// (i) from the mean statistic.
	lam := o.lambda1(&st, Mean(stat))
	// (ii) per dimension, then mean; (iii) harmonic.
	var sumLam, sumK, sumVar float64
	for i, si := range stat {
		li := o.lambda1(&st, si)
		lams[i] = li
		sumLam += li
		sumK += KalmanGain(li, c.lambdaK)
		sumVar += o.variance1(&st, si)
	}

	c.NEff[idx] = float32(neff)
	c.NEffEntropy[idx] = float32(math.Exp(h))
	c.SumAlpha[idx] = float32(s1)
	c.SMean[idx] = float32(sMean)
	c.LambdaObs[idx] = float32(lam)
	c.K[idx] = float32(KalmanGain(lam, c.lambdaK))
	if c.opts.Reductions == AllReductions {
		c.LambdaObsDimMean[idx] = float32(sumLam / d)
		c.KDimMean[idx] = float32(sumK / d)
		c.LambdaObsHarmonic[idx] = float32(d / sumVar)
	}
	c.BOSMass[idx] = float32(ColumnMass(alpha, c.opts.BOSKeys))
	c.ENorm[idx] = float32(math.Sqrt(e2))
	if c.opts.KeepPerDim {
		store32(c.S[idx*c.DHead:idx*c.DHead+w], s)
		store32(c.LambdaObsDim[idx*c.DHead:idx*c.DHead+w], lams)
	}

	switch {
	case !finite(s1) || !finite(s2):
		return "attention weights"
	case !finite(sumE) || !finite(sumS) || !finite(e2):
		return "values"
	}
	return ""
}

func finite(x float64) bool { return !math.IsNaN(x) && !math.IsInf(x, 0) }

// renormRow sets dst to the row alpha divided by its own sum Σα (float64,
// each quotient rounded to float32 once), reusing dst's storage.
func renormRow(dst, alpha []float32) []float32 {
	var s1 float64
	for _, a := range alpha {
		s1 += float64(a)
	}
	dst = append(dst[:0], alpha...)
	for j, a := range dst {
		dst[j] = float32(float64(a) / s1)
	}
	return dst
}

// SinkRows selects the attention rows the diagnostics read on a model
// with learned attention sinks (gpt-oss), whose softmax runs over the keys
// and one sink logit per head and then drops the sink column, so that a row
// sums to 1 − σ (σ the sink mass, MetricSinkMass). The output is z =
// Σ_j α_j v_j = (1 − σ)·Σ_j α'_j v_j with α' = α/(1 − σ): the sink acts as
// a head-wise output gate (1 − σ) on a softmax over the tokens.
// docs/diagnostics.md argues the default.
type SinkRows int

const (
	// RenormRows (the default) reads α' = α/Σα, the rows renormalised over
	// the tokens (Σα = 1 − σ): n_eff, S, λobs, K, the entropy, e and the
	// first-token mass describe which tokens the head reads, on the same
	// scale as a model without sinks (n_eff ≤ t + 1), and σ is reported
	// beside them as the gate it acts as — the reading the gated models'
	// diagnostics have (pre-gate rows, the gate in its own column).
	RenormRows SinkRows = iota
	// RawRows reads the rows as the model returns them (hook_pattern):
	// Σα = 1 − σ, n_eff = 1/Σα² grows as 1/(1 − σ)² when the sink takes
	// the mass, e = Σα v is shrunk by (1 − σ).
	RawRows
)

// String returns the name flags and manifests use: "renorm" or "raw".
func (r SinkRows) String() string {
	switch r {
	case RenormRows:
		return "renorm"
	case RawRows:
		return "raw"
	}
	return fmt.Sprintf("SinkRows(%d)", int(r))
}

// ParseSinkRows parses "renorm" or "raw".
func ParseSinkRows(s string) (SinkRows, bool) {
	for _, r := range []SinkRows{RenormRows, RawRows} {
		if r.String() == s {
			return r, true
		}
	}
	return 0, false
}

// store32 rounds src into dst (len(dst) = len(src)).
func store32(dst []float32, src []float64) {
	for i, x := range src {
		dst[i] = float32(x)
	}
}

// Hooks returns a hook set that streams the attention rows of the layers
// with cells to c and stores the output gates of a gated model of
// configuration cfg in it: what a forward pass needs for the App. I
// diagnostics.
func (c *Collector) Hooks(cfg *model.Config) *hooks.Set {
	hs := &hooks.Set{}
	if len(c.opts.Layers) == c.L {
		hs.Stream(-1, c)
	} else {
		for _, l := range c.opts.Layers {
			hs.Stream(l, c)
		}
	}
	if gp := cfg.GatePerHead(); gp > 0 {
		hs.Add(hooks.AttnGate, func(_ string, l int, x *tensor.Dense) error {
			return c.SetLayerGates(l, x.Data().([]float32), gp)
		})
	}
	return hs
}
