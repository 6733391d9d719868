package hooks

import (
	"fmt"

	"gorgonia.org/tensor"
)

// ScaleHead returns a Func that multiplies head h of a per-head value
// ([batch,pos,head] or [batch,pos,head,d_head]: hook_q, hook_z, hook_gate)
// by s. ScaleHead(h, 0) removes a head's contribution at hook_z.
func ScaleHead(h int, s float32) Func {
	return func(name string, _ int, x *tensor.Dense) error {
		return eachHeadValue(name, x, h, func(v *float32) { *v *= s })
	}
}

// SetHead returns a Func that sets head h of a per-head value to c, e.g.
// SetHead(h, 1) at hook_gate removes head h's output gate.
func SetHead(h int, c float32) Func {
	return func(name string, _ int, x *tensor.Dense) error {
		return eachHeadValue(name, x, h, func(v *float32) { *v = c })
	}
}

func eachHeadValue(name string, x *tensor.Dense, h int, f func(*float32)) error {
	sh := x.Shape()
	if len(sh) < 3 {
		return fmt.Errorf("%s has shape %v, not [batch,pos,head,...]", name, sh)
	}
	if h < 0 || h >= sh[2] {
		return fmt.Errorf("head %d out of range for %s with %d heads", h, name, sh[2])
	}
	inner := 1
	for _, d := range sh[3:] {
		inner *= d
	}
	data := x.Data().([]float32)
	for r := 0; r < sh[0]*sh[1]; r++ {
		base := (r*sh[2] + h) * inner
		for i := 0; i < inner; i++ {
			f(&data[base+i])
		}
	}
	return nil
}
