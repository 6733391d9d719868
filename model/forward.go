package model

import (
	"fmt"
	"math"
	"strings"
	"sync"

	"gorgonia.org/tensor"

	"github.com/filterlens/probe/hooks"
)

// Forward runs the model on a batch of equal-length token id sequences. Every
// intermediate passes through its hook point in opt.Hooks (see
// hooks.Points); attention rows stream to the registered consumers. The T×T
// pattern is materialized only for layers whose hook_pattern is hooked.
func (m *Model) Forward(ids [][]int, opt Options) (*Output, error) {
	if err := m.checkHooks(opt.Hooks); err != nil {
		return nil, err
	}
	if opt.Compute == "" {
		opt.Compute = m.Compute
	}
	if err := m.checkCompute(opt.Compute); err != nil {
		return nil, err
	}
	return m.pass(ids, opt)
}

// pass runs the family's forward pass.
func (m *Model) pass(ids [][]int, opt Options) (*Output, error) {
	if p, ok := m.ext.(ownPass); ok {
		return p.forward(m, ids, opt)
	}
	return m.forward(ids, opt)
}

// forward is the decoder pass of every family that is data on the
// declared slots of a block (llama2.c's order: embed → block(l) → head).
// Each layer is a token mixer (softmax attention, or Layer.mixer) and a
// channel mixer (the dense MLP, or Layer.ffn) in the residual layout of
// Config.Residual, each sub-block with an optional norm before it and after
// it (nil: none).
func (m *Model) forward(ids [][]int, opt Options) (*Output, error) {
	T, err := m.checkIDs(ids, opt)
	if err != nil {
		return nil, err
	}
	if err := m.CheckMemory(len(ids), T, opt, 0); err != nil {
		return nil, err
	}
	p := m.newDecoderPass(len(ids), T, opt)
	defer p.work.release()

	// token embedding (× EmbedScale; + learned positions), and the
	// family's per-layer inputs from it (Gemma 4)
	p.embed(ids)
	if li, ok := m.ext.(layerInputs); ok && p.err == nil {
		p.pli, p.err = li.layerInputs(m, ids, p.x, p.opt, p.run)
	}

	blocks, headsOnly := m.Reach(opt)
	for l := range m.Layers {
		p.run(hooks.ResidPre, l, p.x, p.B, T, m.DModel)
		if l == blocks {
			break
		}
		lastHeads := headsOnly && l == blocks-1 // nothing reads this block past its heads
		if err := p.block(l, lastHeads); err != nil {
			return nil, err
		}
		if lastHeads {
			break
		}
	}
	if p.err != nil {
		return nil, p.err
	}
	if blocks < len(m.Layers) || headsOnly {
		return &Output{Batch: p.B, T: T}, nil
	}

	// final norm, LM head
	m.norm(p.h, p.x, m.FinalW, m.FinalB)
	p.run(hooks.LNFinalNormalized, -1, p.h, p.B, T, m.DModel)
	res := m.logits(p.h, nil, opt.Compute, p.B, T, opt, p.run)
	if p.err != nil {
		return nil, p.err
	}
	return res, nil
}

// decoderPass holds one forward pass's buffers: the residual stream, the
// sub-blocks' inputs and outputs, the attention arena and the RoPE tables.
// Its run keeps the first hook error (err).
type decoderPass struct {
	m      *Model
	opt    Options
	hs     *hooks.Set
	B, T   int
	err    error
	x, h   []float32 // residual stream [B·T, D]; normalized input of a sub-block
	out    []float32 // sub-block output, in h's storage (see forward)
	h2     []float32 // the channel mixer's input and output (parallel layout only)
	side   []float32 // the output of a token mixer beside attention (Layer.beside)
	mlp    []float32 // MLP hidden values (mlpBlock)
	arena  []float32 // softmax attention's q (then z), k, v, gate, or a mixer's scratch
	rope   *ropeTable
	local  *ropeTable // the sliding layers' own RoPE (Gemma 3)
	rot    qkRotator
	work   *workList // the attention workers' scratch, layer to layer
	attnOn bool      // some layer is softmax attention
	// kept holds the k and v of the layers whose k and v later layers
	// reuse (Layer.KVFrom), by layer; ffnSide is the output of the channel
	// mixers beside the MLP (Layer.ffnBeside); pli the per-layer inputs
	// (layerInputs).
	kept         map[int][2][]float32
	ffnSide, pli []float32
}

// layerInputs is implemented by the state (Model.ext) of a family whose
// layers each read an input of their own beside the residual stream
// (Gemma 4's per-layer embeddings): layerInputs computes them from the
// token ids and the embedded stream x [B·T, D], once per pass;
// addLayerInput adds layer l's branch to x at the end of the block (before
// Layer.Scale).
type layerInputs interface {
	layerInputs(m *Model, ids [][]int, x []float32, opt Options, run hookRun) ([]float32, error)
	addLayerInput(m *Model, l int, x, pli []float32, B, T int, opt Options, run hookRun) error
}

// newDecoderPass allocates the buffers of a pass of B sequences of T
// tokens (PassBytes counts them).
func (m *Model) newDecoderPass(B, T int, opt Options) *decoderPass {
	c := &m.Config
	n := B * T
	p := &decoderPass{m: m, opt: opt, hs: opt.Hooks, B: B, T: T, work: new(workList)}
	p.x = make([]float32, n*c.DModel)
	p.h = make([]float32, n*c.DModel)
	// each sub-block has read a row of h (mlpBlock and the mixers: a row
	// block, or all) before it writes that row of out
	p.out = p.h
	if c.Residual == ResidualParallel {
		p.h2 = make([]float32, n*c.DModel)
	}
	for _, L := range m.Layers {
		if L.beside != nil {
			p.side = make([]float32, n*c.DModel)
			break
		}
	}
	// the softmax layers' q (then z), k, v and gate and the mixers' buffers
	// (Gated DeltaNet's q, k, v and output) share one arena: a layer needs
	// one set or the other, so the pass holds the larger
	var arena int
	arena, p.attnOn = m.arenaFloats(B, T)
	p.arena = make([]float32, arena)
	p.rot, _ = m.ext.(qkRotator)
	for l := range m.Layers {
		L := &m.Layers[l]
		if L.KVFrom > 0 {
			if p.kept == nil {
				p.kept = map[int][2][]float32{}
			}
			p.kept[L.KVFrom-1] = [2][]float32{}
		}
		if L.ffnBeside != nil && p.ffnSide == nil {
			p.ffnSide = make([]float32, n*c.DModel)
		}
	}
	if m.PosEmbed == nil && p.rot == nil && p.attnOn {
		dh := c.DHead
		if c.GlobalDHead > 0 {
			dh = c.GlobalDHead // Gemma 4: the full layers' own head width
		}
		p.rope = newRopeTable(c.RoPE, c.RoPE.dims(dh), T)
		if c.LocalRoPE != nil {
			p.local = newRopeTable(*c.LocalRoPE, c.LocalRoPE.dims(c.DHead), T)
		}
	}
	return p
}

// run runs the hooks of point at layer l on x [shape], keeping the first
// error (a hookRun).
func (p *decoderPass) run(point string, l int, x []float32, shape ...int) {
	if p.err == nil {
		p.err = p.hs.Run(point, l, x, shape...)
	}
}

// embed fills the residual stream with the token embeddings of ids, times
// Config.EmbedScale, plus the learned positions where the model has them,
// then normalized by Model.EmbedNormW/B where the model has that norm.
func (p *decoderPass) embed(ids [][]int) {
	m, x, B, T, D := p.m, p.x, p.B, p.T, p.m.DModel
	// split over the cores: a mapped table's rows are page faults
	parallelRows(B*T, D, func(lo, hi int) {
		for r := lo; r < hi; r++ {
			m.Embed.widenRow(x[r*D:(r+1)*D], ids[r/T][r%T])
		}
	})
	if m.Embed.release != nil {
		// the table's pages leave the resident set until the next read (a
		// tied LM head's): the rows read pulled in whole page-cache folios
		m.Embed.release()
	}
	if s := m.EmbedScale; s != 0 { // Gemma: √D in the checkpoint's dtype; Granite: embedding_multiplier
		for i := range x {
			x[i] *= s
		}
	}
	p.run(hooks.Embed, -1, x, B, T, D)
	if m.PosEmbed != nil {
		pos := make([]float32, B*T*D)
		for b := 0; b < B; b++ {
			copy(pos[b*T*D:(b+1)*T*D], m.PosEmbed[:T*D])
		}
		p.run(hooks.PosEmbed, -1, pos, B, T, D)
		addTo(x, pos)
	}
	if m.EmbedNormW != nil {
		LayerNorm(x, x, D, m.EmbedNormW, m.EmbedNormB, m.NormEps) // RWKV's ln0
	}
}

// block runs layer l on the residual stream: with the sequential layout
//
//	x ← x + s·post₁(mix(norm₁(x)))      (hook_resid_mid)
//	x ← x + s·post₂(ffn(norm₂(x)))
//
// and with the parallel one (GPT-NeoX) x ← x + s·(ffn(norm₂(x)) +
// mix(norm₁(x))), where s is Config.ResidScale (1 when 0) and a nil norm is
// none. headsOnly stops after the attention heads' output (nothing reads
// further).
func (p *decoderPass) block(l int, headsOnly bool) error {
	m, L, x, B, T, D := p.m, &p.m.Layers[l], p.x, p.B, p.T, p.m.DModel

	// token mixer: norm, attention (or the layer's own mixer)
	m.norm(p.h, x, L.Norm1W, L.Norm1B)
	if L.Norm1W != nil {
		p.run(hooks.LN1Normalized, l, p.h, B, T, D)
	}
	if L.mixer != nil {
		// the layer's own token mixer in place of softmax attention
		// (Qwen3.5's Gated DeltaNet layers)
		if p.err == nil {
			p.err = L.mixer.mix(m, p.out, p.h, p.arena, l, B, T, p.opt, p.run)
		}
	} else {
		if L.beside != nil && p.err == nil {
			// a second token mixer on the same normalized input, into its
			// own buffer (Falcon-H1's Mamba-2), before attention takes the
			// arena
			p.err = L.beside.mix(m, p.side, p.h, p.arena, l, B, T, p.opt, p.run)
		}
		if s := m.AttnInScale; s != 0 {
			for i := range p.h {
				p.h[i] *= s
			}
		}
		if done, err := p.attention(l, headsOnly); err != nil || done {
			return err
		}
		if L.beside != nil {
			p.run(hooks.AttnBranchOut, l, p.out, B, T, D)
		}
		if s := m.AttnOutScale; s != 0 {
			for i := range p.out {
				p.out[i] *= s
			}
		}
		if L.beside != nil {
			addTo(p.out, p.side)
		}
	}
	if headsOnly {
		return nil
	}
	if L.PostNorm1W != nil {
		rmsNorm(p.out, p.out, D, L.PostNorm1W, m.NormEps) // Gemma's, OLMo 2's post-attention norm
	}
	p.run(hooks.AttnOut, l, p.out, B, T, D)

	// channel mixer input: after the attention residual add, or (parallel)
	// from the same x
	if m.Residual == ResidualParallel {
		m.norm(p.h2, x, L.Norm2W, L.Norm2B)
		if L.Norm2W != nil {
			p.run(hooks.LN2Normalized, l, p.h2, B, T, D)
		}
		p.channel(l, p.h2, p.h2)
		// HF's order: mlp_output + attn_output + residual
		for i, v := range p.h2 {
			p.out[i] = v + p.out[i]
		}
		m.addResidual(x, p.out)
	} else if L.ffn == nil && L.WUp.Rows == 0 {
		// no channel mixer, neither Layer.ffn nor an MLP of any shape
		// (Mamba-2's blocks are the token mixer alone)
		m.addResidual(x, p.out)
	} else {
		m.addResidual(x, p.out)
		p.run(hooks.ResidMid, l, x, B, T, D)
		if i := firstNonFinite(x); i >= 0 && p.err == nil {
			p.err = fmt.Errorf("model: non-finite value %v in the residual stream after the attention output projection of layer %d at batch %d position %d dim %d (every head's output was finite)",
				x[i], l, i/D/T, (i/D)%T, i%D)
		}
		m.norm(p.h, x, L.Norm2W, L.Norm2B)
		if L.Norm2W != nil {
			p.run(hooks.LN2Normalized, l, p.h, B, T, D)
		}
		p.channel(l, p.out, p.h)
		m.addResidual(x, p.out)
	}
	if li, ok := m.ext.(layerInputs); ok && p.err == nil {
		p.err = li.addLayerInput(m, l, x, p.pli, B, T, p.opt, p.run)
	}
	if s := L.Scale; s != 0 {
		for i := range x {
			x[i] *= s
		}
	}
	p.run(hooks.ResidPost, l, x, B, T, D)
	if p.err != nil {
		return p.err
	}
	return residualFault(x, l, T, D)
}

// channel runs layer l's channel mixer on the normalized input h into out
// (which may be h): the dense MLP, or Layer.ffn; then the post-norm
// (Gemma, OLMo 2) and hook_mlp_out.
func (p *decoderPass) channel(l int, out, h []float32) {
	m, L, B, T, D := p.m, &p.m.Layers[l], p.B, p.T, p.m.DModel
	if L.ffn != nil {
		if p.err == nil {
			p.err = L.ffn.mixChannels(m, out, h, l, B, T, p.opt, p.run)
		}
	} else {
		F := m.DMLP
		if L.WUp.Rows > 0 {
			F = L.WUp.Rows // Gemma 4's double-wide MLPs
		}
		mlpBlock(out, h, &p.mlp, L, m.Act, B, T, D, F, p.opt.Compute, p.hs, p.run, l)
	}
	if L.ffnBeside != nil && p.err == nil {
		// the mixer beside the MLP reads the residual stream itself
		if L.PostNormMLPW != nil {
			rmsNorm(out, out, D, L.PostNormMLPW, m.NormEps)
		}
		p.err = L.ffnBeside.mixChannels(m, p.ffnSide, p.x, l, B, T, p.opt, p.run)
		addTo(out, p.ffnSide)
	}
	if L.PostNorm2W != nil {
		rmsNorm(out, out, D, L.PostNorm2W, m.NormEps)
	}
	p.run(hooks.MLPOut, l, out, B, T, D)
}

// addResidual adds a sub-block's output to the residual stream: x += s·out
// with s = Config.ResidScale (Granite's residual_multiplier), x += out when
// it is 0.
func (m *Model) addResidual(x, out []float32) {
	if s := m.ResidScale; s != 0 {
		for i, v := range out {
			x[i] += v * s
		}
		return
	}
	addTo(x, out)
}

// attention runs layer l's softmax attention from the normalized input p.h
// into p.out: q, k, v projections (and gate logits), QK-norm, RoPE,
// softmax(cap(s·q·kᵀ) + mask [+ sink])·v streamed in query tiles, the output
// gate, the output projection. done reports that the pass stops here
// (headsOnly: after the heads' output z).
func (p *decoderPass) attention(l int, headsOnly bool) (done bool, err error) {
	m, c, L, B, T := p.m, &p.m.Config, &p.m.Layers[l], p.B, p.T
	D, H, KV, dh := c.DModel, c.Heads, c.KVHeads, c.DHead
	if L.DHead > 0 {
		dh = L.DHead
	}
	if L.KVHeads > 0 {
		KV = L.KVHeads
	}
	n, h, cmp := B*T, p.h, p.opt.Compute
	gp := c.GatePerHead()
	// z overwrites q: the attention loop copies a tile's queries out before
	// it writes that tile's outputs, and nothing reads q later
	q := p.arena[:n*H*dh]
	z := q
	k, v := p.arena[n*H*dh:][:n*KV*dh], p.arena[n*H*dh+n*KV*dh:][:n*KV*dh]
	var gate []float32
	if gp > 0 {
		gate = p.arena[n*H*dh+2*n*KV*dh:][:n*H*gp]
	}

	// q, k, v projections (and the gate logits of gated models)
	// (a layer with KVFrom reuses an earlier layer's k and v)
	shared := L.KVFrom > 0
	linearAs(cmp, q, h, n, D, L.Wq, H*dh, L.Bq)
	if shared {
		src := p.kept[L.KVFrom-1]
		copy(k, src[0])
		copy(v, src[1])
	} else {
		linearAs(cmp, k, h, n, D, L.Wk, KV*dh, L.Bk)
		if L.VFromK {
			copy(v, k) // Gemma 4's attention_k_eq_v: the raw k projection
		} else {
			linearAs(cmp, v, h, n, D, L.Wv, KV*dh, L.Bv)
		}
		if L.VNorm != nil {
			rmsNorm(v, v, len(L.VNorm), L.VNorm, c.NormEps)
		}
	}
	p.run(hooks.AttnQ, l, q, B, T, H, dh)
	p.run(hooks.AttnK, l, k, B, T, KV, dh)
	p.run(hooks.AttnV, l, v, B, T, KV, dh)
	if gate != nil {
		linearAs(cmp, gate, h, n, D, L.Wg, H*gp, L.Bg)
		parallelRows(n, H*gp, func(lo, hi int) {
			for i := lo * H * gp; i < hi*H*gp; i++ {
				gate[i] = sigmoid(gate[i])
			}
		})
	}

	// QK-norm over each head (a [dh] weight) or over the whole projection
	// (an [H·dh] weight: OLMo 2), then RoPE (rotate-half) unless the layer
	// has none
	if L.QNorm != nil {
		rmsNorm(q, q, len(L.QNorm), L.QNorm, c.NormEps)
	}
	if L.KNorm != nil && !shared {
		rmsNorm(k, k, len(L.KNorm), L.KNorm, c.NormEps)
	}
	if c.ClipQKV > 0 {
		clamp(q, c.ClipQKV)
		if !shared {
			clamp(k, c.ClipQKV)
			clamp(v, c.ClipQKV)
		}
	}
	if rl := p.rope; rl != nil && !c.layerNoRoPE(l) {
		if p.local != nil && c.layerWindow(l) > 0 {
			rl = p.local
		}
		parallelRows(n, (H+KV)*dh, func(lo, hi int) {
			for r := lo; r < hi; r++ {
				t := r % T
				for i := 0; i < H; i++ {
					rl.apply(q[(r*H+i)*dh:(r*H+i+1)*dh], t)
				}
				for i := 0; i < KV && !shared; i++ {
					rl.apply(k[(r*KV+i)*dh:(r*KV+i+1)*dh], t)
				}
			}
		})
	}
	if p.rot != nil && p.err == nil {
		// the family's own rotation of q and k from h (Selective RoPE's
		// input-dependent cumulative angles)
		p.err = p.rot.rotate(l, h, q, k, B, T, p.hs)
	}
	p.run(hooks.AttnRotQ, l, q, B, T, H, dh)
	p.run(hooks.AttnRotK, l, k, B, T, KV, dh)
	if p.err != nil {
		return true, p.err
	}
	if kv, ok := p.kept[l]; ok {
		// a later layer reuses this layer's k and v
		kv[0] = append(kv[0][:0], k...)
		kv[1] = append(kv[1][:0], v...)
		p.kept[l] = kv
	}

	// softmax(cap(s·q·kᵀ) + causal mask)·v, streamed in query tiles
	args := &attnArgs{
		layer: l, batch: B, T: T, heads: H, kvHeads: KV, dHead: dh,
		scale: m.attnScale(l), window: c.layerWindow(l), softcap: float32(c.AttnSoftcap), sinks: L.Sinks,
		q: q, k: k, v: v, z: z, bf16: cmp == ComputeBF16,
		consumers: p.hs.Consumers(l), tileRows: p.opt.TileRows, threads: p.opt.Threads,
		work: p.work,
	}
	if err := attend(args, p.hs, p.run); err != nil {
		return true, err
	}

	// output gate: z ⊙ sigmoid(gate logits), per head or per element
	if gate != nil {
		if gp == 1 {
			p.run(hooks.AttnGate, l, gate, B, T, H)
		} else {
			p.run(hooks.AttnGate, l, gate, B, T, H, dh)
		}
		for r := 0; r < n*H; r++ {
			zr := z[r*dh : (r+1)*dh]
			if gp == 1 {
				for i := range zr {
					zr[i] *= gate[r]
				}
			} else {
				for i := range zr {
					zr[i] *= gate[r*dh+i]
				}
			}
		}
	}
	p.run(hooks.AttnZ, l, z, B, T, H, dh)
	if p.err == nil {
		p.err = headFault(z, l, T, H, dh)
	}
	if headsOnly {
		return true, nil
	}

	// o_proj
	linearAs(cmp, p.out, z, n, H*dh, L.Wo, D, L.Bo)
	return false, nil
}

// Reach returns how much of the model a pass with opt runs: blocks 0 …
// blocks−1, the last of them only through its attention heads' output
// when headsOnly. The pass stops after the last value anything reads
// (hooks.Set.Reach: a capture of layer 0's pattern runs layer 0's attention
// alone; the App. I diagnostics skip the last block's o_proj and MLP); it
// runs every block for the logits, when nothing is read (a timed pass), and
// in the families with their own pass.
func (m *Model) Reach(opt Options) (blocks int, headsOnly bool) {
	if _, own := m.ext.(ownPass); own || opt.Logits || opt.LogitRows != nil {
		return len(m.Layers), false
	}
	return opt.Hooks.Reach(len(m.Layers))
}

// arenaFloats is the size of forward's arena for B sequences of T tokens:
// the larger of the softmax layers' q (then z), k, v and gate and the
// mixers' scratch (scratchFloats); attn reports whether any layer is
// softmax attention.
func (m *Model) arenaFloats(B, T int) (floats int, attn bool) {
	c := &m.Config
	for _, L := range m.Layers {
		if L.beside != nil {
			floats = max(floats, L.beside.scratchFloats(B, T))
		}
		if L.mixer != nil {
			floats = max(floats, L.mixer.scratchFloats(B, T))
		} else {
			attn = true
			dh, kv := c.DHead, c.KVHeads
			if L.DHead > 0 {
				dh = L.DHead
			}
			if L.KVHeads > 0 {
				kv = L.KVHeads
			}
			floats = max(floats, B*T*(c.Heads*dh+2*kv*dh+c.Heads*c.GatePerHead()))
		}
	}
	return floats, attn
}

// hookPoints caches the names a model's pass issues (HookNames).
type hookPoints struct {
	once  sync.Once
	names []string
	err   error
}

// HookNames returns every hook point the model's forward pass issues, in
// the order of the pass, found by running the model on one token with
// every point hooked (so conditional points such as hook_pattern and logits
// are included) and no matrix products; once per loaded model.
func (m *Model) HookNames() ([]string, error) {
	list := func() ([]string, error) {
		var names []string
		hs := &hooks.Set{}
		seen := map[string]bool{}
		hs.AddAny(func(name string, _ int, _ *tensor.Dense) error {
			if !seen[name] {
				seen[name] = true
				names = append(names, name)
			}
			return nil
		})
		// the names do not depend on the values: the pass computes no
		// products (computeNames), so it reads no weight matrix (an 8B
		// model's 16 GB, mapped, would all become resident)
		if _, err := m.pass([][]int{{0}}, Options{Hooks: hs, Logits: true, Threads: 1, Compute: computeNames}); err != nil {
			return nil, fmt.Errorf("model: listing the hook points: %w", err)
		}
		return names, nil
	}
	p := m.points
	if p == nil {
		return list()
	}
	p.once.Do(func() { p.names, p.err = list() })
	return p.names, p.err
}

// checkHooks refuses, before a pass, a hook pattern that matches none of
// the points the model issues, naming the closest ones it does issue.
func (m *Model) checkHooks(hs *hooks.Set) error {
	patterns := hs.Patterns()
	if len(patterns) == 0 {
		return nil
	}
	names, err := m.HookNames()
	if err != nil {
		return nil // the model cannot run (e.g. a non-finite weight): the pass itself will say why
	}
	for _, p := range patterns {
		if matchesAny(p, names) {
			continue
		}
		parts := strings.SplitN(p, ".", 3)
		if len(parts) == 3 && parts[0] == "blocks" {
			// the point exists at other layers: say which
			anyLayer := "blocks.*." + parts[2]
			var at []string
			for _, n := range names {
				if hooks.Match(anyLayer, n) {
					at = append(at, strings.SplitN(n, ".", 3)[1])
				}
			}
			if len(at) > 0 {
				return fmt.Errorf("model: hook %q: this model issues %s only at layers %s (it has %d layers)",
					p, "blocks.{l}."+parts[2], strings.Join(at, ", "), m.Config.Layers)
			}
		}
		var cands []string
		for _, n := range names {
			np := strings.SplitN(n, ".", 3)
			if len(parts) == 3 && parts[0] == "blocks" && len(np) == 3 && np[0] == "blocks" {
				n = "blocks." + parts[1] + "." + np[2] // in the layer the pattern names
			}
			cands = append(cands, n)
		}
		return fmt.Errorf("model: hook %q is not issued by this model (%s, %d layers); closest: %s (`probe hooks --model <dir>` lists them all)",
			p, m.Arch, m.Config.Layers, strings.Join(hooks.Closest(p, cands, 3), ", "))
	}
	return nil
}

// matchesAny reports whether pattern matches one of names.
func matchesAny(pattern string, names []string) bool {
	for _, n := range names {
		if hooks.Match(pattern, n) {
			return true
		}
	}
	return false
}

// A tokenMixer takes the place of softmax attention in one layer of the
// decoder pass (Layer.mixer; Qwen3.5's Gated DeltaNet layers, AFA): it maps the
// normalized input h [B·T, D] to the mixer's output out [B·T, D], before
// hook_attn_out and the residual add, issuing its own hooks through run.
// out is h's storage: a row of out may be written once the mixer has read
// that row of h for the last time.
type tokenMixer interface {
	mix(m *Model, out, h, scratch []float32, l, B, T int, opt Options, run hookRun) error
	// scratchFloats is how much of the pass's scratch (its attention
	// layers' q, k, v, z and gate, which mix may overwrite) the mixer uses
	// for B sequences of T tokens.
	scratchFloats(B, T int) int
}

// A channelMixer takes the place of the dense MLP in one layer of the
// decoder pass (Layer.ffn; a mixture of experts): it maps the normalized
// input h [B·T, D] to out [B·T, D], before the post-norm, hook_mlp_out and
// the residual add, issuing its own hooks (mlp.*) through run. out may be
// h's storage, as for tokenMixer.
type channelMixer interface {
	mixChannels(m *Model, out, h []float32, l, B, T int, opt Options, run hookRun) error
	// scratchFloats is the memory the mixer allocates for a pass of B
	// sequences of T tokens, in float32 values (PassBytes).
	scratchFloats(B, T int) int
}

// qkRotator is implemented by the state (Model.ext) of a family that
// rotates q and k its own way instead of RoPE in the decoder pass.
type qkRotator interface {
	rotate(l int, h, q, k []float32, B, T int, hs *hooks.Set) error
}

// hookRun runs the hooks of a point (a hooks constant) at layer l (−1
// outside the blocks) on a [shape] tensor (each forward pass's closure over
// its hooks.Set, which keeps the first error).
type hookRun func(point string, l int, x []float32, shape ...int)

// blockRows and headRows are the most rows the MLP sub-block (mlpBlock),
// the projections of Gated DeltaNet (gatedDeltaNet) and the LM head
// (Model.logits for Options.LogitRows) compute at a time: their hidden
// values, T×d_ff, T×(conv channels) and T×vocab, live as blocks of at most
// blockRows and headRows rows instead (docs/performance.md, "Peak
// memory"). Every output row is its own product, so the sums are those of
// one product over all rows (bit for bit on the pure-Go kernels). Fewer
// rows would cost time: each product packs its whole weight matrix once.
// (Variables so that tests can put block boundaries anywhere.)
var (
	blockRows = 2048
	headRows  = 512
)

// blockSize returns the rows per block when n rows are computed in blocks
// of at most most rows: the blocks as equal as can be, so that none is
// much smaller than the others.
func blockSize(n, most int) int {
	k := (n + most - 1) / most
	return (n + k - 1) / k
}

// mlpBlock computes the MLP sub-block out = down(act(gate(h)) ⊙ up(h))
// (SwiGLU, where the layer has WGate) or down(act(up(h))) (GPT-2's
// fc/proj) for the n = B·T rows of h [n, D] into out [n, D] (which may be
// h: each row block is read before it is written), with the hooks
// mlp.hook_pre and mlp.hook_post of layer l, products in the arithmetic
// cmp. (The post-norm and hook_mlp_out are the caller's.) The hidden values live in
// *buf (grown as needed, reused across layers): at most blockRows rows at a time,
// or all n rows when mlp.hook_pre or mlp.hook_post of the layer is hooked
// (hs), so that the hook sees the whole [B, T, F] tensor in one call.
func mlpBlock(out, h []float32, buf *[]float32, L *Layer, act string, B, T, D, F int, cmp Compute, hs *hooks.Set, run hookRun, l int) {
	n, k := B*T, 1
	rows := blockSize(n, blockRows)
	if hs.Has(hooks.Name(hooks.MLPPre, l)) || hs.Has(hooks.Name(hooks.MLPPost, l)) {
		rows = n // the hooks run, on [B, T, F], only here
	}
	if L.WGate.present() {
		k = 2
	}
	if len(*buf) < k*rows*F {
		*buf = make([]float32, k*rows*F)
	}
	for r := 0; r < n; r += rows {
		m := min(rows, n-r)
		x, a1 := h[r*D:(r+m)*D], (*buf)[:m*F]
		if L.WGate.present() {
			a2 := (*buf)[rows*F : rows*F+m*F]
			linearAs(cmp, a1, x, m, D, L.WGate, F, L.BGate)
			run(hooks.MLPPre, l, a1, B, T, F)
			linearAs(cmp, a2, x, m, D, L.WUp, F, L.BUp)
			swiglu(a1, a2, act) // act(a1)·a2, in parallel on SIMD kernels
		} else {
			fn := activations[act]
			linearAs(cmp, a1, x, m, D, L.WUp, F, L.BUp)
			run(hooks.MLPPre, l, a1, B, T, F)
			for i, g := range a1 {
				a1[i] = fn(g)
			}
		}
		run(hooks.MLPPost, l, a1, B, T, F)
		linearAs(cmp, out[r*D:(r+m)*D], a1, m, F, L.WDown, D, L.BDown)
	}
}

// residualFault reports the first NaN/Inf of the residual stream x [B·T,
// D] after layer l, naming batch, position and dimension, or nil.
func residualFault(x []float32, l, T, D int) error {
	if i := firstNonFinite(x); i >= 0 {
		return fmt.Errorf("model: non-finite value %v in the residual stream after layer %d at batch %d position %d dim %d",
			x[i], l, i/D/T, (i/D)%T, i%D)
	}
	return nil
}

// logits returns the output of a pass with the logits z = h·Headᵀ + bias
// (bias may be nil; Gemma: soft-capped) of the final stream h [B·T, D],
// products in the arithmetic cmp: all [B, T, V] of them when asked for
// (Options.Logits) or hooked, and to Options.LogitRows in blocks of at
// most headRows rows, which alone needs only headRows×V of them at a time.
func (m *Model) logits(h, bias []float32, cmp Compute, B, T int, opt Options, run hookRun) *Output {
	c := &m.Config
	n, D, V := B*T, c.DModel, c.Vocab
	head := func(z, x []float32, rows int) {
		linearAs(cmp, z, x, rows, D, m.Head, V, bias)
		if d := c.LogitDivisor; d != 0 { // Granite's logits_scaling
			for i := range z[:rows*V] {
				z[i] /= d
			}
		}
		if c.FinalSoftcap > 0 {
			capLogits(z, float32(c.FinalSoftcap)) // Gemma's final logit soft-cap
		}
	}
	res := &Output{Batch: B, T: T}
	if m.Head.release != nil && (opt.Logits || opt.Hooks.Has(hooks.Logits) || opt.LogitRows != nil) {
		defer m.Head.release() // the head's V × d pages, until the next pass's logits (as the embedding's)
	}
	if opt.Logits || opt.Hooks.Has(hooks.Logits) {
		res.Logits = make([]float32, n*V)
		head(res.Logits, h, n)
		run(hooks.Logits, -1, res.Logits, B, T, V)
	}
	if opt.LogitRows == nil {
		return res
	}
	rows := blockSize(n, headRows)
	z := res.Logits
	if z == nil {
		z = make([]float32, rows*V)
	}
	for r := 0; r < n; r += rows {
		m := min(rows, n-r)
		if res.Logits != nil {
			opt.LogitRows(r, res.Logits[r*V:(r+m)*V])
			continue
		}
		head(z[:m*V], h[r*D:(r+m)*D], m)
		opt.LogitRows(r, z[:m*V])
	}
	return res
}

// headFault checks a layer's attention output z, laid out [B, T, H, width]
// (what the output projection reads), and names the first head and
// position holding NaN or ±Inf; nil when all is finite. One scan per layer,
// negligible beside the projections.
func headFault(z []float32, l, T, H, width int) error {
	i := firstNonFinite(z)
	if i < 0 {
		return nil
	}
	row := i / (H * width)
	return fmt.Errorf("model: non-finite value %v in the attention output of layer %d, head %d, at batch %d position %d (element %d of the head)",
		z[i], l, (i/width)%H, row/T, row%T, i%width)
}

// norm applies the architecture's norm: LayerNorm when a bias is present
// (GPT-2, GPT-NeoX), RMSNorm otherwise; a nil weight is no norm (OLMo 2's
// sub-blocks read the residual stream as it is): dst = x.
func (m *Model) norm(dst, x []float32, w, b []float32) {
	if w == nil {
		copy(dst, x)
		return
	}
	if b != nil {
		LayerNorm(dst, x, m.DModel, w, b, m.NormEps)
	} else {
		rmsNorm(dst, x, m.DModel, w, m.NormEps)
	}
}

// attnScale is the factor s on q·k of layer l: Config.AttnScale (set by
// the family: GPT-2's 1 without scale_attn_weights, Gemma's
// query_pre_attn_scalar^−½, Granite's attention_multiplier), 1/√dh when it
// is 0; divided by l + 1 with Config.ScaleByInverseLayer (GPT-2's
// scale_attn_by_inverse_layer_idx).
func (m *Model) attnScale(l int) float32 {
	s := m.AttnScale
	if s == 0 {
		s = 1 / math.Sqrt(float64(m.DHead))
	}
	if m.ScaleByInverseLayer {
		s /= float64(l + 1)
	}
	return float32(s)
}
