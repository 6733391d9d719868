package main

import (
	"errors"
	"io"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// The commands not yet built by a NewCmdX parse their own flags, as before
// cobra: legacyCmd runs them with cobra's flag parsing off, and newFlags and
// parse give them a pflag set that reads the same command lines.

// legacyCurrent is the legacy command running (for its help).
var legacyCurrent *cobra.Command

// legacyCmd wraps run, which parses args itself, as a cobra command.
func legacyCmd(use, short, example string, run func(args []string, w io.Writer) error) *cobra.Command {
	c := &cobra.Command{Use: use, Short: short, Example: example, DisableFlagParsing: true}
	c.RunE = func(c *cobra.Command, args []string) error {
		legacyCurrent = c
		return run(args, c.OutOrStdout())
	}
	c.SetHelpFunc(func(c *cobra.Command, _ []string) { _ = c.RunE(c, []string{"--help"}) })
	return c
}

// newFlags makes a flag set that reports errors instead of exiting.
func newFlags(name string) *pflag.FlagSet {
	fs := pflag.NewFlagSet("probe "+name, pflag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	return fs
}

// parse parses args (positional arguments may come before flags) and
// returns the positional ones; --help writes the command's help.
func parse(fs *pflag.FlagSet, args []string) ([]string, error) {
	args = rewriteLongFlags(args, func(name string) bool { return name == "help" || fs.Lookup(name) != nil })
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) && legacyCurrent != nil {
			legacyCurrent.Flags().AddFlagSet(fs)
			legacyCurrent.Root().HelpFunc()(legacyCurrent, nil)
		}
		return nil, err
	}
	return fs.Args(), nil
}

// multi is a repeatable string flag.
type multi []string

func (m *multi) String() string     { return strings.Join(*m, ",") }
func (m *multi) Set(s string) error { *m = append(*m, s); return nil }
func (m *multi) Type() string       { return "name" }
