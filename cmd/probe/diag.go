package main

import (
	"bufio"
	"fmt"
	"github.com/spf13/cobra"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/filterlens/probe/analysis"
	"github.com/filterlens/probe/model"
	"github.com/filterlens/probe/probes"
)

// diagColumns are the columns of probe diag's CSV, in order: the metric
// names of the library (probes.Metric*) and the sweep tables.
var diagColumns = []string{"sample", "layer", "head", "query", probes.MetricNEff, probes.MetricNEffEntropy, probes.MetricSMean,
	probes.MetricLambdaObs, probes.MetricK, probes.MetricKDimMean, probes.MetricBOSMass, probes.MetricGate}

// legacyDiagNames are the CSV header names of earlier releases
// (--legacy-names), kept for one release.
var legacyDiagNames = map[string]string{probes.MetricSMean: "s_mean", probes.MetricK: "k_bft", probes.MetricKDimMean: "k_dim_mean"}

// DiagOptions are the options of probe diag.
type DiagOptions struct {
	Stdout             io.Writer
	Model              modelFlag
	Input              tokenFlags
	Out                string
	AllowExtrapolation bool
	Threads            int
	OnNonFinite        string
	WithTokens         bool
	Legacy             bool
	Kernel             string
	SinkRows           string
	Progress           bool
}

// NewCmdDiag builds probe diag; runF (nil: runDiag) runs it.
func NewCmdDiag(runF func(*DiagOptions) error) *cobra.Command {
	opts := &DiagOptions{}
	cmd := &cobra.Command{
		Use:     "diag --model <dir|org/name> (--ids <file> | --text <file> [--max-tokens N]) --out <file.csv>",
		Short:   "per-(sample, layer, head, query) filter diagnostics of one batch as CSV",
		Example: "probe diag --model zoo/checkpoints/gated_headwise --text README.md --max-tokens 128 --out diag.csv",
		Args:    noArgs(""),
		RunE: func(c *cobra.Command, _ []string) error {
			opts.Stdout = c.OutOrStdout()
			return orDefault(runF, runDiag)(opts)
		},
	}
	f := cmd.Flags()
	opts.Model.registerModel(f, "checkpoint")
	opts.Input.registerInput(f, true)
	f.StringVar(&opts.Out, "out", "", "output CSV file")
	extrapolationVar(f, &opts.AllowExtrapolation)
	threadsVar(f, &opts.Threads)
	f.StringVar(&opts.OnNonFinite, "on-nonfinite", analysis.NonFiniteStop, "NaN/Inf in attention rows: stop, or flag (write NaN and report)")
	f.BoolVar(&opts.WithTokens, "tokens", false, "add a last column, token: the text of each query's token (needs the model folder's tokenizer.json or --tokenizer)")
	f.BoolVar(&opts.Legacy, "legacy-names", false, "write the CSV header of earlier releases (s_mean, k_bft, k_dim_mean for S_mean, K, K_dim_mean); kept for one release")
	f.StringVar(&opts.SinkRows, "sink-rows", probes.RenormRows.String(), "models with learned attention sinks (gpt-oss), whose rows sum to 1 − σ: the rows every diagnostic reads, renorm (divided by their own sum; σ in a sink_mass column after bos_mass) or raw (as the model returns them); docs/diagnostics.md")
	f.StringVar(&opts.Kernel, "kernel", "matrix", "where the row moments come from: matrix (the attention pass's matrix products, guarded) or rows (each row walked twice); see probes.Kernel")
	progressVar(f, &opts.Progress)
	markRequired(cmd, "model", modelHint)
	markRequired(cmd, "out", "")
	markExactlyOne(cmd, "ids", "text")
	return cmd
}

// runDiag runs one forward pass of the batch with every App. I diagnostic
// (Eq. 6, ν = 1, σ0² = 1/d_head, λ = 1, two-pass S) on the softmax layers
// and writes them per (sample, layer, head, query) as CSV, with the
// deviation from float32 under --compute bf16.
func runDiag(opts *DiagOptions) error {
	if opts.OnNonFinite != analysis.NonFiniteStop && opts.OnNonFinite != analysis.NonFiniteFlag {
		return fmt.Errorf("--on-nonfinite %q: want stop or flag", opts.OnNonFinite)
	}
	dir, err := opts.Model.dir()
	if err != nil {
		return err
	}
	cfg, err := model.LoadConfig(dir)
	if err != nil {
		return err
	}
	ids, err := opts.Input.batch(dir)
	if err != nil {
		return err
	}
	if err := checkLength(len(ids[0]), cfg, &opts.Input, opts.AllowExtrapolation); err != nil {
		return err
	}
	var toks [][]string
	if opts.WithTokens {
		if toks, err = tokenStrings(dir, opts.Input.Tokenizer, ids); err != nil {
			return fmt.Errorf("--tokens: %w", err)
		}
	}
	m, err := model.Load(dir, opts.Model.loadOptions())
	if err != nil {
		return err
	}
	B, T, c := len(ids), len(ids[0]), &m.Config
	// App. I defaults: Eq. 6, ν = 1, σ0² = 1/d_head, λ = 1, two-pass S.
	k, ok := probes.ParseKernel(opts.Kernel)
	if !ok {
		return fmt.Errorf("--kernel %q: want %s or %s", opts.Kernel, probes.MatrixKernel, probes.RowKernel)
	}
	sr, ok := probes.ParseSinkRows(opts.SinkRows)
	if !ok {
		return fmt.Errorf("--sink-rows %q: want %s or %s", opts.SinkRows, probes.RenormRows, probes.RawRows)
	}
	layers := c.SoftmaxLayers() // the rows written: a hybrid model's Gated DeltaNet layers have none
	if len(layers) == 0 {
		return fmt.Errorf("%s (%s) has no softmax attention layers, so no attention rows to measure (its layers: %s; probe gdn reads recurrent layers)",
			dir, c.Arch, c.LayerKinds()[0])
	}
	sinks := analysis.HasSinks(m)
	copts := probes.CollectorOptions{ContinueOnNonFinite: opts.OnNonFinite == analysis.NonFiniteFlag, Kernel: k, SinkRows: sr, Sinks: sinks}
	opt := model.Options{AllowExtrapolation: opts.AllowExtrapolation, Threads: opts.Threads}
	if err := probes.CheckModelMemory(m, B, T, opt, copts); err != nil { // before the Collector's results
		return err
	}
	col, err := probes.NewModelCollector(B, c, T, copts)
	if err != nil {
		return err
	}
	opt.Hooks = col.Hooks(c)
	end := func(error) {}
	if opts.Progress {
		end = passProgress(opt.Hooks, c.Layers, T)
	}
	_, ferr := m.Forward(ids, opt)
	end(ferr)
	if ferr != nil && (opts.OnNonFinite == analysis.NonFiniteStop || col.NonFiniteRows() == 0) {
		return ferr
	}
	if err := writeDiagCSV(opts.Out, col, c, layers, toks, opts.Legacy, sinks); err != nil {
		return err
	}
	fmt.Fprintf(opts.Stdout, "wrote %d rows (%d samples × %d layers × %d heads × %d queries) to %s\n", B*len(layers)*c.Heads*T, B,
		len(layers), c.Heads, T, opts.Out)
	if len(layers) < c.Layers {
		fmt.Fprintf(opts.Stdout, "measured the softmax layers %v; the others (Gated DeltaNet or Mamba-2 layers) have no softmax rows\n", layers)
	}
	if sinks {
		fmt.Fprintf(opts.Stdout, "learned attention sinks: the diagnostics read the rows %s (--sink-rows); sink_mass is the dropped sink column's weight\n", sr)
	}
	copts.ContinueOnNonFinite = false
	if _, err := opts.Model.deviation(opts.Stdout, m, ids, copts, opts.AllowExtrapolation, opts.Threads); err != nil {
		return err
	}
	if nf, ok := col.FirstNonFinite(); ok {
		fmt.Fprintf(opts.Stdout, "flagged: %d attention rows with non-finite inputs, first %s\n", col.NonFiniteRows(), nf.Error())
		if ferr != nil {
			fmt.Fprintf(opts.Stdout, "flagged: the forward pass stopped early (%v); unreached layers are NaN\n", ferr)
		}
	}
	return nil
}

// writeDiagCSV writes the rows of col — per (sample, layer of layers,
// head, query) — to path as CSV, atomically: the shortest decimal that
// reads back as each stored float32, the gate column empty for an ungated
// model, and with toks a last column of the query's token text; legacy
// writes the header of earlier releases; with sinks a sink_mass column
// after bos_mass.
func writeDiagCSV(path string, col *probes.Collector, c *model.Config, layers []int, toks [][]string, legacy, sinks bool) error {
	B, T, gated := col.B, col.T, c.Gate != model.GateNone // the collector of the whole batch
	columns := diagColumns
	if sinks { // σ beside the first-token mass
		i := slices.Index(columns, probes.MetricBOSMass) + 1
		columns = slices.Insert(slices.Clone(columns), i, probes.MetricSinkMass)
	}
	return writeAtomic(path, func(f io.Writer) error {
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
			for _, l := range layers {
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
						if sinks {
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

// writeAtomic writes path through a temporary file renamed into place.
func writeAtomic(path string, write func(io.Writer) error) (err error) {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	if err = write(f); err != nil {
		return err
	}
	if err = f.Chmod(0o644); err != nil {
		return err
	}
	if err = f.Sync(); err != nil {
		return err
	}
	if err = f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), path)
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
