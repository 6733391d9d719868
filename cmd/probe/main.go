// Command probe loads transformer checkpoints, runs hooked forward passes and
// measures attention as a filter (see README.md).
//
// Usage:
//
//	probe inspect <dir>
//	probe capture --model <dir> (--ids <file.json> | --text <file> [--max-tokens N]) --hook <name> ... --out <file.safetensors>
//	probe tokenize (--model <dir> | --tokenizer <tokenizer.json>) --text <file> [--no-special-tokens]
//	probe generate --arch qwen3|gated|llama|qwen2|gpt2 [--layers N ...] --out <dir>
//	probe demo [--out <dir>]
//	probe hooks
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
)

type command struct {
	name, usage string
	run         func(args []string, stdout io.Writer) error
}

var commands []command

func init() {
	commands = []command{
		{"inspect", "inspect <dir>: architecture, shapes, dtype, parameter count, gate type", cmdInspect},
		{"capture", "capture --model <dir> (--ids <file.json> | --text <file>) --hook <name> ... --out <file.safetensors>", cmdCapture},
		{"tokenize", "tokenize (--model <dir> | --tokenizer <file>) --text <file> [--no-special-tokens]: ids as JSON", cmdTokenize},
		{"generate", "generate --arch <arch> --out <dir>: write a randomly initialized HF checkpoint", cmdGenerate},
		{"demo", "demo [--out <dir>] [--static]: the whole story on the embedded zoo checkpoints (BFT App. I, RFA parameters, AFA figures, perplexity and Prediction 3) in one report.html", cmdDemo},
		{"hooks", "hooks: list the hook points and their shapes", cmdHooks},
		{"figures", "figures --paper rfa|selrope|rt|bft|all --out <dir> [--static] [--model|--series|--history (rfa)]: the papers' figures (analytic; RFA also from checkpoints)", cmdFigures},
		{"report", "report <sweep-dir> [--out report.html] | report attention --capture <file> --layer L [--heads 0,1] [--gamma 0.25] --out <dir>", cmdReport},
		{"sweep", "sweep --model <dir> (--text <file> | --ids <file>) --lengths 1k,2k,4k --samples 5 --out <dir>: BFT App. I diagnostic sweep", cmdSweep},
		{"diag", "diag --model <dir> --ids <file.json> --out <file.csv>: per-(sample, layer, head, query) filter diagnostics", cmdDiag},
		{"summarize", "summarize <dir>: Figs. 2–4 of a sweep beside the paper's numbers", cmdSummarize},
		{"merge", "merge <dir> ... --out <dir>: combine sweep shards into the tables of an unsharded run", cmdMerge},
		{"bench", "bench --model <dir> --tokens T [--reps N] [--no-diagnostics]: forward-pass speed and peak RSS as one JSON object", cmdBench},
		{"ppl", "ppl --model <dir>[,<dir>...] (--ids <file> | --text <file>) [--lengths 256,...,4096] [--samples N] [--gate learned,one,k,k-matched] --out <dir>: perplexity vs context length, gate variants (BFT Prediction 3)", cmdPPL},
		{"params", "params <dir> [--json]: RFA per-head filter parameters (μ, ω band, σ², η², γ², τ, ν/d, α, β, regime, ALiBi slope)", cmdParams},
		{"gdn", "gdn --model <dir> (--ids <file> | --text <file>) --lengths 4k [--samples N] --out <dir>: Gated DeltaNet as a filter per (layer, value head, token): gain, forgetting, innovation, state norm, n_eff^W, first-token share", cmdGDN},
		{"sinks", "sinks --model <dir> (--ids <file> | --text <file>) --lengths 1k,4k [--eps 0.3] --out <dir>: first-token attention and Gu et al.'s sink rate, entropy and largest weight vs T, output-gate statistics per head", cmdSinks},
		{"massive", "massive --model <dir> (--ids <file> | --text <file>) --lengths 1k [--top-k 10] [--intervene zero,mean] --out <dir>: Sun et al.'s massive activations per layer and the perplexity change when they are zeroed or mean-replaced", cmdMassive},
	}
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: probe <command> [options]\n\ncommands:")
	for _, c := range commands {
		fmt.Fprintf(w, "  %s\n", c.usage)
	}
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run executes one command line and returns the exit code. Errors are
// printed to stderr as one message; a panic becomes an error message too.
func run(args []string, stdout, stderr io.Writer) (code int) {
	defer func() {
		if r := recover(); r != nil {
			fmt.Fprintf(stderr, "probe: internal error: %v\n", r)
			code = 3
		}
	}()
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(stderr)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	for _, c := range commands {
		if c.name == args[0] {
			err := c.run(args[1:], stdout)
			if errors.Is(err, flag.ErrHelp) {
				return 0
			}
			if err != nil {
				fmt.Fprintf(stderr, "probe %s: %v\n", c.name, err)
				return 1
			}
			return 0
		}
	}
	fmt.Fprintf(stderr, "probe: unknown command %q\n", args[0])
	usage(stderr)
	return 2
}

// newFlags makes a flag set that reports errors instead of exiting.
func newFlags(name string) *flag.FlagSet {
	fs := flag.NewFlagSet("probe "+name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	return fs
}

// parse parses args, allowing positional arguments before flags, and
// returns the positional ones.
func parse(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				var b strings.Builder
				fs.SetOutput(&b)
				fs.PrintDefaults()
				fmt.Fprint(os.Stderr, b.String())
				return nil, err
			}
			return nil, err
		}
		if fs.NArg() == 0 {
			return pos, nil
		}
		pos = append(pos, fs.Arg(0))
		args = fs.Args()[1:]
	}
}

// multi is a repeatable string flag.
type multi []string

func (m *multi) String() string     { return strings.Join(*m, ",") }
func (m *multi) Set(s string) error { *m = append(*m, s); return nil }
