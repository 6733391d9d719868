package main

import (
	"bufio"
	"fmt"
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

func cmdDiag(args []string, w io.Writer) error {
	fs := newFlags("diag")
	mf := addModelFlag(fs, "checkpoint")
	tf := addTokenFlags(fs, true)
	out := fs.String("out", "", "output CSV file")
	allowExt := addExtrapolationFlag(fs)
	threads := addThreadsFlag(fs)
	onNF := fs.String("on-nonfinite", analysis.NonFiniteStop, "NaN/Inf in attention rows: stop, or flag (write NaN and report)")
	withTokens := fs.Bool("tokens", false, "add a last column, token: the text of each query's token (needs the model folder's tokenizer.json or --tokenizer)")
	legacy := fs.Bool("legacy-names", false, "write the CSV header of earlier releases (s_mean, k_bft, k_dim_mean for S_mean, K, K_dim_mean); kept for one release")
	kernel := fs.String("kernel", "matrix", "where the row moments come from: matrix (the attention pass's matrix products, guarded) or rows (each row walked twice); see probes.Kernel")
	sinkRows := fs.String("sink-rows", probes.RenormRows.String(), "models with learned attention sinks (gpt-oss), whose rows sum to 1 − σ: the rows every diagnostic reads, renorm (divided by their own sum; σ in a sink_mass column after bos_mass) or raw (as the model returns them); docs/diagnostics.md")
	progress := addProgressFlag(fs)
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	switch {
	case len(pos) > 0:
		return fmt.Errorf("unexpected argument %q", pos[0])
	case *out == "":
		return fmt.Errorf("--out is required")
	case *onNF != analysis.NonFiniteStop && *onNF != analysis.NonFiniteFlag:
		return fmt.Errorf("--on-nonfinite %q: want stop or flag", *onNF)
	}
	if err := tf.check(); err != nil {
		return err
	}
	dir, err := mf.dir()
	if err != nil {
		return err
	}
	cfg, err := model.LoadConfig(dir)
	if err != nil {
		return err
	}
	ids, err := tf.batch(dir)
	if err != nil {
		return err
	}
	if err := checkLength(len(ids[0]), cfg, tf, *allowExt); err != nil {
		return err
	}
	var toks [][]string
	if *withTokens {
		if toks, err = tokenStrings(dir, *tf.tokenizer, ids); err != nil {
			return fmt.Errorf("--tokens: %w", err)
		}
	}
	m, err := model.Load(dir, mf.loadOptions())
	if err != nil {
		return err
	}
	B, T, c := len(ids), len(ids[0]), &m.Config
	// App. I defaults: Eq. 6, ν = 1, σ0² = 1/d_head, λ = 1, two-pass S.
	k, ok := probes.ParseKernel(*kernel)
	if !ok {
		return fmt.Errorf("--kernel %q: want %s or %s", *kernel, probes.MatrixKernel, probes.RowKernel)
	}
	sr, ok := probes.ParseSinkRows(*sinkRows)
	if !ok {
		return fmt.Errorf("--sink-rows %q: want %s or %s", *sinkRows, probes.RenormRows, probes.RawRows)
	}
	layers := c.SoftmaxLayers() // the rows written: a hybrid model's Gated DeltaNet layers have none
	sinks := analysis.HasSinks(m)
	copts := probes.CollectorOptions{ContinueOnNonFinite: *onNF == analysis.NonFiniteFlag, Kernel: k, SinkRows: sr, Sinks: sinks}
	columns := diagColumns
	if sinks { // σ beside the first-token mass
		i := slices.Index(columns, probes.MetricBOSMass) + 1
		columns = slices.Insert(slices.Clone(columns), i, probes.MetricSinkMass)
	}
	opt := model.Options{AllowExtrapolation: *allowExt, Threads: *threads}
	if err := probes.CheckModelMemory(m, B, T, opt, copts); err != nil { // before the Collector's results
		return err
	}
	col, err := probes.NewModelCollector(B, c, T, copts)
	if err != nil {
		return err
	}
	opt.Hooks = col.Hooks(c)
	end := func(error) {}
	if *progress {
		end = passProgress(opt.Hooks, c.Layers, T)
	}
	_, ferr := m.Forward(ids, opt)
	end(ferr)
	if ferr != nil && (*onNF == analysis.NonFiniteStop || col.NonFiniteRows() == 0) {
		return ferr
	}
	gated := c.Gate != model.GateNone
	err = writeAtomic(*out, func(f io.Writer) error {
		bw := bufio.NewWriterSize(f, 1<<20)
		for i, name := range columns {
			if i > 0 {
				bw.WriteByte(',')
			}
			if old, ok := legacyDiagNames[name]; ok && *legacy {
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
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "wrote %d rows (%d samples × %d layers × %d heads × %d queries) to %s\n", B*len(layers)*c.Heads*T, B,
		len(layers), c.Heads, T, *out)
	if len(layers) < c.Layers {
		fmt.Fprintf(w, "measured the softmax layers %v; the others are Gated DeltaNet layers, which have no softmax rows\n", layers)
	}
	if sinks {
		fmt.Fprintf(w, "learned attention sinks: the diagnostics read the rows %s (--sink-rows); sink_mass is the dropped sink column's weight\n", sr)
	}
	copts.ContinueOnNonFinite = false
	if _, err := mf.deviation(w, m, ids, copts, *allowExt, *threads); err != nil {
		return err
	}
	if nf, ok := col.FirstNonFinite(); ok {
		fmt.Fprintf(w, "flagged: %d attention rows with non-finite inputs, first %s\n", col.NonFiniteRows(), nf.Error())
		if ferr != nil {
			fmt.Fprintf(w, "flagged: the forward pass stopped early (%v); unreached layers are NaN\n", ferr)
		}
	}
	return nil
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
