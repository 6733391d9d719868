package analysis

import (
	"fmt"
	"math"
	"strings"

	"github.com/filterlens/probe/analysis/results"
	"github.com/filterlens/probe/model"
	"github.com/filterlens/probe/probes"
)

// DefaultDeviationTokens is the length of the slice (the first tokens of
// the first pass) on which a command run with --compute bf16 also runs
// the float32 pass, to measure the deviation it prints beside its tables
// (--deviation-tokens; 0 measures none).
const DefaultDeviationTokens = 256

// MeasureDeviation runs the token ids (sequences of equal length) through
// m twice, in float32 and in the arithmetic c, with a Collector of options
// copts on every layer and the logits, and returns the Deviation of the
// second pass from the first. allowExt is Options.AllowExtrapolation.
func MeasureDeviation(m *model.Model, ids [][]int, c model.Compute, copts probes.CollectorOptions, allowExt bool, threads int) (*results.Deviation, error) {
	cfg := &m.Config
	B, T := len(ids), len(ids[0])
	type pass struct {
		logits []float32
		col    *probes.Collector
	}
	run := func(cmp model.Compute) (pass, error) {
		col, err := probes.NewModelCollector(B, cfg, T, copts)
		if err != nil {
			return pass{}, err
		}
		out, err := m.Forward(ids, model.Options{Hooks: col.Hooks(cfg), Logits: true, AllowExtrapolation: allowExt,
			Threads: threads, Compute: cmp})
		if err != nil {
			return pass{}, fmt.Errorf("the %s pass of the deviation slice (%d × %d tokens): %w", cmp, B, T, err)
		}
		return pass{out.Logits, col}, nil
	}
	ref, err := run(model.ComputeF32)
	if err != nil {
		return nil, err
	}
	got, err := run(c)
	if err != nil {
		return nil, err
	}
	d := &results.Deviation{Compute: string(c), Kernel: model.BF16Kernel(), Sequences: B, Tokens: T, Reference: "float32 products of the weights as stored"}
	if m.Compute.BF16Products() && hasWide(m.DTypes) {
		d.Reference = fmt.Sprintf("float32 products of the weights rounded to bf16 at load (stored %s; their rounding is not in this deviation)",
			strings.Join(m.DTypes, ", "))
	}
	d.Columns = append(d.Columns, columnDeviation("logits", got.logits, ref.logits))
	names := []string{results.MetricNEff, results.MetricNEffEntropy, results.MetricSMean, results.MetricLambdaObs,
		results.MetricK, results.MetricKDimMean, results.MetricBOSMass}
	if cfg.Gate != model.GateNone {
		names = append(names, results.MetricGate)
	}
	for _, name := range names {
		// a column the Collector options do not compute (K_dim_mean
		// without the per-dimension reduction) is held by neither: left out
		g, _ := got.col.Metric(name)
		r, _ := ref.col.Metric(name)
		if c := columnDeviation(name, g, r); c.Values+c.Unmatched > 0 {
			d.Columns = append(d.Columns, c)
		}
	}
	return d, nil
}

// streamDeviation is MeasureDeviation for the stream commands (gdn, sinks,
// massive): on the first n tokens of the first chunk, with the default
// Collector options; nil unless m runs in bf16 and n > 0. Their tables
// have columns of their own: the deviation reported for them is that of
// the logits and of the diagnostics of probe diag's table.
func streamDeviation(m *model.Model, stream []int, chunks []results.Chunk, n int, allowExt bool, threads int) (*results.Deviation, error) {
	if !m.Compute.BF16Products() || n <= 0 || len(chunks) == 0 {
		return nil, nil
	}
	c := chunks[0]
	return MeasureDeviation(m, [][]int{stream[c.Start : c.Start+min(n, c.T)]}, m.Compute, probes.CollectorOptions{}, allowExt, threads)
}

// hasWide reports whether dtypes holds a stored dtype wider than bf16 or
// other than it (F32, F16), which LoadOptions.Compute bf16 rounds.
func hasWide(dtypes []string) bool {
	for _, t := range dtypes {
		if t != "BF16" {
			return true
		}
	}
	return false
}

// columnDeviation compares got with ref element by element, in float64.
func columnDeviation(name string, got, ref []float32) results.ColumnDeviation {
	c := results.ColumnDeviation{Name: name}
	var top float64
	for i, r32 := range ref {
		g, r := float64(got[i]), float64(r32)
		fr, fg := !math.IsNaN(r) && !math.IsInf(r, 0), !math.IsNaN(g) && !math.IsInf(g, 0)
		if fr != fg {
			c.Unmatched++
		}
		if !fr || !fg {
			continue
		}
		c.Values++
		c.MaxAbs = math.Max(c.MaxAbs, math.Abs(g-r))
		top = math.Max(top, math.Abs(r))
	}
	if top > 0 {
		c.MaxRel = c.MaxAbs / top
	}
	return c
}
