package analysis

// The RFA checkpoint data of report/papers' checkpoint figures, computed from
// a checkpoint's learned values:
//
//   - Figs. 3–4: the prior precision P_Δt and bias B_Δt of each head as the
//     forward pass evaluates them (RFAPriors: probes.RFAPrecisionPrior and
//     probes.RFAAdditiveBias, with the learned shift Δt₊, the clamp of the
//     decay exponent and the authors' +0.01 on V).
//   - Figs. 8–10: per-head parameters of one layer over training
//     (rfatab.ParamHistory), from a series of checkpoint directories
//     (LoadRFASeries) or from a JSON history file (ReadRFAHistory).
//   - Figs. 11–14: StreamAttentionMaps (attnmaps.go).

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/filterlens/probe/analysis/rfatab"
	"github.com/filterlens/probe/model"
	"github.com/filterlens/probe/probes"
)

// authorsBrownianBelow is the decay below which a head of a parameter
// history counts as μ = 0 when its source does not say (the RFA authors'
// 1e-5, model.RFAConfig's default BrownianBelow).
const authorsBrownianBelow = 1e-5

// RFAPriorCurves returns one head's prior precision P_Δt(τ) = 1/V(τ) and
// bias B_Δt(τ) = −log V(τ) (RFA Eq. 9, Alg. 1) at each lag τ (tokens), as
// the forward pass evaluates them: s = τ + Δt₊, the decay exponent clamped,
// V = σ²(1 − E²)/(2μ) + η²E² + γ² + c (σ²s + … for μ ≈ 0).
func RFAPriorCurves(p *model.RFAHeadParams, lags []float64) (P, B []float64) {
	P, B = make([]float64, len(lags)), make([]float64, len(lags))
	for i, l := range lags {
		P[i] = probes.RFAPrecisionPrior(p, l)
		B[i] = probes.RFAAdditiveBias(p, l)
	}
	return P, B
}

// RFAPriors returns the prior curves of one layer's heads (LayerParams) at
// the given lags, with each head's values and regime (RFA Figs. 3–4).
func RFAPriors(ps []model.RFAHeadParams, lags []float64) (*rfatab.Priors, error) {
	if len(ps) == 0 {
		return nil, fmt.Errorf("RFA priors: no heads")
	}
	if len(lags) == 0 {
		return nil, fmt.Errorf("RFA priors: no lags")
	}
	p0 := &ps[0]
	maxLag := lags[len(lags)-1]
	out := &rfatab.Priors{Layer: p0.Layer, Lags: lags, MaxLag: maxLag,
		MinExponent: p0.MinExponent, MaxExponent: p0.MaxExponent, CovEps: p0.CovEps, BrownianBelow: p0.BrownianBelow}
	for i := range ps {
		p := &ps[i]
		r := p.Regime()
		P, B := RFAPriorCurves(p, lags)
		out.Heads = append(out.Heads, rfatab.Head{Head: p.Head, Mu: p.Mu, TShift: p.TShift, Sigma2: p.Sigma2, Eta2: p.Eta2,
			Gamma2: p.Gamma2, Tau: p.Tau, NuOverD: p.NuOverD(), Regime: r.Regime,
			SteadyState: r.SteadyState, Alpha: r.Alpha, Beta: r.Beta,
			P0: probes.RFAPrecisionPrior(p, 0), PMax: probes.RFAPrecisionPrior(p, maxLag),
			B0: probes.RFAAdditiveBias(p, 0), BMax: probes.RFAAdditiveBias(p, maxLag), P: P, B: B})
	}
	return out, nil
}

// deriveRegimes validates h and fills its SteadyState, Alpha and Beta from
// Mu, Sigma2, Eta2 and Gamma2 as model.RFAHeadParams.Regime derives them
// (left nil without Mu).
func deriveRegimes(h *rfatab.ParamHistory) error {
	h.SteadyState, h.Alpha, h.Beta = nil, nil, nil
	if err := h.Validate(); err != nil {
		return err
	}
	if h.Mu == nil {
		return nil
	}
	for i := range h.Steps {
		ss, a, b := make([]float64, h.Heads()), make([]float64, h.Heads()), make([]float64, h.Heads())
		for k := range ss {
			p := model.RFAHeadParams{Mu: h.Mu[i][k], Sigma2: h.Sigma2[i][k], Eta2: h.Eta2[i][k],
				Gamma2: h.Gamma2[i][k], BrownianBelow: h.BrownianBelow}
			r := p.Regime()
			ss[k], a[k], b[k] = r.SteadyState, r.Alpha, r.Beta
		}
		h.SteadyState, h.Alpha, h.Beta = append(h.SteadyState, ss), append(h.Alpha, a), append(h.Beta, b)
	}
	return nil
}

// LayerParams returns the heads of one layer from a model's RFAParams (in
// head order), or an error naming the layers there are.
func LayerParams(all []model.RFAHeadParams, layer int) ([]model.RFAHeadParams, error) {
	var out []model.RFAHeadParams
	layers := 0
	for _, p := range all {
		layers = max(layers, p.Layer+1)
		if p.Layer == layer {
			out = append(out, p)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("RFA parameters: layer %d out of range (the model has %d layers)", layer, layers)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Head < out[j].Head })
	return out, nil
}

// RFAHistoryFromParams builds a history from per-point model parameters
// (each point's RFAParams, every layer or just the chosen one), taking the
// heads of layer.
func RFAHistoryFromParams(layer int, steps []float64, labels []string, points [][]model.RFAHeadParams) (*rfatab.ParamHistory, error) {
	if len(steps) != len(points) || len(labels) != len(points) {
		return nil, fmt.Errorf("RFA series: %d steps, %d labels for %d points", len(steps), len(labels), len(points))
	}
	h := &rfatab.ParamHistory{Layer: layer, Steps: steps, Labels: labels, BrownianBelow: authorsBrownianBelow}
	for i, all := range points {
		ps, err := LayerParams(all, layer)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", labels[i], err)
		}
		if i > 0 && len(ps) != h.Heads() {
			return nil, fmt.Errorf("RFA series: %s has %d heads in layer %d, %s has %d", labels[i], len(ps), layer, labels[0], h.Heads())
		}
		row := func(f func(p *model.RFAHeadParams) float64) []float64 {
			out := make([]float64, len(ps))
			for k := range ps {
				out[k] = f(&ps[k])
			}
			return out
		}
		h.Mu = append(h.Mu, row(func(p *model.RFAHeadParams) float64 { return p.Mu }))
		h.Sigma2 = append(h.Sigma2, row(func(p *model.RFAHeadParams) float64 { return p.Sigma2 }))
		h.Eta2 = append(h.Eta2, row(func(p *model.RFAHeadParams) float64 { return p.Eta2 }))
		h.Gamma2 = append(h.Gamma2, row(func(p *model.RFAHeadParams) float64 { return p.Gamma2 }))
		h.Tau = append(h.Tau, row(func(p *model.RFAHeadParams) float64 { return p.Tau }))
		h.NuOverD = append(h.NuOverD, row(func(p *model.RFAHeadParams) float64 { return p.NuOverD() }))
		if ps[0].BrownianBelow > 0 {
			h.BrownianBelow = ps[0].BrownianBelow
		}
	}
	return h, deriveRegimes(h)
}

// RFASeriesPoint is one checkpoint directory of a training series with its
// position in training.
type RFASeriesPoint struct {
	Dir        string
	Step       float64
	StepSource string // "trainer_state.json global_step", "directory name", "order given"
	Epoch      bool   // the step counts epochs (the name says epoch)
}

// stepName matches the usual checkpoint directory names: checkpoint-1200
// (Hugging Face Trainer), step_500, iter300, ckpt-7, epoch_12 (the RFA
// authors' rfa_lm_epoch_12), or a bare number.
var stepName = regexp.MustCompile(`(?i)(?:^|[^a-z])(checkpoint|ckpt|global_step|step|iter|iteration|epoch)[-_]?(\d+)$|^(\d+)$`)

// seriesStep reads a checkpoint directory's position in training:
// global_step of its trainer_state.json when present, else the number in
// its name (see stepName). ok is false when neither says.
func seriesStep(dir string) (p RFASeriesPoint, ok bool, err error) {
	p.Dir = dir
	if data, err := os.ReadFile(filepath.Join(dir, "trainer_state.json")); err == nil {
		var st struct {
			GlobalStep *float64 `json:"global_step"`
		}
		if err := json.Unmarshal(data, &st); err != nil {
			return p, false, fmt.Errorf("%s: %v", filepath.Join(dir, "trainer_state.json"), err)
		}
		if st.GlobalStep != nil {
			p.Step, p.StepSource = *st.GlobalStep, "trainer_state.json global_step"
			return p, true, nil
		}
	}
	base := strings.TrimSuffix(filepath.Base(filepath.Clean(dir)), ".safetensors")
	m := stepName.FindStringSubmatch(base)
	if m == nil {
		return p, false, nil
	}
	num := m[2]
	if num == "" {
		num = m[3]
	}
	v, err := strconv.ParseFloat(num, 64)
	if err != nil {
		return p, false, nil
	}
	p.Step, p.StepSource, p.Epoch = v, "directory name", strings.EqualFold(m[1], "epoch")
	return p, true, nil
}

// isCheckpointDir reports whether dir holds a config.json.
func isCheckpointDir(dir string) bool {
	st, err := os.Stat(filepath.Join(dir, "config.json"))
	return err == nil && !st.IsDir()
}

// RFASeriesDirs resolves --series: a list of checkpoint directories, or a
// single directory whose subdirectories holding a config.json are the
// checkpoints (checkpoint-* as the Hugging Face Trainer writes them). Each
// point's step is global_step from its trainer_state.json, else the number
// in its name (checkpoint-1200, step_500, epoch_12, 1200); the points are
// sorted by step. When some directory says neither, every point keeps the
// order given and counts as step 0, 1, 2, … (XLabel says so). It returns
// the points and the x-axis label.
func RFASeriesDirs(entries []string) ([]RFASeriesPoint, string, error) {
	var dirs []string
	for _, e := range entries {
		if e = strings.TrimSpace(e); e != "" {
			dirs = append(dirs, e)
		}
	}
	if len(dirs) == 1 && !isCheckpointDir(dirs[0]) {
		ents, err := os.ReadDir(dirs[0])
		if err != nil {
			return nil, "", err
		}
		parent := dirs[0]
		dirs = nil
		for _, e := range ents {
			if d := filepath.Join(parent, e.Name()); e.IsDir() && isCheckpointDir(d) {
				dirs = append(dirs, d)
			}
		}
		if len(dirs) == 0 {
			return nil, "", fmt.Errorf("RFA series: %s is not a checkpoint (no config.json) and has no checkpoint subdirectories (checkpoint-*/config.json)", parent)
		}
	}
	if len(dirs) == 0 {
		return nil, "", fmt.Errorf("RFA series: empty checkpoint series")
	}
	var pts []RFASeriesPoint
	allStepped, epochs := true, 0
	for _, d := range dirs {
		if !isCheckpointDir(d) {
			return nil, "", fmt.Errorf("RFA series: %s has no config.json", d)
		}
		p, ok, err := seriesStep(d)
		if err != nil {
			return nil, "", err
		}
		allStepped = allStepped && ok
		if p.Epoch {
			epochs++
		}
		pts = append(pts, p)
	}
	if !allStepped {
		for i := range pts {
			pts[i] = RFASeriesPoint{Dir: pts[i].Dir, Step: float64(i), StepSource: "order given"}
		}
		return pts, "checkpoint (in the order given)", nil
	}
	sort.SliceStable(pts, func(i, j int) bool { return pts[i].Step < pts[j].Step })
	for i := 1; i < len(pts); i++ {
		if pts[i].Step == pts[i-1].Step {
			return nil, "", fmt.Errorf("RFA series: %s and %s are both at step %g", pts[i-1].Dir, pts[i].Dir, pts[i].Step)
		}
	}
	label := "training step"
	if epochs == len(pts) {
		label = "epoch"
	}
	return pts, label, nil
}

// LoadRFASeries loads every checkpoint of a series (RFASeriesDirs), one at a
// time, and returns layer's parameters over training (layer < 0: the last
// layer). Only the per-head parameters are kept.
func LoadRFASeries(entries []string, layer int) (*rfatab.ParamHistory, error) {
	pts, xlabel, err := RFASeriesDirs(entries)
	if err != nil {
		return nil, err
	}
	var (
		steps  []float64
		labels []string
		params [][]model.RFAHeadParams
		layers int
	)
	for i, p := range pts {
		m, err := model.Load(p.Dir, model.LoadOptions{})
		if err != nil {
			return nil, err
		}
		ps, err := m.RFAParams()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", p.Dir, err)
		}
		if i == 0 {
			layers = m.Config.Layers
		} else if m.Config.Layers != layers {
			return nil, fmt.Errorf("RFA series: %s has %d layers, %s has %d", p.Dir, m.Config.Layers, pts[0].Dir, layers)
		}
		steps = append(steps, p.Step)
		labels = append(labels, filepath.Base(filepath.Clean(p.Dir)))
		params = append(params, ps)
	}
	if layer < 0 {
		layer = layers - 1
	}
	h, err := RFAHistoryFromParams(layer, steps, labels, params)
	if err != nil {
		return nil, err
	}
	h.XLabel = xlabel
	var src []string
	for _, p := range pts {
		src = append(src, fmt.Sprintf("%s (step %g from %s)", p.Dir, p.Step, p.StepSource))
	}
	h.Source = strings.Join(src, "; ")
	return h, nil
}

// History file keys. A history file is one JSON object:
//
//	{
//	  "step":    [s_0, s_1, …],        optional: the x of each point (default 0, 1, 2, …: the
//	                                   authors log once per optimizer step)
//	  "x_label": "training step",      optional
//	  "layer":   5,                    optional: the layer of the unprefixed keys
//	  "l{l}.sigma_sq_v": [[σ²_h …], …], one row of per-head values per point, for layer l, under the
//	  "l{l}.eta_sq_v", "l{l}.gamma_sq_v", "l{l}.tau", "l{l}.nu_over_d", "l{l}.mu_v",
//	                                   authors' metadata names (as `probe params --json` and the
//	                                   golden files name them)
//	  or, unprefixed, the authors' training history names (their history dict, one block):
//	  "sigma" (= σ², sigma_sq_v), "eta" (η²), "gamma" (γ²), "tau", "nu_over_d", "mu"
//	}
//
// Other keys ("loss", "sigma_tilde", …) are ignored. σ², η², γ² are
// required; without μ ("mu"/"l{l}.mu_v") σ̃², α and β need the decays from
// elsewhere (ReadRFAHistory's mu). A point's row may be nested ([[…]]): it
// is flattened. null reads as a missing value (NaN).
var (
	historyPrefixed = regexp.MustCompile(`^l(\d+)\.(mu_v|sigma_sq_v|eta_sq_v|gamma_sq_v|tau|nu_over_d|sigma_tilde_sq_v)$`)
	historyAuthors  = map[string]string{"mu": "mu_v", "sigma": "sigma_sq_v", "eta": "eta_sq_v", "gamma": "gamma_sq_v",
		"tau": "tau", "nu_over_d": "nu_over_d", "sigma_tilde": "sigma_tilde_sq_v"}
)

// flattenNumbers flattens nested JSON arrays of numbers (null → NaN).
func flattenNumbers(v any, out []float64) ([]float64, error) {
	switch x := v.(type) {
	case nil:
		return append(out, math.NaN()), nil
	case float64:
		return append(out, x), nil
	case []any:
		for _, e := range x {
			var err error
			if out, err = flattenNumbers(e, out); err != nil {
				return nil, err
			}
		}
		return out, nil
	}
	return nil, fmt.Errorf("%v is not a number", v)
}

// ReadRFAHistory reads a JSON history file (format above) and returns the
// parameters of layer (layer < 0: the largest layer among prefixed keys,
// or the unprefixed keys' layer). mu, when not nil, gives each head's fixed
// decay for histories without μ (the authors' μ is a fixed buffer, so a
// checkpoint of the same run supplies it).
func ReadRFAHistory(path string, layer int, mu []float64) (*rfatab.ParamHistory, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(data, &raw); err != nil {
		return nil, fmt.Errorf("%s: want a JSON object of per-step lists (see `probe help figures`): %v", path, err)
	}
	h := &rfatab.ParamHistory{Layer: -1, XLabel: "training step", BrownianBelow: authorsBrownianBelow, Source: path}
	fileLayer := -1
	if r, ok := raw["layer"]; ok {
		if err := json.Unmarshal(r, &fileLayer); err != nil {
			return nil, fmt.Errorf("%s: \"layer\": %v", path, err)
		}
	}
	if r, ok := raw["x_label"]; ok {
		if err := json.Unmarshal(r, &h.XLabel); err != nil {
			return nil, fmt.Errorf("%s: \"x_label\": %v", path, err)
		}
	}
	// Collect the candidate keys per layer (−2 marks the unprefixed ones).
	const unprefixed = -2
	byLayer := map[int]map[string]string{} // layer → metadata name → file key
	for k := range raw {
		if m := historyPrefixed.FindStringSubmatch(k); m != nil {
			l, _ := strconv.Atoi(m[1])
			if byLayer[l] == nil {
				byLayer[l] = map[string]string{}
			}
			byLayer[l][m[2]] = k
		} else if name, ok := historyAuthors[k]; ok {
			if byLayer[unprefixed] == nil {
				byLayer[unprefixed] = map[string]string{}
			}
			byLayer[unprefixed][name] = k
		}
	}
	var prefixed []int
	for l := range byLayer {
		if l >= 0 {
			prefixed = append(prefixed, l)
		}
	}
	slices.Sort(prefixed)
	var keys map[string]string
	switch {
	case layer >= 0 && byLayer[layer] != nil:
		keys, h.Layer = byLayer[layer], layer
	case layer >= 0 && byLayer[unprefixed] != nil && (fileLayer < 0 || fileLayer == layer):
		keys, h.Layer = byLayer[unprefixed], layer
	case layer < 0 && len(prefixed) > 0:
		h.Layer = prefixed[len(prefixed)-1]
		keys = byLayer[h.Layer]
	case layer < 0 && byLayer[unprefixed] != nil:
		keys, h.Layer = byLayer[unprefixed], fileLayer
	default:
		return nil, fmt.Errorf("%s: no parameters of layer %d (prefixed layers %v; unprefixed keys of layer %d); want keys such as \"l%d.sigma_sq_v\" or the authors' \"sigma\", \"eta\", \"gamma\"",
			path, layer, prefixed, fileLayer, max(layer, 0))
	}
	read := func(name string) ([][]float64, error) {
		k, ok := keys[name]
		if !ok {
			return nil, nil
		}
		var rows []any
		if err := json.Unmarshal(raw[k], &rows); err != nil {
			return nil, fmt.Errorf("%s: %q: want a list with one row of per-head values per point: %v", path, k, err)
		}
		out := make([][]float64, len(rows))
		for i, r := range rows {
			v, err := flattenNumbers(r, nil)
			if err != nil {
				return nil, fmt.Errorf("%s: %q point %d: %v", path, k, i, err)
			}
			out[i] = v
		}
		return out, nil
	}
	for _, f := range []struct {
		name string
		dst  *[][]float64
	}{{"mu_v", &h.Mu}, {"sigma_sq_v", &h.Sigma2}, {"eta_sq_v", &h.Eta2}, {"gamma_sq_v", &h.Gamma2}, {"tau", &h.Tau}, {"nu_over_d", &h.NuOverD}} {
		if *f.dst, err = read(f.name); err != nil {
			return nil, err
		}
	}
	if h.Eta2 == nil || h.Gamma2 == nil || h.Sigma2 == nil {
		return nil, fmt.Errorf("%s: layer %d needs σ², η² and γ² (\"l{l}.sigma_sq_v\", \"l{l}.eta_sq_v\", \"l{l}.gamma_sq_v\", or the authors' \"sigma\", \"eta\", \"gamma\")", path, h.Layer)
	}
	n := len(h.Eta2)
	if r, ok := raw["step"]; ok {
		if err := json.Unmarshal(r, &h.Steps); err != nil {
			return nil, fmt.Errorf("%s: \"step\": want a list of numbers: %v", path, err)
		}
	} else {
		for i := 0; i < n; i++ {
			h.Steps = append(h.Steps, float64(i))
		}
	}
	if len(h.Steps) != n {
		return nil, fmt.Errorf("%s: %d steps for %d points", path, len(h.Steps), n)
	}
	if h.Mu == nil && mu != nil {
		H := len(h.Eta2[0])
		if len(mu) != H {
			return nil, fmt.Errorf("%s: %d heads, but %d decays μ were given", path, H, len(mu))
		}
		for i := 0; i < n; i++ {
			h.Mu = append(h.Mu, slices.Clone(mu))
		}
	}
	for i := 0; i < n; i++ {
		h.Labels = append(h.Labels, fmt.Sprintf("%s[%d]", filepath.Base(path), i))
	}
	if err := deriveRegimes(h); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return h, nil
}
