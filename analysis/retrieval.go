package analysis

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"time"

	"github.com/filterlens/probe/hooks"
	"github.com/filterlens/probe/model"
	"github.com/filterlens/probe/probes"
)

// Which copy steps a retrieval score counts (RetrievalOptions.Steps).
const (
	// StepsCopied counts the copy queries where the model's greedy next
	// token is the copy (Wu et al.: the tokens the model generates from
	// the needle).
	StepsCopied = "copied"
	// StepsAll counts every copy query (teacher forcing: the head's
	// behaviour whether or not the model copies).
	StepsAll = "all"
)

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
	// Steps is StepsCopied (default) or StepsAll.
	Steps string `json:"steps"`
	// Above is the score above which a head counts as a retrieval head
	// (Wu et al.: 0.1).
	Above              float64 `json:"above"`
	TileRows           int     `json:"tile_rows"`
	AllowExtrapolation bool    `json:"allow_extrapolation"`
}

// DefaultRetrievalOptions are the command's defaults.
func DefaultRetrievalOptions() RetrievalOptions {
	return RetrievalOptions{Segment: 64, Samples: 4, Seed: 1, Steps: StepsCopied, Above: 0.1}
}

// RetrievalHeadRow is one row of the retrieval_heads table: one softmax
// (layer, head) over every sample (probes.RetrievalCollector).
type RetrievalHeadRow struct {
	Layer      int     `parquet:"layer"`
	Kind       string  `parquet:"kind"`   // "global", or "local" for a sliding-window layer
	Window     int     `parquet:"window"` // 0: none
	Head       int     `parquet:"head"`
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
	Tokens      string  `json:"tokens"` // TokenDigest of the pass
	Seconds     float64 `json:"seconds"`
}

// RetrievalManifest records a retrieval run.
type RetrievalManifest struct {
	Kind        string            `json:"kind"` // "retrieval"
	Tool        ToolInfo          `json:"tool"`
	Created     string            `json:"created"`
	Error       string            `json:"error,omitempty"`
	Args        []string          `json:"args,omitempty"`
	Model       ModelInfo         `json:"model"`
	Layers      []int             `json:"softmax_layers"`
	Windows     []int             `json:"windows"` // per model layer; 0: none
	Options     RetrievalOptions  `json:"retrieval"`
	T           int               `json:"T"`
	Conventions map[string]string `json:"conventions"`
	Samples     []RetrievalSample `json:"samples"`
	// HeadsAbove counts the heads whose score exceeds Options.Above.
	HeadsAbove int      `json:"heads_above"`
	Notes      []string `json:"notes,omitempty"`
	Threads    int      `json:"threads"`
	Seconds    float64  `json:"total_seconds"`
	CLIOptions []Option `json:"options,omitempty"`
	Tables     []string `json:"tables,omitempty"`
}

// RetrievalManifestName is the manifest's file name in a retrieval run's
// folder.
const RetrievalManifestName = "retrieval_manifest.json"

// RetrievalRun is one `probe retrieval` run.
type RetrievalRun struct {
	Dir        string
	Load       model.LoadOptions
	Options    RetrievalOptions
	Out        string
	Formats    []string
	Threads    int
	CLIOptions []Option
	Args       []string
}

// CopyTask returns the token ids of one pass of the copy task: n distinct
// ids, gap filler ids not among them, the n ids again; drawn from a PCG
// seeded by (seed, sample) over [0, vocab).
func CopyTask(n, gap, vocab int, seed uint64, sample int) ([]int, error) {
	if n < 2 || n >= vocab || gap < 0 {
		return nil, fmt.Errorf("copy task: segment %d, gap %d: want 2 ≤ segment < vocabulary (%d) and gap ≥ 0", n, gap, vocab)
	}
	rng := rand.New(rand.NewPCG(seed, uint64(sample)))
	perm := rng.Perm(vocab)
	seg, rest := perm[:n], perm[n:]
	ids := append([]int{}, seg...)
	for i := 0; i < gap; i++ {
		ids = append(ids, rest[rng.IntN(len(rest))])
	}
	return append(ids, seg...), nil
}

// Run runs the passes and writes retrieval_heads and the manifest.
func (r *RetrievalRun) Run() (*RetrievalManifest, []RetrievalHeadRow, error) {
	start := time.Now()
	o := &r.Options
	switch {
	case o.Steps != StepsCopied && o.Steps != StepsAll:
		return nil, nil, fmt.Errorf("steps %q: want %s or %s", o.Steps, StepsCopied, StepsAll)
	case o.Samples < 1:
		return nil, nil, fmt.Errorf("samples = %d: want at least 1", o.Samples)
	case !(o.Above >= 0 && o.Above < 1):
		return nil, nil, fmt.Errorf("above = %v: want a score threshold in [0, 1)", o.Above)
	}
	if len(r.Formats) == 0 {
		r.Formats = []string{FormatParquet, FormatCSV}
	}
	if r.Threads <= 0 {
		r.Threads = runtime.GOMAXPROCS(0)
	}
	m, err := model.Load(r.Dir, r.Load)
	if err != nil {
		return nil, nil, err
	}
	c := &m.Config
	T := 2*o.Segment + o.Gap
	if _, err := CopyTask(o.Segment, o.Gap, c.Vocab, o.Seed, 0); err != nil {
		return nil, nil, err
	}
	if c.MaxPos > 0 && T > c.MaxPos && !o.AllowExtrapolation {
		return nil, nil, fmt.Errorf("2 × segment + gap = %d tokens exceeds the model's max_position_embeddings %d (pass --allow-extrapolation to run it anyway)", T, c.MaxPos)
	}
	info, err := DescribeModel(m)
	if err != nil {
		return nil, nil, err
	}
	if err := os.MkdirAll(r.Out, 0o755); err != nil {
		return nil, nil, err
	}
	layers, windows := c.SoftmaxLayers(), LayerWindows(c)
	man := &RetrievalManifest{Kind: "retrieval", Tool: Tool(), Created: time.Now().UTC().Format(time.RFC3339), Args: r.Args,
		Model: info, Layers: layers, Windows: windows, Options: *o, T: T, Conventions: retrievalConventions(),
		Threads: r.Threads, CLIOptions: r.CLIOptions}
	if len(layers) < c.Layers {
		man.Notes = append(man.Notes, fmt.Sprintf("measured the softmax layers %v; the others are Gated DeltaNet or Mamba-2 layers", layers))
	}
	fail := func(err error) (*RetrievalManifest, []RetrievalHeadRow, error) {
		man.Error = err.Error()
		man.Seconds = time.Since(start).Seconds()
		if werr := writeJSON(filepath.Join(r.Out, RetrievalManifestName), man); werr != nil {
			return man, nil, fmt.Errorf("%w (and writing the manifest failed: %v)", err, werr)
		}
		return man, nil, err
	}
	one, err := probes.CopySources(T, 0, o.Segment+o.Gap, o.Segment)
	if err != nil {
		return fail(err)
	}
	var sources []int
	for s := 0; s < o.Samples; s++ {
		sources = append(sources, one...)
	}
	col, err := probes.NewRetrievalCollector(o.Samples, c.Layers, c.Heads, T, sources)
	if err != nil {
		return fail(err)
	}
	counted := make([]bool, o.Samples*T)
	for s := 0; s < o.Samples; s++ {
		t0 := time.Now()
		ids, _ := CopyTask(o.Segment, o.Gap, c.Vocab, o.Seed, s)
		// One sequence per pass through a batch-1 view of the collector's
		// sample s: the tiles say batch 0.
		hs := &hooks.Set{}
		view := &sampleView{col: col, sample: s}
		for _, l := range layers {
			hs.Stream(l, view)
		}
		out, err := m.Forward([][]int{ids}, model.Options{Hooks: hs, Logits: true, AllowExtrapolation: o.AllowExtrapolation,
			TileRows: o.TileRows, Threads: r.Threads})
		if err != nil {
			return fail(fmt.Errorf("sample %d: %w", s, err))
		}
		rs := RetrievalSample{Sample: s, Tokens: TokenDigest(ids)}
		for t, src := range one {
			if src < 0 {
				continue
			}
			rs.CopyQueries++
			z := out.Logits[t*c.Vocab : (t+1)*c.Vocab]
			best := 0
			for v, x := range z {
				if x > z[best] {
					best = v
				}
			}
			copied := best == ids[t+1]
			if copied {
				rs.Copied++
			}
			counted[s*T+t] = o.Steps == StepsAll || copied
		}
		rs.CopyRate = float64(rs.Copied) / float64(rs.CopyQueries)
		rs.Seconds = time.Since(t0).Seconds()
		man.Samples = append(man.Samples, rs)
	}
	heads, err := col.Scores(layers, counted)
	if err != nil {
		return fail(err)
	}
	var rows []RetrievalHeadRow
	for _, h := range heads {
		row := RetrievalHeadRow{Layer: h.Layer, Kind: "global", Window: windows[h.Layer], Head: h.Head, Steps: h.Steps, Hits: h.Hits,
			Score: h.Score, SourceMass: h.SourceMass}
		if windows[h.Layer] > 0 {
			row.Kind = "local"
		}
		if h.Score > o.Above {
			man.HeadsAbove++
		}
		rows = append(rows, row)
	}
	if len(heads) > 0 && heads[0].Steps == 0 {
		man.Notes = append(man.Notes, "the model copied at no copy step: every score is empty (NaN); --steps all scores every copy query")
	}
	if err := writeTable(r.Out, "retrieval_heads", rows, r.Formats); err != nil {
		return fail(err)
	}
	for _, fm := range r.Formats {
		man.Tables = append(man.Tables, "retrieval_heads."+fm)
	}
	man.Seconds = time.Since(start).Seconds()
	return man, rows, writeJSON(filepath.Join(r.Out, RetrievalManifestName), man)
}

// sampleView streams one pass's tiles (batch 0) into sample s of a
// RetrievalCollector sized for every sample.
type sampleView struct {
	col    *probes.RetrievalCollector
	sample int
}

func (v *sampleView) ConsumeAttn(tile *hooks.AttnTile) error {
	t := *tile
	t.Batch = v.sample
	return v.col.ConsumeAttn(&t)
}

// retrievalConventions states the definitions behind the retrieval table.
func retrievalConventions() map[string]string {
	return map[string]string{
		"task":            "a pass is a segment of n distinct token ids, gap filler ids not in the segment, and the segment again (T = 2n + gap), from PCG(seed, sample) over the whole vocabulary",
		"copy_step":       "query t = n + gap + i − 1 (i = 1 … n − 1) of the second copy, whose next token is the copy of x[i] (its source s(t) = i); counted per retrieval.steps: copied (the model's greedy next token is the copy, Wu et al. 2024) or all",
		"retrieval_score": "hits / steps over the counted copy steps of every sample, a hit when argmax_j alpha[t, j] = s(t) (first maximum on ties): Wu et al.'s copy-paste condition, since no other visible position holds the copied token",
		"source_mass":     "mean over the counted copy steps of alpha[t, s(t)] (0 where s(t) is outside a sliding window); 1/(t + 1) for uniform attention",
		"heads_above":     "heads whose retrieval_score exceeds retrieval.above (Wu et al.'s retrieval heads: > 0.1)",
		"attention_rows":  "post-softmax, pre-gate rows of the softmax layers, streamed in tiles; never a T x T matrix",
	}
}
