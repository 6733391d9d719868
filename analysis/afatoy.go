package analysis

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/filterlens/probe/afatoy"
	"github.com/filterlens/probe/analysis/afatab"
)

// AFAToy evaluates the AFA toy checkpoints under dir
// (zoo/checkpoints/afa_toy) for AFA Figs. 1–3, which report/papers draws:
// fig1a, fig1b, fig1c (one AFA layer per noise setting, each with its
// data.safetensors), <Fig2Setting>/stages/step_NNNN (earlier training
// stages) and softmax (the Fig. 3 baseline). Each runs its forward pass
// (afatoy.Filter) on the held-out trajectories stored beside it; the
// filters of Fig. 2 also carry every measurement forward to each of
// opt.Targets (afatoy.Filter.PulledForward).
func AFAToy(dir string, opt afatab.Options) (*afatab.Toy, error) {
	opt = opt.Defaults()
	toy := &afatab.Toy{Dir: dir, Options: opt, Runs: map[string]*afatab.Run{}}
	filters := map[string]*afaToyFilter{}
	load := func(setting string) (*afaToyFilter, error) {
		if f := filters[setting]; f != nil {
			return f, nil
		}
		d := filepath.Join(dir, setting)
		f, err := loadAFAToy(d, filepath.Join(d, "data.safetensors"))
		if err != nil {
			return nil, err
		}
		filters[setting], toy.Runs[setting] = f, f.run
		return f, nil
	}
	for _, s := range afatab.Settings {
		f, err := load(s.Dir)
		if err != nil {
			return nil, err
		}
		if opt.Trajectory < 0 || opt.Trajectory >= f.run.N {
			return nil, fmt.Errorf("analysis: trajectory %d outside the %d held-out trajectories of %s", opt.Trajectory, f.run.N, f.run.Dir)
		}
	}

	// Fig. 2: the trained filter and its first and last earlier stage.
	final, err := load(opt.Fig2Setting)
	if err != nil {
		return nil, err
	}
	stageDirs, err := filepath.Glob(filepath.Join(final.run.Dir, "stages", "step_*"))
	if err != nil {
		return nil, err
	}
	sort.Slice(stageDirs, func(i, j int) bool { return afaToySteps(stageDirs[i]) < afaToySteps(stageDirs[j]) })
	if len(stageDirs) < 2 {
		return nil, fmt.Errorf("analysis: %s: Fig. 2 needs two earlier stages in stages/step_NNNN, found %d", final.run.Dir, len(stageDirs))
	}
	early, err := loadAFAToy(stageDirs[0], filepath.Join(final.run.Dir, "data.safetensors"))
	if err != nil {
		return nil, err
	}
	mid, err := loadAFAToy(stageDirs[len(stageDirs)-1], filepath.Join(final.run.Dir, "data.safetensors"))
	if err != nil {
		return nil, err
	}
	toy.Early, toy.Mid = early.run, mid.run
	for _, i := range opt.Targets {
		if i < 0 || i >= final.run.T {
			return nil, fmt.Errorf("analysis: Fig. 2 target %d outside [0, %d)", i, final.run.T)
		}
	}
	for _, f := range []*afaToyFilter{early, mid, final} {
		f.run.Pulled = map[int][]float32{}
		for _, i := range opt.Targets {
			if f.run.Pulled[i], err = f.m.PulledForward(f.x, f.run.N, f.run.T, i); err != nil {
				return nil, err
			}
		}
	}

	// Fig. 3: the AFA filter and the softmax baseline.
	if _, err := load(opt.Fig3Setting); err != nil {
		return nil, err
	}
	sm, err := loadAFAToy(filepath.Join(dir, "softmax"), filepath.Join(dir, "softmax", "data.safetensors"))
	if err != nil {
		return nil, err
	}
	toy.Softmax = sm.run
	return toy, nil
}

// afaToyFilter is a loaded toy checkpoint, its inputs [N, T, 2] and its
// evaluation.
type afaToyFilter struct {
	m   *afatoy.Filter
	x   []float32
	run *afatab.Run
}

// loadAFAToy loads the toy checkpoint in dir and runs it on the
// trajectories of dataPath.
func loadAFAToy(dir, dataPath string) (*afaToyFilter, error) {
	m, err := afatoy.Load(dir)
	if err != nil {
		return nil, err
	}
	d, err := afatoy.ReadData(dataPath)
	if err != nil {
		return nil, err
	}
	if d.StateDim != 2 || m.Config.StateDim != 2 {
		return nil, fmt.Errorf("analysis: %s: the AFA toy figures need 2-D states, have %d", dir, d.StateDim)
	}
	c := &m.Config
	T := c.SeqLen
	if d.M < T+1 {
		return nil, fmt.Errorf("analysis: %s: %d measurements per trajectory, the filter needs %d inputs and the next as target", dataPath, d.M, T)
	}
	x, err := d.Inputs(T)
	if err != nil {
		return nil, err
	}
	out, err := m.Forward(x, d.N, T)
	if err != nil {
		return nil, err
	}
	r := &afatab.Run{Dir: dir, Step: afaToySteps(dir), Layer: c.Layer, T: T, EmbedDim: c.EmbedDim, Embedding: c.Embedding,
		Heads: c.Heads, DHead: c.DHead, Dt: c.AFA.Dt, Epsilon: c.AFA.Epsilon, KernelForm: c.AFA.KernelForm, Softmax: c.Softmax, Data: c.Data,
		N: d.N, M: d.M, Fine: d.Fine, Measurements: d.Measurements, States: d.States, StatesFine: d.StatesFine,
		Pred: out.Pred, Patterns: out.Patterns, PatternHeads: out.Heads}
	if c.Layer == "afa" {
		ps, err := m.AFAParams()
		if err != nil {
			return nil, err
		}
		for _, p := range ps {
			r.Params = append(r.Params, afatab.Head{A: p.A, Sigma2: p.Sigma2, Eta2: p.Eta2, TauS: p.TauS})
		}
	}
	return &afaToyFilter{m: m, x: x, run: r}, nil
}

// afaToySteps is the training step of a checkpoint folder: the number in a
// step_NNNN name, else the last step of its train_log.jsonl, else the
// configured steps (0 when none is known).
func afaToySteps(dir string) int {
	if n, ok := strings.CutPrefix(filepath.Base(dir), "step_"); ok {
		if v, err := strconv.Atoi(n); err == nil {
			return v
		}
	}
	if b, err := os.ReadFile(filepath.Join(dir, "train_log.jsonl")); err == nil {
		lines := strings.Split(strings.TrimSpace(string(b)), "\n")
		var step int
		if _, err := fmt.Sscanf(lines[len(lines)-1], `{"step": %d`, &step); err == nil {
			return step
		}
	}
	return 0
}
