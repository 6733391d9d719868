package main

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/filterlens/probe/analysis"
	"github.com/filterlens/probe/hooks"
	"github.com/filterlens/probe/model"
	"github.com/filterlens/probe/report/papers"
)

// registerCompletions registers the completion of every flag
// flagCompletions names on every command that has it. cobra adds probe
// completion bash|zsh|fish|powershell itself when it runs a command line
// (its scripts call the hidden probe __complete, which calls these).
func registerCompletions(root *cobra.Command) {
	var register func(c *cobra.Command)
	register = func(c *cobra.Command) {
		for name, f := range flagCompletions {
			if c.Flags().Lookup(name) != nil {
				_ = c.RegisterFlagCompletionFunc(name, f)
			}
		}
		for _, s := range c.Commands() {
			register(s)
		}
	}
	register(root)
}

// flagCompletions completes the values of these flags wherever a command
// has them.
var flagCompletions = map[string]cobra.CompletionFunc{
	"arch":    fixedValues(generateArchNames()...),
	"hook":    completeHook,
	"paper":   fixedValues(append(slices.Clone(papers.Paper), "afa", "all")...),
	"compute": fixedValues(string(model.ComputeF32), string(model.ComputeF32Widen), string(model.ComputeBF16), string(model.ComputeBF16Proj)),
	"format":  listValues(analysis.FormatParquet, analysis.FormatCSV, analysis.FormatJSONL),
	"model":   completeModelDir,
}

// fixedValues completes one of values.
func fixedValues(values ...string) cobra.CompletionFunc {
	return func(_ *cobra.Command, _ []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		var out []cobra.Completion
		for _, v := range values {
			if strings.HasPrefix(v, toComplete) {
				out = append(out, v)
			}
		}
		return out, cobra.ShellCompDirectiveNoFileComp
	}
}

// listValues completes the last item of a comma-separated list of values
// ("parquet,c" → "parquet,csv"), offering those not yet in the list.
func listValues(values ...string) cobra.CompletionFunc {
	return func(_ *cobra.Command, _ []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		i := strings.LastIndex(toComplete, ",") + 1
		done, last := strings.Split(toComplete[:i], ","), toComplete[i:]
		var out []cobra.Completion
		for _, v := range values {
			if strings.HasPrefix(v, last) && !slices.Contains(done, v) {
				out = append(out, toComplete[:i]+v)
			}
		}
		return out, cobra.ShellCompDirectiveNoFileComp
	}
}

// layerPrefix matches the layer of a hook name being typed: "blocks.3.".
var layerPrefix = regexp.MustCompile(`^blocks\.([0-9]+|\*)\.`)

// completeHook completes a hook name from the registry (hooks.Points, no
// model loaded): a per-layer point as blocks.*.… (every layer) and, once a
// layer is typed (blocks.3.), as that layer's point; each with its shape.
func completeHook(_ *cobra.Command, _ []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
	layers := []string{"*"}
	if m := layerPrefix.FindStringSubmatch(toComplete); m != nil && m[1] != "*" {
		layers = []string{m[1]}
	}
	var out []cobra.Completion
	for _, p := range hooks.Points {
		names := []string{p.Name}
		if strings.Contains(p.Name, "{l}") {
			names = names[:0]
			for _, l := range layers {
				names = append(names, strings.Replace(p.Name, "{l}", l, 1))
			}
		}
		for _, n := range names {
			if strings.HasPrefix(n, toComplete) {
				out = append(out, cobra.CompletionWithDesc(n, p.Shape))
			}
		}
	}
	return out, cobra.ShellCompDirectiveNoFileComp
}

// completeModelDir completes a checkpoint folder: the folders beside what
// is typed that hold a config.json, and, to descend into, those holding
// checkpoints one or two levels down (ending in /). A folder that cannot
// be read or holds no checkpoint suggests nothing.
func completeModelDir(_ *cobra.Command, _ []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
	dir, prefix := filepath.Split(toComplete)
	read := dir
	if read == "" {
		read = "."
	}
	entries, err := os.ReadDir(read)
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	var out []cobra.Completion
	directive := cobra.ShellCompDirectiveNoFileComp
	if prefix == "" && dir != "" && isModelDir(dir) {
		out = append(out, strings.TrimSuffix(dir, "/"))
	}
	for _, e := range entries {
		name := e.Name()
		if !strings.HasPrefix(name, prefix) || (strings.HasPrefix(name, ".") && !strings.HasPrefix(prefix, ".")) {
			continue
		}
		p := dir + name
		switch {
		case isModelDir(p):
			out = append(out, p)
		case len(checkpointsUnder(p)) > 0:
			out = append(out, p+"/")
			directive |= cobra.ShellCompDirectiveNoSpace
		}
	}
	return out, directive
}

// isModelDir reports whether dir is a folder holding a config.json.
func isModelDir(dir string) bool {
	fi, err := os.Stat(filepath.Join(dir, "config.json"))
	return err == nil && fi.Mode().IsRegular()
}
