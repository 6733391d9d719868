package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/filterlens/probe/analysis"
	"github.com/filterlens/probe/analysis/results"
	"github.com/filterlens/probe/checkpoint"
	"github.com/filterlens/probe/model"
	"github.com/filterlens/probe/tokenizer"
)

// lambdaFlags are the λ-prior flags of the commands that compute λobs and K
// (sweep, ppl, gdn): declared once, with one default each (App. I's: Eq. 6,
// ν = 1, σ0² = 1/d_head, λ = 1, no cap).
type lambdaFlags struct {
	Form                    string // λobs estimator ("" where the command offers no choice)
	Nu, Sigma02, Prior, Max float64
}

// registerLambda registers --nu, --sigma02 and --lambda-prior, and where
// the command offers a choice of estimator (forms lists them; "" for none)
// --lambda-form and --lambda-max.
func (f *lambdaFlags) registerLambda(fs *pflag.FlagSet, forms string) {
	fs.Float64Var(&f.Nu, "nu", 1, "ν of Eq. 6")
	fs.Float64Var(&f.Sigma02, "sigma02", 0, "σ0² of Eq. 6 (0: 1/d_head)")
	fs.Float64Var(&f.Prior, "lambda-prior", 1, "λ in K = λobs/(λ + λobs) (App. I: 1)")
	if forms != "" {
		fs.StringVar(&f.Form, "lambda-form", "reml", "λobs estimator: "+forms)
		fs.Float64Var(&f.Max, "lambda-max", 0, "cap on λobs (0: none)")
	}
}

// planFlags choose the chunks a measurement over context lengths takes
// from one token stream (sweep, ppl, gdn, sinks, massive): declared once;
// each command passes its defaults (analysis's Default*Options).
type planFlags struct {
	Lengths, Disjoint, Placement string
	K, Samples, Offset           int
	Seed                         uint64
}

// planDefaults are a command's defaults of the plan flags ("" lengths:
// required).
type planDefaults = planFlags

// registerPlan registers --lengths, --k, --samples, --disjoint,
// --placement, --seed and --offset with the defaults d.
func (p *planFlags) registerPlan(fs *pflag.FlagSet, d planDefaults) {
	lengthsUsage := "context lengths T, e.g. 1k,4k; a k suffix means --k"
	if d.Lengths == "" {
		lengthsUsage += " (required)"
	}
	fs.StringVar(&p.Lengths, "lengths", d.Lengths, lengthsUsage)
	fs.IntVar(&p.K, "k", d.K, "what k means in --lengths: 1000 or 1024")
	fs.IntVar(&p.Samples, "samples", d.Samples, "chunks per length")
	fs.StringVar(&p.Disjoint, "disjoint", d.Disjoint, "chunks disjoint across all lengths (all) or only within a length (within)")
	fs.StringVar(&p.Placement, "placement", d.Placement, "chunk layout: sequential from --offset, or shuffled by --seed")
	fs.Uint64Var(&p.Seed, "seed", d.Seed, "seed of --placement shuffled")
	fs.IntVar(&p.Offset, "offset", d.Offset, "first stream token to use")
}

// stdin is what an input file "-" reads (tests replace it).
var stdin io.Reader = os.Stdin

// modelFlag is --model with --revision: a checkpoint folder, or a hub
// model id org/name resolved offline in the Hugging Face cache
// (checkpoint.ResolveModel); and, for the commands that load the model,
// --allow-unexpected (which model.Load's errors name), --compute,
// --deviation-tokens and --memory-check.
type modelFlag struct {
	Name, Revision  string
	AllowUnexpected bool
	Compute         string
	DeviationTokens int
	MemoryCheck     bool
}

// registerModelRef registers --model and --revision on fs: for commands that
// read a checkpoint's files without loading the model (probe tokenize),
// which find the folder with locate.
func (m *modelFlag) registerModelRef(fs *pflag.FlagSet, usage string) {
	fs.StringVar(&m.Name, "model", "", usage+": a folder, or a hub model id org/name found in the Hugging Face cache (never downloaded)")
	fs.StringVar(&m.Revision, "revision", "", "with a hub model id: the branch, tag or commit of the snapshot (default main)")
}

// registerModel registers --model, --revision, --allow-unexpected, --compute,
// --deviation-tokens and --memory-check on fs.
func (m *modelFlag) registerModel(fs *pflag.FlagSet, usage string) {
	m.registerModelRef(fs, usage)
	fs.BoolVar(&m.AllowUnexpected, "allow-unexpected", false, "ignore checkpoint tensors the architecture does not use")
	fs.StringVar(&m.Compute, "compute", string(model.ComputeF32), "arithmetic of the matrix products: f32 (float32 products; bf16 weights on AMX: each activation split exactly into three bf16 parts, "+
		"exact products, float32 sums); f32-widen (the weights widened to float32: the bits of a float32 copy of them); bf16 (PyTorch's bf16: activations rounded to bf16, bf16 weights — "+
		"f32 ones rounded once at load —, float32 sums, and the attention's q, k, v in bf16, its softmax float32); or bf16-proj "+
		"(bf16's projections, the attention in float32); see model.Compute")
	fs.IntVar(&m.DeviationTokens, "deviation-tokens", analysis.DefaultDeviationTokens, "with --compute bf16 or bf16-proj, commands that write tables also run the first N tokens "+
		"of their first pass in float32 and record and print the deviation of logits and diagnostics (0: none)")
	fs.BoolVar(&m.MemoryCheck, "memory-check", true, "refuse a pass whose estimated memory (docs/performance.md, \"Peak memory\") exceeds the memory available "+
		"(MemAvailable, or a cgroup's limit such as a Slurm job's) before it starts, instead of being killed part way")
}

// positional takes the one positional argument of inspect-like commands
// (probe params <dir>) as --model.
func (m *modelFlag) positional(pos []string) error {
	switch {
	case len(pos) > 1:
		return fmt.Errorf("want one checkpoint (a folder or org/name), got %d arguments: %s", len(pos), strings.Join(pos, " "))
	case len(pos) == 0 && m.Name == "":
		return fmt.Errorf("want one checkpoint (a folder or a hub model id org/name), as the argument or --model")
	case len(pos) == 1 && m.Name != "":
		return fmt.Errorf("give the checkpoint once: as the argument %q or as --model %q", pos[0], m.Name)
	case len(pos) == 1:
		m.Name = pos[0]
	}
	return nil
}

// loadOptions returns the model.LoadOptions the flags ask for (--compute
// is checked by resolve).
func (m modelFlag) loadOptions() model.LoadOptions {
	return model.LoadOptions{AllowUnexpected: m.AllowUnexpected, Compute: model.Compute(m.Compute), NoMemoryCheck: !m.MemoryCheck}
}

// checkFlags validates --compute and --deviation-tokens (resolve does).
func (m modelFlag) checkFlags() error {
	if _, err := model.ParseCompute(m.Compute); err != nil {
		return fmt.Errorf("--%w", err)
	}
	if m.DeviationTokens < 0 {
		return fmt.Errorf("--deviation-tokens %d: want 0 (none) or more tokens", m.DeviationTokens)
	}
	return nil
}

// printDeviation prints a Deviation (nil: nothing).
func printDeviation(w io.Writer, d *results.Deviation) {
	if d == nil {
		return
	}
	for _, l := range d.Lines() {
		fmt.Fprintln(w, l)
	}
}

// load resolves --model and loads the model with the flags' options,
// returning its folder too.
func (m modelFlag) load() (string, *model.Model, error) {
	dir, err := m.dir()
	if err != nil {
		return "", nil, err
	}
	md, err := model.Load(dir, m.loadOptions())
	return dir, md, err
}

// dir returns the checkpoint folder --model names; --model is required.
func (m modelFlag) dir() (string, error) {
	d, _, err := m.resolve()
	return d, err
}

// loadConfig returns the checkpoint folder --model names and its config.
func (m modelFlag) loadConfig() (string, *model.Config, error) {
	dir, err := m.dir()
	if err != nil {
		return "", nil, err
	}
	cfg, err := model.LoadConfig(dir)
	return dir, cfg, err
}

// resolve is dir, also returning where in the hub cache the folder was
// found (nil for a folder given as such).
func (m modelFlag) resolve() (string, *checkpoint.HubModel, error) {
	if err := m.checkFlags(); err != nil {
		return "", nil, err
	}
	return m.locate()
}

// locate is resolve without the checks of the flags that load a model.
func (m modelFlag) locate() (string, *checkpoint.HubModel, error) {
	if m.Name == "" {
		return "", nil, fmt.Errorf("--model is required (a checkpoint folder or a hub model id org/name)")
	}
	return checkpoint.ResolveModel(m.Name, m.Revision)
}

// inputName names an input path in messages: "-" is standard input.
func inputName(path string) string {
	if path == "-" {
		return "<stdin>"
	}
	return path
}

// readInput reads a file, or standard input for "-".
func readInput(path string) ([]byte, error) {
	if path == "-" {
		b, err := io.ReadAll(stdin)
		if err != nil {
			return nil, fmt.Errorf("<stdin>: %w", err)
		}
		return b, nil
	}
	return os.ReadFile(path)
}

// idFormat is the id file format every --ids reads, for messages.
const idFormat = "a JSON list of token ids (one sequence, e.g. [1,2,3], as probe tokenize prints it) or a list of such lists (a batch, e.g. [[1,2],[3,4]])"

// parseIDs parses an id file: a flat JSON list of ids is one sequence, a
// list of lists is a batch. Every sequence must be non-empty and every id
// non-negative. Errors name the file, and the sequence and position at
// fault.
func parseIDs(path string, data []byte) ([][]int, error) {
	name := inputName(path)
	var batch [][]int
	// JSON's null decodes to id 0 without an error; in a list that decodes
	// as ids at all, "null" can only be that literal
	if json.Valid(data) && bytes.Contains(data, []byte("null")) {
		return nil, fmt.Errorf("%s: null where a token id or a sequence is expected (want %s)", name, idFormat)
	}
	if isNested(data) {
		if err := json.Unmarshal(data, &batch); err != nil {
			return nil, fmt.Errorf("%s: want %s: %v", name, idFormat, err)
		}
	} else {
		var flat []int
		if err := json.Unmarshal(data, &flat); err != nil {
			return nil, fmt.Errorf("%s: want %s: %v", name, idFormat, err)
		}
		if len(flat) > 0 {
			batch = [][]int{flat}
		}
		if t := firstNegative(flat); t >= 0 {
			return nil, fmt.Errorf("%s: token id %d at position %d is negative", name, flat[t], t)
		}
	}
	if len(batch) == 0 {
		return nil, fmt.Errorf("%s: empty: no token ids (want %s)", name, idFormat)
	}
	for b, seq := range batch {
		if len(seq) == 0 {
			return nil, fmt.Errorf("%s: sequence %d is empty", name, b)
		}
		if t := firstNegative(seq); t >= 0 {
			return nil, fmt.Errorf("%s: token id %d at sequence %d position %d is negative", name, seq[t], b, t)
		}
	}
	return batch, nil
}

// isNested reports whether data starts like a JSON list of lists.
func isNested(data []byte) bool {
	s := bytes.TrimSpace(data)
	if len(s) == 0 || s[0] != '[' {
		return false
	}
	s = bytes.TrimSpace(s[1:])
	return len(s) > 0 && s[0] == '['
}

// readIDBatch reads capture's and diag's --ids: one sequence or a
// rectangular batch (see parseIDs).
func readIDBatch(path string) ([][]int, error) {
	data, err := readInput(path)
	if err != nil {
		return nil, err
	}
	ids, err := parseIDs(path, data)
	if err != nil {
		return nil, err
	}
	for b, seq := range ids {
		if len(seq) != len(ids[0]) {
			return nil, fmt.Errorf("%s: sequence %d has %d tokens, sequence 0 has %d (the batch must be rectangular)",
				inputName(path), b, len(seq), len(ids[0]))
		}
	}
	return ids, nil
}

// readIDStream reads the --ids of commands that cut chunks from one
// token stream (sweep, ppl, bench): a flat list, or a batch of one.
func readIDStream(path string) ([]int, error) {
	data, err := readInput(path)
	if err != nil {
		return nil, err
	}
	return parseIDStream(path, data)
}

// parseIDStream is readIDStream on data already read.
func parseIDStream(path string, data []byte) ([]int, error) {
	ids, err := parseIDs(path, data)
	if err != nil {
		return nil, err
	}
	if len(ids) > 1 {
		return nil, fmt.Errorf("%s: holds a batch of %d sequences; this command takes one token stream (a flat list such as probe tokenize prints, or a batch of one)",
			inputName(path), len(ids))
	}
	return ids[0], nil
}

// firstNegative returns the index of the first negative id, or -1.
func firstNegative(ids []int) int {
	for i, id := range ids {
		if id < 0 {
			return i
		}
	}
	return -1
}

// tokenizerPath returns the tokenizer.json to use: file, or the one in
// the model folder.
func tokenizerPath(modelDir, file string) (string, error) {
	if file != "" {
		return file, nil
	}
	if modelDir == "" {
		return "", fmt.Errorf("no tokenizer: pass --tokenizer <tokenizer.json>")
	}
	if gp, _, ok, err := model.GGUFTokenizer(modelDir); err != nil || ok {
		if err == nil && gp == "" {
			err = fmt.Errorf("%s: its tokenizer is in the GGUF metadata, not in a file: pass --tokenizer <tokenizer.json> (scripts/gguf/gguf2hf writes one) or put one beside the file", modelDir)
		}
		return gp, err
	}
	p := filepath.Join(modelDir, "tokenizer.json")
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("%s has no tokenizer.json: pass --tokenizer <tokenizer.json>", modelDir)
	}
	return p, nil
}

// loadTokenizer loads file, or the model folder's tokenizer.json (a GGUF
// model: the tokenizer.json beside the file, else its tokenizer.ggml.*
// metadata, model.GGUFTokenizer).
func loadTokenizer(modelDir, file string) (*tokenizer.Tokenizer, error) {
	if file == "" && modelDir != "" {
		if p, data, ok, err := model.GGUFTokenizer(modelDir); err != nil {
			return nil, err
		} else if ok && p == "" {
			return tokenizer.FromJSON(data)
		} else if ok {
			file = p
		}
	}
	p, err := tokenizerPath(modelDir, file)
	if err != nil {
		return nil, err
	}
	return tokenizer.Load(p)
}

// tokenStrings returns the text of every token of ids, each decoded on its
// own by the tokenizer of the model folder (or --tokenizer file), for
// labelling outputs; an error when there is no tokenizer.
func tokenStrings(modelDir, tokFile string, ids [][]int) ([][]string, error) {
	tok, err := loadTokenizer(modelDir, tokFile)
	if err != nil {
		return nil, err
	}
	out := make([][]string, len(ids))
	for b, seq := range ids {
		out[b] = make([]string, len(seq))
		for i, id := range seq {
			if out[b][i], err = tok.Decode([]int{id}, false); err != nil {
				return nil, err
			}
		}
	}
	return out, nil
}

// readText tokenizes a text file ("-": standard input) into one sequence
// of at most maxTokens tokens (0: all).
func readText(modelDir, tokFile, textFile string, maxTokens int, addSpecial bool) ([]int, error) {
	tok, err := loadTokenizer(modelDir, tokFile)
	if err != nil {
		return nil, err
	}
	text, err := readInput(textFile)
	if err != nil {
		return nil, err
	}
	ids, err := tok.Encode(string(text), addSpecial)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", inputName(textFile), err)
	}
	if len(ids) == 0 {
		return nil, fmt.Errorf("%s: no tokens", inputName(textFile))
	}
	if maxTokens > 0 && len(ids) > maxTokens {
		ids = ids[:maxTokens]
	}
	return ids, nil
}

// tokenFlags are the token inputs of the commands that run a model:
// --ids or --text (with --tokenizer, and --max-tokens for a batch).
type tokenFlags struct {
	IDs, Text, Tokenizer string
	MaxTokens            int
}

// registerInput registers the input flags of every command that runs a model:
// --ids, --text and --tokenizer, and with batch (capture, diag: one batch
// of sequences, rather than one token stream cut into chunks) also
// --max-tokens.
func (f *tokenFlags) registerInput(fs *pflag.FlagSet, batch bool) {
	fs.StringVar(&f.IDs, "ids", "", "token ids: "+idFormat+"; - reads standard input")
	fs.StringVar(&f.Text, "text", "", "text file to tokenize (with the post-processor's special tokens); - reads standard input")
	fs.StringVar(&f.Tokenizer, "tokenizer", "", "tokenizer.json for --text (default: the one in the model folder)")
	if batch {
		fs.IntVar(&f.MaxTokens, "max-tokens", 0, "keep at most this many tokens of --text (0: all)")
	}
}

// checkedBatch is batch, refusing sequences longer than cfg's positions
// unless allowExt (checkLength).
func (f *tokenFlags) checkedBatch(modelDir string, cfg *model.Config, allowExt bool) ([][]int, error) {
	ids, err := f.batch(modelDir)
	if err != nil {
		return nil, err
	}
	return ids, checkLength(len(ids[0]), cfg, f, allowExt)
}

// batch reads the ids: the --ids batch, or --text as one sequence.
func (f tokenFlags) batch(modelDir string) ([][]int, error) {
	if f.IDs != "" {
		return readIDBatch(f.IDs)
	}
	seq, err := readText(modelDir, f.Tokenizer, f.Text, f.MaxTokens, true)
	if err != nil {
		return nil, err
	}
	return [][]int{seq}, nil
}

// runFlags are the flags of every measurement on the run engine (sweep,
// diag, gdn, sinks, massive, experts, retrieval, ppl): model, output folder
// and formats (diag: its CSV file, and no --format), workers, shard, force
// and progress, with the checks and the run spec they fill.
type runFlags struct {
	Model               modelFlag
	Force, Progress     bool
	Threads             int
	Formats, Out, Shard string
	sh                  results.Shard // --shard, parsed by formats
}

// streamFlags are the flags of the measurements that cut one token stream
// into chunks (gdn, sinks, massive, experts): runFlags, input and plan.
type streamFlags struct {
	runFlags
	Input              tokenFlags
	Plan               planFlags
	AllowExtrapolation bool
}

// progressBar returns the progress function of a run (nil without
// --progress) and the function that ends its bar.
func (sf *runFlags) progressBar() (func(analysis.Progress), func()) {
	if !sf.Progress {
		return nil, func() {}
	}
	bar := newProgressBar(progressOut)
	return bar.update, bar.finish
}

// threadsVar declares --threads into p: the workers of every command that
// runs forward passes (attention, Gated DeltaNet heads and the
// diagnostics' consumers; the projections always split over GOMAXPROCS).
func threadsVar(fs *pflag.FlagSet, p *int) {
	fs.IntVar(p, "threads", 0, "workers of the attention and the diagnostics (0: GOMAXPROCS)")
}

// tileVar declares --tile, the query rows per attention tile, into p.
func tileVar(fs *pflag.FlagSet, p *int) {
	fs.IntVar(p, "tile", 0, "query rows per attention tile (0: the model's default)")
}

// extrapolationVar declares --allow-extrapolation into p, for the
// commands that otherwise refuse sequences longer than the model's
// max_position_embeddings.
func extrapolationVar(fs *pflag.FlagSet, p *bool) {
	fs.BoolVar(p, "allow-extrapolation", false, "run sequences longer than max_position_embeddings")
}

// modelHint is what "--model is required" says after it.
const modelHint = "a checkpoint folder or a hub model id org/name"

// shardVar declares --shard into p, which the commands that run passes
// into a folder share (sweep and the measurements on the run engine).
func shardVar(fs *pflag.FlagSet, p *string) {
	fs.StringVar(p, "shard", "0/1", "run passes i, i+n, … of the run (i/n, 0-based) into --out; combine the shard folders with probe merge")
}

// registerRun registers the flags of a measurement on the run engine;
// model says what --model takes.
func (s *runFlags) registerRun(fs *pflag.FlagSet, model string) {
	s.Model.registerModel(fs, model)
	threadsVar(fs, &s.Threads)
	fs.StringVar(&s.Formats, "format", "parquet,csv", "table formats: any of parquet,csv,jsonl")
	fs.StringVar(&s.Out, "out", "", "output folder (required); re-running into it skips finished passes")
	shardVar(fs, &s.Shard)
	fs.BoolVar(&s.Force, "force", false, "run into an --out that holds other files, or a run of another plan (its tables are replaced)")
	progressVar(fs, &s.Progress)
}

// registerStream registers the flags of a stream command with its plan
// defaults d.
func (s *streamFlags) registerStream(fs *pflag.FlagSet, d planDefaults) {
	s.registerRun(fs, "checkpoint (required)")
	s.Input.registerInput(fs, false) // one token stream, cut into chunks
	s.Plan.registerPlan(fs, d)
	extrapolationVar(fs, &s.AllowExtrapolation)
}

// declareRelations declares to cobra the flags a stream command
// requires (--model, --out, --lengths) and that exactly one of --ids and
// --text is given.
func (s *streamFlags) declareRelations(cmd *cobra.Command) {
	markRequired(cmd, "model", modelHint)
	markRequired(cmd, "out", "")
	markRequired(cmd, "lengths", "e.g. --lengths 1k,4k")
	markExactlyOne(cmd, "ids", "text")
}

// formats parses --shard and --format, returning the table formats.
func (s *runFlags) formats() ([]string, error) {
	var err error
	if s.sh, err = results.ParseShard(s.Shard); err != nil {
		return nil, fmt.Errorf("--shard: %w", err)
	}
	formats, err := analysis.ParseFormats(s.Formats)
	if err != nil {
		return nil, fmt.Errorf("--format: %w", err)
	}
	return formats, nil
}

// validate parses --shard, --format and --lengths, returning the stream
// plan and the table formats.
func (s *streamFlags) validate() (results.StreamPlan, []string, error) {
	formats, err := s.formats()
	if err != nil {
		return results.StreamPlan{}, nil, err
	}
	lengths, err := analysis.ParseLengths(s.Plan.Lengths, s.Plan.K)
	if err != nil {
		return results.StreamPlan{}, nil, fmt.Errorf("--lengths: %w", err)
	}
	return s.Plan.plan(lengths, s.AllowExtrapolation), formats, nil
}

// plan is the stream plan of the parsed lengths, the layout flags and
// allowExt (--allow-extrapolation, or ppl's true).
func (p planFlags) plan(lengths []int, allowExt bool) results.StreamPlan {
	return results.StreamPlan{Lengths: lengths, Samples: p.Samples, Disjoint: p.Disjoint, Placement: p.Placement,
		Seed: p.Seed, Offset: p.Offset, AllowExtrapolation: allowExt}
}

// engineRun is a command's run on the engine between runFlags.spec and
// finish: its flags, where its lines go, its kind, and the function that
// ends its interrupt handler and progress bar.
type engineRun struct {
	*runFlags
	io   *cmdIO
	kind string
	end  func()
}

// spec is the one place a measurement's command fills its run spec (all
// but the model and the token stream): it refuses an --out that holds
// files other than a run of kind (what: the files the run writes) unless
// --force (a run of kind with another plan is refused by the run, which
// names the field), installs the interrupt handler that closes the spec's
// Stop and the progress bar (--progress), and returns the spec and the
// run that finish (or the caller's end) ends once the run returns.
func (s *runFlags) spec(kind, what string, formats []string, io *cmdIO) (analysis.RunSpec, *engineRun, error) {
	if analysis.StreamKindOf(s.Out) != kind {
		if err := refuseNonEmpty(s.Out, what, s.Force); err != nil {
			return analysis.RunSpec{}, nil, err
		}
	}
	stop := make(chan struct{})
	endInterrupt := onInterrupt(kind, stop, func() string { return resumeNote(kind, io.CommandLine) })
	progress, endBar := s.progressBar()
	spec := analysis.RunSpec{Load: s.Model.loadOptions(), Out: s.Out, Formats: formats, Threads: s.Threads, Shard: s.sh,
		Force: s.Force, Stop: stop, Progress: progress, CLIOptions: io.CLIOptions, Args: append([]string{kind}, io.CommandLine...),
		DeviationTokens: s.Model.DeviationTokens}
	return spec, &engineRun{s, io, kind, func() { endBar(); endInterrupt() }}, nil
}

// streamSpec is runFlags.spec with the model folder and the token stream (--ids
// or --text).
func (s *streamFlags) streamSpec(kind, what string, formats []string, io *cmdIO) (analysis.RunSpec, *engineRun, error) {
	dir, err := s.Model.dir()
	if err != nil {
		return analysis.RunSpec{}, nil, err
	}
	spec, run, err := s.runFlags.spec(kind, what, formats, io)
	if err != nil {
		return spec, nil, err
	}
	spec.Dir = dir
	if spec.Stream, spec.Source, err = readTokenStream(s.Input.IDs, s.Input.Text, dir, s.Input.Tokenizer); err != nil {
		run.end()
		return spec, nil, err
	}
	return spec, run, nil
}

// finish ends r, whose run returned man and err: a stop (SIGINT) says what
// is kept and how to resume, with exit status 130, and other errors pass
// through; otherwise done says what ran, report (unless the run was a
// shard, which writes no tables) prints the command's lines on its tables,
// and the bf16 deviation comes last.
func finish[M interface {
	*T
	Record() *results.RunRecord
}, T any](r *engineRun, man M, err error, report func() error) error {
	r.end()
	w := r.io.Stdout
	if err != nil {
		if man != nil {
			return r.stopped(w, r.kind, r.io.CommandLine, man.Record(), err)
		}
		return err
	}
	rec := man.Record()
	if !r.done(w, rec) {
		if err := report(); err != nil {
			return err
		}
	}
	printDeviation(w, rec.Deviation)
	return nil
}

// stopped reports a stream run that SIGINT stopped (analysis.ErrStopped):
// what is kept and the command that resumes it, exit status 130; other
// errors pass through.
func (s *runFlags) stopped(w io.Writer, cmd string, args []string, rec *results.RunRecord, err error) error {
	if !errors.Is(err, analysis.ErrStopped) {
		return err
	}
	fmt.Fprintf(w, "interrupted: %d passes are finished and kept in %s (each pass file is written whole); %s says the run is unfinished.\n%s\n",
		len(rec.Passes), filepath.Join(s.Out, "passes"), analysis.StreamManifestName(cmd, s.sh), resumeNote(cmd, args))
	return exitError{130, err}
}

// done reports the passes a stream command ran and kept, and for a shard
// how to combine the shards; it returns whether the run was a shard (which
// writes no tables).
func (s *runFlags) done(w io.Writer, rec *results.RunRecord) bool {
	if len(rec.Reused) > 0 || s.sh.Count > 1 {
		fmt.Fprintf(w, "%d passes (%d run, %d already finished) in %s; manifest %s\n", len(rec.Passes), len(rec.Passes)-len(rec.Reused),
			len(rec.Reused), s.Out, analysis.StreamManifestName(rec.Kind, s.sh))
	}
	if s.sh.Count <= 1 {
		return false
	}
	fmt.Fprintf(w, "shard %v done; when every shard is, combine them with: probe merge <shard folders…> --out <dir>\n", s.sh)
	return true
}
