package results

// Metric names: the metrics probes.Collector computes (its Metric, Get
// and GetDim take them; the functions and options named beside each are
// package probes'), and the metric column of the sweep's tables. The names
// of the metrics that the golden diagnostics.safetensors files hold are
// the same as there.
const (
	MetricNEff              = "neff"                // Kish n_eff = 1/Σα² (NEff)
	MetricNEffEntropy       = "neff_entropy"        // exp(−Σα log α) (NEffEntropy)
	MetricSumAlpha          = "sum_alpha"           // Σα (1 up to rounding for softmax rows)
	MetricSMean             = "S_mean"              // S̄ = mean_i S_i
	MetricLambdaObs         = "lambda_obs"          // λobs, reduction FromMean (i)
	MetricK                 = "K"                   // K(λobs, λ), reduction FromMean (i)
	MetricLambdaObsDimMean  = "lambda_obs_dim_mean" // mean_i λobs_i, reduction PerDimMean (ii)
	MetricKDimMean          = "K_dim_mean"          // mean_i K(λobs_i, λ), reduction (ii)
	MetricLambdaObsHarmonic = "lambda_obs_harmonic" // 1/mean_i Var_i, reduction Harmonic (iii)
	MetricBOSMass           = "bos_mass"            // α mass on CollectorOptions.BOSKeys (default α_0)
	MetricSinkMass          = "sink_mass"           // σ, the weight of the dropped sink column (learned sinks; 0 without)
	MetricENorm             = "e_norm"              // ‖e‖, norm of the pre-gate head output Σα v
	MetricGate              = "gate"                // output gate (SetGate); NaN where never set

	MetricS            = "S"              // per-dimension S_i, [B,L,H,T,DHead] (KeepPerDim)
	MetricLambdaObsDim = "lambda_obs_dim" // per-dimension λobs_i, [B,L,H,T,DHead] (KeepPerDim)
)
