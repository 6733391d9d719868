package results

// HeadRow is one row of the per-(layer, head) summary table: one metric of
// one (T, layer, head) over one query window, pooled over the samples.
type HeadRow struct {
	T         int64   `parquet:"T"`
	Layer     int64   `parquet:"layer"`
	Head      int64   `parquet:"head"`
	Metric    string  `parquet:"metric,dict"`
	Window    string  `parquet:"window,dict"`
	Samples   int64   `parquet:"samples"`
	N         int64   `parquet:"n"`
	Mean      float64 `parquet:"mean"`
	Std       float64 `parquet:"std"`
	NonFinite int64   `parquet:"nonfinite"`
	// LeftOut counts the queries of the window left out as not
	// applicable: for bos_mass, those of a sliding-window layer that cannot
	// see position 0 (t ≥ window; their measured mass, 0, is in the
	// buckets table). 0 for every other metric.
	LeftOut int64 `parquet:"left_out"`
}

// Fig2Row is one metric at one length over the Figs. 2–3 pool (last
// LastFrac queries, the last layers, every head, every sample) under both
// std conventions: pooled elements (sample, layer, head, query), and the
// means of the (sample, layer) units. The ratio metrics
// ("lambda_obs_ratio/…") are Fig. 2(c) in its three readings; Paper is the
// paper's value at this length where it has one. Layers is the layer
// group (LayersAll, or LayersGlobal / LayersLocal under LocalSeparate);
// LeftOut counts the pooled queries left out as not applicable (bos_mass
// of sliding-window layers, see HeadRow.LeftOut).
type Fig2Row struct {
	T         int64   `parquet:"T"`
	Layers    string  `parquet:"layers,dict"`
	Metric    string  `parquet:"metric,dict"`
	N         int64   `parquet:"n"`
	Mean      float64 `parquet:"mean"`
	StdPooled float64 `parquet:"std_pooled"`
	Units     int64   `parquet:"units"`
	MeanUnits float64 `parquet:"mean_units"`
	StdUnits  float64 `parquet:"std_units"`
	Paper     float64 `parquet:"paper"`
	LeftOut   int64   `parquet:"left_out"`
}

// Fig3Row is Fig. 3 at one length: the aggregate n̄_eff and S̄, the λobs
// that the options' form (Eq. 6) predicts from them, the measured mean gain
// K_meas (mean of per-element K), λ fitted once at Tmin in closed form
// (λ = λobs(Tmin)(1 − K_meas(Tmin))/K_meas(Tmin)), the predicted
// K_opt = λobs/(λ + λobs), its relative error |K_opt − K_meas|/K_meas, the
// signed difference K_opt − K_meas, and K_meas(T) − K_meas(Tmin), the
// change the prediction has to follow; Layers is the layer group (see
// Fig2Row), each group with its own λ.
type Fig3Row struct {
	T           int64   `parquet:"T"`
	Layers      string  `parquet:"layers,dict"`
	NEff        float64 `parquet:"neff"`
	SMean       float64 `parquet:"S_mean"`
	LambdaPred  float64 `parquet:"lambda_pred"`
	KMeas       float64 `parquet:"K_meas"`
	LambdaFit   float64 `parquet:"lambda_fit"`
	KOpt        float64 `parquet:"K_opt"`
	RelErr      float64 `parquet:"rel_err"`
	DeltaK      float64 `parquet:"delta_K"`
	KChange     float64 `parquet:"K_change"`
	PaperRelErr float64 `parquet:"paper_rel_err"`
}

// Fig4Row is one (layer, head) cell of Fig. 4: K over the last-LastFrac
// queries and BOS mass over the last-BOSFrac queries, over the Fig. 4
// lengths and every sample, under the chosen weighting (K, BOS) and the
// other one (KPasses/BOSPasses: equal weight per pass; KQueries/BOSQueries:
// every query pooled). Passes counts the passes with K values. The BOS mass
// leaves out the queries that cannot see position 0 (a sliding-window
// layer's t ≥ window), counted in BOSLeftOut; a cell whose every BOS query
// is left out has BOS mass NaN and is not in the statistics. Gate is the
// learned output gate over the same queries and weighting as K (NaN for a
// model without one): the analogue of Fig. 4 with the gate in place of K.
// Layers is the cell's layer group (see Fig2Row).
type Fig4Row struct {
	Layer      int64   `parquet:"layer"`
	Head       int64   `parquet:"head"`
	Layers     string  `parquet:"layers,dict"`
	K          float64 `parquet:"K"`
	BOS        float64 `parquet:"bos_mass"`
	KPasses    float64 `parquet:"K_passes"`
	BOSPasses  float64 `parquet:"bos_mass_passes"`
	KQueries   float64 `parquet:"K_queries"`
	BOSQueries float64 `parquet:"bos_mass_queries"`
	Passes     int64   `parquet:"passes"`
	LastLayers bool    `parquet:"last_layers"`
	BOSLeftOut int64   `parquet:"bos_left_out"`
	Gate       float64 `parquet:"gate"`
}

// Corr is a correlation over the Fig. 4 cells: Pearson r with its
// two-sided p (t with DF = Cells − 2 degrees of freedom), Spearman's ρ and
// the bootstrap interval of r.
type Corr struct {
	Cells    int         `json:"cells"`
	R        Float       `json:"pearson_r"`
	P        Float       `json:"p_two_sided"`
	DF       int         `json:"df"`
	Spearman Float       `json:"spearman_rho"`
	CI       BootstrapCI `json:"bootstrap_ci"`
}

// Fig4Stats are the statistics of the Fig. 4 cells of one layer group.
type Fig4Stats struct {
	Layers  string `json:"layers"`
	Lengths []int  `json:"lengths"`
	Pool    string `json:"pool"`
	Corr           // K against BOS mass over the cells
	// The paper's threshold checks: the largest BOS mass; the heads with
	// BOS mass > 0.05 (count, smallest K, layer range, −1 when none); heads
	// above 0.3; the K range and mean BOS mass of the last layers.
	MaxBOS        Float    `json:"max_bos_mass"`
	SinkHeads     int      `json:"heads_bos_over_0.05"`
	SinkMinK      Float    `json:"min_K_of_those"`
	SinkLayers    [2]int   `json:"layers_of_those"`
	HeadsOver03   int      `json:"heads_bos_over_0.3"`
	LastLayersK   [2]Float `json:"last_layers_K_range"`
	LastLayersBOS Float    `json:"last_layers_mean_bos_mass"`
	// BOSLeftOut counts the BOS-window queries of the group's cells left
	// out as not applicable (Fig4Row.BOSLeftOut), over the Fig. 4 passes.
	BOSLeftOut int64 `json:"bos_left_out"`
	// Gate is BOS mass against the learned output gate in place of K
	// (nil for a model without a learned gate).
	Gate *Corr `json:"gate,omitempty"`
}

// GroupSummary is the scalar results of one layer group (Fig2Row.Layers).
type GroupSummary struct {
	Layers        string    `json:"layers"`
	LayersUsed    []int     `json:"layers_used"`
	LambdaFit     Float     `json:"fig3_lambda_fit"`
	Fig3MaxRelErr Float     `json:"fig3_max_rel_err"`
	Fig4          Fig4Stats `json:"fig4"`
}

// Summary gathers the scalar results of a sweep's aggregation. LayersUsed,
// LambdaFit, Fig3MaxRelErr and Fig4 are those of the first layer group
// (the only one unless the model has both global and sliding-window
// layers and analysis.local_layers is separate; then "global"); Groups
// holds every group's.
type Summary struct {
	Lengths       []int          `json:"lengths"`
	TMin          int            `json:"T_min"`
	Samples       int            `json:"samples"`
	LayersUsed    []int          `json:"layers_used"`
	LambdaFit     Float          `json:"fig3_lambda_fit"`
	Fig3MaxRelErr Float          `json:"fig3_max_rel_err"`
	Fig4          Fig4Stats      `json:"fig4"`
	NonFinite     int64          `json:"nonfinite_values"`
	Agg           AggOptions     `json:"analysis"`
	Groups        []GroupSummary `json:"layer_groups"`
	Notes         []string       `json:"notes"`
}

// Results are the tables and statistics built from a sweep's passes.
type Results struct {
	Heads   []HeadRow
	Fig2    []Fig2Row
	Fig3    []Fig3Row
	Fig4    []Fig4Row
	Summary Summary
}
