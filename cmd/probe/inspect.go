package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/filterlens/probe/checkpoint"
	"github.com/filterlens/probe/model"
	"github.com/filterlens/probe/probes"
)

// summary is what inspect reports, read from config.json and the tensor
// headers only (no weights are loaded).
type summary struct {
	Dir        string   `json:"dir"`
	Arch       string   `json:"architecture"`
	ModelType  string   `json:"model_type"`
	Format     string   `json:"format"`
	Files      []string `json:"files"`
	Layers     int      `json:"layers"`
	DModel     int      `json:"d_model"`
	Heads      int      `json:"heads"`
	KVHeads    int      `json:"kv_heads"`
	DHead      int      `json:"head_dim"`
	DMLP       int      `json:"d_mlp"`
	Vocab      int      `json:"vocab"`
	MaxPos     int      `json:"max_position_embeddings"`
	DTypes     []string `json:"dtypes"`
	Parameters int64    `json:"parameters"`
	Gate       string   `json:"gate"`
	QKNorm     bool     `json:"qk_norm"`
	QKVBias    bool     `json:"qkv_bias"`
	Tied       bool     `json:"tied_embeddings"`
	RoPE       string   `json:"rope"`
	// LayerKinds is each layer's token mixer (model.Config.LayerKinds).
	LayerKinds []string `json:"layer_kinds"`
	// AttnSoftcap and FinalSoftcap are the logit soft-caps (0: none).
	AttnSoftcap  float64 `json:"attn_logit_softcap,omitempty"`
	FinalSoftcap float64 `json:"final_logit_softcap,omitempty"`
	// Skipped lists the stored tensors that are not part of the text model
	// (a vision-language wrapper's vision tower), which Load skips.
	Skipped []string `json:"skipped_tensors,omitempty"`
	// Hub says where in the Hugging Face cache Dir was found (nil for a
	// folder given as such).
	Hub *checkpoint.HubModel `json:"hub,omitempty"`
	// Memory is the estimate of a pass of --tokens tokens (nil without).
	Memory *memoryPlan `json:"memory,omitempty"`
}

// memoryPlan is what one pass of T tokens (one sequence, float32 compute,
// GOMAXPROCS attention workers) with every App. I diagnostic needs, as
// probe sweep and bench store them by default: the weights as the model
// holds them (an upper bound of what is resident: a pass releases the
// mapped embedding after its lookup, and one without logits never reads an
// untied head), the pass beyond them (model.Model.PassBytes) and the
// diagnostics' results (probes.Collector.Bytes), beside the memory
// available now.
type memoryPlan struct {
	Tokens          int     `json:"tokens"`
	WeightMiB       float64 `json:"weight_mib"`
	PassMiB         float64 `json:"pass_mib"`
	DiagnosticsMiB  float64 `json:"diagnostics_mib"`
	AvailableMiB    float64 `json:"available_mib,omitempty"` // absent where it cannot be read
	AvailableSource string  `json:"available_source,omitempty"`
}

// planMemory loads the checkpoint (safetensors are mapped: no weights
// read) and estimates a pass of T tokens with every App. I diagnostic.
func planMemory(dir string, T int) (*memoryPlan, error) {
	m, err := model.Load(dir, model.LoadOptions{})
	if err != nil {
		return nil, err
	}
	col, err := probes.NewModelCollector(1, &m.Config, 1, probes.CollectorOptions{Reductions: defaultReductions}) // its results grow as T
	if err != nil {
		return nil, err
	}
	pass, ok := m.PassBytes(1, T, model.Options{Hooks: col.Hooks(&m.Config)})
	if !ok {
		return nil, fmt.Errorf("--tokens: no memory estimate for the %s family (its own pass or token mixer, which docs/performance.md's \"Peak memory\" does not describe)", m.Arch)
	}
	p := &memoryPlan{Tokens: T, WeightMiB: mib(m.WeightBytes), PassMiB: mib(pass), DiagnosticsMiB: mib(col.Bytes() * int64(T))}
	if avail, from := model.AvailableMemory(); avail >= 0 {
		p.AvailableMiB, p.AvailableSource = mib(avail), from
	}
	return p, nil
}

// mib converts bytes to MiB.
func mib(b int64) float64 { return float64(b) / (1 << 20) }

func inspect(dir string) (*summary, error) {
	cfg, err := model.LoadConfig(dir)
	if err != nil {
		return nil, err
	}
	ck, err := checkpoint.Open(dir)
	if err != nil {
		return nil, err
	}
	defer ck.Close()
	s := &summary{Dir: dir, Arch: string(cfg.Arch), ModelType: cfg.ModelType, Format: ck.Format(), Files: ck.Files(),
		Layers: cfg.Layers, DModel: cfg.DModel, Heads: cfg.Heads, KVHeads: cfg.KVHeads, DHead: cfg.DHead,
		DMLP: cfg.DMLP, Vocab: cfg.Vocab, MaxPos: cfg.MaxPos, Gate: string(cfg.Gate), QKNorm: cfg.QKNorm,
		QKVBias: cfg.QKVBias, Tied: cfg.TiedHead, RoPE: cfg.Positions(), LayerKinds: cfg.LayerKinds(),
		AttnSoftcap: cfg.AttnSoftcap, FinalSoftcap: cfg.FinalSoftcap, Skipped: model.SkippedNames(cfg, ck.Names())}
	types := map[string]bool{}
	for _, n := range ck.Names() {
		info, _ := ck.Info(n)
		p, dtype := model.StoredParameters(n, info) // MXFP4 blocks: two a byte
		types[dtype] = true
		s.Parameters += p
	}
	for t := range types {
		s.DTypes = append(s.DTypes, t)
	}
	sort.Strings(s.DTypes)
	return s, nil
}

// kindRuns writes per-layer kinds as runs: "0–2 gated DeltaNet …; 3 full
// attention".
func kindRuns(kinds []string) string {
	var parts []string
	for i := 0; i < len(kinds); {
		j := i
		for j+1 < len(kinds) && kinds[j+1] == kinds[i] {
			j++
		}
		if j > i {
			parts = append(parts, fmt.Sprintf("%d–%d %s", i, j, kinds[i]))
		} else {
			parts = append(parts, fmt.Sprintf("%d %s", i, kinds[i]))
		}
		i = j + 1
	}
	return strings.Join(parts, "; ")
}

// checkpointsUnder lists the folders at most two levels below dir that
// hold a config.json (a zoo, a training run's checkpoint-* folders),
// sorted.
func checkpointsUnder(dir string) []string {
	var found []string
	for _, pattern := range []string{"*/config.json", "*/*/config.json"} {
		m, _ := filepath.Glob(filepath.Join(dir, pattern))
		for _, c := range m {
			found = append(found, filepath.Dir(c))
		}
	}
	sort.Strings(found)
	return found
}

// InspectOptions are the options of probe inspect.
type InspectOptions struct {
	cmdIO
	JSON     bool   // print JSON
	Revision string // with a hub model id: the snapshot's branch, tag or commit
	Tokens   int    // also estimate the memory of one pass of this many tokens (0: none)
}

// flags declares the flags of probe inspect into f and their relations.
func (o *InspectOptions) flags(cmd *cobra.Command, f *pflag.FlagSet) {
	f.BoolVar(&o.JSON, "json", false, "print JSON")
	f.StringVar(&o.Revision, "revision", "", "with a hub model id org/name: the branch, tag or commit of the snapshot (default main)")
	f.IntVar(&o.Tokens, "tokens", 0, "also estimate the memory of one pass of this many tokens with every App. I diagnostic "+
		"(float32 compute; safetensors are mapped, no weights read, a .bin checkpoint is read whole) beside the memory available (0: none)")
	cmd.ValidArgsFunction = completeModelDir
}

// runInspect prints the summary of one checkpoint (config.json and the
// tensor headers; with Tokens, the memory estimate of a pass), or lists
// the checkpoints of a folder of them.
func runInspect(opts *InspectOptions) error {
	pos := opts.Args
	if len(pos) != 1 {
		return fmt.Errorf("want one checkpoint (a folder or a hub model id org/name), got %d arguments", len(pos))
	}
	dir, hub, err := checkpoint.ResolveModel(pos[0], opts.Revision)
	if err != nil {
		return err
	}
	if file, ok, err := checkpoint.FindGGUF(dir); err != nil || ok {
		if err != nil {
			return err
		}
		return inspectGGUF(opts, file)
	}
	if _, err := os.Stat(filepath.Join(dir, "config.json")); errors.Is(err, os.ErrNotExist) {
		if found := checkpointsUnder(dir); len(found) > 0 {
			fmt.Fprintf(opts.Stdout, "%s holds no config.json; it is a folder of %d checkpoints (inspect one of them: probe inspect <folder>):\n", dir, len(found))
			for _, f := range found {
				fmt.Fprintf(opts.Stdout, "  %s\n", f)
			}
			return nil
		}
	}
	if opts.Tokens < 0 {
		return fmt.Errorf("--tokens %d: want 0 (no estimate) or more tokens", opts.Tokens)
	}
	s, err := inspect(dir)
	if err != nil {
		return err
	}
	s.Hub = hub
	if opts.Tokens > 0 {
		if s.Memory, err = planMemory(dir, opts.Tokens); err != nil {
			return err
		}
	}
	if opts.JSON {
		enc := json.NewEncoder(opts.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(s)
	}
	fmt.Fprintf(opts.Stdout, "checkpoint:    %s (%s: %v)\n", s.Dir, s.Format, s.Files)
	if s.Hub != nil {
		fmt.Fprintf(opts.Stdout, "hub cache:     %s (revision %s)\n", s.Hub, s.Hub.Revision)
	}
	fmt.Fprintf(opts.Stdout, "architecture:  %s (model_type %s)\n", s.Arch, s.ModelType)
	fmt.Fprintf(opts.Stdout, "layers:        %d\n", s.Layers)
	fmt.Fprintf(opts.Stdout, "d_model:       %d\n", s.DModel)
	fmt.Fprintf(opts.Stdout, "heads:         %d\n", s.Heads)
	fmt.Fprintf(opts.Stdout, "kv heads:      %d\n", s.KVHeads)
	fmt.Fprintf(opts.Stdout, "head dim:      %d\n", s.DHead)
	fmt.Fprintf(opts.Stdout, "mlp dim:       %d\n", s.DMLP)
	fmt.Fprintf(opts.Stdout, "vocab:         %d\n", s.Vocab)
	fmt.Fprintf(opts.Stdout, "max positions: %d\n", s.MaxPos)
	fmt.Fprintf(opts.Stdout, "dtype:         %v\n", s.DTypes)
	fmt.Fprintf(opts.Stdout, "parameters:    %d\n", s.Parameters)
	fmt.Fprintf(opts.Stdout, "gate:          %s\n", s.Gate)
	fmt.Fprintf(opts.Stdout, "qk-norm:       %v\n", s.QKNorm)
	fmt.Fprintf(opts.Stdout, "qkv bias:      %v\n", s.QKVBias)
	fmt.Fprintf(opts.Stdout, "tied head:     %v\n", s.Tied)
	fmt.Fprintf(opts.Stdout, "positions:     %s\n", s.RoPE)
	fmt.Fprintf(opts.Stdout, "layer kinds:   %s\n", kindRuns(s.LayerKinds))
	if s.AttnSoftcap > 0 || s.FinalSoftcap > 0 {
		fmt.Fprintf(opts.Stdout, "soft-caps:     attention logits %g, final logits %g (0: none)\n", s.AttnSoftcap, s.FinalSoftcap)
	}
	if len(s.Skipped) > 0 {
		fmt.Fprintf(opts.Stdout, "skipped:       %d stored tensors are not part of the text model and are not loaded: %s\n", len(s.Skipped), listNames(s.Skipped))
	}
	if p := s.Memory; p != nil {
		writeMemoryPlan(opts.Stdout, p)
	}
	return nil
}

// inspectGGUF prints the summary of a GGUF file (its tensors' types and
// bytes per parameter) and, with --tokens, its memory plan.
func inspectGGUF(opts *InspectOptions, file string) error {
	s, err := checkpoint.SummarizeGGUF(file)
	if err != nil {
		return err
	}
	if err := checkpoint.WriteGGUFSummary(opts.Stdout, s, opts.JSON); err != nil || opts.Tokens <= 0 {
		return err
	}
	if opts.JSON {
		return fmt.Errorf("--tokens with --json: the GGUF summary has no memory field; run without --json")
	}
	p, err := planMemory(file, opts.Tokens) // through model.Load: the quantized blocks as held
	if err != nil {
		return err
	}
	writeMemoryPlan(opts.Stdout, p)
	return nil
}

// writeMemoryPlan prints the memory line of probe inspect --tokens.
func writeMemoryPlan(w io.Writer, p *memoryPlan) {
	fmt.Fprintf(w, "memory:        one pass of %d tokens with every App. I diagnostic: weights ≤ %.0f MiB + pass %.0f MiB + diagnostics %.0f MiB ≤ %.0f MiB (docs/performance.md, \"Peak memory\")",
		p.Tokens, p.WeightMiB, p.PassMiB, p.DiagnosticsMiB, p.WeightMiB+p.PassMiB+p.DiagnosticsMiB)
	if p.AvailableSource != "" {
		fmt.Fprintf(w, "; available %.0f MiB (%s)", p.AvailableMiB, p.AvailableSource)
	}
	fmt.Fprintln(w)
}
