package results

import (
	"cmp"
	"fmt"
)

// ProbeOptions are the per-row diagnostic options of a sweep (they become
// probes.CollectorOptions). Zero values select the paper's App. I choices;
// analysis.ResolveProbeOptions fills them in so that the manifest records the values used.
type ProbeOptions struct {
	// Form is the λobs estimator: "reml" (Eq. 6 with the conjugate prior,
	// the App. I diagnostic; default), "naive" (Eq. 5) or "sandwich"
	// (Eq. 13).
	Form string `json:"lambda_form"`
	// Nu is ν of Eq. 6 (default 1, App. I).
	Nu float64 `json:"nu"`
	// Sigma02 is σ0² of Eq. 6 (default 1/d_head, App. I "σ0² = 1/d_h"; 0 in
	// a manifest of a model whose layers differ in head width: 1/d_head of
	// each layer).
	Sigma02 float64 `json:"sigma02"`
	// LambdaPrior is λ in K = λobs/(λ + λobs) (default 1: App. I's "gain K
	// at λ = 1").
	LambdaPrior float64 `json:"lambda_prior"`
	// LambdaMax caps λobs when positive (default 0: no cap, as in App. I).
	LambdaMax float64 `json:"lambda_max"`
	// Moments is how S is computed: "two-pass" (default; stable) or
	// "expanded" (Eq. 7's Σαv² − e², for comparison only).
	Moments string `json:"moments"`
	// Kernel is where the row moments come from: "matrix" (default: the
	// attention pass's own float32 products, with rows that could lose
	// digits recomputed in float64) or "rows" (every row walked twice in
	// float64, the reference; docs/diagnostics.md measures both). They
	// agree within 1e-5 relative on every metric (probes.Kernel,
	// hooks.AttnMoments).
	Kernel string `json:"kernel"`
	// Reductions selects the reductions of S over the head dimension that
	// the tables hold (notes §B.4): "mean" (default: reduction (i), λobs
	// and K from S̄ = mean_i S_i — what the figures use) or "all" (also
	// (ii) lambda_obs_dim_mean and K_dim_mean, per dimension then mean,
	// and (iii) lambda_obs_harmonic). "all" needs S per dimension, one more
	// product per attention tile with as many columns as α·v
	// (probes.Reductions; docs/diagnostics.md measures the cost of each). A
	// manifest without the field (written before it existed) means "all".
	Reductions string `json:"reductions"`
	// SinkRows is the reading of a model with learned attention sinks
	// (gpt-oss), whose rows sum to 1 − σ: "renorm" (default: the rows
	// divided by their own sum, the sink mass reported beside them as the
	// gate it acts as) or "raw" (the rows as the model returns them);
	// probes.SinkRows, docs/diagnostics.md ("Models with attention sinks")
	// argues the default. A model without sinks reads the same under both.
	// A manifest without the field (written before it existed) means
	// "renorm", which no model without sinks can tell apart; for such a
	// model a pass key leaves it out (analysis builds the key without it), so that its pass files
	// from before the option stay valid.
	SinkRows string `json:"sink_rows,omitempty"`
}

// SweepOptions are the options that decide which passes a sweep runs and
// what each pass stores. All are recorded in the manifest.
type SweepOptions struct {
	// LengthsArg is the lengths list as given ("1k,2k,4k"); Lengths the
	// resolved context lengths T, ascending.
	LengthsArg string `json:"lengths_arg"`
	Lengths    []int  `json:"lengths"`
	// KUnit is what "k" means in LengthsArg: 1000 (default; WikiText-style
	// round numbers) or 1024. The paper does not say (notes §F.1.6).
	KUnit int `json:"k"`
	// Samples is the number of chunks per length (paper: 5).
	Samples int `json:"samples"`
	// Disjoint is analysis.DisjointAll (default) or analysis.DisjointWithin; Placement is
	// analysis.PlaceSequential (default) or analysis.PlaceShuffled with Seed; Offset is the
	// first stream token used (default 0). See analysis.ChunkOptions.
	Disjoint  string `json:"disjoint"`
	Placement string `json:"placement"`
	Seed      uint64 `json:"seed"`
	Offset    int    `json:"offset"`
	// BOSToken is a token id prepended to every pass, −1 for none
	// (default: the gated checkpoints' tokenizer adds none, notes §B.1,
	// §F.1.3). When set it counts in T: a pass of length T is the BOS
	// token and T − 1 stream tokens, so the query windows, the position
	// limit and the BOS mass (α on position 0, now the BOS token) refer to
	// the same positions in both modes.
	BOSToken int `json:"bos_token"`
	// BOSCountsInT is always true (see BOSToken); recorded for readers.
	BOSCountsInT bool `json:"bos_counts_in_T"`
	// Bucket is the query bucket size of the per-bucket table (default 64).
	// Buckets are also cut at the window starts, so aggregates are exact
	// whatever the size.
	Bucket int `json:"bucket"`
	// LastFrac is the query window of Figs. 2–3 and of K in Fig. 4: the
	// last LastFrac of the queries (default 0.25: "last-25% queries").
	LastFrac float64 `json:"last_frac"`
	// BOSFrac is the query window of the BOS mass in Fig. 4: the last
	// BOSFrac of the queries (default 0.5: "second-half queries",
	// t ≥ ⌈T/2⌉).
	BOSFrac float64 `json:"bos_frac"`
	// AllowExtrapolation runs lengths beyond max_position_embeddings.
	AllowExtrapolation bool `json:"allow_extrapolation"`
	// OnNonFinite is analysis.NonFiniteStop (default) or analysis.NonFiniteFlag.
	OnNonFinite string `json:"on_nonfinite"`
	// Probe are the per-row diagnostic options.
	Probe ProbeOptions `json:"probe"`
	// Compute is the arithmetic of the passes' matrix products, the
	// model's (model.Compute; omitted for f32, so that f32 pass keys are
	// those of earlier releases, whose float32 products ran on the kernels
	// that f32-widen names now).
	Compute string `json:"compute,omitempty"`
	// DeviationTokens: with Compute bf16, the first DeviationTokens tokens
	// of the first pass also run in float32, and Manifest.Deviation records
	// how far the bf16 logits and diagnostics lie from them (0: not
	// measured; analysis.DefaultDeviationTokens).
	DeviationTokens int `json:"deviation_tokens,omitempty"`
}

// Fig. 4 weightings (AggOptions.Fig4Pool).
const (
	// PoolPasses gives every (T, sample) pass the same weight: a cell's K
	// is the mean over passes of the pass's window mean (default: "aggregated
	// over 5 samples and T ∈ {4k, 8k}" read as 10 equal passes).
	PoolPasses = "passes"
	// PoolQueries pools every query of every pass (an 8k pass then weighs
	// twice a 4k pass).
	PoolQueries = "queries"
)

// λobs ratio readings of Fig. 2(c) (AggOptions.LambdaRatio).
const (
	// RatioOfMeans is mean λobs(T) / mean λobs(Tmin) over the pooled
	// elements (default).
	RatioOfMeans = "ratio-of-means"
	// MeanOfRatios is the mean over (layer, head) cells of the last layers
	// of λobs(T, l, h)/λobs(Tmin, l, h), each a pooled cell mean.
	MeanOfRatios = "mean-of-ratios"
	// RatioFromK "recovers" λobs from the mean gain: λ·K̄/(1 − K̄), then
	// takes the ratio (the figure's title says "Recovered").
	RatioFromK = "from-K"
)

// Aggregation of local (sliding-window) and global layers
// (AggOptions.LocalLayers).
const (
	// LocalSeparate aggregates the global and the local layers of a model
	// that has both as two layer groups ("global", "local"): Figs. 2–3
	// pool the last last_layers layers of each group, Fig. 4's statistics
	// are per group (default: a sliding window changes what n_eff, S and
	// the BOS mass can be, so the two kinds are not one population).
	LocalSeparate = "separate"
	// LocalPooled pools every layer as one group ("all"), as for a model
	// without sliding windows.
	LocalPooled = "pooled"
)

// Layer groups of the aggregate tables (the layers column).
const (
	LayersAll    = "all"
	LayersGlobal = "global"
	LayersLocal  = "local"
)

// AggOptions are the App. I aggregation options. They do not change the
// pass files, only the tables built from them, so summarize and merge may
// override them.
type AggOptions struct {
	// LastLayers is how many of the deepest layers Figs. 2–3 pool (default
	// 7: "the last 7 deep layers"; a model with fewer layers uses all, and
	// the manifest says so).
	LastLayers int `json:"last_layers"`
	// DDOF is the delta degrees of freedom of every std: 0 (default; the
	// population std of numpy's np.std, the likely tool behind the figure;
	// the difference to ddof 1 is 1.5 % over the 35 (sample, layer) units
	// and nil over pooled elements) or 1.
	DDOF int `json:"ddof"`
	// Fig4Lengths are the lengths Fig. 4 aggregates (default: 4k and 8k in
	// the sweep's k unit when present — the paper's choice —, else all).
	Fig4Lengths []int `json:"fig4_lengths"`
	// Fig4Pool is "passes" (default) or "queries" (PoolPasses, PoolQueries).
	Fig4Pool string `json:"fig4_pool"`
	// Bootstrap is the number of bootstrap resamples of the Fig. 4 cells
	// (default 10000), Seed their PCG seed (default 1) and CILevel the
	// interval's level (default 0.95).
	Bootstrap int     `json:"bootstrap"`
	Seed      uint64  `json:"seed"`
	CILevel   float64 `json:"ci_level"`
	// LambdaRatio is the reading of Fig. 2(c) shown first (default
	// RatioOfMeans; all three are stored).
	LambdaRatio string `json:"lambda_ratio"`
	// LocalLayers is LocalSeparate (default) or LocalPooled; it matters
	// only for a model with both sliding-window and global layers. A
	// manifest without the field (written before it existed, and before
	// manifests recorded windows) reads as LocalSeparate.
	LocalLayers string `json:"local_layers"`
}

// Validate checks the options (an empty LocalLayers becomes
// LocalSeparate).
func (a *AggOptions) Validate() error {
	a.LocalLayers = cmp.Or(a.LocalLayers, LocalSeparate)
	switch {
	case a.LastLayers < 1:
		return fmt.Errorf("last-layers = %d: want at least 1", a.LastLayers)
	case a.DDOF != 0 && a.DDOF != 1:
		return fmt.Errorf("ddof = %d: want 0 or 1", a.DDOF)
	case a.Fig4Pool != PoolPasses && a.Fig4Pool != PoolQueries:
		return fmt.Errorf("fig4-pool %q: want passes or queries", a.Fig4Pool)
	case a.Bootstrap < 0:
		return fmt.Errorf("bootstrap = %d: want ≥ 0 (0 skips the interval)", a.Bootstrap)
	case !(a.CILevel > 0 && a.CILevel < 1):
		return fmt.Errorf("ci-level = %v: want a level in (0, 1)", a.CILevel)
	case a.LambdaRatio != RatioOfMeans && a.LambdaRatio != MeanOfRatios && a.LambdaRatio != RatioFromK:
		return fmt.Errorf("lambda-ratio %q: want ratio-of-means, mean-of-ratios or from-K", a.LambdaRatio)
	case a.LocalLayers != LocalSeparate && a.LocalLayers != LocalPooled:
		return fmt.Errorf("local-layers %q: want %s or %s", a.LocalLayers, LocalSeparate, LocalPooled)
	}
	return nil
}
