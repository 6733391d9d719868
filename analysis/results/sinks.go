package results

import (
	"math"
)

// SinkRate returns Gu et al.'s Sink_1^ε: the percentage of the given
// per-head first-token means ā_0 that exceed eps (strictly), over the
// finite ones, and how many were finite. It is non-increasing in eps.
func SinkRate(firstMeans []float64, eps float64) (rate float64, heads int) {
	var above int
	for _, m := range firstMeans {
		if math.IsNaN(m) {
			continue
		}
		heads++
		if m > eps {
			above++
		}
	}
	if heads == 0 {
		return math.NaN(), 0
	}
	return 100 * float64(above) / float64(heads), heads
}

// SinkHeadRow is one row of the sinks_heads table: the measurements of one
// (length, sample, softmax layer, head) (probes.SinkCollector,
// probes.HeadGateStats).
type SinkHeadRow struct {
	T      int `parquet:"T"`
	Sample int `parquet:"sample"`
	SoftmaxHead
	Rows        int64   `parquet:"rows"`
	BOSN        int64   `parquet:"bos_n"`
	LeftOut     int64   `parquet:"left_out"`
	BOSMass     float64 `parquet:"bos_mass"`
	Entropy     float64 `parquet:"entropy"`
	EntropyNorm float64 `parquet:"entropy_norm"`
	LogT        float64 `parquet:"log_T"`
	MaxWeight   float64 `parquet:"max_weight"`
	MaxLast     float64 `parquet:"max_weight_last"`
	NEff        float64 `parquet:"neff"`
	SinkMass    float64 `parquet:"sink_mass"` // mean σ_t of a model with learned sinks; 0 without
	GateMean    float64 `parquet:"gate_mean"`
	GateMedian  float64 `parquet:"gate_median"`
	GateBelow   float64 `parquet:"gate_below"`
	GateFirst   float64 `parquet:"gate_first"`
	GateRest    float64 `parquet:"gate_rest"`
}

// SinkRateRow is one row of the sinks_rate table: Gu et al.'s Sink_1^ε over
// the (layer, head) pairs of one layer group at one length, each head's ā_0
// pooled over the samples (weighted by their applicable queries).
type SinkRateRow struct {
	T           int     `parquet:"T"`
	Eps         float64 `parquet:"eps"`
	Layers      string  `parquet:"layers"` // "all", "global" or "local"
	Heads       int     `parquet:"heads"`
	HeadsAbove  int     `parquet:"heads_above"`
	Rate        float64 `parquet:"rate"` // percent
	Rows        int64   `parquet:"rows"`
	RowsLeftOut int64   `parquet:"rows_left_out"`
}

// SinksOptions are the options of a sinks run, recorded in its manifest.
type SinksOptions struct {
	StreamPlan
	// Eps are the thresholds ε of Sink_1^ε (Gu et al.: 0.3).
	Eps []float64 `json:"eps"`
	// IncludeFirstQuery counts query 0 (α[0,0] = 1) in ā_0, as Gu et al.'s
	// mean over all queries does.
	IncludeFirstQuery bool `json:"include_first_query"`
	// GateBelow is the threshold of the gate sparsity (Qiu et al.: 0.1).
	GateBelow float64 `json:"gate_below"`
	// SinkRows is the reading of a model with learned attention sinks:
	// "renorm" (default) or "raw" (probes.SinkRows; ProbeOptions.SinkRows).
	// "" (a manifest from before the option) means "renorm".
	SinkRows string `json:"sink_rows"`
	// SplitLocal adds rate rows for global and local (sliding-window)
	// layers separately when the model has both.
	SplitLocal bool `json:"split_local"`
	TileRows   int  `json:"tile_rows"`
}

// SinksManifest records a sinks run (or one shard of it).
type SinksManifest struct {
	RunRecord
	SoftmaxLayers
	Options SinksOptions `json:"sinks"`
	LeftOut int64        `json:"rows_left_out"` // over every pass and head (of the tables)
}

// SinksManifestName is the manifest's file name in an unsharded sinks
// run's folder (analysis.StreamManifestName for a shard's).
const SinksManifestName = "sinks_manifest.json"

// SinkRates computes the sinks_rate rows from the per-sample head rows:
// per length, each (layer, head)'s ā_0 pooled over samples (Σ bos_mass ·
// bos_n / Σ bos_n), then probes.SinkRate at every ε over all layers
// and, with split and a model that has both kinds, over the global and the
// local layers separately.
func SinkRates(heads []SinkHeadRow, lengths []int, eps []float64, split bool) []SinkRateRow {
	type key struct{ T, l, h int }
	type pool struct {
		kind           string
		sum            float64
		n, rows, leftO int64
	}
	pools := map[key]*pool{}
	var order []key
	kinds := map[string]bool{}
	for _, r := range heads {
		k := key{r.T, r.Layer, r.Head}
		p := pools[k]
		if p == nil {
			p = &pool{kind: r.Kind}
			pools[k] = p
			order = append(order, k)
		}
		if r.BOSN > 0 {
			p.sum += r.BOSMass * float64(r.BOSN)
		}
		p.n += r.BOSN
		p.rows += r.Rows
		p.leftO += r.LeftOut
		kinds[r.Kind] = true
	}
	groups := []string{"all"}
	if split && kinds["global"] && kinds["local"] {
		groups = append(groups, "global", "local")
	}
	var out []SinkRateRow
	for _, T := range lengths {
		for _, g := range groups {
			var means []float64
			var rows, left int64
			for _, k := range order {
				p := pools[k]
				if k.T != T || (g != "all" && p.kind != g) {
					continue
				}
				m := math.NaN()
				if p.n > 0 {
					m = p.sum / float64(p.n)
				}
				means = append(means, m)
				rows += p.rows
				left += p.leftO
			}
			for _, e := range eps {
				rate, n := SinkRate(means, e)
				above := 0
				if n > 0 {
					above = int(math.Round(rate * float64(n) / 100))
				}
				out = append(out, SinkRateRow{T: T, Eps: e, Layers: g, Heads: n, HeadsAbove: above, Rate: rate, Rows: rows, RowsLeftOut: left})
			}
		}
	}
	return out
}
