package main

import (
	"encoding/json"
	"fmt"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/filterlens/probe/analysis"
)

// VersionOptions are the options of probe version.
type VersionOptions struct {
	cmdIO
	JSON bool // the build information as JSON (the tool field of the manifests)
}

// flags declares the flags of probe version into f and their relations.
func (o *VersionOptions) flags(cmd *cobra.Command, f *pflag.FlagSet) {
	cmd.Flags().BoolVar(&o.JSON, "json", false, "print the build information as JSON (the tool field of the manifests)")
}

// runVersion prints analysis.Tool(): module, version, VCS revision and
// whether the tree was modified, Go, platform and matrix products.
func runVersion(opts *VersionOptions) error {
	w, t := opts.Stdout, analysis.Tool()
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
