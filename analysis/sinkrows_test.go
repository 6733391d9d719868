package analysis

import (
	"slices"
	"strings"
	"testing"

	"github.com/filterlens/probe/analysis/results"
	"github.com/filterlens/probe/probes"
)

// TestSinkRowsOption: ProbeOptions.SinkRows resolves to "renorm" and
// reaches the Collector's options, "raw" too; another value is refused
// naming both; a manifest from before the option ("") reads as the
// default; the tables of a sink model hold sink_mass right after bos_mass,
// those of any other model do not; a pass key records sink_rows for a sink
// model only, so that the keys of other models are those from before the
// option, bit for bit.
func TestSinkRowsOption(t *testing.T) {
	p, err := ResolveProbeOptions(results.ProbeOptions{}, 16)
	if err != nil || p.SinkRows != "renorm" {
		t.Fatalf("Resolve: sink_rows %q, error %v; want renorm", p.SinkRows, err)
	}
	for _, c := range []struct {
		in   string
		want probes.SinkRows
	}{{"renorm", probes.RenormRows}, {"raw", probes.RawRows}, {"", probes.RenormRows}} {
		q := p
		q.SinkRows = c.in
		o, err := collectorOptions(q)
		if err != nil || o.SinkRows != c.want {
			t.Errorf("sink_rows %q: Collector SinkRows %v, error %v; want %v", c.in, o.SinkRows, err, c.want)
		}
	}
	q := p
	q.SinkRows = "renormalised"
	if _, err := ResolveProbeOptions(q, 16); err == nil || !strings.Contains(err.Error(), `"renormalised"`) ||
		!strings.Contains(err.Error(), "renorm or raw") {
		t.Errorf("sink_rows renormalised: error %v, want one naming the value and renorm or raw", err)
	}
	for _, red := range []string{"mean", "all"} {
		with, without := passMetrics(true, true, red), passMetrics(true, false, red)
		i := slices.Index(with, results.MetricSinkMass)
		if i < 1 || with[i-1] != results.MetricBOSMass || slices.Contains(without, results.MetricSinkMass) ||
			!slices.Equal(slices.Delete(slices.Clone(with), i, i+1), without) {
			t.Errorf("reductions %s: metrics with sinks %v, without %v; want sink_mass after bos_mass only with sinks", red, with, without)
		}
	}
	sw := results.SweepOptions{Probe: p}
	old := sw
	old.Probe.SinkRows = ""
	ch := results.Chunk{T: 64, End: 64}
	key := func(info results.ModelInfo, o results.SweepOptions) results.StreamKey {
		return streamKey("sweep", info.Digest, sweepKeyOptions(info, o), ch, "")
	}
	if a, b := key(results.ModelInfo{Digest: "x"}, sw), key(results.ModelInfo{Digest: "x"}, old); a.Hash() != b.Hash() {
		t.Errorf("model without sinks: pass key %s differs from the key without the option", a.Options)
	}
	if k := sweepKeyOptions(results.ModelInfo{Digest: "x", Sinks: true}, sw); k.Probe.SinkRows != "renorm" {
		t.Errorf("sink model: pass key sink_rows %q, want renorm", k.Probe.SinkRows)
	}
	if d := DefaultSinksOptions(); d.SinkRows != "renorm" {
		t.Errorf("DefaultSinksOptions().SinkRows = %q, want renorm", d.SinkRows)
	}
}
