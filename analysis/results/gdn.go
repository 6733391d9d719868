package results

// GDNRow is one row of the gdn table: the Gated DeltaNet filter quantities
// of one (length, sample, layer, value head, token) (probes.GDNFilter).
type GDNRow struct {
	T       int     `parquet:"T"`
	Sample  int     `parquet:"sample"`
	Layer   int     `parquet:"layer"`
	Head    int     `parquet:"head"`
	Token   int     `parquet:"token"`
	Mixer   string  `parquet:"mixer,dict"`
	Beta    float64 `parquet:"beta"`
	Decay   float64 `parquet:"decay"`
	Horizon float64 `parquet:"horizon"`
	GDNFilterValues
}

// GDNFilterValues are the columns of gdn from the innovation on, which
// gdn_heads holds too, as means over a head's tokens under the same names:
// the innovation, the state norm and the statistics of the effective-
// attention row W[t, ·] (NaN without gdn.w_rows). GDNRow and GDNHeadRow
// embed it; Parquet, CSV and JSONL lay its fields out in its place.
type GDNFilterValues struct {
	Innovation float64 `parquet:"innovation"`
	StateNorm  float64 `parquet:"state_norm"`
	NEffW      float64 `parquet:"neff_w"`
	FirstShare float64 `parquet:"first_share"`
	RowSum     float64 `parquet:"row_sum"`
	NegShare   float64 `parquet:"neg_share"`
	SMeanW     float64 `parquet:"S_mean_w"`
	LambdaObsW float64 `parquet:"lambda_obs_w"`
	KW         float64 `parquet:"K_w"`
}

// GDNOptions are the options of a gdn run, recorded in its manifest.
type GDNOptions struct {
	StreamPlan
	// Innovation is probes.InnovationForm's name ("decayed", default, or
	// "undecayed"); Weights is probes.EffAttnWeights' ("abs", default, or
	// "signed"); Nu, Sigma02, Prior define λobs^W and K^W (0: 1, 1/d_v, 1);
	// NoDispersion skips S̄^W, λobs^W, K^W.
	Innovation   string  `json:"innovation"`
	Weights      string  `json:"weights"`
	Nu           float64 `json:"nu"`
	Sigma02      float64 `json:"sigma0_sq"`
	Prior        float64 `json:"lambda_prior"`
	NoDispersion bool    `json:"no_dispersion"`
	// RWKVDecay and RWKVGain are probes.DecaySummary's name ("geomean",
	// default, "mean", "min", "max") and probes.GainSummary's ("removal",
	// default, or "mean"): the per-head scalars of an RWKV-7 layer's
	// per-channel decay w_t and learning rate a_t (decay and beta columns
	// of mixer rwkv7; unused by the other mixers).
	RWKVDecay string `json:"rwkv_decay"`
	RWKVGain  string `json:"rwkv_gain"`
	// WRows computes the effective-attention rows' statistics (neff_w …
	// K_w; otherwise NaN): O(T²·d_k) per head against the recurrence's
	// O(T·d_k·d_v), so off by default (docs/diagnostics.md, "Cost").
	WRows    bool `json:"w_rows"`
	TileRows int  `json:"tile_rows"`
}

// GDNManifest records a gdn run (or one shard of it).
type GDNManifest struct {
	RunRecord
	Layers  []int      `json:"gdn_layers"`
	Options GDNOptions `json:"gdn"`
}

// GDNManifestName is the manifest's file name in an unsharded gdn run's
// folder (analysis.StreamManifestName for a shard's).
const GDNManifestName = "gdn_manifest.json"

// The mixer column's values: the recurrent mixer a gdn row measures.
const (
	MixerGatedDeltaNet = "gated_deltanet"
	MixerMamba2        = "mamba2"
	MixerRWKV7         = "rwkv7"
	// MixerAttention rows are the softmax heads of a layer whose Mamba-2
	// runs beside attention (Falcon-H1), with --w-rows: only the W-row
	// columns are defined (n_eff^W is then Kish's n_eff).
	MixerAttention = "attention"
)

// GDNHeadRow is one row of the gdn_heads table: per (length, sample,
// layer, value head) the mean over tokens of each column of gdn (over its
// finite values; Nonfinite counts the others over every column), and the
// median horizon, which a token with g = 0 (+Inf) would dominate as a mean.
type GDNHeadRow struct {
	T             int     `parquet:"T"`
	Sample        int     `parquet:"sample"`
	Layer         int     `parquet:"layer"`
	Head          int     `parquet:"head"`
	Mixer         string  `parquet:"mixer,dict"`
	Tokens        int     `parquet:"tokens"`
	Beta          float64 `parquet:"beta"`
	Decay         float64 `parquet:"decay"`
	HorizonMedian float64 `parquet:"horizon_median"`
	GDNFilterValues
	Nonfinite int `parquet:"nonfinite"`
}
