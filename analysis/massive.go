package analysis

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"time"

	"gorgonia.org/tensor"

	"github.com/filterlens/probe/hooks"
	"github.com/filterlens/probe/model"
	"github.com/filterlens/probe/probes"
)

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
	Lengths   []int  `json:"lengths"`
	Samples   int    `json:"samples"`
	Disjoint  string `json:"disjoint"`
	Placement string `json:"placement"`
	Seed      uint64 `json:"seed"`
	Offset    int    `json:"offset"`
	// TopK entries per layer are reported.
	TopK int `json:"top_k"`
	// Interventions run after the plain pass, each its own pass.
	Interventions []string `json:"interventions"`
	// Layer is the layer whose top Entries entries are replaced (−1: in
	// each pass the layer with the largest top-1 ratio to its median).
	Layer   int `json:"layer"`
	Entries int `json:"entries"` // 0: TopK
	// AllowExtrapolation runs lengths beyond max_position_embeddings.
	AllowExtrapolation bool `json:"allow_extrapolation"`
}

// DefaultMassiveOptions are the command's defaults.
func DefaultMassiveOptions() MassiveOptions {
	return MassiveOptions{Samples: 1, Disjoint: DisjointAll, Placement: PlaceSequential, Seed: 1, TopK: 10,
		Interventions: []string{MassiveZero, MassiveMean}, Layer: -1}
}

// MassiveManifest records a massive run.
type MassiveManifest struct {
	Kind        string            `json:"kind"` // "massive"
	Tool        ToolInfo          `json:"tool"`
	Created     string            `json:"created"`
	Error       string            `json:"error,omitempty"`
	Args        []string          `json:"args,omitempty"`
	Model       ModelInfo         `json:"model"`
	Source      SourceInfo        `json:"source"`
	Options     MassiveOptions    `json:"massive"`
	Conventions map[string]string `json:"conventions"`
	Chunks      []Chunk           `json:"chunks"` // Start, End cover the T + 1 tokens of each chunk
	Threads     int               `json:"threads"`
	Seconds     float64           `json:"total_seconds"`
	CLIOptions  []Option          `json:"options,omitempty"`
	Tables      []string          `json:"tables,omitempty"`
	// Deviation, for a model run in bf16 arithmetic, is how far its logits
	// and diagnostics lie from float32 on the first tokens of the first
	// chunk (streamDeviation).
	Deviation *Deviation `json:"compute_deviation,omitempty"`
}

// MassiveManifestName is the manifest's file name in a massive run's folder.
const MassiveManifestName = "massive_manifest.json"

// MassiveRun is one `probe massive` run.
type MassiveRun struct {
	Dir        string
	Load       model.LoadOptions
	Source     SourceInfo
	Stream     []int
	Options    MassiveOptions
	Out        string
	Formats    []string
	Threads    int
	CLIOptions []Option
	Args       []string
	// DeviationTokens: with a model loaded for bf16 arithmetic, the first
	// DeviationTokens tokens of the first chunk also run in float32
	// (Manifest.Deviation; 0: not measured).
	DeviationTokens int
}

// Run runs the passes and writes massive_top, massive_ppl and the manifest.
func (r *MassiveRun) Run() (*MassiveManifest, []MassiveTopRow, []MassivePPLRow, error) {
	start := time.Now()
	o := &r.Options
	if o.TopK < 1 {
		return nil, nil, nil, fmt.Errorf("top-k %d: want at least 1", o.TopK)
	}
	if o.Entries == 0 {
		o.Entries = o.TopK
	}
	if o.Entries < 1 || o.Entries > o.TopK {
		return nil, nil, nil, fmt.Errorf("entries %d: want 1 … top-k (%d)", o.Entries, o.TopK)
	}
	for _, iv := range o.Interventions {
		if iv != MassiveZero && iv != MassiveMean {
			return nil, nil, nil, fmt.Errorf("intervention %q: want %s or %s", iv, MassiveZero, MassiveMean)
		}
	}
	if len(r.Formats) == 0 {
		r.Formats = []string{FormatParquet, FormatCSV}
	}
	if r.Threads <= 0 {
		r.Threads = runtime.GOMAXPROCS(0)
	}
	plus := make([]int, len(o.Lengths))
	for i, T := range o.Lengths {
		plus[i] = T + 1
	}
	chunks, err := PlanChunks(len(r.Stream), ChunkOptions{Lengths: plus, Samples: o.Samples, Disjoint: o.Disjoint,
		Placement: o.Placement, Seed: o.Seed, Offset: o.Offset})
	if err != nil {
		return nil, nil, nil, fmt.Errorf("%s: %w (a chunk is T + 1 tokens)", r.Source.File.Path, err)
	}
	for i := range chunks {
		chunks[i].T--
	}
	m, err := model.Load(r.Dir, r.Load)
	if err != nil {
		return nil, nil, nil, err
	}
	c := &m.Config
	if o.Layer >= c.Layers {
		return nil, nil, nil, fmt.Errorf("layer %d: the model has %d layers (0 … %d; −1 picks the layer with the largest ratio)", o.Layer, c.Layers, c.Layers-1)
	}
	for _, ch := range chunks {
		for j, id := range r.Stream[ch.Start:ch.End] {
			if id < 0 || id >= c.Vocab {
				return nil, nil, nil, fmt.Errorf("%s: token %d at stream position %d is outside the vocabulary [0, %d)", r.Source.File.Path, id, ch.Start+j, c.Vocab)
			}
		}
	}
	info, err := DescribeModel(m)
	if err != nil {
		return nil, nil, nil, err
	}
	if err := os.MkdirAll(r.Out, 0o755); err != nil {
		return nil, nil, nil, err
	}
	man := &MassiveManifest{Kind: "massive", Tool: Tool(), Created: time.Now().UTC().Format(time.RFC3339), Args: r.Args,
		Model: info, Source: r.Source, Options: *o, Conventions: massiveConventions(), Chunks: chunks, Threads: r.Threads,
		CLIOptions: r.CLIOptions}
	if man.Deviation, err = streamDeviation(m, r.Stream, chunks, r.DeviationTokens, o.AllowExtrapolation, r.Threads); err != nil {
		return nil, nil, nil, err
	}
	fail := func(err error) (*MassiveManifest, []MassiveTopRow, []MassivePPLRow, error) {
		man.Error = err.Error()
		man.Seconds = time.Since(start).Seconds()
		if werr := writeJSON(filepath.Join(r.Out, MassiveManifestName), man); werr != nil {
			return man, nil, nil, fmt.Errorf("%w (and writing the manifest failed: %v)", err, werr)
		}
		return man, nil, nil, err
	}
	var tops []MassiveTopRow
	var ppls []MassivePPLRow
	D := c.DModel
	for _, ch := range chunks {
		T := ch.T
		ids := [][]int{r.Stream[ch.Start : ch.End-1]}
		targets := r.Stream[ch.Start+1 : ch.End]
		opt := model.Options{Logits: true, AllowExtrapolation: o.AllowExtrapolation, Threads: r.Threads}

		// plain pass: top entries and median of every layer
		top := make([][]probes.Activation, c.Layers)
		med := make([]float64, c.Layers)
		var scratch []float32
		hs := &hooks.Set{}
		hs.Add(hooks.ResidPost, func(_ string, l int, x *tensor.Dense) error {
			h := x.Data().([]float32)
			top[l] = probes.TopAbs(h, T, D, o.TopK)
			med[l], scratch = probes.MedianAbs(h, scratch)
			return nil
		})
		opt.Hooks = hs
		out, err := m.Forward(ids, opt)
		if err != nil {
			return fail(fmt.Errorf("T=%d sample %d: %w", T, ch.Sample, err))
		}
		base := meanNLL(out.Logits, m.Vocab, targets)
		ppls = append(ppls, MassivePPLRow{T: T, Sample: ch.Sample, Intervention: "none", Layer: -1, Tokens: T, NLL: base,
			PPL: math.Exp(base)})
		layer, best := o.Layer, -1.0
		for l := 0; l < c.Layers; l++ {
			for k, a := range top[l] {
				ratio := math.Abs(float64(a.Value)) / med[l]
				tops = append(tops, MassiveTopRow{T: T, Sample: ch.Sample, Layer: l, Rank: k, Position: a.Position, Channel: a.Channel,
					Value: float64(a.Value), MedianAbs: med[l], Ratio: ratio})
				if k == 0 && o.Layer < 0 && ratio > best {
					layer, best = l, ratio
				}
			}
		}
		entries := top[layer][:min(o.Entries, len(top[layer]))]
		for _, iv := range o.Interventions {
			hs := &hooks.Set{}
			hs.Add(hooks.Name(hooks.ResidPost, layer), func(_ string, _ int, x *tensor.Dense) error {
				h := x.Data().([]float32)
				var means []float64
				if iv == MassiveMean {
					means = make([]float64, D)
					probes.ChannelMeans(means, h, T, D)
				}
				probes.ReplaceEntries(h, D, entries, means)
				return nil
			})
			opt.Hooks = hs
			out, err := m.Forward(ids, opt)
			if err != nil {
				return fail(fmt.Errorf("T=%d sample %d, intervention %s at layer %d: %w", T, ch.Sample, iv, layer, err))
			}
			nll := meanNLL(out.Logits, m.Vocab, targets)
			ppls = append(ppls, MassivePPLRow{T: T, Sample: ch.Sample, Intervention: iv, Layer: layer, Entries: len(entries),
				Tokens: T, NLL: nll, PPL: math.Exp(nll), DNLL: nll - base})
		}
	}
	if err := writeTable(r.Out, "massive_top", tops, r.Formats); err != nil {
		return fail(err)
	}
	if err := writeTable(r.Out, "massive_ppl", ppls, r.Formats); err != nil {
		return fail(err)
	}
	for _, fm := range r.Formats {
		man.Tables = append(man.Tables, "massive_top."+fm, "massive_ppl."+fm)
	}
	man.Seconds = time.Since(start).Seconds()
	if err := writeJSON(filepath.Join(r.Out, MassiveManifestName), man); err != nil {
		return man, tops, ppls, err
	}
	return man, tops, ppls, nil
}

// meanNLL is the mean of TokenNLL over the targets.
func meanNLL(logits []float32, V int, targets []int) float64 {
	var s float64
	for _, x := range TokenNLL(nil, logits, V, targets) {
		s += x
	}
	return s / float64(len(targets))
}

// massiveConventions states the definitions behind the massive tables.
func massiveConventions() map[string]string {
	return map[string]string{
		"activation":   "blocks.{l}.hook_resid_post, the residual stream leaving block l, batch 1",
		"top":          "the top_k entries by |h[t,i]| (ties: earlier position, then earlier channel), ratio = |h| / median over all T x d_model entries of |h| (exact)",
		"massive":      "Sun et al. 2024 call an entry massive when |h| > 100 and about 1000 x the median; the table reports the top entries, whatever their size",
		"intervention": "a second pass with the top `entries` entries of `layer` (default: the layer with the largest top-1 ratio in that pass) set to 0 (zero) or to their channel's mean over the pass's positions (mean, computed from the live activation at that layer); later layers see the change",
		"nll":          "mean over the T predicted tokens of logsumexp(z_t) - z_t[x_{t+1}] in float64; ppl = exp(nll); d_nll = nll - nll(none) on the same chunk",
	}
}
