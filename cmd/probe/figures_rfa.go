package main

import (
	"fmt"
	"io"
	"math/rand/v2"
	"strconv"
	"strings"

	"github.com/spf13/pflag"

	"github.com/filterlens/probe/analysis"
	"github.com/filterlens/probe/analysis/attngrid"
	"github.com/filterlens/probe/checkpoint"
	"github.com/filterlens/probe/model"
	"github.com/filterlens/probe/report"
	"github.com/filterlens/probe/report/papers"
)

// rfaFigureFlags are the options of `probe figures --paper rfa` that draw
// the paper's figures from checkpoints instead of formulas:
//
//	--model <dir>       Figs. 3–4 from the checkpoint's learned per-head values, Figs. 11–14 from a forward pass
//	--series <dirs>     Figs. 8–10 from a series of checkpoints (comma-separated, or one folder of checkpoint-* subfolders)
//	--history <file>    Figs. 8–10 from a JSON parameter history (format: analysis.ReadRFAHistory)
type rfaFigureFlags struct {
	Model, Series, History string
	Revision               string
	AllowUnexpected        bool
	Layer                  int
	MaxLag                 float64
	LagAxis                string
	AttnTokens             int
	IDs, Text, Tokenizer   string
	Seed                   uint64
	Heads                  string
	Pool                   string
	MaxSize                int
	Decayed                bool
	AllowExtrapolation     bool
}

// registerRFAFigures registers the checkpoint options on the figures flag set.
func (f *rfaFigureFlags) registerRFAFigures(fs *pflag.FlagSet) {
	fs.StringVar(&f.Model, "model", "", "RFA checkpoint, a folder or a hub model id org/name in the Hugging Face cache: Figs. 3–4 from its learned per-head values and Figs. 11–14 attention maps (--paper rfa)")
	fs.StringVar(&f.Revision, "revision", "", "with a hub model id: the branch, tag or commit of the snapshot (default main)")
	fs.BoolVar(&f.AllowUnexpected, "allow-unexpected", false, "ignore checkpoint tensors the architecture does not use")
	fs.StringVar(&f.Series, "series", "", "checkpoints over training, comma-separated or one folder of checkpoint-* subfolders: Figs. 8–10 (--paper rfa)")
	fs.StringVar(&f.History, "history", "", "JSON parameter history {\"step\": [...], \"l{l}.sigma_sq_v\": [[per head]...], ...} or the authors' history dict as JSON: Figs. 8–10")
	fs.IntVar(&f.Layer, "layer", -1, "layer to draw; -1: the last")
	fs.Float64Var(&f.MaxLag, "max-lag", 0, "largest lag of Figs. 3–4 (default: the model's longest context, its t_measure length)")
	fs.StringVar(&f.LagAxis, "lag-axis", "log", "lag axis of Figs. 3–4: log (1 … max-lag) or linear (0 … max-lag)")
	fs.IntVar(&f.AttnTokens, "attn-tokens", -1, "sequence length T of the attention maps; -1: 4096 (the paper's L), or the model's longest context if shorter; 0: no maps")
	fs.StringVar(&f.IDs, "ids", "", "token ids for the attention maps: a JSON list of ints (or of lists: the first is used); default: random ids")
	fs.StringVar(&f.Text, "text", "", "text file tokenized with the model's tokenizer.json for the attention maps")
	fs.StringVar(&f.Tokenizer, "tokenizer", "", "tokenizer.json for --text (default: the model's)")
	fs.Uint64Var(&f.Seed, "seed", 1, "seed of the random token ids of the attention maps")
	fs.StringVar(&f.Heads, "heads", "", "comma-separated heads of the attention maps (default: all)")
	fs.StringVar(&f.Pool, "pool", attngrid.PoolMax, "downsampling of the attention maps: max or mean over each block")
	fs.IntVar(&f.MaxSize, "max-size", 128, "largest number of blocks per side of an attention map (0: one cell per token pair)")
	fs.BoolVar(&f.Decayed, "attn-decayed", false, "also draw the decayed attention A = Â ⊙ E (hook_pattern_decayed), RFA only")
	extrapolationVar(fs, &f.AllowExtrapolation)
}

// active reports whether any checkpoint input was given.
func (f *rfaFigureFlags) active() bool {
	return f.Model != "" || f.Series != "" || f.History != ""
}

// attentionIDs returns the token ids of the attention maps and a sentence
// saying where they come from.
func (f *rfaFigureFlags) attentionIDs(m *model.Model, T int) ([]int, string, error) {
	switch {
	case f.IDs != "" && f.Text != "":
		return nil, "", fmt.Errorf("give --ids or --text, not both")
	case f.IDs != "":
		ids, err := readIDStream(f.IDs)
		if err != nil {
			batch, berr := readIDBatch(f.IDs)
			if berr != nil {
				return nil, "", err
			}
			ids = batch[0]
		}
		if len(ids) < T {
			return nil, "", fmt.Errorf("%s holds %d tokens, fewer than --attn-tokens %d", f.IDs, len(ids), T)
		}
		return ids[:T], fmt.Sprintf("the first %d ids of %s", T, f.IDs), nil
	case f.Text != "":
		ids, err := readText(f.Model, f.Tokenizer, f.Text, T, true)
		if err != nil {
			return nil, "", err
		}
		if len(ids) < T {
			return nil, "", fmt.Errorf("%s gives %d tokens, fewer than --attn-tokens %d", f.Text, len(ids), T)
		}
		return ids, fmt.Sprintf("the first %d tokens of %s", T, f.Text), nil
	}
	rng := rand.New(rand.NewPCG(f.Seed, 0x5eed))
	ids := make([]int, T)
	for i := range ids {
		ids[i] = rng.IntN(m.Config.Vocab)
	}
	return ids, fmt.Sprintf("%d random ids, uniform on [0, %d), PCG seed %d (no text: the maps show the learned prior and the rotations, not content)", T, m.Config.Vocab, f.Seed), nil
}

// parseHeads reads --heads.
func parseHeads(s string) ([]int, error) {
	if s == "" {
		return nil, nil
	}
	var hs []int
	for _, part := range strings.Split(s, ",") {
		h, err := strconv.Atoi(strings.TrimSpace(part))
		if err != nil {
			return nil, fmt.Errorf("--heads %q: %v", s, err)
		}
		hs = append(hs, h)
	}
	return hs, nil
}

// cmdFiguresRFA draws the RFA figures of the checkpoint inputs into out.
func cmdFiguresRFA(f *rfaFigureFlags, out string, wo report.WriteOptions, w io.Writer) error {
	r, err := rfaCheckpointReport(f)
	if err != nil {
		return err
	}
	res, err := r.Write(out, wo)
	if err != nil {
		return err
	}
	var ids []string
	for _, fig := range r.Figures {
		ids = append(ids, fig.ID)
	}
	fmt.Fprintf(w, "rfa: %d figures (%s) → %s\n", len(r.Figures), strings.Join(ids, ", "), res.HTML)
	return nil
}

// rfaCheckpointReport builds the report of the checkpoint inputs.
func rfaCheckpointReport(f *rfaFigureFlags) (*report.Report, error) {
	in := papers.RFACheckpointInput{Model: f.Model}
	var m *model.Model
	if f.Model != "" {
		var err error
		if m, err = f.modelInput(&in); err != nil {
			return nil, err
		}
	}
	switch {
	case f.Series != "" && f.History != "":
		return nil, fmt.Errorf("give --series or --history, not both")
	case f.Series != "":
		h, err := analysis.LoadRFASeries(strings.Split(f.Series, ","), f.Layer)
		if err != nil {
			return nil, err
		}
		in.History = h
	case f.History != "":
		var mu []float64
		if m != nil && in.RFA {
			// μ is a fixed buffer in the authors' runs: the checkpoint
			// supplies it to a history that did not log it.
			for _, p := range in.MapsHeads {
				mu = append(mu, p.Mu)
			}
		}
		h, err := analysis.ReadRFAHistory(f.History, f.Layer, mu)
		if err != nil {
			return nil, err
		}
		in.History = h
	}
	in.Manifest = []report.Option{{Name: "paper", Value: "papers/000 (RFA), Figs. 3, 4 (App. B.4), 8–10 (App. F.2), 11–14 (App. F.3)", Source: "shared/papers; notes 000 §C"}}
	if f.Model != "" {
		in.Manifest = append(in.Manifest, report.Option{Name: "checkpoint", Value: f.Model, Source: "--model"})
	}
	return papers.RFACheckpointReport(in)
}

// modelInput loads --model (resolving a hub id into f.Model) and fills in
// with what it gives: the layer drawn, for an RFA model its learned
// per-head values and lag axis (Figs. 3–4), and the attention maps of
// --attn-tokens tokens (Figs. 11–14).
func (f *rfaFigureFlags) modelInput(in *papers.RFACheckpointInput) (*model.Model, error) {
	dir, _, err := checkpoint.ResolveModel(f.Model, f.Revision)
	if err != nil {
		return nil, err
	}
	f.Model = dir
	m, err := model.Load(f.Model, model.LoadOptions{AllowUnexpected: f.AllowUnexpected})
	if err != nil {
		return nil, err
	}
	in.RFA, in.Layers = m.IsRFA(), m.Config.Layers
	layer := f.Layer
	if layer < 0 {
		layer = m.Config.Layers - 1
	}
	if layer >= m.Config.Layers {
		return nil, fmt.Errorf("--layer %d: %s has %d layers", layer, f.Model, m.Config.Layers)
	}
	in.Layer = layer
	if in.RFA {
		if err := f.rfaParams(in, m); err != nil {
			return nil, err
		}
	} else if f.Decayed {
		return nil, fmt.Errorf("--attn-decayed: %s is a %s model; the decayed attention A = Â ⊙ E exists for RFA models only", f.Model, m.Config.Arch)
	}
	T := f.AttnTokens
	if T < 0 {
		T = 4096
		if m.Config.MaxPos > 0 {
			T = min(T, m.Config.MaxPos)
		}
	}
	if T > 0 {
		hs, err := parseHeads(f.Heads)
		if err != nil {
			return nil, err
		}
		ids, src, err := f.attentionIDs(m, T)
		if err != nil {
			return nil, err
		}
		in.MapsTokens = src
		in.Maps, err = analysis.StreamAttentionMaps(m, ids, analysis.AttnMapSpec{Layer: layer, Heads: hs, MaxSize: f.MaxSize, Pool: f.Pool, Decayed: f.Decayed},
			model.Options{AllowExtrapolation: f.AllowExtrapolation})
		if err != nil {
			return nil, err
		}
	}
	if !in.RFA && in.Maps == nil {
		return nil, fmt.Errorf("%s is a %s model, not RFA: only its attention maps can be drawn, and --attn-tokens is 0", f.Model, m.Config.Arch)
	}
	return m, nil
}

// rfaParams fills in with the RFA model's learned per-head values of
// in.Layer and the lag axis of Figs. 3–4.
func (f *rfaFigureFlags) rfaParams(in *papers.RFACheckpointInput, m *model.Model) error {
	in.Ablation = m.Config.RFA.Ablation
	all, err := m.RFAParams()
	if err != nil {
		return err
	}
	ps, err := analysis.LayerParams(all, in.Layer)
	if err != nil {
		return err
	}
	in.Lags = papers.RFALagAxis{Max: f.MaxLag, Source: "given"}
	if in.Lags.Max <= 0 {
		in.Lags = papers.RFALagAxis{Max: float64(m.Config.MaxPos), Source: "default: the model's longest context (t_measure)"}
	}
	switch f.LagAxis {
	case "log":
		in.Lags.Log = true
	case "linear":
	default:
		return fmt.Errorf("--lag-axis %q: want log or linear", f.LagAxis)
	}
	lags, err := in.Lags.Grid()
	if err != nil {
		return err
	}
	if in.Priors, err = analysis.RFAPriors(ps, lags); err != nil {
		return err
	}
	in.MapsHeads = in.Priors.Heads
	return nil
}
