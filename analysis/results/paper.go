package results

// PaperNumbers are the values Long et al. report for their zero-training
// diagnostic of QwQZh/gated_attention/1B_gate_headwise (arXiv:2605.18832,
// App. I, Figs. 2–4; notes/003_bft.md §B.6), kept so that summaries print
// them beside a sweep's own numbers. They are read off the paper's text;
// the absolute K values of Fig. 3 are not reported.
type PaperNumbers struct {
	// LengthsK are the context lengths in thousands ("1k" … "10k"; the
	// paper does not say whether k is 1000 or 1024).
	LengthsK []int
	// NEff, Gate and LambdaRatio are Fig. 2's panels (a), (b), (c): mean
	// over 5 samples × 7 deep layers × last-25 % queries.
	NEff, Gate, LambdaRatio []float64
	// GateSpread is the "within-length std" of the gate (±0.075).
	GateSpread float64
	// Fig3RelErr are the relative errors |K_opt − K_meas|/K_meas at the
	// lengths after the first (2k … 10k), as fractions.
	Fig3RelErr []float64
	// Fig. 4: 448 (layer, head) cells over T ∈ {4k, 8k} × 5 samples.
	Fig4Cells   int
	Fig4R       float64 // Pearson r (rounded; 0.246 reproduces the p-value)
	Fig4P       float64 // two-sided p
	BOSSinkMass float64 // heads with BOS mass above this …
	BOSSinkK    float64 // … all have K_BFT above this …
	SinkLayers  [2]int  // … and sit in these middle layers
	LateK       [2]float64
	MaxBOS      float64 // no head exceeds this BOS mass
	Model       string
}

// Paper is the table of the paper's published App. I numbers.
var Paper = PaperNumbers{
	LengthsK:    []int{1, 2, 4, 6, 8, 10},
	NEff:        []float64{32.5, 41.4, 55.1, 64.0, 66.0, 70.7},
	Gate:        []float64{0.277, 0.292, 0.303, 0.306, 0.308, 0.304},
	LambdaRatio: []float64{1.00, 1.09, 1.23, 1.28, 1.28, 1.28},
	GateSpread:  0.075,
	Fig3RelErr:  []float64{0.0013, 0.0028, 0.0015, 0.0005, 0.0006},
	Fig4Cells:   448,
	Fig4R:       0.25,
	Fig4P:       1.3e-7,
	BOSSinkMass: 0.05,
	BOSSinkK:    0.94,
	SinkLayers:  [2]int{6, 18},
	LateK:       [2]float64{0.6, 0.85},
	MaxBOS:      0.3,
	Model:       "QwQZh/gated_attention/1B_gate_headwise (28 layers, 16 heads, 8 KV heads, d_head 128)",
}
