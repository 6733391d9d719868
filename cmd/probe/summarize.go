package main

import (
	"encoding/json"
	"fmt"
	"github.com/spf13/cobra"
	"io"
	"strings"

	"github.com/filterlens/probe/analysis"
)

// SummarizeOptions are the options of probe summarize.
type SummarizeOptions struct {
	Stdout io.Writer
	Args   []string // positional arguments
	JSON   bool
	Agg    aggFlags
}

// NewCmdSummarize builds probe summarize; runF (nil: runSummarize) runs it.
func NewCmdSummarize(runF func(*SummarizeOptions) error) *cobra.Command {
	opts := &SummarizeOptions{}
	cmd := &cobra.Command{
		Use:     "summarize <dir> [--json] [--last-layers N --ddof 0|1 ...]",
		Short:   "Figs. 2–4 of a sweep folder beside the paper's numbers, optionally re-aggregated",
		Example: "probe summarize /tmp/sweep --last-layers 2",
		RunE: func(c *cobra.Command, args []string) error {
			opts.Stdout = c.OutOrStdout()
			opts.Args = args
			return orDefault(runF, runSummarize)(opts)
		},
	}
	f := cmd.Flags()
	f.BoolVar(&opts.JSON, "json", false, "print summary.json's content instead of the tables")
	opts.Agg.registerAgg(f)
	return cmd
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
