package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/filterlens/probe/hooks"
	"github.com/spf13/cobra"
)

// HooksOptions are the options of probe hooks.
type HooksOptions struct {
	Stdout io.Writer
	Args   []string // positional arguments
	Model  modelFlag
}

// NewCmdHooks builds probe hooks; runF (nil: runHooks) runs it.
func NewCmdHooks(runF func(*HooksOptions) error) *cobra.Command {
	opts := &HooksOptions{}
	cmd := &cobra.Command{
		Use:     "hooks [--model <dir|org/name>]",
		Short:   "list the hook points with their shapes, or the points one model issues",
		Example: "probe hooks --model zoo/checkpoints/gated_headwise",
		RunE: func(c *cobra.Command, args []string) error {
			opts.Stdout = c.OutOrStdout()
			opts.Args = args
			return orDefault(runF, runHooks)(opts)
		},
	}
	f := cmd.Flags()
	opts.Model.registerModel(f, "list the points this checkpoint's forward pass issues, with their shapes")
	return cmd
}

// runHooks lists the hook registry, or the points the model of
// opts.Model issues with their shapes.
func runHooks(opts *HooksOptions) error {
	pos := opts.Args
	if len(pos) > 0 {
		return fmt.Errorf("unexpected argument %q: probe hooks lists every hook point, or with --model the points of that model", pos[0])
	}
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
