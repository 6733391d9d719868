package main

import (
	"encoding/json"
	"fmt"
	"io"

	"github.com/filterlens/probe/analysis"
	"github.com/spf13/cobra"
)

// VersionOptions are the options of probe version.
type VersionOptions struct {
	Out  io.Writer
	JSON bool // the build information as JSON (the tool field of the manifests)
}

// NewCmdVersion builds probe version; runF (nil: runVersion) runs it.
func NewCmdVersion(runF func(*VersionOptions) error) *cobra.Command {
	opts := &VersionOptions{}
	cmd := &cobra.Command{
		Use:     "version [--json]",
		Short:   "module version, VCS revision and whether the tree was modified, from the build information",
		Example: "probe version",
		Args:    noArgs(""),
		RunE: func(c *cobra.Command, _ []string) error {
			opts.Out = c.OutOrStdout()
			return orDefault(runF, runVersion)(opts)
		},
	}
	cmd.Flags().BoolVar(&opts.JSON, "json", false, "print the build information as JSON (the tool field of the manifests)")
	return cmd
}

// runVersion prints analysis.Tool(): module, version, VCS revision and
// whether the tree was modified, Go, platform and matrix products.
func runVersion(opts *VersionOptions) error {
	w, t := opts.Out, analysis.Tool()
	if opts.JSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(t)
	}
	fmt.Fprintf(w, "probe %s (module %s)\n", t.Version, t.Module)
	switch {
	case t.Revision == "":
		fmt.Fprintf(w, "revision: unknown: %s\n", t.BuildNote)
	case t.Modified == nil:
		fmt.Fprintf(w, "revision: %s %s (whether the tree was modified is not recorded)\n", t.Revision, t.Time)
	case *t.Modified:
		fmt.Fprintf(w, "revision: %s %s, built from a modified tree (uncommitted changes)\n", t.Revision, t.Time)
	default:
		fmt.Fprintf(w, "revision: %s %s, unmodified tree\n", t.Revision, t.Time)
	}
	fmt.Fprintf(w, "go: %s %s, matrix products: %s, results format %s\n", t.Go, t.Platform, t.BLAS, t.Format)
	return nil
}

// orDefault returns runF, or def when runF is nil.
func orDefault[O any](runF, def func(*O) error) func(*O) error {
	if runF != nil {
		return runF
	}
	return def
}

// noArgs refuses positional arguments: `unexpected argument "x"`, with why
// (a hint in parentheses) when given.
func noArgs(why string) cobra.PositionalArgs {
	return func(_ *cobra.Command, args []string) error {
		if len(args) == 0 {
			return nil
		}
		if why != "" {
			return fmt.Errorf("unexpected argument %q (%s)", args[0], why)
		}
		return fmt.Errorf("unexpected argument %q", args[0])
	}
}
