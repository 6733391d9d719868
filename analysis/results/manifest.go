package results

import (
	"fmt"

	"github.com/filterlens/probe/checkpoint"
)

// FileHash identifies a file by its sha256.
type FileHash struct {
	Path   string `json:"path"`
	SHA256 string `json:"sha256"`
	Bytes  int64  `json:"bytes"`
}

// ModelInfo describes the checkpoint a sweep ran on.
type ModelInfo struct {
	Dir        string   `json:"dir"`
	Arch       string   `json:"arch"`
	ModelType  string   `json:"model_type"`
	Layers     int      `json:"layers"`
	DModel     int      `json:"d_model"`
	Heads      int      `json:"heads"`
	KVHeads    int      `json:"kv_heads"`
	DHead      int      `json:"d_head"`
	Vocab      int      `json:"vocab"`
	MaxPos     int      `json:"max_position_embeddings"`
	Gate       string   `json:"gate"`
	DTypes     []string `json:"stored_dtypes"`
	Compute    string   `json:"compute_dtype"`
	Parameters int64    `json:"parameters"`
	// MeasuredLayers lists the layers whose attention rows the diagnostics
	// measure when that is not every layer (a hybrid model's softmax
	// layers; its Gated DeltaNet layers have no softmax rows).
	MeasuredLayers []int `json:"measured_layers,omitempty"`
	// Windows is each layer's sliding window (keys t−w+1 … t; 0: the
	// layer sees every earlier position), nil when no layer has one (and in
	// manifests written before the field, read as no window anywhere).
	Windows []int `json:"windows,omitempty"`
	// LayerDHead is each layer's value width per head when the layers
	// differ (Gemma 4's global layers: global_head_dim); absent when every
	// layer's heads are DHead wide. σ₀²'s default, 1/d_head, is then each
	// layer's own (ProbeOptions.Sigma02 recorded as 0).
	LayerDHead []int `json:"layer_d_head,omitempty"`
	// Sinks says that the model's softmax attention has learned sink
	// logits (gpt-oss: its pass issues blocks.{l}.attn.hook_sink_mass);
	// absent for every other model.
	Sinks bool `json:"sinks,omitempty"`
	// Format is "gguf" for a model loaded from a GGUF file (whose
	// DTypes are then ggml's types as stored: "Q4_K", "Q6_K", "F32", …);
	// absent for a Hugging Face checkpoint.
	Format string     `json:"format,omitempty"`
	Files  []FileHash `json:"files"` // config.json and the weight files (a GGUF model: the file alone, which holds its config)
	// Digest is the sha256 over the files' names and hashes: the model's
	// identity in pass keys.
	Digest string `json:"digest"`
	// Hub says which hub model id, revision and commit Dir was resolved
	// from when --model named one (nil for a folder given as such).
	Hub *checkpoint.HubModel `json:"hub,omitempty"`
}

// SourceInfo describes the token stream a sweep cut its chunks from.
type SourceInfo struct {
	Kind      string    `json:"kind"` // "text" (tokenized here) or "ids" (a JSON list of ints)
	File      FileHash  `json:"file"`
	Tokenizer *FileHash `json:"tokenizer,omitempty"`
	// AddSpecialTokens says whether the tokenizer's post-processor added
	// its special tokens (never: a BOS is the sweep's explicit option).
	AddSpecialTokens bool   `json:"add_special_tokens"`
	Tokens           int    `json:"tokens"`
	Digest           string `json:"digest"` // analysis.TokenDigest of the whole stream
}

// ToolInfo identifies the program that wrote a result.
type ToolInfo struct {
	Name    string `json:"name"`
	Module  string `json:"module"`
	Version string `json:"version"` // module version: a tag or pseudo-version (+dirty when modified); "(devel)" when the build recorded none
	// Revision and Modified are the VCS commit the program was built from
	// and whether its tree had uncommitted changes; empty and null when
	// the build recorded no VCS information (go run, go test,
	// -buildvcs=false, a linked git worktree), which BuildNote then says.
	Revision  string `json:"vcs_revision,omitempty"`
	Time      string `json:"vcs_time,omitempty"`
	Modified  *bool  `json:"vcs_modified"`
	BuildNote string `json:"build_note,omitempty"`
	Go        string `json:"go"`
	Platform  string `json:"platform"`
	BLAS      string `json:"blas"` // matrix products: gonum (pure Go) or openblas (build tag)
	Format    string `json:"format"`
}

// Option is one command-line option as given, with its default.
type Option struct {
	Name    string `json:"name"`
	Value   string `json:"value"`
	Default string `json:"default"`
	Set     bool   `json:"set"` // given on the command line
	Usage   string `json:"usage"`
}

// Shard selects the passes i, i+n, i+2n, … (0-based, in (T, sample)
// order) of a sweep.
type Shard struct {
	Index int `json:"index"`
	Count int `json:"count"`
}

// ParseShard parses "i/n" with 0 ≤ i < n.
func ParseShard(s string) (Shard, error) {
	var sh Shard
	if _, err := fmt.Sscanf(s, "%d/%d", &sh.Index, &sh.Count); err != nil || fmt.Sprintf("%d/%d", sh.Index, sh.Count) != s {
		return sh, fmt.Errorf("shard %q: want i/n, e.g. 0/4 (i is 0-based)", s)
	}
	if sh.Count < 1 || sh.Index < 0 || sh.Index >= sh.Count {
		return sh, fmt.Errorf("shard %q: want 0 ≤ i < n (i is 0-based)", s)
	}
	return sh, nil
}

func (s Shard) String() string { return fmt.Sprintf("%d/%d", s.Index, s.Count) }

// Timings are wall-clock seconds of the parts of a run.
type Timings struct {
	Total    float64 `json:"total"`
	Hashing  float64 `json:"hashing"`
	Loading  float64 `json:"loading"`
	Tokenize float64 `json:"tokenize"`
	Passes   float64 `json:"passes"` // forward passes with diagnostics run by this process
	Tables   float64 `json:"tables"`
}

// Manifest is a sweep's record (kind "sweep" on the run engine): the
// RunRecord every measurement writes, plus the sweep's options, its
// aggregation options and what the aggregation and the run measured. It is
// written as manifest.json beside the tables (or
// manifest-shard-I-of-N.json by a shard).
type Manifest struct {
	RunRecord
	Sweep    SweepOptions `json:"sweep"`
	Analysis AggOptions   `json:"analysis"`
	// LayersUsed are the layers Figs. 2–3 pooled.
	LayersUsed []int `json:"layers_used,omitempty"`
	// Flags lists passes with non-finite activations (--on-nonfinite
	// flag) and other conditions a reader must know.
	Flags      []string `json:"flags,omitempty"`
	GOMAXPROCS int      `json:"gomaxprocs"`
	NumCPU     int      `json:"num_cpu"`
	Timings    Timings  `json:"timings"`
}
