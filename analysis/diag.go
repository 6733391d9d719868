package analysis

import (
	"bufio"
	"cmp"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/filterlens/probe/hooks"
	"github.com/filterlens/probe/model"
	"github.com/filterlens/probe/probes"

	"github.com/filterlens/probe/analysis/results"
	"github.com/filterlens/probe/internal/atomicfile"
)

// DiagOptions are the options of a diag pass (Diagnose) and of a diag run
// (DiagRun, recorded in its manifest under "diag").
type DiagOptions struct {
	// OnNonFinite is what NaN/Inf in the attention rows does:
	// NonFiniteStop (default) ends the pass with an error, NonFiniteFlag
	// writes NaN for the rows and reports them (Diag.ForwardErr).
	OnNonFinite string `json:"on_nonfinite"`
	// Kernel is where the row moments come from (probes.ParseKernel):
	// "matrix" (default, the attention pass's products, guarded) or "rows".
	Kernel string `json:"kernel"`
	// SinkRows is the reading of a model with learned attention sinks
	// (probes.ParseSinkRows): "renorm" (default) or "raw".
	SinkRows           string `json:"sink_rows"`
	AllowExtrapolation bool   `json:"allow_extrapolation"`
	// Tokens (a run's) stores each query's token text (DiagRun.Tokens)
	// in the token column; LegacyNames writes the CSV header of earlier
	// releases (DiagCSVOptions.Legacy).
	Tokens      bool `json:"tokens"`
	LegacyNames bool `json:"legacy_names"`
	Threads     int  `json:"-"`
	// Watch, when set, is given the pass's hooks before it runs (a
	// progress display) and returns what to call with the pass's error.
	Watch func(hs *hooks.Set) func(error) `json:"-"`
}

// collectorOptions fills o's defaults and returns the collector options
// they give (ContinueOnNonFinite under NonFiniteFlag; Sinks: a model with
// learned sinks), refusing an unknown value with its flag's name.
func (o *DiagOptions) collectorOptions(sinks bool) (probes.CollectorOptions, error) {
	o.OnNonFinite = cmp.Or(o.OnNonFinite, NonFiniteStop)
	if o.OnNonFinite != NonFiniteStop && o.OnNonFinite != NonFiniteFlag {
		return probes.CollectorOptions{}, fmt.Errorf("--on-nonfinite %q: want stop or flag", o.OnNonFinite)
	}
	o.Kernel = cmp.Or(o.Kernel, probes.MatrixKernel.String())
	k, ok := probes.ParseKernel(o.Kernel)
	if !ok {
		return probes.CollectorOptions{}, fmt.Errorf("--kernel %q: want %s or %s", o.Kernel, probes.MatrixKernel, probes.RowKernel)
	}
	o.SinkRows = cmp.Or(o.SinkRows, probes.RenormRows.String())
	sr, ok := probes.ParseSinkRows(o.SinkRows)
	if !ok {
		return probes.CollectorOptions{}, fmt.Errorf("--sink-rows %q: want %s or %s", o.SinkRows, probes.RenormRows, probes.RawRows)
	}
	return probes.CollectorOptions{ContinueOnNonFinite: o.OnNonFinite == NonFiniteFlag, Kernel: k, SinkRows: sr, Sinks: sinks}, nil
}

// diagLayers returns m's softmax layers, refusing a model without any.
func diagLayers(m *model.Model) ([]int, error) {
	c := &m.Config
	if l := c.SoftmaxLayers(); len(l) > 0 {
		return l, nil
	}
	return nil, fmt.Errorf("%s (%s) has no softmax attention layers, so no attention rows to measure (its layers: %s; probe gdn reads recurrent layers)",
		m.Dir, c.Arch, c.LayerKinds()[0])
}

// Diag is what one diag pass measured: every App. I diagnostic of every
// (sample, softmax layer, head, query) of the batch.
type Diag struct {
	Collector *probes.Collector
	// Options are the collector's (the bf16 deviation measures with them,
	// ContinueOnNonFinite off).
	Options probes.CollectorOptions
	Config  *model.Config
	Layers  []int // the softmax layers, whose rows are measured
	Sinks   bool  // learned attention sinks (a sink_mass column)
	// ForwardErr is the pass's error when OnNonFinite is NonFiniteFlag
	// and rows were flagged: the layers it did not reach are NaN.
	ForwardErr error
}

// Diagnose runs one forward pass of ids (B sequences of one length T)
// through m with every App. I diagnostic on its softmax layers at the
// paper's defaults (Eq. 6, ν = 1, σ0² = 1/d_head, λ = 1, K = λobs/(λ +
// λobs); probes.Collector), after checking that m has softmax layers and
// that the pass and its collector fit in memory.
func Diagnose(m *model.Model, ids [][]int, o DiagOptions) (*Diag, error) {
	copts, err := o.collectorOptions(HasSinks(m))
	if err != nil {
		return nil, err
	}
	layers, err := diagLayers(m)
	if err != nil {
		return nil, err
	}
	c := &m.Config
	d := &Diag{Config: c, Layers: layers, Sinks: copts.Sinks, Options: copts}
	B, T := len(ids), len(ids[0])
	opt := model.Options{AllowExtrapolation: o.AllowExtrapolation, Threads: o.Threads}
	if err := probes.CheckModelMemory(m, B, T, opt, d.Options); err != nil { // before the Collector's results
		return nil, err
	}
	col, err := probes.NewModelCollector(B, c, T, d.Options)
	if err != nil {
		return nil, err
	}
	d.Collector = col
	opt.Hooks = col.Hooks(c)
	end := func(error) {}
	if o.Watch != nil {
		end = o.Watch(opt.Hooks)
	}
	_, ferr := m.Forward(ids, opt)
	end(ferr)
	if ferr != nil && (o.OnNonFinite == NonFiniteStop || col.NonFiniteRows() == 0) {
		return nil, ferr
	}
	d.ForwardErr = ferr
	d.Options.ContinueOnNonFinite = false
	return d, nil
}

// DiagColumns are the columns of the diag CSV (Diag.WriteCSV), in order: the metric names
// of the library (results.Metric*) and the sweep tables.
var DiagColumns = []string{"sample", "layer", "head", "query", results.MetricNEff, results.MetricNEffEntropy, results.MetricSMean,
	results.MetricLambdaObs, results.MetricK, results.MetricKDimMean, results.MetricBOSMass, results.MetricGate}

// legacyDiagNames are the CSV header names of earlier releases (legacy
// in WriteCSV), kept for one release.
var legacyDiagNames = map[string]string{results.MetricSMean: "s_mean", results.MetricK: "k_bft", results.MetricKDimMean: "k_dim_mean"}

// DiagRow is one row of probe diag's table: every App. I diagnostic of
// one (sample, softmax layer, head, query) (DiagColumns), the sink mass σ
// of a model with learned sinks, the gate of a gated one, and the query's
// token text when asked for. A pass file of a diag run holds one sample's
// rows.
type DiagRow struct {
	Sample      int     `parquet:"sample"`
	Layer       int     `parquet:"layer"`
	Head        int     `parquet:"head"`
	Query       int     `parquet:"query"`
	NEff        float32 `parquet:"neff"`
	NEffEntropy float32 `parquet:"neff_entropy"`
	SMean       float32 `parquet:"S_mean"`
	LambdaObs   float32 `parquet:"lambda_obs"`
	K           float32 `parquet:"K"`
	KDimMean    float32 `parquet:"K_dim_mean"`
	BOSMass     float32 `parquet:"bos_mass"`
	SinkMass    float32 `parquet:"sink_mass"`
	Gate        float32 `parquet:"gate"`
	Token       string  `parquet:"token"`
}

// Rows returns d's rows in (sample, layer, head, query) order, the
// samples numbered from first; toks ([sample][query], nil: none) gives
// each query's token text.
func (d *Diag) Rows(first int, toks [][]string) []DiagRow {
	col, c := d.Collector, d.Config
	rows := make([]DiagRow, 0, col.B*len(d.Layers)*c.Heads*col.T)
	for b := 0; b < col.B; b++ {
		for _, l := range d.Layers {
			for h := 0; h < c.Heads; h++ {
				for t := 0; t < col.T; t++ {
					i := col.Index(b, l, h, t)
					r := DiagRow{Sample: first + b, Layer: l, Head: h, Query: t, NEff: col.NEff[i], NEffEntropy: col.NEffEntropy[i],
						SMean: col.SMean[i], LambdaObs: col.LambdaObs[i], K: col.K[i], KDimMean: col.KDimMean[i], BOSMass: col.BOSMass[i]}
					if d.Sinks {
						r.SinkMass = col.SinkMass[i]
					}
					if c.Gate != model.GateNone {
						r.Gate = col.Gate[i]
					}
					if toks != nil {
						r.Token = toks[b][t]
					}
					rows = append(rows, r)
				}
			}
		}
	}
	return rows
}

// WriteCSV writes the rows of d — per (sample, softmax layer, head,
// query) — to path as probe diag's CSV (WriteDiagCSV), with toks
// ([sample][query], nil: none) as its token column.
func (d *Diag) WriteCSV(path string, toks [][]string, legacy bool) error {
	o := DiagCSVOptions{Sinks: d.Sinks, Gated: d.Config.Gate != model.GateNone, Tokens: toks != nil, Legacy: legacy}
	_, err := WriteDiagCSV(path, o, 1, func(int) ([]DiagRow, error) { return d.Rows(0, toks), nil })
	return err
}

// DiagCSVOptions say which of a DiagRow's optional columns probe diag's
// CSV has, and which header it writes.
type DiagCSVOptions struct {
	Sinks  bool // a sink_mass column after bos_mass (a model with learned sinks)
	Gated  bool // the gate column holds values (empty for an ungated model)
	Tokens bool // a last column, token
	// Legacy writes the header of earlier releases (s_mean, k_bft,
	// k_dim_mean).
	Legacy bool
}

// WriteDiagCSV writes the rows of parts parts (part(i): the i-th's, read
// one at a time) to path as probe diag's CSV, atomically: the header
// DiagColumns (with o's optional columns), then one line per row with the
// shortest decimal that reads back as each stored float32. It returns the
// rows written.
func WriteDiagCSV(path string, o DiagCSVOptions, parts int, part func(i int) ([]DiagRow, error)) (int64, error) {
	columns := DiagColumns
	if o.Sinks { // σ beside the first-token mass
		i := slices.Index(columns, results.MetricBOSMass) + 1
		columns = slices.Insert(slices.Clone(columns), i, results.MetricSinkMass)
	}
	var n int64
	err := atomicfile.Write(path, func(f io.Writer) error {
		bw := bufio.NewWriterSize(f, 1<<20)
		for i, name := range columns {
			if i > 0 {
				bw.WriteByte(',')
			}
			if old, ok := legacyDiagNames[name]; ok && o.Legacy {
				name = old
			}
			bw.WriteString(name)
		}
		if o.Tokens {
			bw.WriteString(",token")
		}
		bw.WriteByte('\n')
		var buf []byte
		for i := range parts {
			rows, err := part(i)
			if err != nil {
				return err
			}
			n += int64(len(rows))
			for _, r := range rows {
				buf = diagLine(buf[:0], r, o)
				bw.Write(buf)
			}
		}
		return bw.Flush()
	})
	return n, err
}

// diagLine appends row r's CSV line to buf.
func diagLine(buf []byte, r DiagRow, o DiagCSVOptions) []byte {
	for _, k := range []int{r.Sample, r.Layer, r.Head, r.Query} {
		buf = strconv.AppendInt(buf, int64(k), 10)
		buf = append(buf, ',')
	}
	for _, x := range []float32{r.NEff, r.NEffEntropy, r.SMean, r.LambdaObs, r.K, r.KDimMean, r.BOSMass} {
		buf = strconv.AppendFloat(buf, float64(x), 'g', -1, 32)
		buf = append(buf, ',')
	}
	if o.Sinks {
		buf = strconv.AppendFloat(buf, float64(r.SinkMass), 'g', -1, 32)
		buf = append(buf, ',')
	}
	if o.Gated {
		buf = strconv.AppendFloat(buf, float64(r.Gate), 'g', -1, 32)
	}
	if o.Tokens {
		buf = append(buf, ',')
		buf = appendCSVField(buf, r.Token)
	}
	buf = append(buf, '\n')
	return buf
}

// appendCSVField appends s as one CSV field (RFC 4180): quoted, with
// quotes doubled, when it holds a comma, quote, CR or LF or starts or ends
// with a space.
func appendCSVField(buf []byte, s string) []byte {
	if !strings.ContainsAny(s, ",\"\r\n") && strings.TrimSpace(s) == s {
		return append(buf, s...)
	}
	buf = append(buf, '"')
	buf = append(buf, strings.ReplaceAll(s, `"`, `""`)...)
	return append(buf, '"')
}

// DiagManifest records a diag run (or one shard of it).
type DiagManifest struct {
	results.RunRecord
	Options DiagOptions `json:"diag"`
	Layers  []int       `json:"softmax_layers"` // the layers measured
	// Rows is the CSV's row count once it is written; Flags name the
	// passes (of this run, not reused ones) whose rows were flagged
	// non-finite (OnNonFinite flag).
	Rows  int64    `json:"rows"`
	Flags []string `json:"flags,omitempty"`
}

// diagTables are the tables of a diag pass: one sample's rows.
var diagTables = []string{"diag"}

// DiagRunDir is the run folder of probe diag's CSV file csv: csv + ".run",
// holding diag_manifest.json (or a shard's) and passes/.
func DiagRunDir(csv string) string { return csv + ".run" }

// DiagRun is one `probe diag` run on the run engine: one pass per sample
// of IDs (Diagnose with batch 1), whose rows are a pass file in
// Out/passes, then the CSV, written beside Out (whose name must end in
// ".run": DiagRunDir) from the pass files. It resumes and shards as
// GDNRun does: the CSV of probe merge of the shards is the unsharded
// run's, byte for byte.
type DiagRun struct {
	RunSpec
	IDs     [][]int    // the batch: B sequences of one length T (Stream: their concatenation)
	Tokens  [][]string // each query's token text ([sample][query]; Options.Tokens: needed)
	Options DiagOptions
}

// Run runs the passes and, unsharded, writes the CSV and the manifest. A
// CSV at the run's path without a diag run folder (written by probe diag
// before it ran on the engine) cannot be resumed and is refused unless
// Force.
func (r *DiagRun) Run() (*DiagManifest, error) {
	o := &r.Options
	csv, ok := strings.CutSuffix(r.Out, ".run")
	switch {
	case !ok:
		return nil, fmt.Errorf("diag run folder %s: want the CSV's path + .run (DiagRunDir)", r.Out)
	case len(r.IDs) == 0 || len(r.IDs[0]) == 0:
		return nil, fmt.Errorf("diag: no token ids")
	case o.Tokens && len(r.Tokens) != len(r.IDs):
		return nil, fmt.Errorf("diag: tokens of %d sequences for %d", len(r.Tokens), len(r.IDs))
	}
	if _, err := os.Stat(csv); err == nil && !r.Force && StreamKindOf(r.Out) != "diag" {
		return nil, fmt.Errorf("%s was written by a probe diag that kept no run folder (%s), so it cannot be resumed (it records neither the model nor the ids): re-run with --force to measure again and replace it, or choose another --out",
			csv, filepath.Base(r.Out))
	}
	copts, err := o.collectorOptions(false)
	if err != nil {
		return nil, err
	}
	T := len(r.IDs[0])
	chunks := make([]results.Chunk, len(r.IDs))
	for b, seq := range r.IDs {
		if len(seq) != T {
			return nil, fmt.Errorf("diag: sequence %d has %d tokens, sequence 0 has %d", b, len(seq), T)
		}
		chunks[b] = results.Chunk{T: T, Sample: b, Start: b * T, End: (b + 1) * T}
	}
	r.Stream = slices.Concat(r.IDs...)
	m, rec, err := r.load("diag", chunks)
	if err != nil {
		return nil, err
	}
	layers, err := diagLayers(m)
	if err != nil {
		return nil, err
	}
	copts.Sinks = HasSinks(m)
	if n := r.DeviationTokens; m.Compute.BF16Products() && n > 0 {
		head := make([][]int, len(r.IDs))
		for b, seq := range r.IDs {
			head[b] = seq[:min(n, T)]
		}
		dev := copts
		dev.ContinueOnNonFinite = false
		if rec.Deviation, err = MeasureDeviation(m, head, m.Compute, dev, o.AllowExtrapolation, r.Threads); err != nil {
			return nil, fmt.Errorf("--deviation-tokens %d: %w", n, err)
		}
	}
	man := &DiagManifest{RunRecord: rec, Options: *o, Layers: layers}
	man.Formats = []string{FormatCSV}
	man.Conventions = map[string]string{"rows": "one per (sample, softmax layer, head, query) in that order; probe diag's CSV, written beside the run folder (its name without .run)"}
	err = runStream(&r.RunSpec, man, man.Options, m, &diagMeasure{DiagRun: r, m: m, man: man, copts: copts})
	return man, err
}

// diagMeasure is probe diag's measurement: one Diagnose pass per sample,
// whose rows finishDiag writes as the CSV.
type diagMeasure struct {
	*DiagRun
	m     *model.Model
	man   *DiagManifest
	copts probes.CollectorOptions // the Collector's, for the memory check
}

func (d *diagMeasure) tables() []string { return diagTables }
func (d *diagMeasure) finish() error    { return finishDiag(d.Out, d.man) }

func (d *diagMeasure) checkMemory(T int) error {
	opt := model.Options{AllowExtrapolation: d.Options.AllowExtrapolation, Threads: d.Threads}
	return probes.CheckModelMemory(d.m, 1, T, opt, d.copts)
}

func (d *diagMeasure) pass(c results.Chunk, watch func(*hooks.Set)) ([]passTable, error) {
	po := d.Options
	po.Threads, po.Watch = d.Threads, func(hs *hooks.Set) func(error) { watch(hs); return func(error) {} }
	res, err := Diagnose(d.m, [][]int{d.Stream[c.Start:c.End]}, po)
	if err != nil {
		return nil, err
	}
	if nf, ok := res.Collector.FirstNonFinite(); ok {
		f := fmt.Sprintf("sample %d: %d attention rows with non-finite inputs, first %s", c.Sample, res.Collector.NonFiniteRows(), nf.Error())
		if res.ForwardErr != nil {
			f += fmt.Sprintf("; the forward pass stopped early (%v), unreached layers are NaN", res.ForwardErr)
		}
		d.man.Flags = append(d.man.Flags, f)
	}
	var toks [][]string
	if d.Options.Tokens {
		toks = d.Tokens[c.Sample : c.Sample+1]
	}
	return []passTable{tableOf("diag", res.Rows(c.Sample, toks))}, nil
}

// finishDiag writes probe diag's CSV of the run folder dir (DiagRunDir)
// from the pass files of every sample of man, one sample at a time.
func finishDiag(dir string, man *DiagManifest) error {
	o := DiagCSVOptions{Sinks: man.Model.Sinks, Gated: man.Model.Gate != string(model.GateNone), Tokens: man.Options.Tokens,
		Legacy: man.Options.LegacyNames}
	csv := strings.TrimSuffix(dir, ".run")
	var err error
	man.Rows, err = WriteDiagCSV(csv, o, len(man.Chunks), func(i int) ([]DiagRow, error) {
		return readPassRows[DiagRow](dir, "diag", man, man.Options, man.Chunks[i])
	})
	man.Tables = []string{filepath.Base(csv)}
	return err
}
