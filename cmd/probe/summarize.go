package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/filterlens/probe/analysis"
)

func cmdSummarize(args []string, w io.Writer) error {
	fs := newFlags("summarize")
	asJSON := fs.Bool("json", false, "print summary.json's content instead of the tables")
	af := addAggFlags(fs)
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return fmt.Errorf("want one results folder: probe summarize <dir>")
	}
	man, _, _, err := analysis.LoadPartialResults(pos[0], nil)
	if err != nil {
		return err
	}
	agg, err := af.options(man.Analysis, man.Sweep.KUnit, true)
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
		if *asJSON {
			fmt.Fprintln(progressOut, note) // stdout holds only the JSON
		} else {
			fmt.Fprintln(w, note)
		}
	}
	if *asJSON {
		b, err := json.MarshalIndent(res.Summary, "", "  ")
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(w, "%s\n", b)
		return err
	}
	return analysis.WriteReport(w, man, res)
}
