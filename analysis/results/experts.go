package results

// Margins of the top-1 choice (analysis.ExpertOptions.Margin).
const (
	MarginProb  = "prob"  // p₍₁₎ − p₍₂₎ of the softmax over all experts, in [0, 1]
	MarginLogit = "logit" // z₍₁₎ − z₍₂₎ of the router logits
)

// ExpertLoadRow is one (layer, expert): the share of the routing
// assignments it received, over all tokens and over the first token of
// each sequence and the rest, the mean routing weight it was given, and
// the share of the first tokens and of the rest whose top-1 it is. T is
// the sequences' length (of Experts' last pass, when they differ).
type ExpertLoadRow struct {
	T           int     `parquet:"T"`
	Layer       int     `parquet:"layer"`
	Expert      int     `parquet:"expert"`
	Assignments int64   `parquet:"assignments"`
	Load        float64 `parquet:"load"`       // Assignments / (N·k)
	FirstLoad   float64 `parquet:"first_load"` // over the sequences' position 0
	RestLoad    float64 `parquet:"rest_load"`  // over positions ≥ 1
	MeanWeight  float64 `parquet:"mean_weight"`
	FirstTop1   float64 `parquet:"first_top1"` // share of the first tokens whose top-1 expert is this one
	RestTop1    float64 `parquet:"rest_top1"`  // share of the other tokens whose top-1 expert is this one
}

// ExpertLayerRow is one sparse layer: the router's mean entropy and
// top-1 margin over all tokens, over the first tokens and over the rest,
// and the first tokens' top-1 expert: the one most of them pick (Mode,
// the lowest index on a tie), the share of sequences whose first token
// picks it, and the share of the other tokens that do.
type ExpertLayerRow struct {
	T            int     `parquet:"T"`
	Layer        int     `parquet:"layer"`
	Experts      int     `parquet:"experts"`
	TopK         int     `parquet:"top_k"`
	Sequences    int64   `parquet:"sequences"`
	Tokens       int64   `parquet:"tokens"`
	Entropy      float64 `parquet:"entropy"`
	EntropyFirst float64 `parquet:"entropy_first"`
	EntropyRest  float64 `parquet:"entropy_rest"`
	Margin       float64 `parquet:"margin"`
	MarginFirst  float64 `parquet:"margin_first"`
	MarginRest   float64 `parquet:"margin_rest"`
	FirstMode    int     `parquet:"first_top1_mode"`
	FirstAgree   float64 `parquet:"first_top1_agree"`
	RestAgree    float64 `parquet:"rest_top1_agree"`
}

// ExpertsRunOptions are the options of an experts run, recorded in its
// manifest.
type ExpertsRunOptions struct {
	StreamPlan
	// Margin is how the top-1 margin is measured: MarginProb (default) or
	// MarginLogit (analysis.ExpertOptions.Margin).
	Margin string `json:"margin"`
}

// ExpertsManifest records an experts run (or one shard of it).
type ExpertsManifest struct {
	RunRecord
	Experts int               `json:"experts_per_layer"`
	TopK    int               `json:"top_k"`
	Options ExpertsRunOptions `json:"experts"`
}

// ExpertsManifestName is the manifest's file name in an unsharded experts
// run's folder (analysis.StreamManifestName for a shard's).
const ExpertsManifestName = "experts_manifest.json"
