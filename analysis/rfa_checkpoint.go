package analysis

import (
	"fmt"
	"sort"

	"github.com/filterlens/probe/model"
)

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
