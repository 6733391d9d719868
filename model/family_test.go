package model

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/filterlens/probe/checkpoint"
)

// checkHeadTable checks the shape of a readout: every column named in
// JSON or text, L·H rows layer major, a cell per column, layer and head
// first.
func checkHeadTable(t *testing.T, m *Model, tab *HeadTable) {
	t.Helper()
	if tab.Title == "" || len(tab.Columns) < 3 || tab.Columns[0].Name != "layer" || tab.Columns[1].Name != "head" {
		t.Fatalf("table %q, columns %v", tab.Title, tab.Columns)
	}
	for _, c := range tab.Columns {
		if c.Name == "" && c.Label == "" {
			t.Errorf("column %v is in neither form", c)
		}
	}
	if len(tab.Rows) != m.Config.Layers*m.Heads {
		t.Fatalf("%d rows for %d layers × %d heads", len(tab.Rows), m.Config.Layers, m.Heads)
	}
	for i, r := range tab.Rows {
		if len(r) != len(tab.Columns) || r[0] != i/m.Heads || r[1] != i%m.Heads {
			t.Fatalf("row %d: %v", i, r)
		}
	}
}

// Every family that reads out per-head parameters and can be generated
// gives L·H rows of finite values on a generated checkpoint.
func TestHeadParamsGenerated(t *testing.T) {
	n := 0
	for _, f := range families {
		if f.headParams == nil || f.small == nil {
			continue
		}
		n++
		t.Run(string(f.arch), func(t *testing.T) {
			cfg, err := SmallConfig(f.arch, Size{Layers: 3, DModel: 32, Heads: 4, KVHeads: 4, Vocab: 61, MaxPos: 64})
			if err != nil {
				t.Fatal(err)
			}
			m, _, err := Generate(cfg, 5)
			if err != nil {
				t.Fatal(err)
			}
			tab, err := m.HeadParams()
			if err != nil {
				t.Fatal(err)
			}
			checkHeadTable(t, m, tab)
			for i, r := range tab.Rows {
				for j, v := range r {
					if x, ok := v.(float64); ok && (math.IsNaN(x) || math.IsInf(x, 0)) {
						t.Errorf("row %d column %v: %v", i, tab.Columns[j], x)
					}
				}
			}
		})
	}
	if n < 2 {
		t.Errorf("%d generated families with readouts, want AFA and RT at least", n)
	}
}

// A family without readouts is refused with a message that names it and
// the families that have them.
func TestHeadParamsRefused(t *testing.T) {
	cfg, err := SmallConfig(ArchLlama, Size{Layers: 1, DModel: 16, Heads: 2, KVHeads: 2, Vocab: 11, MaxPos: 16})
	if err != nil {
		t.Fatal(err)
	}
	m, _, err := Generate(cfg, 1)
	if err != nil {
		t.Fatal(err)
	}
	_, err = m.HeadParams()
	if err == nil {
		t.Fatal("a llama model has per-head filter parameters")
	}
	for _, want := range []string{"llama checkpoint", string(ArchRFA), string(ArchAFA), string(ArchRT)} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %q", err, want)
		}
	}
}

// RFA's readout holds the authors' transformations of the stored raw
// parameters, computed here from the tensors of every golden RFA case.
func TestHeadParamsRFA(t *testing.T) {
	dirs, _ := filepath.Glob(filepath.Join(goldenDir, "rfa_*"))
	if len(dirs) == 0 {
		t.Skipf("no RFA golden cases in %s (../shared/golden)", goldenDir)
	}
	for _, dir := range dirs {
		t.Run(filepath.Base(dir), func(t *testing.T) {
			if _, err := os.Stat(filepath.Join(dir, "config.json")); err != nil {
				t.Skip(err)
			}
			m, err := Load(dir, LoadOptions{})
			if err != nil {
				t.Fatal(err)
			}
			tab, err := m.HeadParams()
			if err != nil {
				t.Fatal(err)
			}
			checkHeadTable(t, m, tab)
			ck, err := checkpoint.Open(dir)
			if err != nil {
				t.Fatal(err)
			}
			defer ck.Close()
			col := func(r []any, name string) float64 {
				i := slices.IndexFunc(tab.Columns, func(c HeadColumn) bool { return c.Name == name })
				if i < 0 {
					t.Fatalf("no column %q", name)
				}
				return r[i].(float64)
			}
			sp := func(x float32) float64 { return math.Log1p(math.Exp(float64(x))) }
			rc, d := m.RFA, float64(m.DHead)
			for _, r := range tab.Rows {
				l, h := r[0].(int), r[1].(int)
				raw := func(name string) float32 {
					v, err := ck.Float32(fmt.Sprintf("backbone.blocks.%d.attn.%s", l, name))
					if err != nil {
						t.Fatal(err)
					}
					return v[h]
				}
				omega, err := ck.Float32(fmt.Sprintf("backbone.blocks.%d.attn.omega_v", l))
				if err != nil {
					t.Fatal(err)
				}
				band := omega[h*m.DHead/2 : (h+1)*m.DHead/2]
				lo, hi := math.Inf(1), 0.0
				for _, w := range band {
					lo, hi = min(lo, math.Abs(float64(w))*rc.OmegaRescale), max(hi, math.Abs(float64(w))*rc.OmegaRescale)
				}
				mu, sigma2 := float64(raw("mu_v"))*rc.DecayScale, sp(raw("sigma_v"))
				eta2 := sp(raw("eta_v")) + rc.Epsilon
				for name, want := range map[string]float64{
					"mu": mu, "sigma2": sigma2, "eta2": eta2, "gamma2": sp(raw("gamma_v")) + rc.Epsilon,
					"tau": sp(raw("tau_param")) + rc.Epsilon, "nu_over_d": (d*sp(raw("nu_param")) + 2 + rc.Epsilon) / d,
					"omega_min": lo, "omega_max": hi,
				} {
					if got := col(r, name); math.Abs(got-want) > 1e-12*max(1, math.Abs(want)) {
						t.Errorf("layer %d head %d %s = %v, from the raw tensors %v", l, h, name, got, want)
					}
				}
				alpha := col(r, "alpha")
				if math.Abs(mu) < rc.BrownianBelow {
					if !math.IsNaN(alpha) {
						t.Errorf("layer %d head %d: μ = 0 head with α = %v", l, h, alpha)
					}
				} else if want := eta2 - sigma2/(2*mu); math.Abs(alpha-want) > 1e-12*max(1, math.Abs(want)) {
					t.Errorf("layer %d head %d: α = %v, want η² − σ²/2μ = %v", l, h, alpha, want)
				}
			}
		})
	}
}
