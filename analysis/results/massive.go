package results

// Interventions on massive activations (MassiveOptions.Interventions).
const (
	MassiveZero = "zero" // Sun et al.: set the entries to 0
	MassiveMean = "mean" // control: set each entry to its channel's mean over the pass's positions
)

// MassiveTopRow is one row of the massive_top table: the rank-th largest
// |h[t, i]| of layer l's residual stream (blocks.{l}.hook_resid_post) in one
// pass, against the layer's median |h|.
type MassiveTopRow struct {
	T         int     `parquet:"T"`
	Sample    int     `parquet:"sample"`
	Layer     int     `parquet:"layer"`
	Rank      int     `parquet:"rank"`
	Position  int     `parquet:"position"`
	Channel   int     `parquet:"channel"`
	Value     float64 `parquet:"value"`
	MedianAbs float64 `parquet:"median_abs"`
	Ratio     float64 `parquet:"ratio"` // |value| / median_abs
}

// MassivePPLRow is one row of the massive_ppl table: the mean NLL of one
// pass with the top entries of one layer replaced (or none).
type MassivePPLRow struct {
	T            int     `parquet:"T"`
	Sample       int     `parquet:"sample"`
	Intervention string  `parquet:"intervention"` // "none", "zero" or "mean"
	Layer        int     `parquet:"layer"`        // the layer intervened on (−1 for none)
	Entries      int     `parquet:"entries"`      // entries replaced
	Tokens       int     `parquet:"tokens"`       // predicted tokens
	NLL          float64 `parquet:"nll"`
	PPL          float64 `parquet:"ppl"`
	DNLL         float64 `parquet:"d_nll"` // NLL − NLL of none, same chunk
}

// MassiveOptions are the options of a massive run, recorded in its
// manifest. A chunk holds T + 1 stream tokens: position t predicts x_{t+1}.
type MassiveOptions struct {
	StreamPlan
	// TopK entries per layer are reported.
	TopK int `json:"top_k"`
	// Interventions run after the plain pass, each its own pass.
	Interventions []string `json:"interventions"`
	// Layer is the layer whose top Entries entries are replaced (−1: in
	// each pass the layer with the largest top-1 ratio to its median).
	Layer   int `json:"layer"`
	Entries int `json:"entries"` // 0: TopK
}

// MassiveManifest records a massive run (or one shard of it). Its chunks'
// Start, End cover the T + 1 tokens of each chunk.
type MassiveManifest struct {
	RunRecord
	Options MassiveOptions `json:"massive"`
}

// MassiveManifestName is the manifest's file name in an unsharded massive
// run's folder (analysis.StreamManifestName for a shard's).
const MassiveManifestName = "massive_manifest.json"
