// Package afatab holds the AFA toy data that analysis computes from the
// toy-system checkpoints of zoo/train/afa_toy.py (analysis.AFAToy) and
// report/papers draws (AFA Figs. 1–3): each checkpoint's held-out
// trajectories, its one-step predictions, its attention maps, its learned
// AFA parameters and, for Fig. 2, its pulled-forward state estimates. It
// also holds the checkpoint's simulation and baseline options
// (DataOptions, SoftmaxConfig), which package afatoy parses from
// config.json. It imports nothing of the module, so that the figures need
// not depend on afatoy or model.
package afatab

import "math"

// Options choose what the AFA toy figures show and so which checkpoints
// and estimates analysis.AFAToy computes. The zero value gives the
// defaults in brackets (Defaults fills them in).
type Options struct {
	// Trajectory is the held-out trajectory drawn [0].
	Trajectory int
	// Fig2Setting and Fig3Setting name the checkpoint folders of Figs. 2
	// and 3 ["fig1b": σ² = 0.3, η² = 0.5; the paper names none].
	Fig2Setting, Fig3Setting string
	// Targets are Fig. 2's target tokens i [20, 40, 60, 80: notes 001 §C.2].
	Targets []int
	// Gamma is Fig. 3's contrast exponent A^γ [0.25, as the author's plots].
	Gamma float64
}

// Defaults returns o with its zero fields set to the defaults.
func (o Options) Defaults() Options {
	if o.Fig2Setting == "" {
		o.Fig2Setting = "fig1b"
	}
	if o.Fig3Setting == "" {
		o.Fig3Setting = "fig1b"
	}
	if len(o.Targets) == 0 {
		o.Targets = []int{20, 40, 60, 80}
	}
	if o.Gamma == 0 {
		o.Gamma = 0.25
	}
	return o
}

// Settings are Fig. 1's panels: the checkpoint folder, its label and the
// caption's noise numbers.
var Settings = []struct{ Dir, Label, Caption string }{
	{"fig1a", "(a) measurement noise only", "σ² = 0.0, η² = 1.0"},
	{"fig1b", "(b) process and measurement noise", "σ² = 0.3, η² = 0.5"},
	{"fig1c", "(c) higher noise", "σ² = 0.5, η² = 2.0"},
}

// Toy is every checkpoint the AFA toy figures draw, each evaluated on its
// stored held-out trajectories.
type Toy struct {
	Dir     string  // the afa_toy folder (zoo/checkpoints/afa_toy)
	Options Options // as used, defaults filled in
	// Runs are the AFA filters by folder name: every Fig. 1 setting, and
	// Options.Fig2Setting and Options.Fig3Setting.
	Runs map[string]*Run
	// Early and Mid are Fig. 2's earlier training stages of
	// Options.Fig2Setting: the first and the last of its stages/step_NNNN.
	Early, Mid *Run
	// Softmax is Fig. 3's two-layer softmax baseline.
	Softmax *Run
}

// Run is one checkpoint evaluated on its held-out trajectories. States are
// 2-D (StateDim 2); every array is row-major in the shape given.
type Run struct {
	Dir  string
	Step int // training steps behind the weights (0 when unknown)
	// Layer is "afa" (one Algorithm 1 layer) or "softmax" (the baseline).
	Layer     string
	T         int    // input tokens of a pass (config.json seq_len)
	EmbedDim  int    // d_e
	Embedding string // "identity" or "random_orthogonal"
	// Heads and DHead are the AFA layer's heads and reals per head (2d);
	// Dt, Epsilon and KernelForm its options (model/afa_config.go).
	Heads, DHead       int
	Dt, Epsilon        float64
	KernelForm         string
	Softmax            SoftmaxConfig // "softmax" only
	Data               DataOptions
	N, M, Fine         int       // trajectories, measurements per trajectory, fine-grid states per trajectory
	Measurements       []float32 // [N, M, 2]
	States, StatesFine []float32 // [N, M, 2], [N, Fine, 2]: the true states at the measured times and on the fine grid
	Pred               []float32 // [N, T, 2]: the prediction of z_{t+1} from z_0..z_t
	Patterns           [][]float32
	PatternHeads       int // H of each pattern [N, H, T, T] (rows sum to 1), one per attention layer
	Params             []Head
	Pulled             map[int][]float32 // target i → [N, i+1, 2]: the measurements j ≤ i carried forward to t_i (Fig. 2's runs only)
}

// Head is one AFA head's learned values (model.AFAHeadParams).
type Head struct {
	A      float64 // decay a = α² (Re λ = −a)
	Sigma2 float64 // σ², process noise
	Eta2   float64 // η², measurement noise
	TauS   float64 // softmax temperature τ_s
}

// SoftmaxConfig describes the standard-attention baseline.
type SoftmaxConfig struct {
	Layers, Heads, FFN int
	// Positional is "sinusoidal" (additive, Vaswani et al.; the paper's
	// "additive positional embedding"), "rope" (rotate-half) or "none".
	Positional string
	RoPETheta  float64
	LNEps      float64
}

// DataOptions are the simulation options of the checkpoint's data (notes
// 001 §C.0), as config.json "data" records them.
type DataOptions struct {
	A         [][]float64 `json:"A"`
	Dt        float64     `json:"dt"`     // Euler step
	Stride    int         `json:"stride"` // Euler steps per measurement
	Steps     int         `json:"steps"`  // Euler steps simulated
	Sigma     float64     `json:"sigma"`  // process noise (Fig. 1 caption's σ² number)
	Eta       float64     `json:"eta"`    // measurement noise (caption's η² number)
	Noise     string      `json:"noise"`  // "std": the numbers multiply randn; "variance": their roots do
	R0        []float64   `json:"r0"`     // initial radius range
	Setting   string      `json:"setting"`
	TrainN    int         `json:"train_trajectories"`
	TestN     int         `json:"test_trajectories"`
	TrainSeed int         `json:"train_seed"`
	TestSeed  int         `json:"test_seed"`
}

// NoiseStd returns the standard deviations of the process and measurement
// noise the simulator used.
func (d *DataOptions) NoiseStd() (sigma, eta float64) {
	if d.Noise == "variance" {
		return math.Sqrt(d.Sigma), math.Sqrt(d.Eta)
	}
	return d.Sigma, d.Eta
}
