package analysis

import (
	"bufio"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"

	"github.com/filterlens/probe/hooks"
	"github.com/filterlens/probe/model"
	"github.com/filterlens/probe/probes"

	"github.com/filterlens/probe/analysis/results"
	"github.com/filterlens/probe/internal/atomicfile"
)

// DiagOptions are the options of one diag pass (probe diag, Diagnose).
type DiagOptions struct {
	// OnNonFinite is what NaN/Inf in the attention rows does:
	// NonFiniteStop (default) ends the pass with an error, NonFiniteFlag
	// writes NaN for the rows and reports them (Diag.ForwardErr).
	OnNonFinite string
	// Kernel is where the row moments come from (probes.ParseKernel):
	// "matrix" (default, the attention pass's products, guarded) or "rows".
	Kernel string
	// SinkRows is the reading of a model with learned attention sinks
	// (probes.ParseSinkRows): "renorm" (default) or "raw".
	SinkRows           string
	AllowExtrapolation bool
	Threads            int
	// Watch, when set, is given the pass's hooks before it runs (a
	// progress display) and returns what to call with the pass's error.
	Watch func(hs *hooks.Set) func(error)
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
	if o.OnNonFinite == "" {
		o.OnNonFinite = NonFiniteStop
	}
	if o.OnNonFinite != NonFiniteStop && o.OnNonFinite != NonFiniteFlag {
		return nil, fmt.Errorf("--on-nonfinite %q: want stop or flag", o.OnNonFinite)
	}
	if o.Kernel == "" {
		o.Kernel = probes.MatrixKernel.String()
	}
	k, ok := probes.ParseKernel(o.Kernel)
	if !ok {
		return nil, fmt.Errorf("--kernel %q: want %s or %s", o.Kernel, probes.MatrixKernel, probes.RowKernel)
	}
	if o.SinkRows == "" {
		o.SinkRows = probes.RenormRows.String()
	}
	sr, ok := probes.ParseSinkRows(o.SinkRows)
	if !ok {
		return nil, fmt.Errorf("--sink-rows %q: want %s or %s", o.SinkRows, probes.RenormRows, probes.RawRows)
	}
	c := &m.Config
	d := &Diag{Config: c, Layers: c.SoftmaxLayers(), Sinks: HasSinks(m)}
	if len(d.Layers) == 0 {
		return nil, fmt.Errorf("%s (%s) has no softmax attention layers, so no attention rows to measure (its layers: %s; probe gdn reads recurrent layers)",
			m.Dir, c.Arch, c.LayerKinds()[0])
	}
	B, T := len(ids), len(ids[0])
	d.Options = probes.CollectorOptions{ContinueOnNonFinite: o.OnNonFinite == NonFiniteFlag, Kernel: k, SinkRows: sr, Sinks: d.Sinks}
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
// of the library (probes.Metric*) and the sweep tables.
var DiagColumns = []string{"sample", "layer", "head", "query", results.MetricNEff, results.MetricNEffEntropy, results.MetricSMean,
	results.MetricLambdaObs, results.MetricK, results.MetricKDimMean, results.MetricBOSMass, results.MetricGate}

// legacyDiagNames are the CSV header names of earlier releases (legacy
// in WriteCSV), kept for one release.
var legacyDiagNames = map[string]string{results.MetricSMean: "s_mean", results.MetricK: "k_bft", results.MetricKDimMean: "k_dim_mean"}

// WriteCSV writes the rows of d — per (sample, softmax layer, head,
// query) — to path as CSV, atomically: the shortest decimal that reads
// back as each stored float32, the gate column empty for an ungated
// model, and with toks ([sample][query]) a last column, token, of the
// query's token text; legacy writes the header of earlier releases
// (s_mean, k_bft, k_dim_mean); with sinks a sink_mass column after
// bos_mass.
func (d *Diag) WriteCSV(path string, toks [][]string, legacy bool) error {
	col, c := d.Collector, d.Config
	B, T, gated := col.B, col.T, c.Gate != model.GateNone
	columns := DiagColumns
	if d.Sinks { // σ beside the first-token mass
		i := slices.Index(columns, results.MetricBOSMass) + 1
		columns = slices.Insert(slices.Clone(columns), i, results.MetricSinkMass)
	}
	return atomicfile.Write(path, func(f io.Writer) error {
		bw := bufio.NewWriterSize(f, 1<<20)
		for i, name := range columns {
			if i > 0 {
				bw.WriteByte(',')
			}
			if old, ok := legacyDiagNames[name]; ok && legacy {
				name = old
			}
			bw.WriteString(name)
		}
		if toks != nil {
			bw.WriteString(",token")
		}
		bw.WriteByte('\n')
		var buf []byte
		for b := 0; b < B; b++ {
			for _, l := range d.Layers {
				for h := 0; h < c.Heads; h++ {
					for t := 0; t < T; t++ {
						i := col.Index(b, l, h, t)
						buf = buf[:0]
						buf = strconv.AppendInt(buf, int64(b), 10)
						buf = append(buf, ',')
						buf = strconv.AppendInt(buf, int64(l), 10)
						buf = append(buf, ',')
						buf = strconv.AppendInt(buf, int64(h), 10)
						buf = append(buf, ',')
						buf = strconv.AppendInt(buf, int64(t), 10)
						// the shortest decimal that reads back as the stored float32
						for _, x := range []float32{col.NEff[i], col.NEffEntropy[i], col.SMean[i], col.LambdaObs[i],
							col.K[i], col.KDimMean[i], col.BOSMass[i]} {
							buf = append(buf, ',')
							buf = strconv.AppendFloat(buf, float64(x), 'g', -1, 32)
						}
						if d.Sinks {
							buf = append(buf, ',')
							buf = strconv.AppendFloat(buf, float64(col.SinkMass[i]), 'g', -1, 32)
						}
						buf = append(buf, ',')
						if gated {
							buf = strconv.AppendFloat(buf, float64(col.Gate[i]), 'g', -1, 32)
						}
						if toks != nil {
							buf = append(buf, ',')
							buf = appendCSVField(buf, toks[b][t])
						}
						buf = append(buf, '\n')
						bw.Write(buf)
					}
				}
			}
		}
		return bw.Flush()
	})
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
