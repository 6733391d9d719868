package main

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/filterlens/probe/analysis/results"
)

// cmdIO is what every command's options hold beside their flags, filled
// from the command line when the command runs (newCmd): where its lines
// go, its positional arguments, and for the manifests and the resume note
// every flag with its value and the arguments after the command name.
type cmdIO struct {
	Stdout      io.Writer
	Args        []string
	CLIOptions  []results.Option
	CommandLine []string
}

// base returns o: every options type embedding a cmdIO has it, for newCmd.
func (o *cmdIO) base() *cmdIO { return o }

// newCmd builds the command name (its path below probe) in gh's shape:
// its text and positional arguments from usage, and a RunE that fills the
// options' cmdIO from the command line and runs runF on them, or runX when
// runF is nil (tests and defaultsOf pass a runF that keeps the options).
// The options declare the flags that fill them (their flags method).
func newCmd[O any, P interface {
	*O
	base() *cmdIO
	flags(*cobra.Command, *pflag.FlagSet)
}](runF, runX func(P) error, name string) *cobra.Command {
	u, ok := usage[name]
	if !ok {
		panic("no usage of probe " + name)
	}
	cmd, opts := &u, P(new(O))
	if cmd.Args == nil {
		cmd.Args = noArgs("")
	}
	cmd.RunE = func(c *cobra.Command, args []string) error {
		b := opts.base()
		b.Stdout, b.Args = c.OutOrStdout(), args
		b.CLIOptions, b.CommandLine = cliOptions(c.Flags()), commandArgs(c)
		if runF != nil {
			return runF(opts)
		}
		return runX(opts)
	}
	opts.flags(cmd, cmd.Flags())
	return cmd
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

// NewCmdBench builds probe bench; runF (nil: runBench) runs it.
func NewCmdBench(runF func(*BenchOptions) error) *cobra.Command {
	return newCmd(runF, runBench, "bench")
}

// NewCmdCapture builds probe capture; runF (nil: runCapture) runs it.
func NewCmdCapture(runF func(*CaptureOptions) error) *cobra.Command {
	return newCmd(runF, runCapture, "capture")
}

// NewCmdDemo builds probe demo; runF (nil: runDemo) runs it.
func NewCmdDemo(runF func(*DemoOptions) error) *cobra.Command {
	return newCmd(runF, runDemo, "demo")
}

// NewCmdDiag builds probe diag; runF (nil: runDiag) runs it.
func NewCmdDiag(runF func(*DiagOptions) error) *cobra.Command {
	return newCmd(runF, runDiag, "diag")
}

// NewCmdExperts builds probe experts; runF (nil: runExperts) runs it.
func NewCmdExperts(runF func(*ExpertsOptions) error) *cobra.Command {
	return newCmd(runF, runExperts, "experts")
}

// NewCmdExplore builds probe explore; runF (nil: runExplore) runs it.
func NewCmdExplore(runF func(*ExploreOptions) error) *cobra.Command {
	return newCmd(runF, runExplore, "explore")
}

// NewCmdFigures builds probe figures; runF (nil: runFigures) runs it.
func NewCmdFigures(runF func(*FiguresOptions) error) *cobra.Command {
	return newCmd(runF, runFigures, "figures")
}

// NewCmdGDN builds probe gdn; runF (nil: runGDN) runs it.
func NewCmdGDN(runF func(*GDNOptions) error) *cobra.Command {
	return newCmd(runF, runGDN, "gdn")
}

// NewCmdGenerate builds probe generate; runF (nil: runGenerate) runs it.
func NewCmdGenerate(runF func(*GenerateOptions) error) *cobra.Command {
	return newCmd(runF, runGenerate, "generate")
}

// NewCmdHooks builds probe hooks; runF (nil: runHooks) runs it.
func NewCmdHooks(runF func(*HooksOptions) error) *cobra.Command {
	return newCmd(runF, runHooks, "hooks")
}

// NewCmdInspect builds probe inspect; runF (nil: runInspect) runs it.
func NewCmdInspect(runF func(*InspectOptions) error) *cobra.Command {
	return newCmd(runF, runInspect, "inspect")
}

// NewCmdMassive builds probe massive; runF (nil: runMassive) runs it.
func NewCmdMassive(runF func(*MassiveOptions) error) *cobra.Command {
	return newCmd(runF, runMassive, "massive")
}

// NewCmdMerge builds probe merge; runF (nil: runMerge) runs it.
func NewCmdMerge(runF func(*MergeOptions) error) *cobra.Command {
	return newCmd(runF, runMerge, "merge")
}

// NewCmdParams builds probe params; runF (nil: runParams) runs it.
func NewCmdParams(runF func(*ParamsOptions) error) *cobra.Command {
	return newCmd(runF, runParams, "params")
}

// NewCmdPPL builds probe ppl; runF (nil: runPPL) runs it.
func NewCmdPPL(runF func(*PPLOptions) error) *cobra.Command {
	return newCmd(runF, runPPL, "ppl")
}

// NewCmdReport builds probe report; runF (nil: runReport) runs it.
func NewCmdReport(runF func(*ReportOptions) error) *cobra.Command {
	return newCmd(runF, runReport, "report")
}

// NewCmdReportAttention builds probe report attention; runF (nil: runReportAttention) runs it.
func NewCmdReportAttention(runF func(*ReportAttentionOptions) error) *cobra.Command {
	return newCmd(runF, runReportAttention, "report attention")
}

// NewCmdRetrieval builds probe retrieval; runF (nil: runRetrieval) runs it.
func NewCmdRetrieval(runF func(*RetrievalOptions) error) *cobra.Command {
	return newCmd(runF, runRetrieval, "retrieval")
}

// NewCmdSetup builds probe setup; runF (nil: runSetup) runs it.
func NewCmdSetup(runF func(*SetupOptions) error) *cobra.Command {
	return newCmd(runF, runSetup, "setup")
}

// NewCmdSinks builds probe sinks; runF (nil: runSinks) runs it.
func NewCmdSinks(runF func(*SinksOptions) error) *cobra.Command {
	return newCmd(runF, runSinks, "sinks")
}

// NewCmdSummarize builds probe summarize; runF (nil: runSummarize) runs it.
func NewCmdSummarize(runF func(*SummarizeOptions) error) *cobra.Command {
	return newCmd(runF, runSummarize, "summarize")
}

// NewCmdSweep builds probe sweep; runF (nil: runSweep) runs it.
func NewCmdSweep(runF func(*SweepOptions) error) *cobra.Command {
	return newCmd(runF, runSweep, "sweep")
}

// NewCmdTokenize builds probe tokenize; runF (nil: runTokenize) runs it.
func NewCmdTokenize(runF func(*TokenizeOptions) error) *cobra.Command {
	return newCmd(runF, runTokenize, "tokenize")
}

// NewCmdVersion builds probe version; runF (nil: runVersion) runs it.
func NewCmdVersion(runF func(*VersionOptions) error) *cobra.Command {
	return newCmd(runF, runVersion, "version")
}
