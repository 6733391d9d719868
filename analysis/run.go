package analysis

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/parquet-go/parquet-go"

	"github.com/filterlens/probe/hooks"
	"github.com/filterlens/probe/model"
	"github.com/filterlens/probe/probes"

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

// Sweep runs the passes of a sweep (or of one shard of it), writes one
// pass file per (T, sample), and for an unsharded run the tables.
type Sweep struct {
	Model   *model.Model
	Info    ModelInfo // DescribeModel(Model)
	Source  SourceInfo
	Stream  []int // the token stream
	Options SweepOptions
	Agg     AggOptions
	Out     string
	Shard   Shard // zero value: the whole sweep
	Threads int   // attention workers (0: GOMAXPROCS)
	Formats []string
	// Options and arguments as given on the command line, for the manifest.
	CLIOptions []Option
	Args       []string
	// Progress, when set, is called as the sweep advances.
	Progress func(Progress)
	// Stop, when closed, stops the sweep before its next pass: Run
	// returns ErrStopped with the finished passes kept and the manifest
	// saying the sweep is unfinished. A pass under way is finished first.
	Stop <-chan struct{}
	// Timings already spent (hashing, loading, tokenizing) by the caller.
	Timings Timings
}

// ErrStopped is wrapped by the error of Sweep.Run (and of the stream
// commands' Run) when its Stop was closed before every pass was finished.
var ErrStopped = errors.New("stopped before its last pass")

// Run runs the sweep. The manifest is written first, marked incomplete
// (unless the folder's manifest records a finished sweep, whose tables
// stay valid until new ones are written), and completed at the end.
// Finished pass files with the same key are kept; a pass file made with
// other options is an error naming the file and the fields that differ.
// On a failure or a stop every finished pass file stays, and the manifest
// records the error and the passes finished. It returns the manifest it
// wrote and, for an unsharded run, the aggregated results.
func (s *Sweep) Run() (*Manifest, *Results, error) {
	start := time.Now()
	man, chunks, err := s.prepare()
	if err != nil {
		return nil, nil, err
	}
	if err := os.MkdirAll(filepath.Join(s.Out, "passes"), 0o755); err != nil {
		return nil, nil, err
	}
	fail := func(err error) (*Manifest, *Results, error) {
		man.Error = err.Error()
		man.Timings.Total = time.Since(start).Seconds() + s.Timings.Hashing + s.Timings.Loading + s.Timings.Tokenize
		return man, nil, recordFailure(filepath.Join(s.Out, ManifestName(s.Shard)), man, err)
	}
	if old, err := ReadManifest(filepath.Join(s.Out, ManifestName(s.Shard))); err != nil || !old.Complete {
		if err := writeJSON(filepath.Join(s.Out, ManifestName(s.Shard)), man); err != nil {
			return nil, nil, err
		}
	}

	mine := shardChunks(chunks, s.Shard, nil)
	if err := s.checkMemory(mine); err != nil {
		return fail(err)
	}
	// progress through the engine's (streamProgress): one forward pass
	// of the model per chunk
	pr := newStreamProgress(streamRun{RunSpec: &RunSpec{Progress: s.Progress}, model: s.Model}, mine, start)
	passStart := time.Now()
	for i, c := range mine {
		path := passPath(s.Out, c.T, c.Sample)
		key := s.key(c)
		if _, err := os.Stat(path); err == nil {
			// Read it whole: a damaged page (CRC mismatch) makes it
			// incomplete too, and it is run again.
			rec, _, err := ReadPass(path)
			switch {
			case errors.Is(err, errIncomplete):
				man.Notes = append(man.Notes, fmt.Sprintf("%s was incomplete (%v) and was run again", path, err))
			case err != nil:
				return fail(err)
			case rec.Hash != key.Hash():
				return fail(fmt.Errorf("%s was made from another model, text or options (%s); use another --out or remove the file",
					path, strings.Join(keyDiff(key, rec.Key), "; ")))
			default:
				man.Passes = append(man.Passes, rec)
				man.Reused = append(man.Reused, rec.File)
				if rec.NonFinite != nil {
					man.Flags = append(man.Flags, flagLine(rec))
				}
				pr.reused(i, c)
				continue
			}
		}
		select {
		case <-s.Stop:
			return fail(fmt.Errorf("sweep %w: %d of %d passes finished", ErrStopped, len(man.Passes), len(mine)))
		default:
		}
		rec, rows, err := s.runPass(c, key, pr.watch(i, c))
		if err != nil {
			return fail(err)
		}
		if err := writePass(path, rec, rows); err != nil {
			return fail(err)
		}
		rec.Rows = int64(len(rows))
		man.Passes = append(man.Passes, rec)
		if rec.NonFinite != nil {
			man.Flags = append(man.Flags, flagLine(rec))
		}
		pr.done(c)
	}
	man.Timings.Passes = time.Since(passStart).Seconds()

	if s.Shard.Count > 1 {
		man.Complete = true
		man.Timings.Total = time.Since(start).Seconds() + s.Timings.Hashing + s.Timings.Loading + s.Timings.Tokenize
		return man, nil, writeJSON(filepath.Join(s.Out, ManifestName(s.Shard)), man)
	}
	t0 := time.Now()
	res, err := finalize(s.Out, man, s.Formats)
	if err != nil {
		return fail(err)
	}
	man.Timings.Tables = time.Since(t0).Seconds()
	man.Timings.Total = time.Since(start).Seconds() + s.Timings.Hashing + s.Timings.Loading + s.Timings.Tokenize
	man.LayersUsed = res.Summary.LayersUsed
	man.Complete = true
	return man, res, writeJSON(filepath.Join(s.Out, ManifestName(s.Shard)), man)
}

func flagLine(rec PassRecord) string {
	nf := rec.NonFinite
	s := fmt.Sprintf("pass T=%d sample %d: %d attention rows with non-finite %s, first at layer %d, head %d, query %d",
		rec.Key.T, rec.Key.Sample, nf.Rows, nf.Where, nf.Layer, nf.Head, nf.Query)
	if nf.Aborted != "" {
		s += "; the forward pass stopped: " + nf.Aborted
	}
	return s
}

// prepare validates the options, plans the chunks and starts the manifest.
func (s *Sweep) prepare() (*Manifest, []Chunk, error) {
	if s.Model == nil {
		return nil, nil, errors.New("analysis: Sweep.Model is nil")
	}
	if s.Shard.Count == 0 {
		s.Shard = Shard{0, 1}
	}
	if s.Shard.Index < 0 || s.Shard.Index >= s.Shard.Count {
		return nil, nil, fmt.Errorf("shard %v: want 0 ≤ i < n", s.Shard)
	}
	if len(s.Formats) == 0 {
		s.Formats = []string{FormatParquet}
	}
	if s.Threads <= 0 {
		s.Threads = runtime.GOMAXPROCS(0)
	}
	cfg := &s.Model.Config
	s.Options.Compute = s.Model.Compute.Recorded()
	if !s.Model.Compute.BF16Products() {
		s.Options.DeviationTokens = 0
	}
	if err := s.Options.Validate(cfg.MaxPos, cfg.Vocab); err != nil {
		return nil, nil, err
	}
	if cfg.LearnedPositions() && s.Options.Lengths[len(s.Options.Lengths)-1] > cfg.MaxPos {
		return nil, nil, fmt.Errorf("length %d exceeds the %d learned positions of this %s model (they cannot extrapolate)",
			s.Options.Lengths[len(s.Options.Lengths)-1], cfg.MaxPos, cfg.Arch)
	}
	p, err := s.Options.Probe.Resolve(SigmaDHead(cfg))
	if err != nil {
		return nil, nil, err
	}
	s.Options.Probe = p
	if err := s.Agg.Validate(); err != nil {
		return nil, nil, err
	}
	chunks, err := PlanChunks(len(s.Stream), s.Options.ChunkOptions())
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", s.Source.File.Path, err)
	}
	for _, c := range chunks {
		for i, id := range s.Stream[c.Start:c.End] {
			if id < 0 || id >= cfg.Vocab {
				return nil, nil, fmt.Errorf("%s: token %d at stream position %d is outside the model's vocabulary [0, %d)",
					s.Source.File.Path, id, c.Start+i, cfg.Vocab)
			}
		}
	}
	man := &Manifest{Tool: Tool(), Created: time.Now().UTC().Format(time.RFC3339), Args: s.Args, Shard: s.Shard,
		Model: s.Info, Source: s.Source, Sweep: s.Options, Analysis: s.Agg, Conventions: conventions(s.Options, s.Agg),
		Chunks: chunks, Threads: s.Threads, GOMAXPROCS: runtime.GOMAXPROCS(0), NumCPU: runtime.NumCPU(),
		Timings: s.Timings, Options: s.CLIOptions, Passes: []PassRecord{}}
	if n := s.Options.DeviationTokens; n > 0 && len(chunks) > 0 {
		ids := s.passIDs(chunks[0])
		copts, _ := s.Options.Probe.collector()
		d, err := MeasureDeviation(s.Model, [][]int{ids[:min(n, len(ids))]}, s.Options.Compute, copts, s.Options.AllowExtrapolation, s.Threads)
		if err != nil {
			return nil, nil, err
		}
		man.Deviation = d
	}
	return man, chunks, nil
}

// passIDs returns the token ids of a pass: the optional BOS, then the chunk.
func (s *Sweep) passIDs(c Chunk) []int {
	ids := make([]int, 0, c.T)
	if s.Options.BOSToken >= 0 {
		ids = append(ids, s.Options.BOSToken)
	}
	return append(ids, s.Stream[c.Start:c.End]...)
}

// expectedKey is the key of chunk c without its token digest.
func expectedKey(info ModelInfo, o SweepOptions, c Chunk) PassKey {
	probe := o.Probe
	if !info.Sinks {
		probe.SinkRows = "" // decides nothing without sinks: absent, as in the keys from before the option
	}
	return PassKey{Format: formatVersion, Model: info.Digest, T: c.T, Sample: c.Sample, Start: c.Start, End: c.End,
		BOSToken: o.BOSToken, Bucket: o.Bucket, LastFrac: o.LastFrac, BOSFrac: o.BOSFrac, Probe: probe,
		Cuts: windowCuts(info.Windows), Compute: o.Compute}
}

// checkMemory checks, before the first pass, that the longest of chunks
// fits with its Collector's results (model.Model.CheckMemory): a sweep
// that cannot is refused at its start, not at its last length.
func (s *Sweep) checkMemory(chunks []Chunk) error {
	T := longestT(chunks)
	if T == 0 {
		return nil
	}
	copts, _ := s.Options.Probe.collector()
	copts.Sinks = s.Info.Sinks
	err := probes.CheckModelMemory(s.Model, 1, T, model.Options{Threads: s.Threads}, copts)
	if err != nil {
		return fmt.Errorf("the sweep's longest pass (T=%d, with its diagnostics' results): %w", T, err)
	}
	return nil
}

// longestT is the longest T of chunks (0 for none): the pass whose memory
// a run checks before its first.
func longestT(chunks []Chunk) int {
	T := 0
	for _, c := range chunks {
		T = max(T, c.T)
	}
	return T
}

func (s *Sweep) key(c Chunk) PassKey {
	k := expectedKey(s.Info, s.Options, c)
	k.Tokens = TokenDigest(s.passIDs(c))
	return k
}

// runPass runs one forward pass with the Collector on every layer and the
// gate hook (watch adds the progress's), and summarizes it into bucket
// rows.
func (s *Sweep) runPass(c Chunk, key PassKey, watch func(*hooks.Set)) (PassRecord, []BucketRow, error) {
	m := s.Model
	cfg := &m.Config
	rec := PassRecord{Key: key, Hash: key.Hash(), File: passFileName(c.T, c.Sample), Threads: s.Threads}
	copts, _ := s.Options.Probe.collector()
	copts.ContinueOnNonFinite = s.Options.OnNonFinite == NonFiniteFlag
	copts.Sinks = s.Info.Sinks
	col, err := probes.NewModelCollector(1, cfg, c.T, copts)
	if err != nil {
		return rec, nil, err
	}
	hs := col.Hooks(cfg)
	watch(hs)
	t0 := time.Now()
	_, ferr := m.Forward([][]int{s.passIDs(c)}, model.Options{Hooks: hs, AllowExtrapolation: s.Options.AllowExtrapolation,
		Threads: s.Threads})
	rec.Seconds = time.Since(t0).Seconds()
	rec.TokensPerSecond = float64(c.T) / rec.Seconds
	where := fmt.Sprintf("pass T=%d sample %d (stream tokens [%d,%d))", c.T, c.Sample, c.Start, c.End)
	if ferr != nil {
		var nf *probes.NonFiniteError
		switch {
		case errors.As(ferr, &nf):
			return rec, nil, fmt.Errorf("%s: non-finite %s in layer %d, head %d, query %d; the passes finished before it are kept in %s (--on-nonfinite flag records such passes and goes on)",
				where, nf.Where, nf.Layer, nf.Head, nf.Query, s.Out)
		case copts.ContinueOnNonFinite && (col.NonFiniteRows() > 0 || strings.Contains(ferr.Error(), "non-finite")):
			// recorded below
		default:
			return rec, nil, fmt.Errorf("%s: %w", where, ferr)
		}
	}
	if first, ok := col.FirstNonFinite(); ok || ferr != nil {
		info := &NonFiniteInfo{Layer: -1, Head: -1, Query: -1, Rows: col.NonFiniteRows()}
		if ok {
			info.Layer, info.Head, info.Query, info.Where = first.Layer, first.Head, first.Query, first.Where
		}
		if ferr != nil {
			info.Aborted = ferr.Error()
		}
		rec.NonFinite = info
	}
	edges := bucketEdges(c.T, s.Options.Bucket, append([]int{windowStart(c.T, s.Options.LastFrac), windowStart(c.T, s.Options.BOSFrac)},
		key.Cuts...)...)
	rows := bucketRows(col, 0, c.T, c.Sample, edges, cfg.Gate != model.GateNone, s.Info.Sinks, cfg.SoftmaxLayers())
	return rec, rows, nil
}

// finalize reads the pass files of every chunk of man (from dir/passes),
// checks them against the manifest, and writes the tables (buckets, heads,
// fig2, fig3, fig4 in each format, and summary.json) into dir. The
// manifest's Passes and Tables are set from what it read and wrote.
func finalize(dir string, man *Manifest, formats []string) (*Results, error) {
	agg, err := newAggregator(man.Model.Shape(), man.Sweep, man.Sweep.Probe, man.Analysis)
	if err != nil {
		return nil, err
	}
	recs := make([]PassRecord, 0, len(man.Chunks))
	for _, c := range man.Chunks {
		rec, rows, err := readChunk(dir, man, c)
		if err != nil {
			return nil, err
		}
		if err := agg.Add(rows); err != nil {
			return nil, fmt.Errorf("%s: %w", passPath(dir, c.T, c.Sample), err)
		}
		recs = append(recs, rec)
	}
	res, err := agg.Results()
	if err != nil {
		return nil, err
	}
	man.Passes = recs
	man.Flags = nil
	for _, r := range recs {
		if r.NonFinite != nil {
			man.Flags = append(man.Flags, flagLine(r))
		}
	}
	man.LayersUsed = res.Summary.LayersUsed
	man.Notes = append(man.Notes, res.Summary.Notes...)
	man.Tables = nil
	// buckets: streamed pass by pass (one Parquet row group per pass).
	for _, f := range formats {
		path := filepath.Join(dir, "buckets."+f)
		err := atomicfile.Write(path, func(w io.Writer) error {
			return writeBuckets(w, f, func(emit func([]BucketRow) error) error {
				for _, c := range man.Chunks {
					_, rows, err := readChunk(dir, man, c)
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
	for _, t := range []struct {
		name  string
		write func() error
	}{
		{"heads", func() error { return writeTable(dir, "heads", res.Heads, formats) }},
		{"fig2", func() error { return writeTable(dir, "fig2", res.Fig2, formats) }},
		{"fig3", func() error { return writeTable(dir, "fig3", res.Fig3, formats) }},
		{"fig4", func() error { return writeTable(dir, "fig4", res.Fig4, formats) }},
	} {
		if err := t.write(); err != nil {
			return nil, err
		}
		for _, f := range formats {
			man.Tables = append(man.Tables, t.name+"."+f)
		}
	}
	if err := writeJSON(filepath.Join(dir, "summary.json"), res.Summary); err != nil {
		return nil, err
	}
	man.Tables = append(man.Tables, "summary.json")
	return res, nil
}

// readChunk reads and checks the pass file of chunk c.
func readChunk(dir string, man *Manifest, c Chunk) (PassRecord, []BucketRow, error) {
	path := passPath(dir, c.T, c.Sample)
	rec, rows, err := ReadPass(path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return rec, nil, fmt.Errorf("pass (T=%d, sample %d) has no file %s: run its shard (or the sweep) again", c.T, c.Sample, path)
		}
		return rec, nil, err
	}
	want := expectedKey(man.Model, man.Sweep, c)
	want.Tokens = rec.Key.Tokens
	if rec.Hash != want.Hash() {
		return rec, nil, fmt.Errorf("%s does not belong to this sweep: %s", path, strings.Join(keyDiff(want, rec.Key), "; "))
	}
	return rec, rows, nil
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
