package main

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/filterlens/probe/analysis"
)

// SummarizeOptions are the options of probe summarize.
type SummarizeOptions struct {
	cmdIO
	JSON bool
	Agg  aggFlags
}

// flags declares the flags of probe summarize into f and their relations.
func (o *SummarizeOptions) flags(cmd *cobra.Command, f *pflag.FlagSet) {
	f.BoolVar(&o.JSON, "json", false, "print summary.json's content instead of the tables")
	o.Agg.registerAgg(f)
}

// runSummarize prints Figs. 2–4 of the sweep folder opts.Args[0] beside
// the paper's numbers, re-aggregated with the aggregation flags given.
func runSummarize(opts *SummarizeOptions) error {
	pos := opts.Args
	if len(pos) != 1 {
		return fmt.Errorf("want one results folder: probe summarize <dir>")
	}
	man, _, _, err := analysis.LoadPartialResults(pos[0], nil)
	if err != nil {
		return err
	}
	agg, err := opts.Agg.options(man.Analysis, man.Sweep.KUnit, true)
	if err != nil {
		return err
	}
	man, res, missing, err := analysis.LoadPartialResults(pos[0], &agg)
	if err != nil {
		return err
	}
	if !man.Complete {
		why := "it was interrupted, failed or is still running"
		if man.Error != "" {
			why = man.Error
		}
		note := fmt.Sprintf("unfinished sweep (%s): the numbers below use the %d passes of T = %v × %d samples finished in %s, of the %d planned",
			why, len(man.Chunks)-len(missing), res.Summary.Lengths, res.Summary.Samples, pos[0], len(man.Chunks))
		q := make([]string, len(man.Args))
		for i, a := range man.Args {
			q[i] = shellQuote(a)
		}
		note += fmt.Sprintf(". Run the sweep's command again to finish it:\n  probe %s\n", strings.Join(q, " "))
		if opts.JSON {
			fmt.Fprintln(progressOut, note) // stdout holds only the JSON
		} else {
			fmt.Fprintln(opts.Stdout, note)
		}
	}
	if opts.JSON {
		b, err := json.MarshalIndent(res.Summary, "", "  ")
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(opts.Stdout, "%s\n", b)
		return err
	}
	return analysis.WriteReport(opts.Stdout, man, res)
}
