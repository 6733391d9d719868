// Command nbcheck checks Jupyter notebooks for the notebooks' CI.
//
//	nbcheck executed.ipynb ...        check notebooks that jupyter nbconvert --execute wrote
//	nbcheck -lint notebook.ipynb ...  check notebooks as committed (not executed)
//
// An executed notebook passes when every code cell ran (has an execution
// count), no output is an error, and every cell tagged "figure" produced at
// least as many figures as its "figures" metadata says (default 1). A figure
// is an image/png output that decodes to a non-blank picture, an
// image/svg+xml output that is well-formed and draws something, or a
// text/html output that inlines such a PNG (as a data: URI) or SVG.
//
// A committed notebook passes -lint when it is nbformat 4 with a gonb or
// gophernotes kernelspec, stores no outputs or execution counts, and tags at
// least one code cell "figure" with a positive figure count.
//
// The exit status is 1 when any notebook fails; every problem is printed.
package main

import (
	"flag"
	"fmt"
	"os"
)

func main() {
	lint := flag.Bool("lint", false, "check committed (unexecuted) notebooks instead of executed ones")
	flag.Usage = func() {
		fmt.Fprintln(flag.CommandLine.Output(), "usage: nbcheck [-lint] notebook.ipynb ...")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() == 0 {
		flag.Usage()
		os.Exit(2)
	}
	failed := false
	for _, path := range flag.Args() {
		var rep *Report
		var err error
		if *lint {
			rep, err = LintFile(path)
		} else {
			rep, err = CheckFile(path)
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "%s: %v\n", path, err)
			failed = true
			continue
		}
		for _, p := range rep.Problems {
			fmt.Fprintf(os.Stderr, "%s: %s\n", path, p)
		}
		if len(rep.Problems) > 0 {
			failed = true
			continue
		}
		if *lint {
			fmt.Printf("%s: ok (%s kernel, %d code cells, %d expected figures)\n", path, rep.Kernel, rep.CodeCells, rep.Expected)
		} else {
			fmt.Printf("%s: ok (%d code cells ran, %d figures of %d expected)\n", path, rep.CodeCells, rep.Figures, rep.Expected)
		}
	}
	if failed {
		os.Exit(1)
	}
}
