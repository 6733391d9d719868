// Command probe loads transformer checkpoints, runs hooked forward passes and
// measures attention as a filter (see README.md). probe help lists the
// commands; probe help <command> shows one's flags and an example.
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"strings"

	"github.com/filterlens/probe/analysis"
	"github.com/filterlens/probe/internal/names"
)

// command is one subcommand: its name, a one-line description, its
// synopsis, one example (with paths of this repository), and its body.
type command struct {
	name, summary, usage, example string
	run                           func(args []string, stdout io.Writer) error
}

var commands []command

func init() {
	commands = []command{
		{"inspect", "architecture, shapes, dtypes, parameter count and gate type of a checkpoint (no weights read); a folder of checkpoints is listed",
			"inspect <dir|org/name> [--revision R] [--json]",
			"probe inspect zoo/checkpoints/gated_headwise", cmdInspect},
		{"capture", "run one forward pass and write the chosen hook points' activations to a safetensors file",
			"capture --model <dir|org/name> (--ids <file> | --text <file> [--max-tokens N] [--tokenizer F]) --hook <name> ... --out <file.safetensors>",
			"probe capture --model zoo/checkpoints/gated_headwise --text README.md --max-tokens 256 --hook 'blocks.*.attn.hook_pattern' --out cap.safetensors", cmdCapture},
		{"tokenize", "token ids (or --tokens: token strings) of a text as a JSON list, the format every --ids reads",
			"tokenize (--model <dir|org/name> | --tokenizer <tokenizer.json>) --text <file|-> [--tokens] [--no-special-tokens]",
			"echo 'The jury said' | probe tokenize --model zoo/checkpoints/gated_headwise --text - --tokens", cmdTokenize},
		{"generate", "write a randomly initialized Hugging Face checkpoint of a supported architecture",
			"generate --arch <arch> [--layers N --d-model D --heads H --kv-heads K --vocab V --max-pos P] --out <new-dir> [--force]",
			"probe generate --arch gated --layers 2 --d-model 64 --heads 4 --kv-heads 2 --out /tmp/random-gated", cmdGenerate},
		{"demo", "the whole story on the embedded zoo checkpoints (BFT App. I, RFA parameters, AFA figures, perplexity, Prediction 3) in one report.html",
			"demo [--out <dir>] [--static]",
			"probe demo --out /tmp/probe-demo", cmdDemo},
		{"setup", "put echarts.min.js in the user cache (from npm) so that reports made anywhere are interactive",
			"setup [--tgz <echarts-5.6.0.tgz>]",
			"probe setup", cmdSetup},
		{"hooks", "list the hook points with their shapes, or the points one model issues",
			"hooks [--model <dir|org/name>]",
			"probe hooks --model zoo/checkpoints/gated_headwise", cmdHooks},
		{"figures", "the papers' figures: analytic from their formulas, or RFA/AFA from checkpoints",
			"figures --paper rfa|selrope|rt|bft|afa|all --out <dir> [--static] [--model <dir|org/name> | --series <dirs> | --history <file>]",
			"probe figures --paper bft --out /tmp/figures", cmdFigures},
		{"report", "HTML report of a finished sweep, ppl, gdn, sinks, massive or retrieval folder; `report attention` draws captured attention maps",
			"report <results-dir> [--out report.html] [--static]\n       probe report attention --capture <file.safetensors> --layer L [--heads 0,1] [--gamma 0.25] --out <dir>",
			"probe report /tmp/sweep", cmdReport},
		{"sweep", "BFT App. I diagnostic sweep: filter diagnostics over context lengths and samples, tables and Figs. 2–4",
			"sweep --model <dir|org/name> (--text <file> | --ids <file>) --lengths 1k,2k,4k [--samples 5] --out <dir> [--force]",
			"probe sweep --model zoo/checkpoints/gated_headwise --text README.md --lengths 128,256 --samples 2 --out /tmp/sweep", cmdSweep},
		{"diag", "per-(sample, layer, head, query) filter diagnostics of one batch as CSV",
			"diag --model <dir|org/name> (--ids <file> | --text <file> [--max-tokens N]) --out <file.csv>",
			"probe diag --model zoo/checkpoints/gated_headwise --text README.md --max-tokens 128 --out diag.csv", cmdDiag},
		{"summarize", "Figs. 2–4 of a sweep folder beside the paper's numbers, optionally re-aggregated",
			"summarize <dir> [--json] [--last-layers N --ddof 0|1 ...]",
			"probe summarize /tmp/sweep --last-layers 2", cmdSummarize},
		{"merge", "combine the shards of a sweep, gdn, sinks or massive run into the tables of an unsharded run",
			"merge <shard-dir> ... --out <dir> [--force]",
			"probe merge /tmp/shard0 /tmp/shard1 --out /tmp/sweep", cmdMerge},
		{"bench", "forward-pass speed and peak RSS as one JSON object, alone or beside each diagnostic's consumers (--modes)",
			"bench --model <dir|org/name> [--tokens T] [--reps N] [--no-diagnostics | --modes forward,gdn,gdn-w-rows,sinks,massive|all] [--ids <file> | --text <file>]",
			"probe bench --model zoo/checkpoints/qwen3_base --tokens 1024 --reps 3", cmdBench},
		{"ppl", "perplexity vs context length and gate variants (BFT Prediction 3)",
			"ppl --model <dir|org/name>[,...] (--ids <file> | --text <file>) [--lengths 256,...,4096] [--samples N] [--gate learned,one,k,k-matched] --out <dir> [--force]",
			"probe ppl --model zoo/checkpoints/gated_headwise --text README.md --lengths 128,256 --samples 2 --out /tmp/ppl", cmdPPL},
		{"params", "learned per-head filter parameters of the families that have them: RFA (μ, ω band, σ², η², γ², τ, ν/d, α, β, regime, ALiBi slope), AFA (a, ω band, σ², η², τ_s, s) and RT (μ, ω band, σ̃², η², γ², τ_θ², ν, β_s)",
			"params <dir|org/name> [--json]",
			"probe params zoo/checkpoints/rfa_m2_sc", cmdParams},
		{"version", "module version, VCS revision and whether the tree was modified, from the build information",
			"version [--json]",
			"probe version", cmdVersion},
		{"gdn", "Gated DeltaNet as a filter per (layer, value head, token): gain, forgetting, innovation, state norm, and with --w-rows n_eff^W, first-token share, dispersion of the exact effective attention",
			"gdn --model <dir> (--ids <file> | --text <file>) --lengths 4k [--samples N] [--w-rows [--no-dispersion]] [--shard i/n] --out <dir>",
			"probe generate --arch qwen3_5 --vocab 2048 --out /tmp/q35 && probe gdn --model /tmp/q35 --text README.md --tokenizer zoo/checkpoints/gated_headwise/tokenizer.json --lengths 256 --out /tmp/gdn", cmdGDN},
		{"sinks", "first-token attention and Gu et al.'s sink rate, entropy and largest weight vs T, output-gate statistics per softmax head",
			"sinks --model <dir> (--ids <file> | --text <file>) --lengths 1k,4k [--eps 0.3] [--shard i/n] --out <dir>",
			"probe sinks --model zoo/checkpoints/gated_headwise --text README.md --lengths 128,256 --eps 0.1,0.3 --out /tmp/sinks", cmdSinks},
		{"massive", "Sun et al.'s massive activations per layer and the perplexity change when they are zeroed or mean-replaced",
			"massive --model <dir> (--ids <file> | --text <file>) --lengths 1k [--top-k 10] [--intervene zero,mean] [--shard i/n] --out <dir>",
			"probe massive --model zoo/checkpoints/gated_headwise --text README.md --lengths 256 --out /tmp/massive", cmdMassive},
		{"retrieval", "Wu et al.'s retrieval score per softmax head on a synthetic copy task (argmax attention on the copied token's source)",
			"retrieval --model <dir> [--segment 64] [--gap 0] [--samples 4] [--steps copied|all] --out <dir>",
			"probe retrieval --model zoo/checkpoints/qwen3_base --segment 64 --gap 128 --out /tmp/retrieval", cmdRetrieval},
	}
}

// helpOut is where --help and probe help write (run sets it to stdout).
var helpOut io.Writer = os.Stdout

func usage(w io.Writer) {
	fmt.Fprintln(w, "probe measures attention as a filter in transformer checkpoints (see README.md)")
	fmt.Fprintln(w, "\nusage: probe <command> [flags]\n\ncommands:")
	for _, c := range commands {
		fmt.Fprintf(w, "  %-10s %s\n", c.name, c.summary)
	}
	fmt.Fprintln(w, "\nprobe help <command> (or probe <command> --help) shows a command's flags and an example.")
	fmt.Fprintln(w, "A --model is a checkpoint folder or a hub model id org/name found offline in the Hugging Face cache.")
	fmt.Fprintf(w, "The Go collector runs at GOGC=%d unless the environment sets GOGC (GOMEMLIMIT caps the heap too).\n", defaultGOGC)
}

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

// commandHelp writes a command's description, synopsis, flags and example.
func commandHelp(w io.Writer, fs *flag.FlagSet) {
	name := strings.TrimPrefix(fs.Name(), "probe ")
	for _, c := range commands {
		if c.name == name || (name == "report attention" && c.name == "report") {
			fmt.Fprintf(w, "probe %s — %s\n\nusage: probe %s\n", c.name, c.summary, c.usage)
			defer fmt.Fprintf(w, "\nexample:\n  %s\n", c.example)
		}
	}
	n := 0
	fs.VisitAll(func(*flag.Flag) { n++ })
	if n == 0 {
		return
	}
	fmt.Fprintf(w, "\nflags of probe %s:\n", name)
	fs.VisitAll(func(f *flag.Flag) {
		arg, use := flag.UnquoteUsage(f)
		line := "  --" + f.Name
		if arg != "" {
			line += " " + arg
		}
		fmt.Fprintf(w, "%s\n    \t%s", line, strings.ReplaceAll(use, "\n", "\n    \t"))
		if f.DefValue != "" && f.DefValue != "false" && f.DefValue != "0" {
			fmt.Fprintf(w, " (default %s)", f.DefValue)
		}
		fmt.Fprintln(w)
	})
}

func cmdVersion(args []string, w io.Writer) error {
	fs := newFlags("version")
	asJSON := fs.Bool("json", false, "print the build information as JSON (the tool field of the manifests)")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return fmt.Errorf("unexpected argument %q", pos[0])
	}
	t := analysis.Tool()
	if *asJSON {
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

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run executes one command line and returns the exit code. Errors are
// printed to stderr as one message; a panic becomes an error message too.
// Help (probe --help, probe help [command], probe <command> --help) goes
// to stdout with exit code 0.
func run(args []string, stdout, stderr io.Writer) (code int) {
	defer func() {
		if r := recover(); r != nil {
			fmt.Fprintf(stderr, "probe: internal error: %v\n", r)
			code = 3
		}
	}()
	helpOut = stdout
	setGOGC()
	if len(args) == 0 {
		usage(stderr)
		return 2
	}
	switch args[0] {
	case "-h", "-help", "--help":
		usage(stdout)
		return 0
	case "help":
		if len(args) == 1 {
			usage(stdout)
			return 0
		}
		args = append(args[1:], "--help")
	case "-version", "--version":
		args = []string{"version"}
	}
	for _, c := range commands {
		if c.name == args[0] {
			err := c.run(args[1:], stdout)
			if errors.Is(err, flag.ErrHelp) {
				return 0
			}
			if err != nil {
				fmt.Fprintf(stderr, "probe %s: %v\n", c.name, err)
				var ee exitError
				if errors.As(err, &ee) {
					return ee.code
				}
				return 1
			}
			return 0
		}
	}
	fmt.Fprintf(stderr, "probe: unknown command %q%s\n\n", args[0], closestCommand(args[0]))
	usage(stderr)
	return 2
}

// exitError is an error with its own exit status (130: interrupted).
type exitError struct {
	code int
	err  error
}

func (e exitError) Error() string { return e.err.Error() }
func (e exitError) Unwrap() error { return e.err }

// closestCommand returns ` (did you mean "x"?)` for the command name
// closest to name, when one is close.
func closestCommand(name string) string {
	best, bestD := "", 3
	for _, c := range commands {
		if d := names.Distance(name, c.name); d < bestD {
			best, bestD = c.name, d
		}
	}
	if best == "" {
		return ""
	}
	return fmt.Sprintf(" (did you mean %q?)", best)
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
				commandHelp(helpOut, fs)
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
