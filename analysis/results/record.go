package results

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
)

// RunRecord is the part of the manifest that the measurements on the run
// engine (probe sweep, diag, gdn, sinks, massive, experts, retrieval, ppl) share; each
// command's manifest embeds it beside its options (under the command's
// name) and its own fields. A run writes one set of pass files per pass
// (Chunk: a (T, sample), and for ppl its model and variant) into passes/,
// keeps finished ones when it is run again, runs one shard of the passes
// with Shard, and writes its tables from the pass files only, so that
// probe merge of the shards gives the same bytes as one unsharded run.
type RunRecord struct {
	Kind        string            `json:"kind"` // the measurement: sweep, diag, gdn, sinks, massive, experts, retrieval or ppl
	Tool        ToolInfo          `json:"tool"`
	Created     string            `json:"created"`
	Complete    bool              `json:"complete"`
	Error       string            `json:"error,omitempty"`
	Args        []string          `json:"args,omitempty"`
	Shard       Shard             `json:"shard"`
	Model       ModelInfo         `json:"model"`
	Source      SourceInfo        `json:"source"`
	Conventions map[string]string `json:"conventions"`
	Chunks      []Chunk           `json:"chunks"`
	// Passes are the finished passes: this shard's, or every pass once
	// the tables are written.
	Passes []StreamPass `json:"passes"`
	// Reused lists the passes a re-run found finished and kept.
	Reused     []string `json:"reused,omitempty"`
	Notes      []string `json:"notes,omitempty"`
	Threads    int      `json:"threads"`
	Seconds    float64  `json:"total_seconds"`
	Formats    []string `json:"formats"`
	CLIOptions []Option `json:"options,omitempty"`
	Tables     []string `json:"tables,omitempty"`
	// MergedFrom lists the folders probe merge combined.
	MergedFrom []string `json:"merged_from,omitempty"`
	// Deviation, for a model run in bf16 arithmetic, is how far its logits
	// and diagnostics lie from float32 on the first tokens of the first
	// chunk (streamDeviation).
	Deviation *Deviation `json:"compute_deviation,omitempty"`
}

// SoftmaxLayers is the part of a manifest that names the layers whose
// softmax attention rows a measurement reads (a hybrid model's others are
// Gated DeltaNet or Mamba-2 layers) and every model layer's sliding
// window (keys t−w+1 … t; 0: none). The sinks and retrieval manifests
// embed it, so its fields sit at their top level.
type SoftmaxLayers struct {
	Layers  []int `json:"softmax_layers"`
	Windows []int `json:"windows"` // per model layer; 0: none
}

// SoftmaxHead is the part of a table row that names a softmax head: its
// layer, the layer's kind and window, and the head. The sinks_heads and
// retrieval_heads rows embed it, which Parquet (and analysis's CSV and
// JSONL writers) flatten into these four columns in place.
type SoftmaxHead struct {
	Layer  int    `parquet:"layer"`
	Kind   string `parquet:"kind"`   // "global", or "local" for a sliding-window layer
	Window int    `parquet:"window"` // 0: none
	Head   int    `parquet:"head"`
}

// HeadOf returns head h of layer l, whose sliding window is windows[l]
// (0: none, a "global" layer; otherwise "local").
func (s SoftmaxLayers) HeadOf(l, h int) SoftmaxHead {
	kind := "global"
	if s.Windows[l] > 0 {
		kind = "local"
	}
	return SoftmaxHead{Layer: l, Kind: kind, Window: s.Windows[l], Head: h}
}

// Record returns the record itself, so that every manifest embedding it is
// an analysis.StreamManifest.
func (r *RunRecord) Record() *RunRecord { return r }

// StreamKey is everything that determines the pass files of one (T,
// sample) of a stream command. Options are the command's options without
// those that only choose the chunks (the chunk's place and tokens are in
// the key) or say whether to go on (allow_extrapolation).
type StreamKey struct {
	Format  string          `json:"format"` // formatVersion
	Kind    string          `json:"kind"`
	Model   string          `json:"model"` // ModelInfo.Digest
	T       int             `json:"T"`
	Sample  int             `json:"sample"`
	Start   int             `json:"start"`
	End     int             `json:"end"`
	Tokens  string          `json:"tokens"` // analysis.TokenDigest of the pass's ids
	Options json.RawMessage `json:"options"`
	Pass    string          `json:"pass,omitempty"` // Chunk.Pass
}

// Hash returns the hex sha256 of the key's JSON encoding.
func (k StreamKey) Hash() string {
	b, _ := json.Marshal(k)
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// StreamPass records one finished pass of a stream command: stored as JSON
// in the footer of each of its pass files (key "probe.pass") and repeated
// in the manifest.
type StreamPass struct {
	Key     StreamKey        `json:"key"`
	Hash    string           `json:"hash"`
	Rows    map[string]int64 `json:"rows"` // per table
	Seconds float64          `json:"seconds"`
}

// StreamPlan is how a stream measurement cuts its chunks from the token
// stream (analysis.ChunkOptions), and whether lengths beyond the model's
// max_position_embeddings run. Each measurement's options embed it, so
// that the manifest records it under the measurement's name; its fields
// are planKeys.
type StreamPlan struct {
	Lengths   []int  `json:"lengths"`
	Samples   int    `json:"samples"`
	Disjoint  string `json:"disjoint"`
	Placement string `json:"placement"`
	Seed      uint64 `json:"seed"`
	Offset    int    `json:"offset"`
	// AllowExtrapolation runs lengths beyond max_position_embeddings.
	AllowExtrapolation bool `json:"allow_extrapolation"`
}

// Chunk is the piece of the token stream that one (T, sample) pass reads:
// stream tokens [Start, End). With a prepended BOS token the pass's
// sequence is that token followed by the chunk, so End − Start = T − 1;
// otherwise End − Start = T.
type Chunk struct {
	T      int `json:"T"`
	Sample int `json:"sample"`
	Start  int `json:"start"`
	End    int `json:"end"`
	// Pass names what a measurement does with the chunk when it runs
	// more than one pass over chunks (ppl: "m<model index>/<variant>" or
	// "m<model index>/calibration"); empty when a chunk is one pass.
	Pass string `json:"pass,omitempty"`
}
