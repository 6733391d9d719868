package analysis

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"time"

	"github.com/filterlens/probe/hooks"
	"github.com/filterlens/probe/model"
	"github.com/filterlens/probe/probes"
)

// GDNRow is one row of the gdn table: the Gated DeltaNet filter quantities
// of one (length, sample, layer, value head, token) (probes.GDNFilter).
type GDNRow struct {
	T          int     `parquet:"T"`
	Sample     int     `parquet:"sample"`
	Layer      int     `parquet:"layer"`
	Head       int     `parquet:"head"`
	Token      int     `parquet:"token"`
	Beta       float64 `parquet:"beta"`
	Decay      float64 `parquet:"decay"`
	Horizon    float64 `parquet:"horizon"`
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
	Lengths   []int  `json:"lengths"`
	Samples   int    `json:"samples"`
	Disjoint  string `json:"disjoint"`
	Placement string `json:"placement"`
	Seed      uint64 `json:"seed"`
	Offset    int    `json:"offset"`
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
	// NoRows skips the effective-attention rows (every W-row column NaN).
	NoRows   bool `json:"no_w_rows"`
	TileRows int  `json:"tile_rows"`
	// AllowExtrapolation runs lengths beyond max_position_embeddings.
	AllowExtrapolation bool `json:"allow_extrapolation"`
}

// GDNManifest records a gdn run.
type GDNManifest struct {
	Kind        string            `json:"kind"` // "gdn"
	Tool        ToolInfo          `json:"tool"`
	Created     string            `json:"created"`
	Error       string            `json:"error,omitempty"`
	Args        []string          `json:"args,omitempty"`
	Model       ModelInfo         `json:"model"`
	Layers      []int             `json:"gdn_layers"`
	Source      SourceInfo        `json:"source"`
	Options     GDNOptions        `json:"gdn"`
	Conventions map[string]string `json:"conventions"`
	Chunks      []Chunk           `json:"chunks"`
	Threads     int               `json:"threads"`
	Seconds     float64           `json:"total_seconds"`
	PassSeconds []float64         `json:"pass_seconds"`
	CLIOptions  []Option          `json:"options,omitempty"`
	Tables      []string          `json:"tables,omitempty"`
	// Deviation, for a model run in bf16 arithmetic, is how far its logits
	// and diagnostics lie from float32 on the first tokens of the first
	// chunk (streamDeviation).
	Deviation *Deviation `json:"compute_deviation,omitempty"`
}

// GDNManifestName is the manifest's file name in a gdn run's folder.
const GDNManifestName = "gdn_manifest.json"

// GDNRun is one `probe gdn` run: one forward pass per chunk of the stream
// with a probes.GDNFilter on every Gated DeltaNet layer, written as the
// table gdn (Parquet and/or CSV) and gdn_manifest.json in Out.
type GDNRun struct {
	Dir        string
	Load       model.LoadOptions
	Source     SourceInfo
	Stream     []int
	Options    GDNOptions
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

// Run runs the passes and writes the table and the manifest; on a failure
// after the output folder exists the manifest records the error.
func (r *GDNRun) Run() (*GDNManifest, []GDNRow, error) {
	start := time.Now()
	o := &r.Options
	if o.Innovation == "" {
		o.Innovation = probes.InnovationDecayed.String()
	}
	if o.Weights == "" {
		o.Weights = probes.WeightsAbs.String()
	}
	if o.Disjoint == "" {
		o.Disjoint = DisjointAll
	}
	if o.Placement == "" {
		o.Placement = PlaceSequential
	}
	innov, err := probes.ParseInnovationForm(o.Innovation)
	if err != nil {
		return nil, nil, err
	}
	weights, err := probes.ParseEffAttnWeights(o.Weights)
	if err != nil {
		return nil, nil, err
	}
	if len(r.Formats) == 0 {
		r.Formats = []string{FormatParquet, FormatCSV}
	}
	if r.Threads <= 0 {
		r.Threads = runtime.GOMAXPROCS(0)
	}
	chunks, err := PlanChunks(len(r.Stream), ChunkOptions{Lengths: o.Lengths, Samples: o.Samples, Disjoint: o.Disjoint,
		Placement: o.Placement, Seed: o.Seed, Offset: o.Offset})
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", r.Source.File.Path, err)
	}
	m, err := model.Load(r.Dir, r.Load)
	if err != nil {
		return nil, nil, err
	}
	c := &m.Config
	if c.DeltaNet == nil {
		return nil, nil, fmt.Errorf("%s: %s has no Gated DeltaNet layers (probe gdn measures Qwen3.5-style hybrids; use probe diag or probe sinks for softmax layers)", r.Dir, c.Arch)
	}
	info, err := DescribeModel(m)
	if err != nil {
		return nil, nil, err
	}
	if err := os.MkdirAll(r.Out, 0o755); err != nil {
		return nil, nil, err
	}
	dn := c.DeltaNet
	layers := dn.LinearLayers()
	man := &GDNManifest{Kind: "gdn", Tool: Tool(), Created: time.Now().UTC().Format(time.RFC3339), Args: r.Args,
		Model: info, Layers: layers, Source: r.Source, Options: *o, Conventions: gdnConventions(), Chunks: chunks,
		Threads: r.Threads, CLIOptions: r.CLIOptions}
	if man.Deviation, err = streamDeviation(m, r.Stream, chunks, r.DeviationTokens, o.AllowExtrapolation, r.Threads); err != nil {
		return nil, nil, err
	}
	fail := func(err error) (*GDNManifest, []GDNRow, error) {
		man.Error = err.Error()
		man.Seconds = time.Since(start).Seconds()
		if werr := writeJSON(filepath.Join(r.Out, GDNManifestName), man); werr != nil {
			return man, nil, fmt.Errorf("%w (and writing the manifest failed: %v)", err, werr)
		}
		return man, nil, err
	}
	var rows []GDNRow
	var heads []GDNHeadRow
	for _, ch := range chunks {
		t0 := time.Now()
		f, err := probes.NewGDNFilter(1, ch.T, c.Layers, layers, dn.ValueHeads, dn.KeyDim, dn.ValueDim,
			probes.GDNOptions{Innovation: innov, Weights: weights, Nu: o.Nu, Sigma02: o.Sigma02, Prior: o.Prior,
				NoDispersion: o.NoDispersion, NoRows: o.NoRows, Threads: r.Threads})
		if err != nil {
			return fail(err)
		}
		hs := &hooks.Set{}
		f.Register(hs)
		ids := [][]int{r.Stream[ch.Start:ch.End]}
		if _, err := m.Forward(ids, model.Options{Hooks: hs, AllowExtrapolation: o.AllowExtrapolation, TileRows: o.TileRows,
			Threads: r.Threads}); err != nil {
			return fail(fmt.Errorf("T=%d sample %d: %w", ch.T, ch.Sample, err))
		}
		rows = appendGDNRows(rows, f, ch)
		heads = appendGDNHeads(heads, f, ch)
		man.PassSeconds = append(man.PassSeconds, time.Since(t0).Seconds())
	}
	if err := writeTable(r.Out, "gdn", rows, r.Formats); err != nil {
		return fail(err)
	}
	if err := writeTable(r.Out, "gdn_heads", heads, r.Formats); err != nil {
		return fail(err)
	}
	for _, fm := range r.Formats {
		man.Tables = append(man.Tables, "gdn."+fm, "gdn_heads."+fm)
	}
	man.Seconds = time.Since(start).Seconds()
	if err := writeJSON(filepath.Join(r.Out, GDNManifestName), man); err != nil {
		return man, rows, err
	}
	return man, rows, nil
}

// appendGDNRows appends the rows of one pass (batch 1) in (layer, head,
// token) order.
func appendGDNRows(rows []GDNRow, f *probes.GDNFilter, ch Chunk) []GDNRow {
	for s, l := range f.Layers {
		for h := 0; h < f.Hv; h++ {
			for t := 0; t < f.T; t++ {
				i := f.Index(0, s, h, t)
				rows = append(rows, GDNRow{T: ch.T, Sample: ch.Sample, Layer: l, Head: h, Token: t,
					Beta: f.Beta[i], Decay: f.Decay[i], Horizon: f.Horizon[i], Innovation: f.Innovation[i],
					StateNorm: f.StateNorm[i], NEffW: f.NEffW[i], FirstShare: f.FirstShare[i], RowSum: f.RowSum[i],
					NegShare: f.NegShare[i], SMeanW: f.SMeanW[i], LambdaObsW: f.LambdaObsW[i], KW: f.KW[i]})
			}
		}
	}
	return rows
}

// GDNHeadRow is one row of the gdn_heads table: per (length, sample,
// layer, value head) the mean over tokens of each column of gdn (over its
// finite values; Nonfinite counts the others over every column), and the
// median horizon, which a token with g = 0 (+Inf) would dominate as a mean.
type GDNHeadRow struct {
	T             int     `parquet:"T"`
	Sample        int     `parquet:"sample"`
	Layer         int     `parquet:"layer"`
	Head          int     `parquet:"head"`
	Tokens        int     `parquet:"tokens"`
	Beta          float64 `parquet:"beta"`
	Decay         float64 `parquet:"decay"`
	HorizonMedian float64 `parquet:"horizon_median"`
	Innovation    float64 `parquet:"innovation"`
	StateNorm     float64 `parquet:"state_norm"`
	NEffW         float64 `parquet:"neff_w"`
	FirstShare    float64 `parquet:"first_share"`
	RowSum        float64 `parquet:"row_sum"`
	NegShare      float64 `parquet:"neg_share"`
	SMeanW        float64 `parquet:"S_mean_w"`
	LambdaObsW    float64 `parquet:"lambda_obs_w"`
	KW            float64 `parquet:"K_w"`
	Nonfinite     int     `parquet:"nonfinite"`
}

// appendGDNHeads appends the gdn_heads rows of one pass (batch 1) in
// (layer, head) order.
func appendGDNHeads(heads []GDNHeadRow, f *probes.GDNFilter, ch Chunk) []GDNHeadRow {
	hz := make([]float64, 0, f.T)
	for s, l := range f.Layers {
		for h := 0; h < f.Hv; h++ {
			at := f.Index(0, s, h, 0)
			row := GDNHeadRow{T: ch.T, Sample: ch.Sample, Layer: l, Head: h, Tokens: f.T}
			for _, c := range []struct {
				dst *float64
				src []float64
			}{{&row.Beta, f.Beta}, {&row.Decay, f.Decay}, {&row.Innovation, f.Innovation}, {&row.StateNorm, f.StateNorm},
				{&row.NEffW, f.NEffW}, {&row.FirstShare, f.FirstShare}, {&row.RowSum, f.RowSum}, {&row.NegShare, f.NegShare},
				{&row.SMeanW, f.SMeanW}, {&row.LambdaObsW, f.LambdaObsW}, {&row.KW, f.KW}} {
				var sum float64
				n := 0
				for _, x := range c.src[at : at+f.T] {
					if math.IsNaN(x) || math.IsInf(x, 0) {
						row.Nonfinite++
						continue
					}
					sum += x
					n++
				}
				*c.dst = math.NaN()
				if n > 0 {
					*c.dst = sum / float64(n)
				}
			}
			hz = append(hz[:0], f.Horizon[at:at+f.T]...)
			slices.Sort(hz)
			row.HorizonMedian = hz[len(hz)/2]
			if len(hz)%2 == 0 {
				row.HorizonMedian = (hz[len(hz)/2-1] + hz[len(hz)/2]) / 2
			}
			heads = append(heads, row)
		}
	}
	return heads
}

// gdnConventions states the definitions behind the gdn table's columns.
func gdnConventions() map[string]string {
	return map[string]string{
		"recurrence":   "S_t = e^{g_t} S_{t-1} + beta_t k_t (v_t - e^{g_t} S_{t-1}^T k_t)^T, o_t = S_t^T q_t / sqrt(d_k); k, q L2-normalised (blocks.{l}.gdn.hook_*)",
		"decay":        "e^{g_t}; horizon = 1/(1 - e^{g_t}) tokens (+Inf at g = 0)",
		"innovation":   "||r_t||_2, r_t = v_t - e^{g_t} S_{t-1}^T k_t (decayed) or v_t - S_{t-1}^T k_t (undecayed); float64 recurrence on the hooked k, v, beta, g",
		"state_norm":   "||S_t||_F after step t",
		"neff_w":       "(sum_s |W[t,s]|)^2 / sum_s W[t,s]^2 over the exact effective-attention row (o_t = sum_s W[t,s] v_s)",
		"first_share":  "|W[t,0]| / sum_s |W[t,s]|",
		"row_sum":      "sum_s W[t,s]",
		"neg_share":    "sum_{W<0} |W[t,s]| / sum_s |W[t,s]|",
		"S_mean_w":     "mean_i sum_s pi_s (v_si - m_i)^2, m = sum_s pi_s v_s; pi = |W|/sum|W| (abs) or W/sum W where all entries share the sum's sign (signed; NaN elsewhere)",
		"lambda_obs_w": "(neff_w + nu)/(S_mean_w + nu sigma0^2) (BFT Eq. 6 on pi), K_w = lambda_obs_w/(lambda + lambda_obs_w)",
		"batch":        "one sequence per pass (batch 1); the token column is the position in the chunk",
	}
}
