package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/filterlens/probe/analysis"
	"github.com/filterlens/probe/checkpoint"
	"github.com/filterlens/probe/model"
	"github.com/filterlens/probe/probes"
	"github.com/filterlens/probe/tokenizer"
)

// lambdaFlags are the λ-prior flags of the commands that compute λobs and K
// (sweep, ppl): declared once, with one default each (App. I's: Eq. 6, ν =
// 1, σ0² = 1/d_head, λ = 1, no cap).
type lambdaFlags struct {
	form                    *string
	nu, sigma02, prior, max *float64
}

// addLambdaFlags registers --nu, --sigma02 and --lambda-prior, and where
// the command offers a choice of estimator (forms lists them; "" for none)
// --lambda-form and --lambda-max.
func addLambdaFlags(fs *flag.FlagSet, forms string) lambdaFlags {
	f := lambdaFlags{
		nu:      fs.Float64("nu", 1, "ν of Eq. 6"),
		sigma02: fs.Float64("sigma02", 0, "σ0² of Eq. 6 (0: 1/d_head)"),
		prior:   fs.Float64("lambda-prior", 1, "λ in K = λobs/(λ + λobs) (App. I: 1)"),
	}
	if forms != "" {
		f.form = fs.String("lambda-form", "reml", "λobs estimator: "+forms)
		f.max = fs.Float64("lambda-max", 0, "cap on λobs (0: none)")
	}
	return f
}

// planFlags choose the chunks a measurement over context lengths takes
// from one token stream (sweep, ppl, gdn, sinks, massive): declared once;
// each command passes its defaults (analysis's Default*Options).
type planFlags struct {
	lengths, disjoint, placement *string
	k, samples, offset           *int
	seed                         *uint64
}

// planDefaults are a command's defaults of the plan flags ("" lengths:
// required).
type planDefaults struct {
	Lengths, Disjoint, Placement string
	K, Samples, Offset           int
	Seed                         uint64
}

func addPlanFlags(fs *flag.FlagSet, d planDefaults) planFlags {
	lengthsUsage := "context lengths T, e.g. 1k,4k; a k suffix means --k"
	if d.Lengths == "" {
		lengthsUsage += " (required)"
	}
	return planFlags{
		lengths:   fs.String("lengths", d.Lengths, lengthsUsage),
		k:         fs.Int("k", d.K, "what k means in --lengths: 1000 or 1024"),
		samples:   fs.Int("samples", d.Samples, "chunks per length"),
		disjoint:  fs.String("disjoint", d.Disjoint, "chunks disjoint across all lengths (all) or only within a length (within)"),
		placement: fs.String("placement", d.Placement, "chunk layout: sequential from --offset, or shuffled by --seed"),
		seed:      fs.Uint64("seed", d.Seed, "seed of --placement shuffled"),
		offset:    fs.Int("offset", d.Offset, "first stream token to use"),
	}
}

// stdin is what an input file "-" reads (tests replace it).
var stdin io.Reader = os.Stdin

// modelFlag is --model with --revision: a checkpoint folder, or a hub
// model id org/name resolved offline in the Hugging Face cache
// (checkpoint.ResolveModel); and --allow-unexpected, which model.Load's
// errors name.
type modelFlag struct {
	name, revision  *string
	allowUnexpected *bool
	compute         *string
	deviationTokens *int
	memoryCheck     *bool
}

// addModelRef registers --model and --revision on fs: for commands that
// read a checkpoint's files without loading the model (probe tokenize),
// which find the folder with locate.
func addModelRef(fs *flag.FlagSet, usage string) modelFlag {
	return modelFlag{
		name:     fs.String("model", "", usage+": a folder, or a hub model id org/name found in the Hugging Face cache (never downloaded)"),
		revision: fs.String("revision", "", "with a hub model id: the branch, tag or commit of the snapshot (default main)"),
	}
}

// addModelFlag registers --model, --revision, --allow-unexpected,
// --compute, --deviation-tokens and --memory-check on fs.
func addModelFlag(fs *flag.FlagSet, usage string) modelFlag {
	m := addModelRef(fs, usage)
	m.allowUnexpected = fs.Bool("allow-unexpected", false, "ignore checkpoint tensors the architecture does not use")
	m.compute = fs.String("compute", string(model.ComputeF32), "arithmetic of the matrix products: f32 (float32 products; bf16 weights on AMX: each activation split exactly into three bf16 parts, "+
		"exact products, float32 sums); f32-widen (the weights widened to float32: the bits of a float32 copy of them); bf16 (PyTorch's bf16: activations rounded to bf16, bf16 weights — "+
		"f32 ones rounded once at load —, float32 sums, and the attention's q, k, v in bf16, its softmax float32); or bf16-proj "+
		"(bf16's projections, the attention in float32); see model.Compute")
	m.deviationTokens = fs.Int("deviation-tokens", analysis.DefaultDeviationTokens, "with --compute bf16 or bf16-proj, commands that write tables also run the first N tokens "+
		"of their first pass in float32 and record and print the deviation of logits and diagnostics (0: none)")
	m.memoryCheck = fs.Bool("memory-check", true, "refuse a pass whose estimated memory (docs/performance.md, \"Peak memory\") exceeds the memory available "+
		"(MemAvailable, or a cgroup's limit such as a Slurm job's) before it starts, instead of being killed part way")
	return m
}

// positional takes the one positional argument of inspect-like commands
// (probe params <dir>) as --model.
func (m modelFlag) positional(pos []string) error {
	switch {
	case len(pos) > 1:
		return fmt.Errorf("want one checkpoint (a folder or org/name), got %d arguments: %s", len(pos), strings.Join(pos, " "))
	case len(pos) == 0 && *m.name == "":
		return fmt.Errorf("want one checkpoint (a folder or a hub model id org/name), as the argument or --model")
	case len(pos) == 1 && *m.name != "":
		return fmt.Errorf("give the checkpoint once: as the argument %q or as --model %q", pos[0], *m.name)
	case len(pos) == 1:
		*m.name = pos[0]
	}
	return nil
}

// loadOptions returns the model.LoadOptions the flags ask for (--compute
// is checked by resolve).
func (m modelFlag) loadOptions() model.LoadOptions {
	return model.LoadOptions{AllowUnexpected: *m.allowUnexpected, Compute: model.Compute(*m.compute), NoMemoryCheck: !*m.memoryCheck}
}

// deviation measures, for a model loaded with --compute bf16 and
// --deviation-tokens N > 0, the deviation of its passes from float32 on
// the first N tokens of ids (each sequence) with the Collector options
// copts, and prints it to w; nil, and nothing printed, otherwise.
func (m modelFlag) deviation(w io.Writer, md *model.Model, ids [][]int, copts probes.CollectorOptions, allowExt bool, threads int) (*analysis.Deviation, error) {
	n := *m.deviationTokens
	if !md.Compute.BF16Products() || n <= 0 {
		return nil, nil
	}
	slice := make([][]int, len(ids))
	for i, seq := range ids {
		slice[i] = seq[:min(n, len(seq))]
	}
	d, err := analysis.MeasureDeviation(md, slice, md.Compute, copts, allowExt, threads)
	if err != nil {
		return nil, fmt.Errorf("--deviation-tokens %d: %w", n, err)
	}
	printDeviation(w, d)
	return d, nil
}

// checkFlags validates --compute and --deviation-tokens (resolve does).
func (m modelFlag) checkFlags() error {
	if _, err := model.ParseCompute(*m.compute); err != nil {
		return fmt.Errorf("--%w", err)
	}
	if *m.deviationTokens < 0 {
		return fmt.Errorf("--deviation-tokens %d: want 0 (none) or more tokens", *m.deviationTokens)
	}
	return nil
}

// printDeviation prints a Deviation (nil: nothing).
func printDeviation(w io.Writer, d *analysis.Deviation) {
	if d == nil {
		return
	}
	for _, l := range d.Lines() {
		fmt.Fprintln(w, l)
	}
}

// dir returns the checkpoint folder --model names; --model is required.
func (m modelFlag) dir() (string, error) {
	d, _, err := m.resolve()
	return d, err
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
	if *m.name == "" {
		return "", nil, fmt.Errorf("--model is required (a checkpoint folder or a hub model id org/name)")
	}
	return checkpoint.ResolveModel(*m.name, *m.revision)
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

// tokenFlags are the token inputs of capture and diag: --ids or --text
// (with --tokenizer and --max-tokens).
type tokenFlags struct {
	ids, text, tokenizer *string
	maxTokens            *int
}

// addTokenFlags registers the input flags of every command that runs a
// model: --ids, --text and --tokenizer, and with batch (capture, diag: one
// batch of sequences, rather than one token stream cut into chunks) also
// --max-tokens.
func addTokenFlags(fs *flag.FlagSet, batch bool) tokenFlags {
	f := tokenFlags{
		ids:       fs.String("ids", "", "token ids: "+idFormat+"; - reads standard input"),
		text:      fs.String("text", "", "text file to tokenize (with the post-processor's special tokens); - reads standard input"),
		tokenizer: fs.String("tokenizer", "", "tokenizer.json for --text (default: the one in the model folder)"),
	}
	if batch {
		f.maxTokens = fs.Int("max-tokens", 0, "keep at most this many tokens of --text (0: all)")
	}
	return f
}

// check says whether exactly one of --ids and --text is given.
func (f tokenFlags) check() error {
	if (*f.ids == "") == (*f.text == "") {
		return fmt.Errorf("give exactly one of --ids and --text")
	}
	return nil
}

// batch reads the ids: the --ids batch, or --text as one sequence.
func (f tokenFlags) batch(modelDir string) ([][]int, error) {
	if *f.ids != "" {
		return readIDBatch(*f.ids)
	}
	seq, err := readText(modelDir, *f.tokenizer, *f.text, *f.maxTokens, true)
	if err != nil {
		return nil, err
	}
	return [][]int{seq}, nil
}

// streamFlags are the flags of the commands that measure one token stream
// cut into chunks and write tables into a folder (gdn, sinks, massive):
// model, input, plan and output flags, with the checks and the reading
// they share.
type streamFlags struct {
	model               modelFlag
	tok                 tokenFlags
	plan                planFlags
	allowExt, force     *bool
	progress            *bool
	threads             *int
	formats, out, shard *string
	sh                  analysis.Shard // --shard, parsed by validate
}

// progressBar returns the progress function of a run (nil without
// --progress) and the function that ends its bar.
func (sf *streamFlags) progressBar() (func(analysis.Progress), func()) {
	if !*sf.progress {
		return nil, func() {}
	}
	bar := newProgressBar(progressOut)
	return bar.update, bar.finish
}

// addShardFlag registers --shard, which the commands that run passes into
// a folder share (sweep, gdn, sinks, massive).
// addThreadsFlag declares --threads, the workers of every command that runs
// forward passes (attention, Gated DeltaNet heads and the diagnostics'
// consumers; the projections always split over GOMAXPROCS).
func addThreadsFlag(fs *flag.FlagSet) *int {
	return fs.Int("threads", 0, "workers of the attention and the diagnostics (0: GOMAXPROCS)")
}

// addTileFlag declares --tile, the query rows per attention tile.
func addTileFlag(fs *flag.FlagSet) *int {
	return fs.Int("tile", 0, "query rows per attention tile (0: the model's default)")
}

// addExtrapolationFlag declares --allow-extrapolation, for the commands
// that otherwise refuse sequences longer than the model's
// max_position_embeddings.
func addExtrapolationFlag(fs *flag.FlagSet) *bool {
	return fs.Bool("allow-extrapolation", false, "run sequences longer than max_position_embeddings")
}

func addShardFlag(fs *flag.FlagSet) *string {
	return fs.String("shard", "0/1", "run passes i, i+n, … of the run (i/n, 0-based) into --out; combine the shard folders with probe merge")
}

// addStreamFlags registers the flags of a stream command with its plan
// defaults d.
func addStreamFlags(fs *flag.FlagSet, d planDefaults) *streamFlags {
	return &streamFlags{
		model:    addModelFlag(fs, "checkpoint (required)"),
		tok:      addTokenFlags(fs, false), // one token stream, cut into chunks
		plan:     addPlanFlags(fs, d),
		allowExt: addExtrapolationFlag(fs),
		threads:  addThreadsFlag(fs),
		formats:  fs.String("format", "parquet,csv", "table formats: any of parquet,csv,jsonl"),
		out:      fs.String("out", "", "output folder (required); re-running into it skips finished passes"),
		shard:    addShardFlag(fs),
		force:    fs.Bool("force", false, "run into an --out that holds other files, or a run of another plan (its tables are replaced)"),
		progress: addProgressFlag(fs),
	}
}

// validate refuses positional arguments and missing --model, --out, --lengths
// or input, and returns the lengths and table formats.
func (s *streamFlags) validate(pos []string) (lengths []int, formats []string, err error) {
	switch {
	case len(pos) > 0:
		return nil, nil, fmt.Errorf("unexpected argument %q", pos[0])
	case *s.model.name == "":
		return nil, nil, fmt.Errorf("--model is required (a checkpoint folder or a hub model id org/name)")
	case *s.out == "":
		return nil, nil, fmt.Errorf("--out is required")
	case *s.plan.lengths == "":
		return nil, nil, fmt.Errorf("--lengths is required (e.g. --lengths 1k,4k)")
	case (*s.tok.ids == "") == (*s.tok.text == ""):
		return nil, nil, fmt.Errorf("give exactly one of --ids and --text")
	}
	if s.sh, err = analysis.ParseShard(*s.shard); err != nil {
		return nil, nil, fmt.Errorf("--shard: %w", err)
	}
	if formats, err = analysis.ParseFormats(*s.formats); err != nil {
		return nil, nil, fmt.Errorf("--format: %w", err)
	}
	if lengths, err = analysis.ParseLengths(*s.plan.lengths, *s.plan.k); err != nil {
		return nil, nil, fmt.Errorf("--lengths: %w", err)
	}
	return lengths, formats, nil
}

// input resolves the checkpoint folder, refuses an --out that holds
// files other than an earlier run of this command (kind: gdn, sinks or
// massive; what: what the command writes there) unless --force, and reads
// the token stream. An earlier run of another plan is refused later, once
// the model's digest is known (analysis.GDNRun.Run and its siblings).
func (s *streamFlags) input(kind, what string) (dir string, stream []int, src analysis.SourceInfo, err error) {
	if dir, err = s.model.dir(); err != nil {
		return "", nil, src, err
	}
	if analysis.StreamKindOf(*s.out) != kind {
		if err := refuseNonEmpty(*s.out, what, *s.force); err != nil {
			return "", nil, src, err
		}
	}
	stream, src, err = readTokenStream(*s.tok.ids, *s.tok.text, dir, *s.tok.tokenizer)
	return dir, stream, src, err
}

// stopped reports a stream run that SIGINT stopped (analysis.ErrStopped):
// what is kept and the command that resumes it, exit status 130; other
// errors pass through.
func (s *streamFlags) stopped(w io.Writer, cmd string, args []string, rec *analysis.RunRecord, err error) error {
	if !errors.Is(err, analysis.ErrStopped) {
		return err
	}
	fmt.Fprintf(w, "interrupted: %d passes are finished and kept in %s (each pass file is written whole); %s says the run is unfinished.\n%s\n",
		len(rec.Passes), filepath.Join(*s.out, "passes"), analysis.StreamManifestName(cmd, s.sh), resumeNote(cmd, args))
	return exitError{130, err}
}

// done reports the passes a stream command ran and kept, and for a shard
// how to combine the shards; it returns whether the run was a shard (which
// writes no tables).
func (s *streamFlags) done(w io.Writer, rec *analysis.RunRecord) bool {
	if len(rec.Reused) > 0 || s.sh.Count > 1 {
		fmt.Fprintf(w, "%d passes (%d run, %d already finished) in %s; manifest %s\n", len(rec.Passes), len(rec.Passes)-len(rec.Reused),
			len(rec.Reused), *s.out, analysis.StreamManifestName(rec.Kind, s.sh))
	}
	if s.sh.Count <= 1 {
		return false
	}
	fmt.Fprintf(w, "shard %v done; when every shard is, combine them with: probe merge <shard folders…> --out <dir>\n", s.sh)
	return true
}
