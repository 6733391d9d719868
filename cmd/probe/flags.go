package main

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/filterlens/probe/internal/names"
)

// longFlags rewrites the single-dash long flags of the command that args
// run (Go's flag package accepted -model as --model; pflag reads it as the
// shorthands -m -o -d …) to their double-dash spelling, before parsing.
// Only names of that command's flags are rewritten, so a value such as -1
// or - (standard input) is left alone; everything after -- is too.
func longFlags(root *cobra.Command, args []string) []string {
	cmd, _, err := root.Find(args)
	if err != nil || cmd == nil {
		return args
	}
	return rewriteLongFlags(args, func(name string) bool {
		return name == "help" || cmd.Flags().Lookup(name) != nil || cmd.InheritedFlags().Lookup(name) != nil
	})
}

// rewriteLongFlags returns args with every -name and -name=value whose
// name is known spelt --name.
func rewriteLongFlags(args []string, known func(name string) bool) []string {
	out := slices.Clone(args)
	for i, a := range out {
		if a == "--" {
			break
		}
		if len(a) < 2 || a[0] != '-' || a[1] == '-' {
			continue
		}
		name, _, _ := strings.Cut(a[1:], "=")
		if known(name) {
			out[i] = "-" + a
		}
	}
	return out
}

// flagError adds to an unknown-flag error the closest flag the command
// has, e.g. "unknown flag: --lenghts (closest: --lengths)".
func flagError(c *cobra.Command, err error) error {
	var ne *pflag.NotExistError
	if !errors.As(err, &ne) || ne.GetSpecifiedShortnames() != "" {
		return err
	}
	var all []string
	c.Flags().VisitAll(func(f *pflag.Flag) { all = append(all, f.Name) })
	name := ne.GetSpecifiedName()
	if best := names.Closest(name, all, 1); len(best) == 1 && names.Distance(name, best[0]) <= max(2, len(name)/3) {
		return fmt.Errorf("%w (closest: --%s)", err, best[0])
	}
	return err
}

// cobra's messages of the declared flag relations (cobra v1.10.2,
// flag_groups.go and command.go), which flagGroupError rewrites to name
// the flags as they are typed.
var (
	requiredRE  = regexp.MustCompile(`^required flag\(s\) (.*) not set$`)
	oneOfRE     = regexp.MustCompile(`^at least one of the flags in the group \[([^\]]*)\] is required$`)
	exclusiveRE = regexp.MustCompile(`^if any flags in the group \[([^\]]*)\] are set none of the others can be; \[([^\]]*)\] were all set$`)
)

// flagGroupError rewrites cobra's errors of MarkFlagRequired,
// MarkFlagsOneRequired and MarkFlagsMutuallyExclusive to name the flags
// with their dashes: "--out is required", "give exactly one of --ids and
// --text" (a group both one-required and exclusive), "give one of …",
// "give at most one of … (given: --ids and --text)". Other
// errors pass through.
func flagGroupError(c *cobra.Command, err error) error {
	msg := err.Error()
	if m := requiredRE.FindStringSubmatch(msg); m != nil {
		fl := strings.Split(strings.ReplaceAll(m[1], `"`, ""), ", ")
		if len(fl) > 1 {
			return errors.New(dashed(fl) + " are required")
		}
		return errors.New(dashed(fl) + " is required" + requiredHint(c, fl[0]))
	}
	if m := oneOfRE.FindStringSubmatch(msg); m != nil {
		fl := strings.Fields(m[1])
		if inGroup(c, fl[0], "cobra_annotation_mutually_exclusive", m[1]) {
			return errors.New("give exactly one of " + dashed(fl))
		}
		return errors.New("give one of " + dashed(fl))
	}
	if m := exclusiveRE.FindStringSubmatch(msg); m != nil {
		fl, set := strings.Fields(m[1]), strings.Fields(m[2])
		what := "at most one"
		if inGroup(c, fl[0], "cobra_annotation_one_required", m[1]) {
			what = "exactly one"
		}
		return fmt.Errorf("give %s of %s (given: %s)", what, dashed(fl), dashed(set))
	}
	return err
}

// dashed spells flag names "--a", "--a and --b", "--a, --b and --c".
func dashed(fl []string) string {
	d := make([]string, len(fl))
	for i, f := range fl {
		d[i] = "--" + f
	}
	if len(d) == 1 {
		return d[0]
	}
	return strings.Join(d[:len(d)-1], ", ") + " and " + d[len(d)-1]
}

// inGroup reports whether flag name of c is in the flag group (its names
// space-separated, as cobra records them) of the relation annotation.
func inGroup(c *cobra.Command, name, annotation, group string) bool {
	f := c.Flags().Lookup(name)
	return f != nil && slices.Contains(f.Annotations[annotation], group)
}

// requiredHint is the text in parentheses after "--name is required": the
// flag's "required" annotation (e.g. "(e.g. --lengths 1k,4k)"), if any.
func requiredHint(c *cobra.Command, name string) string {
	if f := c.Flags().Lookup(name); f != nil {
		if h := f.Annotations[hintAnnotation]; len(h) == 1 {
			return " (" + h[0] + ")"
		}
	}
	return ""
}

// hintAnnotation holds what a required flag's error says after its name.
const hintAnnotation = "probe_required_hint"

// markRequired declares flag name of c required (cobra.MarkFlagRequired),
// with a hint for its error message ("" for none).
func markRequired(c *cobra.Command, name, hint string) {
	if err := c.MarkFlagRequired(name); err != nil {
		panic(err) // a flag name the command does not declare: a programming error
	}
	if hint != "" {
		_ = c.Flags().SetAnnotation(name, hintAnnotation, []string{hint})
	}
}

// markExactlyOne declares that exactly one of the flags is given.
func markExactlyOne(c *cobra.Command, flags ...string) {
	c.MarkFlagsOneRequired(flags...)
	c.MarkFlagsMutuallyExclusive(flags...)
}
