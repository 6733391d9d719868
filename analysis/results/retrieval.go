package results

// RetrievalOptions are the options of a retrieval run, recorded in its
// manifest.
type RetrievalOptions struct {
	// Segment is the length n of the repeated segment (n distinct token
	// ids drawn uniformly from the whole vocabulary); Gap the number of
	// filler tokens between its two copies (drawn uniformly, with
	// repetition, from the ids not in the segment). A pass is
	// segment, filler, segment: T = 2n + gap.
	Segment int `json:"segment"`
	Gap     int `json:"gap"`
	// Samples is the number of passes, each with its own segment and
	// filler from a PCG seeded by (Seed, sample).
	Samples int    `json:"samples"`
	Seed    uint64 `json:"seed"`
	// Steps is analysis.StepsCopied (default) or analysis.StepsAll.
	Steps string `json:"steps"`
	// Above is the score above which a head counts as a retrieval head
	// (Wu et al.: 0.1).
	Above              float64 `json:"above"`
	TileRows           int     `json:"tile_rows"`
	AllowExtrapolation bool    `json:"allow_extrapolation"`
}

// RetrievalHeadRow is one row of the retrieval_heads table: one softmax
// (layer, head) over every sample (probes.RetrievalCollector).
type RetrievalHeadRow struct {
	SoftmaxHead
	Steps      int64   `parquet:"steps"`
	Hits       int64   `parquet:"hits"`
	Score      float64 `parquet:"retrieval_score"`
	SourceMass float64 `parquet:"source_mass"`
}

// RetrievalSample describes one pass of a retrieval run.
type RetrievalSample struct {
	Sample int `json:"sample"`
	// CopyQueries are the queries with a copy source (n − 1), Copied
	// those where the model's greedy next token is the copy.
	CopyQueries int     `json:"copy_queries"`
	Copied      int     `json:"copied"`
	CopyRate    float64 `json:"copy_rate"`
	Tokens      string  `json:"tokens"` // analysis.TokenDigest of the pass
	Seconds     float64 `json:"seconds"`
}

// RetrievalManifest records a retrieval run (or one shard of it): its
// chunks are the samples, each a pass of T tokens [0, T) of its own copy
// task.
type RetrievalManifest struct {
	RunRecord
	SoftmaxLayers
	Options RetrievalOptions `json:"retrieval"`
	T       int              `json:"T"`
	// Samples and HeadsAbove (the heads whose score exceeds
	// Options.Above) are written with the table.
	Samples    []RetrievalSample `json:"samples"`
	HeadsAbove int               `json:"heads_above"`
}

// RetrievalManifestName is the manifest's file name in an unsharded
// retrieval run's folder (analysis.StreamManifestName for a shard's).
const RetrievalManifestName = "retrieval_manifest.json"
