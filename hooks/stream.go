package hooks

// AttnTile is a block of post-softmax attention rows of one head, handed to
// an AttnConsumer while the forward pass runs. The pass never builds a T×T
// matrix for streaming: a tile holds Rows query rows at a time.
//
// Row r describes query position t = Q0+r. Its weights α[t, 0..t] are
// Alpha[r*Stride : r*Stride+t+1] (causal: keys beyond t are not part of the
// row and may hold anything). The weights are post-softmax and pre-gate; for
// the seeds' mechanisms they are the unattenuated pattern (see the model's
// documentation of hook_pattern).
//
// With learned attention sinks (gpt-oss) each row is the softmax over its
// keys and one extra column, the head's sink logit, which is dropped: the
// row sums to 1 − Sink[r], and Sink[r] is the sink mass (the value of
// blocks.{l}.attn.hook_sink_mass). Sink is nil for a model without sinks,
// where the rows sum to 1 (SinkMass gives 0).
//
// V holds the head's value vectors for every key position of the sequence,
// row j at V[j*VStride : j*VStride+DHead] (for grouped-query attention it is
// the shared KV head's values, exactly the vectors this head multiplies
// by α).
type AttnTile struct {
	Batch, Layer, Head int

	Q0     int       // query position of row 0
	Rows   int       // number of query rows in the tile
	Stride int       // distance between rows in Alpha
	Alpha  []float32 // [Rows, Stride]
	Sink   []float32 // [Rows]: each row's sink mass; nil without sinks

	T       int       // sequence length (number of key positions)
	DHead   int       // value dimension of the head
	VStride int       // distance between value rows in V
	V       []float32 // [T, VStride], first DHead entries of each row used
}

// Row returns α[t, 0..t] for query t = Q0+r.
func (a *AttnTile) Row(r int) []float32 {
	t := a.Q0 + r
	return a.Alpha[r*a.Stride : r*a.Stride+t+1]
}

// SinkMass returns the sink mass of row r (0 without sinks).
func (a *AttnTile) SinkMass(r int) float32 {
	if a.Sink == nil {
		return 0
	}
	return a.Sink[r]
}

// Value returns v_j, the value vector at key position j.
func (a *AttnTile) Value(j int) []float32 {
	return a.V[j*a.VStride : j*a.VStride+a.DHead]
}

// AttnConsumer receives the attention rows of the layers and heads it was
// registered for. ConsumeAttn may be called concurrently for different
// (batch, head) pairs of a layer, but never concurrently for the same
// (batch, layer, head); within one (batch, layer, head) tiles arrive in
// increasing Q0 and cover every query exactly once. The tile and its slices
// are only valid during the call: copy what must be kept.
type AttnConsumer interface {
	ConsumeAttn(tile *AttnTile) error
}

// A DeltaConsumer is an AttnConsumer that also receives the effective
// attention of Gated DeltaNet layers (Qwen3.5's linear-attention layers):
// tiles of rows W[t, 0..t] with core_out[t] = Σ_s W[t, s]·v[s], the exact
// weights the delta rule puts on each past value given q, k, β and g. They
// come in the same AttnTile, with Head the value head and V its values, and
// the same ordering guarantees, but they are not softmax rows: they need
// not sum to 1 and may be negative. Consumers that do not implement it see
// the softmax layers' rows only.
type DeltaConsumer interface {
	AttnConsumer
	ConsumeDelta(tile *AttnTile) error
}

// MomentsConsumer is an AttnConsumer that can also take the per-row moments
// of a tile computed by the attention pass itself with matrix products,
// instead of walking every row's weights and value vectors. Register it
// like any consumer (Set.Stream): the model's shared softmax attention
// calls ConsumeMoments, other attention kernels (the filter mechanisms')
// call ConsumeAttn. The same concurrency rules as for ConsumeAttn apply.
type MomentsConsumer interface {
	AttnConsumer
	ConsumeMoments(m *AttnMoments) error
}

// AttnMoments holds the moments of the rows of one attention tile (one
// batch entry, layer and head; query rows t = Tile.Q0 … Tile.Q0+Rows−1) for
// the BFT filter diagnostics (package probes):
//
//	SumAlpha[r] = Σ_j α_tj                   SumSq[r] = Σ_j α_tj²
//	Entropy[r]  = −Σ_j α_tj log α_tj         (0·log 0 = 0)
//	E[r·d+i]    = e_ti = Σ_j α_tj v_ji       S[r·d+i] = Σ_j α_tj (v_ji − e_ti)²
//
// with d = Tile.DHead, over the float32 weights α the tile holds: with
// learned sinks the raw rows, without the sink column, so that SumAlpha =
// 1 − Tile.Sink[r] and E, S are the raw rows' (a diagnostic on rows
// renormalised over the tokens rescales them by 1/SumAlpha). The pass
// forms them at the cost of one float32 matrix product per head and tile
// beyond the attention: SumAlpha, SumSq and the entropy in the softmax's
// pass over the exponentials; E is the pass's own output α·v; S comes from
// G = Σα (v − c)² as S = G − 2u·F + u²·Σα (u = E − c, F = E − c·Σα) with a
// shift c shared by the query heads of a KV head, and rows where that
// subtraction could lose digits are recomputed by float64 two-pass sums.
// docs/diagnostics.md states the measured accuracy of each.
//
// Tile is the tile itself (weights and value vectors), for what the
// moments do not cover (e.g. the mass on chosen key positions) and as a
// fallback: a consumer may simply call its own ConsumeAttn(Tile). The
// struct and its slices are only valid during the call.
type AttnMoments struct {
	Tile                     *AttnTile
	SumAlpha, SumSq, Entropy []float64 // [Rows]
	E, S                     []float64 // [Rows, DHead]; S nil when SSum is set
	// SSum [Rows] holds Σ_i S_i instead of S when every moments consumer
	// of the pass asked only for the sum (SumOnlyConsumer): then no product
	// per dimension is formed beyond α·v, and G = Σ_j α_tj ‖v_j − c‖² comes
	// out of the softmax's scaling pass, with the same guard and float64
	// recomputation as S.
	SSum []float64
}

// SumOnlyConsumer is a MomentsConsumer that may need only Σ_i S_i of each
// row (AttnMoments.SSum), not S per dimension: when every moments consumer
// of a pass reports MomentsSumOnly, the attention forms SSum instead of S,
// at a fraction of the cost of S's per-dimension product.
type SumOnlyConsumer interface {
	MomentsConsumer
	MomentsSumOnly() bool
}
