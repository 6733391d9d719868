package results

import (
	"fmt"
	"strconv"
	"strings"
)

// PPL gate variants besides the probes.GateMapping names (k, k-matched,
// k-lambda, mean).
const (
	// VariantLearned is the checkpoint as trained: its learned output gate
	// when it has one. Ungated models run this variant only.
	VariantLearned = "learned"
	// VariantOne sets every output gate to 1 (the gate removed).
	VariantOne = "one"
)

// Position selections (PPLOptions.Positions).
const (
	PositionsAll         = "all"          // every position t = 0 … T−1 (default)
	PositionsLastQuarter = "last-quarter" // t ≥ T − ⌊T/4⌋
	PositionsFromPrefix  = "from:"        // "from:N": t ≥ N (e.g. from:256 isolates extrapolation)
)

// PPLOptions are the options of a perplexity run, recorded in its manifest.
type PPLOptions struct {
	// StreamPlan cuts the chunks as in the other measurements (lengths
	// T ascending, samples per length, layout): a chunk holds T + 1 stream
	// tokens. AllowExtrapolation (default true: every length runs, those
	// past max_position_embeddings marked extrapolated) lets a pass run
	// past the model's max_position_embeddings.
	StreamPlan
	// Positions selects the scored positions: "all" (default),
	// "last-quarter" or "from:N" (PositionsAll, …).
	Positions string `json:"positions"`
	// Variants are the gate variants run on gated models, in order:
	// VariantLearned, VariantOne and the probes.GateMapping names.
	Variants []string `json:"variants"`
	// LambdaForm is the λobs estimator of the K mappings: "reml" (Eq. 6,
	// default) or "naive" (Eq. 5). Nu and Sigma02 are Eq. 6's ν and σ0²
	// (0: the paper's 1 and 1/d_head); Prior is λ in K = λobs/(λ + λobs)
	// for k and k-matched (0: 1); LambdaMax caps λobs (0: no cap).
	LambdaForm string  `json:"lambda_form"`
	Nu         float64 `json:"nu"`
	Sigma02    float64 `json:"sigma02"`
	Prior      float64 `json:"prior"`
	LambdaMax  float64 `json:"lambda_max"`
	// CalibLength and CalibSamples size the calibration chunks of the
	// calibrated mappings (k-matched, k-lambda, mean): CalibSamples chunks
	// of CalibLength tokens, run with the learned gate, placed at the start
	// of the stream (from Offset) before every evaluation chunk, so no
	// evaluated token is used for calibration. CalibLength 0 selects the
	// smallest length; CalibSamples 0 selects 1.
	CalibLength  int `json:"calib_length"`
	CalibSamples int `json:"calib_samples"`
	// TrainLength is the training context T_train of the models (0:
	// unknown), for the figures and the T − T_train column only.
	TrainLength int `json:"train_length"`
	// CILevel is the level of the intervals (default 0.95).
	CILevel float64 `json:"ci_level"`
}

// FirstPosition returns the first scored position of a length-T pass under
// the Positions option.
func (o *PPLOptions) FirstPosition(T int) (int, error) {
	switch {
	case o.Positions == "" || o.Positions == PositionsAll:
		return 0, nil
	case o.Positions == PositionsLastQuarter:
		return T - T/4, nil
	case strings.HasPrefix(o.Positions, PositionsFromPrefix):
		n, err := strconv.Atoi(strings.TrimPrefix(o.Positions, PositionsFromPrefix))
		if err != nil || n < 0 {
			return 0, fmt.Errorf("positions %q: want from:N with N ≥ 0", o.Positions)
		}
		if n >= T {
			return 0, fmt.Errorf("positions %q score nothing at T = %d (positions are 0 … T−1)", o.Positions, T)
		}
		return n, nil
	}
	return 0, fmt.Errorf("positions %q: want all, last-quarter or from:N", o.Positions)
}

// PPLChunkRow is one (model, variant, T, sample) pass.
type PPLChunkRow struct {
	Model   string  `parquet:"model"`
	Variant string  `parquet:"variant"`
	T       int     `parquet:"T"`
	Sample  int     `parquet:"sample"`
	Start   int     `parquet:"start"` // stream tokens [start, end): inputs [start, end−1), targets [start+1, end)
	End     int     `parquet:"end"`
	First   int     `parquet:"first_pos"` // first scored position
	N       int     `parquet:"n_pred"`
	NLLSum  float64 `parquet:"nll_sum"`
	NLL     float64 `parquet:"mean_nll"`
	PPL     float64 `parquet:"ppl"`
	Extrap  bool    `parquet:"extrapolated"` // T > max_position_embeddings
}

// PPLSummaryRow is one (model, variant, T): the mean NLL over every scored
// token of the N chunks, ppl = exp of it, the std of the N chunk means
// (ddof 1), their standard error, and a Student-t interval at CILevel on
// the mean NLL, mapped through exp for ppl. DNLL is the mean paired
// difference of chunk NLLs to the learned variant on the same chunks
// (negative: better than the learned gate), with its interval; NaN for the
// learned variant itself and when it did not run.
type PPLSummaryRow struct {
	Model    string  `parquet:"model"`
	Variant  string  `parquet:"variant"`
	T        int     `parquet:"T"`
	Samples  int     `parquet:"samples"`
	First    int     `parquet:"first_pos"`
	N        int     `parquet:"n_pred"`
	NLL      float64 `parquet:"mean_nll"`
	Std      float64 `parquet:"chunk_std"`
	SE       float64 `parquet:"se"`
	NLLLo    float64 `parquet:"nll_lo"`
	NLLHi    float64 `parquet:"nll_hi"`
	PPL      float64 `parquet:"ppl"`
	PPLLo    float64 `parquet:"ppl_lo"`
	PPLHi    float64 `parquet:"ppl_hi"`
	DNLL     float64 `parquet:"d_nll_vs_learned"`
	DNLLLo   float64 `parquet:"d_nll_lo"`
	DNLLHi   float64 `parquet:"d_nll_hi"`
	Extrap   bool    `parquet:"extrapolated"`
	MaxPos   int     `parquet:"max_pos"`
	TMinusTr int     `parquet:"t_minus_train"` // T − TrainLength (T when it is unknown)
}

// PPLCalibRow is the calibration of one (model, mapping, layer, head).
type PPLCalibRow struct {
	Model    string  `parquet:"model"`
	Variant  string  `parquet:"variant"`
	Layer    int     `parquet:"layer"`
	Head     int     `parquet:"head"`
	Rows     int64   `parquet:"rows"`      // query rows of the calibration chunks
	MeanGate float64 `parquet:"mean_gate"` // learned gate's mean
	MeanK    float64 `parquet:"mean_k"`    // K_BFT's mean at the prior λ
	Scale    float64 `parquet:"scale"`     // k-matched: mean_gate/mean_k
	Lambda   float64 `parquet:"lambda"`    // k-lambda: fitted λ (NaN otherwise)
}

// PPLModel is one model of a run in its manifest.
type PPLModel struct {
	Label    string    `json:"label"`
	Info     ModelInfo `json:"info"`
	Gated    bool      `json:"gated"`
	Variants []string  `json:"variants"`
	// Seconds per variant of the evaluation passes, and of the
	// calibration pass(es), loading and hashing.
	Seconds     map[string]float64 `json:"seconds"`
	CalibSecond float64            `json:"calibration_seconds"`
	Loading     float64            `json:"loading_seconds"`
	Hashing     float64            `json:"hashing_seconds"`
	Notes       []string           `json:"notes,omitempty"`
	// Deviation, for a model run in bf16 arithmetic, is how far its
	// logits and diagnostics lie from the float32 pass on the first
	// analysis.PPLRun.DeviationTokens tokens of the first evaluation chunk.
	Deviation *Deviation `json:"compute_deviation,omitempty"`
}

// PPLManifest is a perplexity run's record (ppl_manifest.json, or one
// shard's): its chunks are the passes, each named by its model and gate
// variant (Chunk.Pass "m<i>/<variant>") or "m<i>/calibration".
type PPLManifest struct {
	RunRecord
	Models  []PPLModel `json:"models"`
	Options PPLOptions `json:"ppl"`
	// Eval and Calibration are the stream's evaluation chunks (Chunk.T is
	// the context T; the chunk holds T + 1 tokens) and calibration chunks,
	// which the passes run per model and variant.
	Eval        []Chunk `json:"eval_chunks"`
	Calibration []Chunk `json:"calibration_chunks,omitempty"`
	GOMAXPROCS  int     `json:"gomaxprocs"`
	NumCPU      int     `json:"num_cpu"`
}

// PassDigest is the digest of chunk c's model (ModelInfo.Digest), which
// its pass key holds.
func (m *PPLManifest) PassDigest(c Chunk) string {
	i, _ := PPLPass(c)
	if i < 0 || i >= len(m.Models) {
		return ""
	}
	return m.Models[i].Info.Digest
}

// PPLPass returns the model index and variant ("calibration" for a
// calibration pass) of a ppl pass; index −1 for a chunk of no ppl pass.
func PPLPass(c Chunk) (int, string) {
	m, v, ok := strings.Cut(strings.TrimPrefix(c.Pass, "m"), "/")
	i, err := strconv.Atoi(m)
	if !ok || err != nil || !strings.HasPrefix(c.Pass, "m") {
		return -1, ""
	}
	return i, v
}

// PPLManifestName is the manifest's file name in an unsharded run's folder
// (analysis.StreamManifestName for a shard's).
const PPLManifestName = "ppl_manifest.json"

// PPLResults are a run's tables and manifest.
type PPLResults struct {
	Manifest    *PPLManifest
	Summary     []PPLSummaryRow
	Chunks      []PPLChunkRow
	Calibration []PPLCalibRow
}

// Record returns the manifest's run record.
func (r *PPLResults) Record() *RunRecord { return &r.Manifest.RunRecord }
