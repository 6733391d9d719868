package analysis

import (
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/parquet-go/parquet-go"

	"github.com/filterlens/probe/hooks"
	"github.com/filterlens/probe/model"
	"github.com/filterlens/probe/probes"

	"github.com/filterlens/probe/analysis/results"
	"github.com/filterlens/probe/internal/atomicfile"
)

// Progress reports where a sweep is; Sweep.Progress receives one at the
// start of every pass, after every layer of it, and at its end.
type Progress struct {
	Pass, Passes int // 1-based index of the pass among this shard's, and their number
	T, Sample    int
	// Label names what the pass runs beyond (T, sample) in a run of
	// several passes per chunk (ppl: "<model> <variant>"); empty otherwise.
	Label         string
	Layer, Layers int  // layers finished in the current pass
	Reused        bool // the pass file was already complete and is kept
	Done          bool // the pass is finished (run or reused)
	// Work is the estimated cost of the passes run so far (reused ones
	// excluded) including the current pass's finished layers, WorkLeft
	// that of the passes still to run; the ratio gives an ETA that accounts
	// for attention's T² cost (see passCost).
	Work, WorkLeft float64
	Tokens         int64 // tokens of the passes run so far (finished ones)
	Elapsed        time.Duration
}

// passCost estimates the floating-point work of one length-T pass with
// diagnostics: the projections and MLP (2 flops per weight and token) plus
// causal attention and the per-row diagnostics (about 7·d_head flops per
// (query, key) pair and head: q·k, α·v and the two passes of S).
func passCost(c *model.Config, T int) float64 {
	perLayer := 2*c.DModel*c.Heads*c.DHead + 2*c.DModel*c.KVHeads*c.DHead + 3*c.DModel*c.DMLP
	lin := 2 * float64(perLayer) * float64(c.Layers)
	attn := 7 * float64(c.Layers*c.Heads*c.DHead) * float64(T+1) / 2
	return float64(T) * (lin + attn)
}

// Sweep runs the passes of a sweep (or of one shard of it) on the run
// engine (runStream, kind "sweep"): one pass per (T, sample), whose
// tables buckets and nonfinite are written into passes/, and for an
// unsharded run the tables from the pass files (finishSweep).
type Sweep struct {
	// RunSpec: the token stream, output folder and formats, workers,
	// shard (zero value: the whole sweep), force, stop, progress and
	// command line. Dir and Load are not read (Model is loaded), nor
	// DeviationTokens (Options.DeviationTokens, which the plan records).
	RunSpec
	Model   *model.Model
	Info    results.ModelInfo // DescribeModel(Model)
	Options results.SweepOptions
	Agg     results.AggOptions
	// Timings already spent (hashing, loading, tokenizing) by the caller.
	Timings results.Timings
}

// ErrStopped is wrapped by the error of Sweep.Run (and of the stream
// commands' Run) when its Stop was closed before every pass was finished.
var ErrStopped = errors.New("stopped before its last pass")

// sweepTables are the tables of a sweep's pass: its bucket rows, and the
// non-finite activations it met under --on-nonfinite flag (no row when
// none).
var sweepTables = []string{"buckets", "nonfinite"}

// Run runs the sweep on the run engine: finished pass files with the same
// key are kept, a pass file made with other options is an error naming the
// file and the fields that differ, a folder whose manifest records another
// plan is refused unless Force. On a failure or a stop every finished pass
// file stays, and the manifest records the error and the passes finished.
// It returns the manifest it wrote and, for an unsharded run, the
// aggregated results.
func (s *Sweep) Run() (*results.Manifest, *results.Results, error) {
	start := time.Now()
	man, err := s.prepare()
	if err != nil {
		return nil, nil, err
	}
	ms := &sweepMeasure{Sweep: s, man: man, start: start, passStart: time.Now()}
	err = runStream(&s.RunSpec, man, sweepKeyOptions(s.Info, s.Options), s.Model, ms)
	ms.timings(man, start, ms.passStart, ms.passesEnd)
	if err != nil {
		return man, nil, err
	}
	if s.Shard.Count > 1 {
		// the shard's flags, from its pass files, which finishSweep reads
		// for a whole run
		if man.Flags, err = sweepFlags(s.Out, man, shardChunks(man.Chunks, s.Shard, nil)); err != nil {
			return man, nil, err
		}
		return man, nil, writeJSON(filepath.Join(s.Out, ManifestName(s.Shard)), man)
	}
	return man, ms.res, nil
}

// sweepMeasure is the sweep's measurement: one pass per chunk
// (Sweep.pass), whose buckets finishSweep aggregates into res; its
// manifest records the timings from start, passStart and passesEnd (zero
// until the last pass ended).
type sweepMeasure struct {
	*Sweep
	man                         *results.Manifest
	res                         *results.Results
	start, passStart, passesEnd time.Time
}

func (s *sweepMeasure) tables() []string          { return sweepTables }
func (s *sweepMeasure) ids(c results.Chunk) []int { return s.passIDs(c) }

func (s *sweepMeasure) finish() (err error) {
	s.passesEnd = time.Now()
	s.res, err = finishSweep(s.Out, s.man)
	s.man.Timings.Tables = time.Since(s.passesEnd).Seconds()
	s.timings(s.man, s.start, s.passStart, s.passesEnd)
	return err
}

// timings sets the manifest's timings: the passes from passStart to
// passesEnd (now when zero), the total since start with the caller's.
func (s *Sweep) timings(man *results.Manifest, start, passStart, passesEnd time.Time) {
	if passesEnd.IsZero() {
		passesEnd = time.Now()
	}
	man.Timings.Passes = passesEnd.Sub(passStart).Seconds()
	man.Timings.Total = time.Since(start).Seconds() + s.Timings.Hashing + s.Timings.Loading + s.Timings.Tokenize
}

func flagLine(c results.Chunk, nf NonFiniteInfo) string {
	s := fmt.Sprintf("pass T=%d sample %d: %d attention rows with non-finite %s, first at layer %d, head %d, query %d",
		c.T, c.Sample, nf.Rows, nf.Where, nf.Layer, nf.Head, nf.Query)
	if nf.Aborted != "" {
		s += "; the forward pass stopped: " + nf.Aborted
	}
	return s
}

// prepare validates the options, plans the chunks and starts the manifest.
func (s *Sweep) prepare() (*results.Manifest, error) {
	if s.Model == nil {
		return nil, errors.New("analysis: Sweep.Model is nil")
	}
	if len(s.Formats) == 0 {
		s.Formats = []string{FormatParquet}
	}
	if err := s.defaults(); err != nil {
		return nil, err
	}
	cfg := &s.Model.Config
	s.Options.Compute = string(s.Model.Compute.Recorded())
	if !s.Model.Compute.BF16Products() {
		s.Options.DeviationTokens = 0
	}
	if err := ValidateSweepOptions(&s.Options, cfg.MaxPos, cfg.Vocab); err != nil {
		return nil, err
	}
	if cfg.LearnedPositions() && s.Options.Lengths[len(s.Options.Lengths)-1] > cfg.MaxPos {
		return nil, fmt.Errorf("length %d exceeds the %d learned positions of this %s model (they cannot extrapolate)",
			s.Options.Lengths[len(s.Options.Lengths)-1], cfg.MaxPos, cfg.Arch)
	}
	p, err := ResolveProbeOptions(s.Options.Probe, SigmaDHead(cfg))
	if err != nil {
		return nil, err
	}
	s.Options.Probe = p
	if err := s.Agg.Validate(); err != nil {
		return nil, err
	}
	chunks, err := PlanChunks(len(s.Stream), SweepChunkOptions(&s.Options))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", s.Source.File.Path, err)
	}
	for _, c := range chunks {
		for i, id := range s.Stream[c.Start:c.End] {
			if id < 0 || id >= cfg.Vocab {
				return nil, fmt.Errorf("%s: token %d at stream position %d is outside the model's vocabulary [0, %d)",
					s.Source.File.Path, id, c.Start+i, cfg.Vocab)
			}
		}
	}
	man := &results.Manifest{RunRecord: results.RunRecord{Kind: "sweep", Tool: Tool(), Created: time.Now().UTC().Format(time.RFC3339), Args: s.Args,
		Shard: s.Shard, Model: s.Info, Source: s.Source, Conventions: conventions(s.Options, s.Agg), Chunks: chunks,
		Passes: []results.StreamPass{}, Threads: s.Threads, Formats: s.Formats, CLIOptions: s.CLIOptions},
		Sweep: s.Options, Analysis: s.Agg, GOMAXPROCS: runtime.GOMAXPROCS(0), NumCPU: runtime.NumCPU(), Timings: s.Timings}
	if n := s.Options.DeviationTokens; n > 0 && len(chunks) > 0 {
		ids := s.passIDs(chunks[0])
		copts, _ := collectorOptions(s.Options.Probe)
		d, err := MeasureDeviation(s.Model, [][]int{ids[:min(n, len(ids))]}, model.Compute(s.Options.Compute), copts, s.Options.AllowExtrapolation, s.Threads)
		if err != nil {
			return nil, err
		}
		man.Deviation = d
	}
	return man, nil
}

// passIDs returns the token ids of a pass: the optional BOS, then the chunk.
func (s *Sweep) passIDs(c results.Chunk) []int {
	ids := make([]int, 0, c.T)
	if s.Options.BOSToken >= 0 {
		ids = append(ids, s.Options.BOSToken)
	}
	return append(ids, s.Stream[c.Start:c.End]...)
}

// sweepKey is what of a sweep's options and model decides the rows of
// its passes beside the model digest, the chunk and its tokens (the
// StreamKey's Options).
type sweepKey struct {
	BOSToken int                  `json:"bos_token"` // −1: none
	Bucket   int                  `json:"bucket"`
	LastFrac float64              `json:"last_frac"`
	BOSFrac  float64              `json:"bos_frac"`
	Probe    results.ProbeOptions `json:"probe"`
	// Cuts are the model's distinct sliding windows w, where the buckets
	// are also cut (t < w sees position 0, t ≥ w does not), so that the
	// BOS mass aggregates can leave the queries without position 0 out
	// exactly (absent for a model without sliding windows).
	Cuts []int `json:"window_cuts,omitempty"`
	// Compute is SweepOptions.Compute (omitted for f32).
	Compute string `json:"compute,omitempty"`
}

// sweepKeyOptions is the sweepKey of a sweep of o on the model info.
func sweepKeyOptions(info results.ModelInfo, o results.SweepOptions) sweepKey {
	probe := o.Probe
	if !info.Sinks {
		probe.SinkRows = "" // decides nothing without sinks: a re-run with another --sink-rows keeps the passes
	}
	return sweepKey{BOSToken: o.BOSToken, Bucket: o.Bucket, LastFrac: o.LastFrac, BOSFrac: o.BOSFrac, Probe: probe,
		Cuts: windowCuts(info.Windows), Compute: o.Compute}
}

// checkMemory checks, before the first pass, that a pass of length T
// fits with its Collector's results (probes.CheckModelMemory): a sweep
// that cannot is refused at its start, not at its last length.
func (s *Sweep) checkMemory(T int) error {
	copts, _ := collectorOptions(s.Options.Probe)
	copts.Sinks = s.Info.Sinks
	err := probes.CheckModelMemory(s.Model, 1, T, model.Options{Threads: s.Threads}, copts)
	if err != nil {
		return fmt.Errorf("with its diagnostics' results: %w", err)
	}
	return nil
}

// longestT is the longest T of chunks (0 for none): the pass whose memory
// a run checks before its first.
func longestT(chunks []results.Chunk) int {
	T := 0
	for _, c := range chunks {
		T = max(T, c.T)
	}
	return T
}

// pass runs one forward pass with the Collector on every layer and the
// gate hook (watch adds the progress's), and summarizes it into bucket
// rows, with the non-finite activations it met (sweepTables).
func (s *Sweep) pass(c results.Chunk, watch func(*hooks.Set)) ([]passTable, error) {
	m := s.Model
	cfg := &m.Config
	copts, _ := collectorOptions(s.Options.Probe)
	copts.ContinueOnNonFinite = s.Options.OnNonFinite == NonFiniteFlag
	copts.Sinks = s.Info.Sinks
	col, err := probes.NewModelCollector(1, cfg, c.T, copts)
	if err != nil {
		return nil, err
	}
	hs := col.Hooks(cfg)
	watch(hs)
	_, ferr := m.Forward([][]int{s.passIDs(c)}, model.Options{Hooks: hs, AllowExtrapolation: s.Options.AllowExtrapolation,
		Threads: s.Threads})
	where := fmt.Sprintf("stream tokens [%d,%d)", c.Start, c.End) // the engine names the pass before it
	if ferr != nil {
		var nf *probes.NonFiniteError
		switch {
		case errors.As(ferr, &nf):
			return nil, fmt.Errorf("%s: non-finite %s in layer %d, head %d, query %d; the passes finished before it are kept in %s (--on-nonfinite flag records such passes and goes on)",
				where, nf.Where, nf.Layer, nf.Head, nf.Query, s.Out)
		case copts.ContinueOnNonFinite && (col.NonFiniteRows() > 0 || strings.Contains(ferr.Error(), "non-finite")):
			// recorded below
		default:
			return nil, fmt.Errorf("%s: %w", where, ferr)
		}
	}
	nonfinite := []NonFiniteInfo{}
	if first, ok := col.FirstNonFinite(); ok || ferr != nil {
		info := NonFiniteInfo{Layer: -1, Head: -1, Query: -1, Rows: col.NonFiniteRows()}
		if ok {
			info.Layer, info.Head, info.Query, info.Where = first.Layer, first.Head, first.Query, first.Where
		}
		if ferr != nil {
			info.Aborted = ferr.Error()
		}
		nonfinite = append(nonfinite, info)
	}
	edges := bucketEdges(c.T, s.Options.Bucket, append([]int{windowStart(c.T, s.Options.LastFrac), windowStart(c.T, s.Options.BOSFrac)},
		windowCuts(s.Info.Windows)...)...)
	rows := bucketRows(col, 0, c.T, c.Sample, edges, cfg.Gate != model.GateNone, s.Info.Sinks, cfg.SoftmaxLayers())
	return []passTable{tableOf("buckets", rows), tableOf("nonfinite", nonfinite)}, nil
}

// readBuckets reads and checks the bucket rows of chunk c's pass in dir.
func readBuckets(dir string, man *results.Manifest, c results.Chunk) ([]BucketRow, error) {
	return readPassRows[BucketRow](dir, "buckets", man, sweepKeyOptions(man.Model, man.Sweep), c)
}

// sweepFlags are the flags of the passes of chunks in dir: one line per
// pass that met non-finite activations (its nonfinite pass table).
func sweepFlags(dir string, man *results.Manifest, chunks []results.Chunk) ([]string, error) {
	var flags []string
	for _, c := range chunks {
		nf, err := readPassRows[NonFiniteInfo](dir, "nonfinite", man, sweepKeyOptions(man.Model, man.Sweep), c)
		if err != nil {
			return nil, err
		}
		for _, f := range nf {
			flags = append(flags, flagLine(c, f))
		}
	}
	return flags, nil
}

// finishSweep is the sweep's finish step: it reads the pass files of every
// chunk of man (from dir/passes), checks them against the manifest, and
// writes the tables (buckets, heads, fig2, fig3, fig4 in each of the
// manifest's formats, and summary.json) into dir. The manifest's Flags,
// LayersUsed, Notes and Tables are set from what it read and wrote.
func finishSweep(dir string, man *results.Manifest) (*results.Results, error) {
	agg, err := newAggregator(shapeOf(man.Model), man.Sweep, man.Sweep.Probe, man.Analysis)
	if err != nil {
		return nil, err
	}
	for _, c := range man.Chunks {
		rows, err := readBuckets(dir, man, c)
		if err != nil {
			return nil, err
		}
		if err := agg.Add(rows); err != nil {
			return nil, fmt.Errorf("%s: %w", streamPassPath(dir, "buckets", c), err)
		}
	}
	res, err := agg.Results()
	if err != nil {
		return nil, err
	}
	if man.Flags, err = sweepFlags(dir, man, man.Chunks); err != nil {
		return nil, err
	}
	man.LayersUsed = res.Summary.LayersUsed
	man.Notes = append(man.Notes, res.Summary.Notes...)
	man.Tables = nil
	// buckets: streamed pass by pass (one Parquet row group per pass).
	for _, f := range man.Formats {
		path := filepath.Join(dir, "buckets."+f)
		err := atomicfile.Write(path, func(w io.Writer) error {
			return writeBuckets(w, f, func(emit func([]BucketRow) error) error {
				for _, c := range man.Chunks {
					rows, err := readBuckets(dir, man, c)
					if err != nil {
						return err
					}
					if err := emit(rows); err != nil {
						return err
					}
				}
				return nil
			})
		})
		if err != nil {
			return nil, err
		}
		man.Tables = append(man.Tables, filepath.Base(path))
	}
	tables := man.Tables
	if err := writeTables(man.Record(), dir, tableOf("heads", res.Heads), tableOf("fig2", res.Fig2), tableOf("fig3", res.Fig3),
		tableOf("fig4", res.Fig4)); err != nil {
		return nil, err
	}
	man.Tables = append(tables, man.Tables...)
	if err := writeJSON(filepath.Join(dir, "summary.json"), res.Summary); err != nil {
		return nil, err
	}
	man.Tables = append(man.Tables, "summary.json")
	return res, nil
}

// writeBuckets streams bucket rows in one format; each(emit) calls emit
// once per pass.
func writeBuckets(w io.Writer, format string, each func(emit func([]BucketRow) error) error) error {
	switch format {
	case FormatParquet:
		pw := parquet.NewGenericWriter[BucketRow](w, parquetOptions(nil)...)
		err := each(func(rows []BucketRow) error {
			if _, err := pw.Write(rows); err != nil {
				return err
			}
			return pw.Flush()
		})
		if err != nil {
			return err
		}
		return pw.Close()
	case FormatCSV:
		first := true
		return each(func(rows []BucketRow) error {
			var b strings.Builder
			if err := writeCSV(&b, rows); err != nil {
				return err
			}
			out := b.String()
			if !first {
				out = out[strings.IndexByte(out, '\n')+1:] // header once
			}
			first = false
			_, err := io.WriteString(w, out)
			return err
		})
	case FormatJSONL:
		return each(func(rows []BucketRow) error { return writeJSONL(w, rows) })
	}
	return fmt.Errorf("unknown table format %q", format)
}
