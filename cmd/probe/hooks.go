package main

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/filterlens/probe/hooks"
)

// HooksOptions are the options of probe hooks.
type HooksOptions struct {
	cmdIO
	Model modelFlag
}

// flags declares the flags of probe hooks into f and their relations.
func (o *HooksOptions) flags(cmd *cobra.Command, f *pflag.FlagSet) {
	o.Model.registerModel(f, "list the points this checkpoint's forward pass issues, with their shapes")
}

// runHooks lists the hook registry, or the points the model of
// opts.Model issues with their shapes.
func runHooks(opts *HooksOptions) error {
	if opts.Model.Name == "" {
		for _, p := range hooks.Points {
			fmt.Fprintf(opts.Stdout, "%-34s %-42s %s\n", p.Name, p.Shape, p.Doc)
		}
		return nil
	}
	dir, m, err := opts.Model.load()
	if err != nil {
		return err
	}
	names, err := m.HookNames()
	if err != nil {
		return err
	}
	// the registry entry of each name, for its shape
	doc := func(name string) hooks.Point {
		for _, p := range hooks.Points {
			if hooks.Match(strings.Replace(p.Name, "{l}", "*", 1), name) {
				return p
			}
		}
		return hooks.Point{Name: name}
	}
	fmt.Fprintf(opts.Stdout, "%s: %s, %d layers: %d hook points\n", dir, m.Arch, m.Config.Layers, len(names))
	for _, n := range names {
		p := doc(n)
		fmt.Fprintf(opts.Stdout, "%-40s %-42s %s\n", n, p.Shape, p.Doc)
	}
	return nil
}
