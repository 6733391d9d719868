package results

import (
	"fmt"
)

// Deviation is how far a pass in another arithmetic (Compute, bf16) lies
// from the float32 pass of the same model on the same tokens: per column
// (the logits, then each diagnostic of probe diag's table), over the
// values finite in both passes (a column no value of which is finite is
// left out), the largest |x − x_f32| and that divided
// by the largest |x_f32| of the column (a normwise relative deviation,
// as the golden tolerances are read: a column's small values do not
// inflate it).
type Deviation struct {
	Compute string `json:"compute"` // model.Compute
	Kernel  string `json:"kernel"`  // of the bf16 products: model.BF16Kernel
	// Reference says what the float32 pass multiplied: the weights as
	// stored, or (LoadOptions.Compute bf16 on F32/F16 weights) the weights
	// rounded to bf16 at load, whose rounding is then not in the deviation.
	Reference string            `json:"reference"`
	Sequences int               `json:"sequences"`
	Tokens    int               `json:"tokens"` // per sequence: the first tokens of the pass
	Columns   []ColumnDeviation `json:"columns"`
}

// ColumnDeviation is one column of a Deviation.
type ColumnDeviation struct {
	Name   string  `json:"name"`
	MaxAbs float64 `json:"max_abs"`
	MaxRel float64 `json:"max_rel"` // MaxAbs / max |float32 value|
	Values int     `json:"values"`  // values finite in both passes
	// Unmatched counts values finite in one pass and not in the other.
	Unmatched int `json:"unmatched,omitempty"`
}

// Lines returns the deviation as lines for a terminal: one heading, one
// line per column.
func (d *Deviation) Lines() []string {
	lines := []string{fmt.Sprintf("compute %s: deviation from the float32 pass on the first %d tokens of %d sequence(s) (reference: %s; kernel %s):",
		d.Compute, d.Tokens, d.Sequences, d.Reference, d.Kernel)}
	for _, c := range d.Columns {
		l := fmt.Sprintf("  %-13s max abs %.3g, max rel %.3g (%d values)", c.Name, c.MaxAbs, c.MaxRel, c.Values)
		if c.Unmatched > 0 {
			l += fmt.Sprintf("; %d values finite in one pass only", c.Unmatched)
		}
		lines = append(lines, l)
	}
	return lines
}
