package results

// BootstrapCI is a percentile bootstrap confidence interval of a Pearson
// correlation.
type BootstrapCI struct {
	Lo        Float   `json:"lo"`
	Hi        Float   `json:"hi"`
	Level     float64 `json:"level"`     // e.g. 0.95
	Resamples int     `json:"resamples"` // resamples drawn
	Valid     int     `json:"valid"`     // resamples whose r was defined (non-constant x and y)
	Seed      uint64  `json:"seed"`
}
