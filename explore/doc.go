// Package explore serves a measurement's output folder to the browser:
// a layer × head grid of a metric per context length, one head's metric
// against query position as min/max/mean envelopes per pixel bucket, the
// token strings of a stored pass, and single attention rows computed on
// demand by running the model only as far as the row's layer (see
// docs/explore.md for the JSON API).
//
// Tables are read from Parquet one row group and one column at a time:
// opening a folder reads the buckets table's (layer, head, metric) columns
// once into an index of row ranges, whose size is layers × heads ×
// metrics × passes, not T; a series request then reads only its rows of
// the q_lo, q_hi, n and sum columns. The only thing written into the
// folder is the row cache, CacheDir.
package explore
