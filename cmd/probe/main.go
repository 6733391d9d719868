// Command probe loads transformer checkpoints, runs hooked forward passes and
// measures attention as a filter (see README.md). probe help lists the
// commands; probe help <command> shows one's flags and an example.
//
// Each command is a cobra command built by NewCmdX(runF) (command.go, on
// newCmd, with its text from usage.go); its own file holds its XOptions,
// whose flags method declares the flags that fill them, and runX(opts),
// which does the work by calling the library (tests pass a runF to see the
// options a command line gives).
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/filterlens/probe/internal/names"
)

// defaultGOGC is the collector's GOGC — how far, in percent of the live
// heap, the heap grows between collections — that probe runs with unless
// the environment sets GOGC. The weights are mapped, not on the heap, so
// the live heap is one pass's activations (float32 buffers the collector
// need not scan): Go's default of 100 let a many-pass sweep peak about one
// pass's activations above a single pass; 20 keeps a fifth of them, for a
// few percent more CPU time (docs/performance.md, "Peak memory").
const defaultGOGC = 20

// setGOGC applies defaultGOGC unless the environment sets GOGC.
func setGOGC() {
	if _, ok := os.LookupEnv("GOGC"); !ok {
		debug.SetGCPercent(defaultGOGC)
	}
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run executes one command line and returns the exit code: 0, 1 for an
// error (printed to stderr as one message "probe <command>: …"), 2 for a
// missing or unknown command (the command list follows on stderr), 3 for
// an internal error (a panic), or a command's own (exitError: 130 when
// interrupted). Help (probe --help, probe help [command], probe <command>
// --help) goes to stdout with exit code 0.
func run(args []string, stdout, stderr io.Writer) (code int) {
	defer func() {
		if r := recover(); r != nil {
			fmt.Fprintf(stderr, "probe: internal error: %v\n", r)
			code = 3
		}
	}()
	setGOGC()
	root := newRootCmd()
	if len(args) > 0 && (args[0] == "-version" || args[0] == "--version") {
		args = []string{"version"}
	}
	args = longFlags(root, args)
	root.SetArgs(args)
	root.SetContext(context.WithValue(context.Background(), argsKey{}, args))
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SetIn(stdin)
	cmd, err := root.ExecuteC()
	var ue usageError
	var ee exitError
	switch {
	case err == nil, errors.Is(err, pflag.ErrHelp):
		return 0
	case errors.As(err, &ue):
		if ue.msg != "" {
			fmt.Fprintf(stderr, "probe: %s\n\n", ue.msg)
		}
		writeUsage(stderr, root)
		return 2
	}
	fmt.Fprintf(stderr, "%s: %v\n", cmd.CommandPath(), flagGroupError(cmd, err))
	if errors.As(err, &ee) {
		return ee.code
	}
	return 1
}

// commandUse is the synopsis of every command in the list of probe help.
const commandUse = "usage: probe <command> [flags]"

// newRootCmd builds the command tree: every command and `completion`.
func newRootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:           "probe",
		Short:         "probe measures attention as a filter in transformer checkpoints (see README.md)",
		SilenceErrors: true,
		SilenceUsage:  true,
		Args: func(c *cobra.Command, args []string) error {
			if len(args) > 0 {
				return usageError{fmt.Sprintf("unknown command %q%s", args[0], closestCommand(c, args[0]))}
			}
			return nil
		},
		RunE: func(*cobra.Command, []string) error { return usageError{} }, // a bare probe
	}
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		if !c.HasParent() {
			return usageError{err.Error()}
		}
		return flagError(c, err)
	})
	root.SetHelpTemplate(helpTemplate)
	root.SetHelpCommand(&cobra.Command{
		Use:   "help [command]",
		Short: "the list of commands, or one command's flags and an example",
		RunE: func(c *cobra.Command, args []string) error {
			cmd, rest, err := root.Find(args)
			if err != nil || len(rest) > 0 {
				return usageError{fmt.Sprintf("unknown command %q%s", strings.Join(args, " "), closestCommand(root, args[len(args)-1]))}
			}
			return cmd.Help()
		},
		ValidArgsFunction: func(c *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
			var names []string
			if cmd, _, err := root.Find(args); err == nil {
				for _, s := range cmd.Commands() {
					if s.IsAvailableCommand() {
						names = append(names, s.Name())
					}
				}
			}
			return fixedValues(names...)(c, args, toComplete)
		},
	})
	cobra.AddTemplateFunc("flagUsages", flagUsages)
	commandHelp := root.HelpFunc()
	root.SetHelpFunc(func(c *cobra.Command, args []string) {
		if !c.HasParent() {
			writeUsage(c.OutOrStdout(), c)
			return
		}
		commandHelp(c, args)
	})
	cobra.EnableCommandSorting = false // probe help lists them in commands' order
	root.AddCommand(commands()...)
	registerCompletions(root)
	// each synopsis lists its flags itself
	var noFlagsInUse func(c *cobra.Command)
	noFlagsInUse = func(c *cobra.Command) {
		c.DisableFlagsInUseLine = true
		for _, s := range c.Commands() {
			noFlagsInUse(s)
		}
	}
	noFlagsInUse(root)
	return root
}

// writeUsage writes the list of commands.
func writeUsage(w io.Writer, root *cobra.Command) {
	fmt.Fprintln(w, root.Short)
	fmt.Fprintf(w, "\n%s\n\ncommands:\n", commandUse)
	for _, c := range root.Commands() {
		if c.IsAvailableCommand() {
			fmt.Fprintf(w, "  %-10s %s\n", c.Name(), c.Short)
		}
	}
	fmt.Fprintln(w, "\nprobe help <command> (or probe <command> --help) shows a command's flags and an example.")
	fmt.Fprintln(w, "A --model is a checkpoint folder or a hub model id org/name found offline in the Hugging Face cache.")
	fmt.Fprintf(w, "The Go collector runs at GOGC=%d unless the environment sets GOGC (GOMEMLIMIT caps the heap too).\n", defaultGOGC)
}

// helpTemplate is the help of one command: its description, synopsis,
// subcommands, flags and example.
const helpTemplate = `{{.CommandPath}} — {{.Short}}

usage: {{.UseLine}}
{{- if .HasAvailableSubCommands}}

commands:{{range .Commands}}{{if .IsAvailableCommand}}
  {{.UseLine}}
      {{.Short}}{{end}}{{end}}
{{- end}}
{{- if .HasAvailableLocalFlags}}

flags of {{.CommandPath}}:
{{flagUsages .LocalFlags}}{{end}}
{{- if .HasExample}}

example:
  {{.Example}}{{end}}
`

// flagUsages lists flags as "  --name type" lines, each followed by its
// indented description and default ("--progress=false" style booleans show
// no type).
func flagUsages(fs *pflag.FlagSet) string {
	var b strings.Builder
	fs.VisitAll(func(f *pflag.Flag) {
		if f.Hidden || f.Name == "help" {
			return
		}
		arg, use := pflag.UnquoteUsage(f)
		b.WriteString("  --" + f.Name)
		if arg != "" {
			b.WriteString(" " + arg)
		}
		b.WriteString("\n    \t" + strings.ReplaceAll(use, "\n", "\n    \t"))
		if d := f.DefValue; d != "" && d != "false" && d != "0" && d != "[]" {
			fmt.Fprintf(&b, " (default %s)", d)
		}
		b.WriteString("\n")
	})
	return strings.TrimSuffix(b.String(), "\n")
}

// usageError is a missing or unknown command: exit status 2, the message
// (if any) and the command list on stderr.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

// exitError is an error with its own exit status (130: interrupted).
type exitError struct {
	code int
	err  error
}

func (e exitError) Error() string { return e.err.Error() }
func (e exitError) Unwrap() error { return e.err }

// closestCommand returns ` (did you mean "x"?)` for the command name
// closest to name, when one is close.
func closestCommand(root *cobra.Command, name string) string {
	best, bestD := "", 3
	for _, c := range root.Commands() {
		if d := names.Distance(name, c.Name()); c.IsAvailableCommand() && d < bestD {
			best, bestD = c.Name(), d
		}
	}
	if best == "" {
		return ""
	}
	return fmt.Sprintf(" (did you mean %q?)", best)
}

// commands are probe's commands, in the order probe help lists them.
func commands() []*cobra.Command {
	return []*cobra.Command{
		NewCmdInspect(nil),
		NewCmdCapture(nil),
		NewCmdTokenize(nil),
		NewCmdGenerate(nil),
		NewCmdDemo(nil),
		NewCmdSetup(nil),
		NewCmdHooks(nil),
		NewCmdFigures(nil),
		newReportCmd(),
		NewCmdSweep(nil),
		NewCmdDiag(nil),
		NewCmdSummarize(nil),
		NewCmdMerge(nil),
		NewCmdBench(nil),
		NewCmdPPL(nil),
		NewCmdParams(nil),
		NewCmdVersion(nil),
		NewCmdGDN(nil),
		NewCmdSinks(nil),
		NewCmdMassive(nil),
		NewCmdExperts(nil),
		NewCmdRetrieval(nil),
		NewCmdExplore(nil),
	}
}

// argsKey keys, in the context of a run, the command line run parses.
type argsKey struct{}

// commandArgs returns the arguments after c's name on the command line
// run parsed (what a manifest records and a resume note repeats); nil
// when c was not run from a command line.
func commandArgs(c *cobra.Command) []string {
	ctx := c.Context()
	if ctx == nil {
		return nil
	}
	all, _ := ctx.Value(argsKey{}).([]string)
	depth := strings.Count(c.CommandPath(), " ") // the words of the path below probe
	if len(all) < depth {
		return nil
	}
	return all[depth:]
}

// defaultsOf returns the options of the command newCmd builds as its
// flags' defaults fill them (a command line that gives none of them), for
// callers that run a command's run function directly (probe demo), and
// that command's flags, which stay bound to the options: flagRecord of
// them, once the caller has set the options, is what the equivalent
// command line would have recorded.
func defaultsOf[O any](newCmd func(runF func(*O) error) *cobra.Command) (*O, *pflag.FlagSet) {
	var opts *O
	c := newCmd(func(o *O) error { opts = o; return nil })
	if err := c.RunE(c, nil); err != nil || opts == nil {
		panic(fmt.Sprintf("defaultsOf %s: %v", c.Name(), err)) // RunE only fills the options
	}
	return opts, c.Flags()
}
